"""V2: `attn_implementation="varlen_attn"` off CUDA. torch's varlen kernel has no CPU implementation: a packed batch on
the CPU gets one error naming the CUDA requirement and the CPU's attention (SDPA), before torch's NotImplementedError,
and a float32 batch on the CPU is not told to switch to bf16 (which would lead straight to that NotImplementedError)."""

from __future__ import annotations

import pytest
import torch
from test_packing import _model

from hf_siamese.losses import CosineSimilarityLoss
from hf_siamese.modeling.packing import VARLEN_ATTENTION
from hf_siamese.training.collator import SiamesePairCollator

pytest.importorskip("torch.nn.attention.varlen")

CPU_FIX = (
    r"attn_implementation='varlen_attn' runs FlashAttention's varlen kernel, which needs a CUDA GPU \(and bf16=True or "
    r"fp16=True\); this batch is on cpu: there, use attn_implementation='sdpa'"
)


def _varlen_model():
    model = _model("bert", "sdpa")
    model.encoder.config._attn_implementation = VARLEN_ATTENTION
    return model


def _batch(tiny_tokenizer):
    return SiamesePairCollator(tiny_tokenizer)([{"sentence1": "a man", "sentence2": "the dog runs"}])


def test_V2_bf16_autocast_on_the_cpu_names_cuda_and_sdpa(tiny_tokenizer) -> None:
    model, batch = _varlen_model(), _batch(tiny_tokenizer)
    with pytest.raises(ValueError, match=CPU_FIX), torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_V2_low_precision_weights_on_the_cpu_name_cuda_and_sdpa(tiny_tokenizer, dtype) -> None:
    model, batch = _varlen_model().to(dtype), _batch(tiny_tokenizer)
    with pytest.raises(ValueError, match=CPU_FIX):
        model(**batch)


def test_V2_float32_on_the_cpu_does_not_suggest_bf16_alone(tiny_tokenizer) -> None:
    model, batch = _varlen_model(), _batch(tiny_tokenizer)
    with pytest.raises(ValueError, match=CPU_FIX) as caught:
        model(**batch)
    assert "train with bf16=True" not in str(caught.value)


def test_V2_trainer_bf16_on_the_cpu_names_cuda_and_sdpa(tiny_tokenizer, tmp_path) -> None:
    from helpers import make_args, scored_pairs

    from hf_siamese import SiameseTrainer

    model = _varlen_model()
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path, bf16=True, max_steps=1, per_device_train_batch_size=4),
        train_dataset=scored_pairs(8),
        processing_class=tiny_tokenizer,
        loss=CosineSimilarityLoss(score_range=(0, 5)),
    )
    assert model.encoder.config._attn_implementation == VARLEN_ATTENTION  # kept: chosen explicitly
    with pytest.raises(ValueError, match=CPU_FIX):
        trainer.train()


def test_V2_padded_calls_still_run_on_the_cpu(tiny_tokenizer) -> None:
    model = _varlen_model()
    embeddings = model.encode(["a man plays guitar", "the dog"], tokenizer=tiny_tokenizer)
    assert embeddings.shape[0] == 2 and torch.isfinite(embeddings).all()
