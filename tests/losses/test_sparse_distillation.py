"""Distillation for sparse models: `SparseMarginMSELoss` (`sparse_margin_mse`) and `SparseListDistillationLoss`
(`sparse_list_distill`) against the formulas written out on small tensors (the teacher term, the FLOPS term and its
warm-up, an inference-free model's queries left out of it), the bad inputs named, and short `SiameseTrainer` runs of
a tiny SPLADE / inference-free model whose agreement with a lexical teacher improves."""

from __future__ import annotations

import math
import random

import pytest
import torch
from conftest import TINY, WORDS
from datasets import Dataset
from helpers import make_args
from torch import nn
from transformers import BertConfig, BertForMaskedLM

from hf_siamese import SiameseTrainer, SparseSiameseConfig, SparseSiameseModel
from hf_siamese.losses import (
    LOSSES,
    FlopsRegularizedLoss,
    SparseListDistillationLoss,
    SparseMarginMSELoss,
    SparseMultipleNegativesRankingLoss,
    get_loss,
)
from hf_siamese.modeling.modeling_sparse import SparseSiameseOutput


def _vectors(seed: int = 1, rows: int = 3, texts: int = 4, vocab: int = 6) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.relu(torch.randn(rows, texts, vocab))


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _flops_by_hand(vectors: list[list[float]]) -> float:
    """sum over terms j of (mean over vectors i of w_ij)^2."""
    return sum((sum(v[j] for v in vectors) / len(vectors)) ** 2 for j in range(len(vectors[0])))


def _regularizer_by_hand(rows: list, query_weight: float, document_weight: float, queries: bool = True) -> float:
    documents = [text for row in rows for text in row[1:]]
    term = document_weight * _flops_by_hand(documents)
    return term + (query_weight * _flops_by_hand([row[0] for row in rows]) if queries else 0.0)


def _margin_mse_by_hand(rows: list, scores: list[list[float]], scale: float) -> float:
    terms = []
    for (query, positive, *negatives), teacher in zip(rows, scores, strict=True):
        for negative, teacher_negative in zip(negatives, teacher[1:], strict=True):
            student = scale * (_dot(query, positive) - _dot(query, negative))
            terms.append((student - (teacher[0] - teacher_negative)) ** 2)
    return sum(terms) / len(terms)


def _kl_by_hand(rows: list, scores: list[list[float]], scale: float, temperature: float) -> float:
    total = 0.0
    for (query, *documents), teacher in zip(rows, scores, strict=True):
        student = [scale * _dot(query, document) for document in documents]
        t_norm = math.log(sum(math.exp(t / temperature) for t in teacher))
        s_norm = math.log(sum(math.exp(s) for s in student))
        for s, t in zip(student, teacher, strict=True):
            log_p, log_q = t / temperature - t_norm, s - s_norm
            total += math.exp(log_p) * (log_p - log_q)
    return total / len(rows)


SCORES = [[4.0, 1.5, -0.5], [2.0, 2.5, 0.0], [0.5, -1.0, -3.0]]


@pytest.mark.parametrize(("step", "factor"), [(0, 0.0), (10, 0.0625), (20, 0.25), (40, 1.0), (70, 1.0)])
def test_sparse_margin_mse_by_hand_with_the_warmed_up_flops_term(step, factor) -> None:
    vectors = _vectors()
    rows = vectors.tolist()
    loss = SparseMarginMSELoss(scale=0.5, query_regularizer=0.3, document_regularizer=0.2, warmup_ratio=0.4)
    loss.set_progress(step, 100)
    assert loss.regularizer_factor == pytest.approx(factor)
    expected = _margin_mse_by_hand(rows, SCORES, 0.5) + factor * _regularizer_by_hand(rows, 0.3, 0.2)
    value = loss(SparseSiameseOutput(sentence_embedding=vectors), torch.tensor(SCORES))
    assert float(value) == pytest.approx(expected, rel=1e-5)
    margins = [[s[0] - s[1], s[0] - s[2]] for s in SCORES]  # the teacher's margins read as its scores
    assert float(loss(SparseSiameseOutput(sentence_embedding=vectors), torch.tensor(margins))) == pytest.approx(
        expected, rel=1e-5
    )


def test_sparse_margin_mse_one_negative_takes_one_margin_per_row() -> None:
    vectors = _vectors(texts=3)
    rows = vectors.tolist()
    loss = SparseMarginMSELoss(warmup_ratio=0)
    margins = [1.0, -2.0, 0.5]
    expected = _margin_mse_by_hand(rows, [[m, 0.0] for m in margins], 1.0) + _regularizer_by_hand(rows, 5e-5, 3e-5)
    value = loss(SparseSiameseOutput(sentence_embedding=vectors), torch.tensor(margins))
    assert float(value) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(("scale", "temperature"), [(1.0, 1.0), (0.5, 2.0)])
