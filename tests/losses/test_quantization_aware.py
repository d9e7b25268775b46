"""QuantizationAwareLoss: the codes in the forward pass (binary: the unit sign vector; int8: 255 levels across the
batch's range), the gradient straight through, the loss as the float loss plus the codes' loss by hand, composed with
Matryoshka and cached MNR, the trainer's `quantization_aware` option (the no-duplicates sampler kept for MNR), and bad
inputs refused naming the value."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import make_tiny_model
from datasets import Dataset
from helpers import make_args
from test_cached_mnr import random_batch

from hf_siamese import SiameseBertOutput, SiamesePairCollator, SiameseTrainer, SiameseTrainingArguments
from hf_siamese.losses import (
    CachedMultipleNegativesRankingLoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
    QuantizationAwareLoss,
    SoftmaxLoss,
    SparseMultipleNegativesRankingLoss,
)
from hf_siamese.losses.quantization_aware import quantize_straight_through


def test_binary_codes_forward_and_the_gradient_passes_straight_through() -> None:
    torch.manual_seed(0)
    embeddings = torch.randn(5, 16, requires_grad=True)
    codes = quantize_straight_through(embeddings, "binary")
    assert torch.allclose(codes, torch.sign(embeddings.detach()) / math.sqrt(16))
    weights = torch.randn(5, 16)
    (codes * weights).sum().backward()
    through = embeddings.grad.clone()
    embeddings.grad = None
    (F.normalize(embeddings, dim=-1) * weights).sum().backward()
    assert torch.allclose(through, embeddings.grad)


def test_int8_codes_are_within_half_a_step_of_the_unit_vectors() -> None:
    torch.manual_seed(1)
    embeddings = torch.randn(40, 24)
    unit = F.normalize(embeddings, dim=-1)
    codes = quantize_straight_through(embeddings, "int8")
    step = (unit.max(dim=0).values - unit.min(dim=0).values) / 254
    assert ((codes - unit).abs() <= step / 2 + 1e-6).all()
    assert (codes - unit).abs().max() > 0  # quantized, not the identity


def test_the_loss_is_the_float_loss_plus_the_codes_loss_by_hand() -> None:
    torch.manual_seed(2)
    embeddings = torch.randn(6, 3, 32)
    mnr = MultipleNegativesRankingLoss(scale=20)
    loss = QuantizationAwareLoss(mnr, "binary", float_weight=0.5)(
        SiameseBertOutput(sentence_embedding=embeddings), None
    )

    def by_hand(vectors: torch.Tensor) -> torch.Tensor:
        anchors = F.normalize(vectors[:, 0], dim=-1)
        candidates = F.normalize(torch.cat([vectors[:, 1], vectors[:, 2]]), dim=-1)
        return F.cross_entropy(20 * anchors @ candidates.T, torch.arange(6))

    expected = 0.5 * by_hand(embeddings) + by_hand(torch.sign(embeddings))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_composes_with_matryoshka_and_cached_mnr() -> None:
    torch.manual_seed(3)
    embeddings = torch.randn(4, 2, 32, requires_grad=True)
    output = SiameseBertOutput(sentence_embedding=embeddings)
    outer = MatryoshkaLoss(QuantizationAwareLoss("mnr", "binary"), [32, 16])(output, None)
    inner = QuantizationAwareLoss(MatryoshkaLoss("mnr", [32, 16]), "binary")(output, None)
    assert torch.isfinite(outer) and torch.isfinite(inner)
    (outer + inner).backward()
    assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0
    model = make_tiny_model(seed=0).train()
    loss, _ = QuantizationAwareLoss(CachedMultipleNegativesRankingLoss(mini_batch_size=3), "int8").compute(
        model, random_batch(3), None
    )
    loss.backward()
    assert torch.isfinite(loss) and any(p.grad is not None for p in model.parameters())


def triplets(n: int) -> Dataset:
    words = ["man", "guitar", "dog", "park", "market", "price", "soup", "kitchen"]
    anchors = [f"{words[i % 8]} {words[(3 * i) % 8]} {i}" for i in range(n)]
    return Dataset.from_dict({"anchor": anchors, "positive": [a + " ." for a in anchors], "negative": anchors[::-1]})


def test_the_trainer_option_wraps_the_loss_and_keeps_the_sampler(tmp_path: Path, tiny_tokenizer) -> None:
    args = make_args(tmp_path, num_train_epochs=1)
    settings = {**args.to_dict(), "quantization_aware": "binary"}
    settings = {k: v for k, v in settings.items() if k in SiameseTrainingArguments.__dataclass_fields__}
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=SiameseTrainingArguments(**settings), train_dataset=triplets(16),
        data_collator=SiamesePairCollator(tiny_tokenizer), loss="mnr",
    )  # fmt: skip
    assert isinstance(trainer.loss, QuantizationAwareLoss) and trainer.loss.precision == "binary"
    assert trainer.no_duplicates_sampler
    trainer.train()
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])


def test_bad_inputs_are_refused_naming_the_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="precision='int4'; accepted: int8, binary"):
        QuantizationAwareLoss("mnr", "int4")
    with pytest.raises(ValueError, match="cannot wrap SoftmaxLoss"):
        QuantizationAwareLoss(SoftmaxLoss(), "binary")
    with pytest.raises(ValueError, match="quantizes already"):
        QuantizationAwareLoss(QuantizationAwareLoss("mnr"), "int8")
    with pytest.raises(ValueError, match="trains a sparse or multi-vector model"):
        QuantizationAwareLoss(SparseMultipleNegativesRankingLoss(), "binary")
    with pytest.raises(ValueError, match="float_weight=-1"):
        QuantizationAwareLoss("mnr", "binary", float_weight=-1)
    with pytest.raises(ValueError, match="quantization_aware='int4'; accepted: 'int8', 'binary', None"):
        SiameseTrainingArguments(output_dir=str(tmp_path), quantization_aware="int4", use_cpu=True)
