"""Key-major attention for short texts on the CPU (`hf_siamese/short_attention.py`) and the cached bfloat16 copy
that encode() runs: same results as sdpa, used only where it applies, settings restored."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import SENTENCES, make_tiny_model
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import hf_siamese.modeling.short_attention as short
from hf_siamese.modeling.low_precision import _COPIES, cached_low_precision_copy


class Attention(torch.nn.Module):
    def __init__(self, is_causal: bool = False) -> None:
        super().__init__()
        self.is_causal = is_causal


def qkv(batch: int = 3, heads: int = 2, length: int = 7, dim: int = 8, dtype=torch.float32):
    torch.manual_seed(0)
    return [torch.randn(batch, heads, length, dim, dtype=dtype) for _ in range(3)]


def padding_mask(batch: int, length: int) -> torch.Tensor:
    keep = torch.ones(batch, length, dtype=torch.bool)
    for row in range(1, batch):
        keep[row, length - row :] = False  # row r has r padding tokens
    return keep[:, None, None, :].expand(batch, 1, length, length)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_same_as_sdpa(mask_kind: str) -> None:
    q, k, v = qkv()
    mask = None if mask_kind == "none" else padding_mask(3, 7)
    if mask_kind == "additive":
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    with torch.no_grad():
        fast, _ = short.short_attention_forward(Attention(), q, k, v, mask, scaling=0.3)
        slow, _ = sdpa_attention_forward(Attention(), q, k, v, mask, scaling=0.3, is_causal=False)
    assert fast.shape == (3, 7, 2, 8)
    assert (fast - slow).abs().max() < 1e-5


def test_bfloat16_close_to_float32() -> None:
    q, k, v = qkv(dtype=torch.bfloat16)
    mask = padding_mask(3, 7)
    with torch.no_grad():
        fast, _ = short.short_attention_forward(Attention(), q, k, v, mask)
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask).transpose(1, 2)
    assert fast.dtype == torch.bfloat16
    assert (fast.float() - exact).abs().max() < 3e-2


def test_calls_it_does_not_cover_go_to_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = qkv()
    covered = []
    real = short._covered
    monkeypatch.setattr(short, "_covered", lambda *a: covered.append(real(*a)) or covered[-1])
    with torch.no_grad():
        short.short_attention_forward(Attention(), q, k, v, None)  # covered
        short.short_attention_forward(Attention(is_causal=True), q, k, v, None)  # causal
        short.short_attention_forward(Attention(), q, k, v, None, dropout=0.1)  # dropout
        long_q, long_k, long_v = qkv(length=short.SHORT_LENGTH + 1)
        short.short_attention_forward(Attention(), long_q, long_k, long_v, None)  # too long
        bias = torch.zeros(3, 2, 7, 7)
        short.short_attention_forward(Attention(), q, k, v, None, position_bias=bias)  # extra argument
    short.short_attention_forward(Attention(), q, k, v, None)  # gradients on
    assert covered == [True, False, False, False, False, False]
    # A causal call gives sdpa's causal result, not the bidirectional one.
    with torch.no_grad():
        causal, _ = short.short_attention_forward(Attention(is_causal=True), q, k, v, None)
    assert torch.allclose(causal, F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2))


def test_encode_uses_it_and_restores_sdpa(tiny_tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_tiny_model()
    assert model.encoder.config._attn_implementation == "sdpa"
    with torch.no_grad():
        alone = torch.cat([model(**tiny_tokenizer([t], return_tensors="pt")).sentence_embedding for t in SENTENCES])
    calls = []
    real = short._covered
    monkeypatch.setattr(short, "_covered", lambda *a: calls.append(real(*a)) or calls[-1])
    encoded = model.encode(SENTENCES, tokenizer=tiny_tokenizer, batch_size=2)
    assert calls and all(calls)  # every layer of every batch ran key-major
    assert (encoded - alone).abs().max() < 1e-5
    assert model.encoder.config._attn_implementation == "sdpa"

    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(short, "_covered", fail)
    with pytest.raises(RuntimeError, match="boom"):
        model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    assert model.encoder.config._attn_implementation == "sdpa"  # restored after an error too


def test_eager_encoders_are_left_alone(tiny_tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_tiny_model()
    model.encoder.config._attn_implementation = "eager"
    monkeypatch.setattr(short, "short_attention_forward", None)  # would fail if called
    model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    assert model.encoder.config._attn_implementation == "eager"


def test_low_precision_copy_is_kept_until_a_weight_changes() -> None:
    model = make_tiny_model()
    first = cached_low_precision_copy(model, torch.bfloat16)
    assert first is not model and next(first.parameters()).dtype == torch.bfloat16
    assert cached_low_precision_copy(model, torch.bfloat16) is first
    weight = model.encoder.embeddings.word_embeddings.weight
    with torch.no_grad():
        weight.add_(1.0)  # an optimizer-style in-place update bumps the version
    second = cached_low_precision_copy(model, torch.bfloat16)
    assert second is not first
    assert torch.equal(second.encoder.embeddings.word_embeddings.weight, weight.detach().to(torch.bfloat16))
    weight.data.mul_(2.0)  # a write through .data skips the version; the sum still changes
    third = cached_low_precision_copy(model, torch.bfloat16)
    assert third is not second
    assert torch.equal(third.encoder.embeddings.word_embeddings.weight, weight.detach().to(torch.bfloat16))
    assert len([m for m in _COPIES if m is model]) == 1  # one copy per model, not one per change
    assert "low_precision" not in "".join(model.state_dict())  # not a submodule: never saved


def test_encode_after_training_step_uses_new_weights(tiny_tokenizer) -> None:
    model = make_tiny_model()
    texts = [f"{w} plays the guitar" for w in ("a man", "a woman", "someone", "the child")] * 3
    before = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=1, dtype=torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    out = model(**tiny_tokenizer(texts[:2], padding=True, return_tensors="pt")).sentence_embedding
    out.sum().backward()
    optimizer.step()
    model.eval()
    after = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=1, dtype=torch.bfloat16)
    fresh = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=1)
    assert not torch.allclose(before, after)
    assert (after - fresh).abs().max() < 5e-2  # the bf16 copy of the NEW weights