def test_sparse_list_distillation_by_hand(scale, temperature) -> None:
    vectors = _vectors(seed=2)
    rows = vectors.tolist()
    loss = SparseListDistillationLoss(
        scale=scale, teacher_temperature=temperature, query_regularizer=0.1, document_regularizer=0.05, warmup_ratio=0.5
    )
    loss.set_progress(1, 4)  # a quarter of the way, half the warm-up: factor 0.25
    assert loss.regularizer_factor == pytest.approx(0.25)
    expected = _kl_by_hand(rows, SCORES, scale, temperature) + 0.25 * _regularizer_by_hand(rows, 0.1, 0.05)
    value = loss(SparseSiameseOutput(sentence_embedding=vectors), torch.tensor(SCORES))
    assert float(value) == pytest.approx(expected, rel=1e-5)
    # no warm-up (warmup_ratio 0) and no progress told: the regulariser at full weight from the start
    assert SparseListDistillationLoss(warmup_ratio=0).regularizer_factor == 1.0
    assert SparseListDistillationLoss().regularizer_factor == 1.0


class _LookupQueries(nn.Module):
    """A stand-in for a sparse model: returns the vectors it is given; with `inference_free` it holds
    `query_weights`, as an inference-free `SparseSiameseModel` does."""

    def __init__(self, inference_free: bool) -> None:
        super().__init__()
        self.query_weights = nn.Parameter(torch.ones(6)) if inference_free else None

    def forward(self, input_ids: torch.Tensor) -> SparseSiameseOutput:
        return SparseSiameseOutput(sentence_embedding=input_ids)


@pytest.mark.parametrize("name", ["sparse_margin_mse", "sparse_list_distill", "sparse_mnr"])
@pytest.mark.parametrize("inference_free", [False, True])
def test_inference_free_queries_are_not_regularised(name, inference_free) -> None:
    vectors = _vectors(seed=3)
    rows = vectors.tolist()
    loss = get_loss(name, query_regularizer=10.0, document_regularizer=0.5, warmup_ratio=0)
    labels = None if name == "sparse_mnr" else torch.tensor(SCORES)
    got, output = loss.compute(_LookupQueries(inference_free), {"input_ids": vectors}, labels)
    assert output.sentence_embedding is vectors
    bare = get_loss(name, query_regularizer=0.0, document_regularizer=0.0)  # the ranking / teacher term alone
    without = float(bare(output, labels))
    expected = without + _regularizer_by_hand(rows, 10.0, 0.5, queries=not inference_free)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_the_losses_are_registered_sparse_and_read_teacher_scores() -> None:
    assert LOSSES["sparse_margin_mse"] is SparseMarginMSELoss
    assert LOSSES["sparse_list_distill"] is SparseListDistillationLoss
    for cls in (SparseMarginMSELoss, SparseListDistillationLoss, SparseMultipleNegativesRankingLoss):
        assert issubclass(cls, FlopsRegularizedLoss) and cls.sparse is True
    assert SparseMarginMSELoss.label_kind == SparseListDistillationLoss.label_kind == "score"
    loss = get_loss("sparse_margin_mse", scale=2.0)
    assert isinstance(loss, SparseMarginMSELoss) and loss.scale == 2.0 and loss.distillation.similarity == "dot"


@pytest.mark.parametrize("cls", [SparseMarginMSELoss, SparseListDistillationLoss])
def test_bad_rows_and_labels_are_named(cls) -> None:
    name = cls.__name__
    loss = cls()
    with pytest.raises(ValueError, match=rf"{name} needs rows of \(query, positive, negative.*got \(3, 2, 6\)"):
        loss(SparseSiameseOutput(sentence_embedding=_vectors(texts=2)), torch.tensor(SCORES)[:, :2])
    with pytest.raises(ValueError, match=rf"{name} needs rows of .*got \(3, 6\)"):
        loss(SparseSiameseOutput(sentence_embedding=_vectors()[:, 0]), torch.tensor(SCORES))
    with pytest.raises(ValueError, match=rf"{name} needs teacher .*the batch has no `labels`"):
        loss(SparseSiameseOutput(sentence_embedding=_vectors()), None)
    with pytest.raises(ValueError, match=rf"{name}: 3 rows with .*got \(3, 5\)"):
        loss(SparseSiameseOutput(sentence_embedding=_vectors()), torch.zeros(3, 5))
    with pytest.raises(ValueError, match=rf"{name}: 3 rows with .*got \(3,\)"):
        loss(SparseSiameseOutput(sentence_embedding=_vectors()), torch.zeros(3))


