"""The max-pooled SPLADE head without its `(batch, seq, vocab)` logits (modeling/sparse_pooling.py): the same weights
and the same gradients as pooling the full product, with the bfloat16 screen and without it."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY
from transformers import BertConfig, BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM

from hf_siamese import SparseSiameseConfig, SparseSiameseModel
from hf_siamese.modeling import sparse_pooling
from hf_siamese.modeling.sparse_pooling import (
    activate,
    bert_head,
    blocked_max,
    max_decoded,
    max_pooled_weights,
    packed_max,
)


def _reference(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    logits = hidden @ weight.T + bias
    logits = logits.masked_fill((mask == 0).unsqueeze(-1), torch.finfo(logits.dtype).min)
    return activate(logits.max(dim=1).values, "log1p_relu")


def _inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(3)
    hidden = torch.randn(4, 9, 16)
    weight = torch.randn(300, 16) / 4
    bias = torch.full((300,), -1.5) + torch.randn(300) / 10
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[0, 6:] = 0  # right padding
    mask[1, :3] = 0  # left padding
    mask[3] = 0  # no real token at all
    return hidden, weight, bias, mask


@pytest.mark.parametrize(
    "screen, dense_share, block_tokens",
    [(False, 8, 512), (False, 8, 4), (True, 1, 512), (True, 1, 4), (True, 10**6, 512), (True, 10**6, 4)],
)
def test_max_decoded_gives_the_full_products_weights_and_gradients(
    monkeypatch, screen: bool, dense_share: int, block_tokens: int
) -> None:
    """Without the screen and with it (rows gathered for the terms past it, or the whole vocabulary again), texts
    multiplied together or one at a time."""
    monkeypatch.setattr(sparse_pooling, "fast_bfloat16", lambda device: screen)
    monkeypatch.setattr(sparse_pooling, "DENSE_SHARE", dense_share)
    monkeypatch.setattr(sparse_pooling, "BLOCK_TOKENS", block_tokens)
    hidden, weight, bias, mask = _inputs()
    upstream = torch.rand(4, 300)
    results = []
    for pooled in (_reference, lambda *a: activate(max_decoded(*a), "log1p_relu")):
        leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
        weights = pooled(*leaves, mask)
        (weights * upstream).sum().backward()
        results.append((weights.detach(), *(t.grad for t in leaves)))
    (expected, *expected_grads), (got, *got_grads) = results
    assert 0 < int((expected > 0).sum()) < expected.numel() // 2  # some terms active, most not
    assert torch.equal(got > 0, expected > 0)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not got[3].any()  # the text with no real token has no term
    for name, want, have in zip(("hidden", "weight", "bias"), expected_grads, got_grads, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6, msg=f"gradient of {name}")


def test_the_bfloat16_screen_keeps_terms_just_above_zero(monkeypatch) -> None:
    """Biases set so that each term's float32 max lands within bfloat16's rounding of zero (1e-4 above or below):
    the screen must send every one of them to float32, and the active set and weights are float32's exactly."""
    monkeypatch.setattr(sparse_pooling, "fast_bfloat16", lambda device: True)
    monkeypatch.setattr(sparse_pooling, "DENSE_SHARE", 1)  # the rows past the screen, never the whole vocabulary
    hidden, weight, _, mask = _inputs()
    mask = torch.ones_like(mask)
    maxima = (hidden @ weight.T).max(dim=1).values[0]
    bias = -maxima + torch.where(torch.arange(300) % 2 == 0, 1e-4, -1e-4)
    with torch.no_grad():
        got = activate(max_decoded(hidden[:1], weight, bias, mask[:1]), "log1p_relu")
        expected = _reference(hidden[:1], weight, bias, mask[:1])
    assert torch.equal(got > 0, expected > 0) and int((got > 0).sum()) == 150
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-7)


def test_a_bert_model_pools_without_logits_and_another_layout_from_them(tiny_tokenizer) -> None:
    torch.manual_seed(0)
    bert = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    distil = DistilBertForMaskedLM(
        DistilBertConfig(vocab_size=bert.config.vocab_size, dim=32, n_layers=1, n_heads=2, hidden_dim=37)
    )
    assert bert_head(bert) is not None and bert_head(distil) is None
    texts = ["a man plays a guitar in the park", "dog"]
    tokens = tiny_tokenizer(texts, padding=True, return_tensors="pt")
    for encoder in (bert, distil):
        model = SparseSiameseModel(SparseSiameseConfig(encoder_config=encoder.config), encoder=encoder).train()
        inputs = {k: v for k, v in tokens.items() if k != "token_type_ids" or encoder is bert}
        torch.manual_seed(1)
        got = model(**inputs).sparse_embedding
        torch.manual_seed(1)  # the same dropout masks
        logits = model.encoder(**inputs).logits
        expected = max_pooled_weights(logits, inputs["attention_mask"], "log1p_relu")
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_accelerator_blocks_and_the_per_text_loop_agree() -> None:
    hidden, weight, bias, mask = _inputs()
    for block in (1 << 28, 9 * 300):  # all texts in one block; one text a block
        sparse_pooling.ACCELERATOR_BLOCK = block
        blocked, blocked_winners = blocked_max(hidden, weight, bias, mask)
        looped, looped_winners = packed_max(hidden, weight, bias, mask, screen=False)
        torch.testing.assert_close(blocked[:3], looped[:3], rtol=1e-6, atol=1e-6)
        assert torch.equal(blocked_winners[:3], looped_winners[:3])
        assert bool((blocked[3] < 0).all()) and bool((looped[3] < 0).all())  # no real token: nothing positive
    sparse_pooling.ACCELERATOR_BLOCK = 1 << 28
