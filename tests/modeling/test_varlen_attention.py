"""`attn_implementation="varlen_attn"`: PyTorch's FlashAttention varlen kernel on packed rows, SDPA on padded calls.

The kernel runs on CUDA only: here `torch.nn.attention.varlen.varlen_attn` is replaced by SDPA on each text between
`cu_seq_q` (same signature), so the route's inputs, embeddings and gradients are checked against the padded SDPA route.
benchmarks/gpu_routes.py runs the real kernel against the same reference on a GPU.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.attention.varlen as torch_varlen
from test_packing import TRIPLETS, _model

from hf_siamese.losses import CosineSimilarityLoss
from hf_siamese.modeling.attention_kernels import attention_dropout_off
from hf_siamese.modeling.packing import VARLEN_ATTENTION, packed_route
from hf_siamese.training.collator import SiamesePairCollator


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    calls: list[dict] = []

    def varlen_attn(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, **kwargs):
        calls.append({"cu": cu_seq_q.tolist(), "max": (max_q, max_k), "dtype": q.dtype})
        bounds = cu_seq_q.tolist()
        out = []
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            q_, k_, v_ = (x[start:end].transpose(0, 1) for x in (q, k, v))
            out.append(torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, scale=scale).transpose(0, 1))
        return torch.cat(out)

    monkeypatch.setattr(torch_varlen, "varlen_attn", varlen_attn)
    return calls


def _embed_and_grads(model, batch, attention: str, packing: bool):
    model.encoder.config._attn_implementation = attention
    model.packing = packing
    model.zero_grad()
    labels = torch.tensor([2.0] * batch["input_ids"].shape[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, output = CosineSimilarityLoss(score_range=(0, 5)).compute(model, dict(batch), labels)
    loss.backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return output.sentence_embedding.float().detach(), grads


def test_varlen_route_equals_padded_sdpa(tiny_tokenizer, kernel_calls) -> None:
    model = _model("bert", "sdpa")
    model.train()
    attention_dropout_off(model.encoder)  # both routes without attention dropout
    for layer in model.modules():
        if isinstance(layer, torch.nn.Dropout):
            layer.p = 0.0
    pairs = [{"sentence1": r["anchor"], "sentence2": r["positive"]} for r in TRIPLETS]
    batch = SiamesePairCollator(tiny_tokenizer)(pairs)
    padded, padded_grads = _embed_and_grads(model, batch, "sdpa", False)
    packed, packed_grads = _embed_and_grads(model, batch, VARLEN_ATTENTION, True)
    lengths = [n for row in batch["text_lengths"] for n in row]
    assert kernel_calls and kernel_calls[0]["cu"] == torch.tensor([0, *lengths]).cumsum(0).tolist()
    assert kernel_calls[0]["max"] == (max(lengths), max(lengths)) and kernel_calls[0]["dtype"] == torch.bfloat16
    assert (packed - padded).abs().max() < 3e-2
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        scale = grad.abs().max().clamp(min=1e-3)
        assert ((packed_grads[name] - grad).abs().max() / scale) < 0.1, name


def test_padded_calls_of_the_varlen_implementation_are_sdpa(tiny_tokenizer, kernel_calls) -> None:
    model = _model("bert", "sdpa")
    expected = model.encode(["a man plays guitar", "the dog"], tokenizer=tiny_tokenizer)
    model.encoder.config._attn_implementation = VARLEN_ATTENTION
    assert packed_route(model.encoder) == "varlen"
    got = model.encode(["a man plays guitar", "the dog"], tokenizer=tiny_tokenizer)
    assert torch.allclose(got, expected, atol=1e-5) and not kernel_calls  # padding masked, no kernel call


def test_varlen_refuses_float32_with_the_fix(tiny_tokenizer, kernel_calls) -> None:
    model = _model("bert", "sdpa")
    model.encoder.config._attn_implementation = VARLEN_ATTENTION
    batch = SiamesePairCollator(tiny_tokenizer)([{"sentence1": "a man", "sentence2": "the dog runs"}])
    with pytest.raises(ValueError, match="bf16=True"):
        model(**batch)


def test_trainer_turns_attention_dropout_off_for_the_kernel_routes(tiny_tokenizer, tmp_path, caplog) -> None:
    from helpers import make_args, scored_pairs

    from hf_siamese import SiameseTrainer

    model = _model("bert", "sdpa")
    model.encoder.config._attn_implementation = "flex_attention"
    assert model.encoder.config.attention_probs_dropout_prob > 0
    with caplog.at_level(logging.WARNING):
        SiameseTrainer(
            model=model,
            args=make_args(tmp_path),
            train_dataset=scored_pairs(8),
            processing_class=tiny_tokenizer,
            loss=CosineSimilarityLoss(score_range=(0, 5)),
        )
    assert "attention dropout set to 0" in caplog.text
    assert all(m.p == 0 for n, m in model.encoder.named_modules() if n.endswith("attention.self.dropout"))
    assert any(m.p > 0 for n, m in model.encoder.named_modules() if n.endswith("output.dropout"))  # hidden stays
    sdpa = _model("bert", "sdpa")
    assert not attention_dropout_off(sdpa.encoder)  # SDPA has dropout: nothing changes


def test_cuda_bf16_training_takes_the_varlen_kernel_only_where_it_fits() -> None:
    from hf_siamese.modeling.attention_kernels import training_attention

    model = _model("bert", "sdpa")
    assert training_attention(model.encoder, "cuda", True) == VARLEN_ATTENTION
    assert training_attention(model.encoder, "cuda", False) is None  # float32: the kernel has no fp32
    assert training_attention(model.encoder, "cpu", True) is None
    model.encoder.config._attn_implementation = "eager"  # chosen explicitly: kept
    assert training_attention(model.encoder, "cuda", True) is None
    distil = _model("distilbert", "sdpa")  # cannot pack: kept
    assert training_attention(distil.encoder, "cuda", True) is None