@pytest.mark.parametrize("name", ["sparse_margin_mse", "sparse_list_distill"])
@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("query_regularizer", -1.0, "must be a finite number >= 0"),
        ("document_regularizer", float("inf"), "must be a finite number >= 0"),
        ("document_regularizer", "0.1", "must be a finite number >= 0"),
        ("warmup_ratio", 2.0, r"must be in \[0, 1\]"),
        ("scale", 0.0, "must be a positive finite number"),
    ],
)
def test_bad_settings_are_refused_by_name(name, setting, value, message) -> None:
    owner = LOSSES[name].__name__
    with pytest.raises(ValueError, match=rf"{owner}: {setting}={value!r} {message}"):
        get_loss(name, **{setting: value})


def test_a_bad_teacher_temperature_is_refused() -> None:
    with pytest.raises(ValueError, match="SparseListDistillationLoss: teacher_temperature=-2.0 must be a positive"):
        SparseListDistillationLoss(teacher_temperature=-2.0)


# ----------------------------------------------------------------------------------------------- short training runs


def _sparse(architecture: str) -> SparseSiameseModel:
    torch.manual_seed(0)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    config = SparseSiameseConfig(encoder_config=encoder.config, architecture=architecture, query_ignore_ids=[0, 2, 3])
    return SparseSiameseModel(config, encoder=encoder)


def teacher_rows(n: int = 24, seed: int = 0) -> Dataset:
    """Rows (anchor, positive, negative_1, negative_2) with a lexical teacher's scores: 2 x the number of the
    anchor's words the document holds (positive first)."""
    rng = random.Random(seed)
    words = WORDS[:60]
    rows = []
    for _ in range(n):
        documents = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(3)]
        anchor = " ".join(documents[0].split()[:3])
        label = [2.0 * len(set(anchor.split()) & set(d.split())) for d in documents]
        rows.append({"anchor": anchor, "positive": documents[0], "negative_1": documents[1]})
        rows[-1] |= {"negative_2": documents[2], "label": label}
    return Dataset.from_list(rows)


def _teacher_term(model: SparseSiameseModel, loss: FlopsRegularizedLoss, rows: Dataset, tokenizer) -> float:
    """The teacher term of `loss` (no regulariser) over all `rows`: how far the model is from the teacher."""
    from hf_siamese.training.collator import SiamesePairCollator

    batch = SiamesePairCollator(tokenizer)(rows.to_list())
    labels = batch.pop("labels")
    model.eval()
    with torch.no_grad():
        output = model(**batch)
    return float(loss.distillation(output, labels))


@pytest.mark.parametrize(
    ("name", "architecture"),
    [("sparse_margin_mse", "splade"), ("sparse_margin_mse", "inference_free"), ("sparse_list_distill", "splade")],
)
def test_a_short_run_brings_the_student_closer_to_the_teacher(tmp_path, tiny_tokenizer, name, architecture) -> None:
    rows = teacher_rows()
    model = _sparse(architecture)
    loss = get_loss(name)
    before = _teacher_term(model, loss, rows, tiny_tokenizer)
    args = make_args(tmp_path, num_train_epochs=3, per_device_train_batch_size=8, learning_rate=5e-3)
    trainer = SiameseTrainer(
        model=model.train(), args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss=loss
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 9 and all(math.isfinite(value) for value in losses)
    assert loss.progress == pytest.approx(8 / 9)  # told its progress every step
    after = _teacher_term(model, loss, rows, tiny_tokenizer)
    # SPLADE measured 0.43 x (margins) and 0.29 x (listwise) its start; inference-free 0.86 x, its queries being
    # a lookup of the words they hold (the documents' encoder does the learning)
    assert after < (0.9 if architecture == "inference_free" else 0.6) * before, (before, after)


def test_a_sparse_model_on_teacher_scores_defaults_to_sparse_margin_mse(tmp_path, tiny_tokenizer) -> None:
    args = make_args(tmp_path, num_train_epochs=1)
    trainer = SiameseTrainer(
        model=_sparse("splade"), args=args, train_dataset=teacher_rows(8), processing_class=tiny_tokenizer
    )
    assert isinstance(trainer.loss, SparseMarginMSELoss) and not trainer.no_duplicates_sampler
