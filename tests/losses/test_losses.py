"""Losses against values computed by hand on fixed embeddings, and gradients reaching the encoder."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import make_tiny_model

from hf_siamese import losses


def output(embeddings: list, similarity=None, logits=None) -> SimpleNamespace:
    return SimpleNamespace(
        sentence_embedding=torch.tensor(embeddings, dtype=torch.float32),
        similarity=None if similarity is None else torch.tensor(similarity),
        logits=None if logits is None else torch.tensor(logits),
    )


def cos(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def log_softmax_at(scores: list[float], target: int) -> float:
    return scores[target] - math.log(sum(math.exp(s) for s in scores))


def test_cosine_similarity_loss_by_hand() -> None:
    out = output([[[1, 0], [1, 1]], [[0, 1], [1, 0]]], similarity=[0.8, 0.1])
    loss = losses.CosineSimilarityLoss(score_range=(0, 5))(out, torch.tensor([5.0, 2.5]))
    expected = ((0.8 - 1.0) ** 2 + (0.1 - 0.5) ** 2) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_cosine_similarity_loss_rejects_bad_range() -> None:
    with pytest.raises(ValueError, match=r"score_range=\(5, 0\)"):
        losses.CosineSimilarityLoss(score_range=(5, 0))


def test_softmax_loss_by_hand() -> None:
    logits = [[2.0, 0.5, -1.0], [0.0, 0.0, 3.0]]
    out = output([[[1, 0], [0, 1]], [[1, 1], [0, 1]]], logits=logits)
    loss = losses.SoftmaxLoss()(out, torch.tensor([0, 1]))
    expected = -(log_softmax_at(logits[0], 0) + log_softmax_at(logits[1], 1)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_softmax_loss_needs_head_and_integer_labels() -> None:
    out = output([[[1, 0], [0, 1]]])
    with pytest.raises(ValueError, match="classifier head"):
        losses.SoftmaxLoss()(out, torch.tensor([0]))
    out = output([[[1, 0], [0, 1]]], logits=[[0.0, 1.0]])
    with pytest.raises(ValueError, match="integer class labels"):
        losses.SoftmaxLoss()(out, torch.tensor([0.5]))
    with pytest.raises(ValueError, match=r"0\.\.1"):
        losses.SoftmaxLoss()(out, torch.tensor([2]))


ANCHORS = [[1.0, 0.0], [0.0, 1.0]]
POSITIVES = [[0.8, 0.6], [0.6, 0.8]]
NEGATIVES = [[-1.0, 0.2], [0.3, -1.0]]


@pytest.mark.parametrize("with_negatives", [False, True])
def test_mnr_by_hand(with_negatives: bool) -> None:
    rows = [[a, p, n] if with_negatives else [a, p] for a, p, n in zip(ANCHORS, POSITIVES, NEGATIVES, strict=True)]
    loss = losses.MultipleNegativesRankingLoss(scale=20)(output(rows), None)
    candidates = POSITIVES + (NEGATIVES if with_negatives else [])
    expected = 0.0
    for i, anchor in enumerate(ANCHORS):
        scores = [20 * cos(anchor, c) for c in candidates]
        expected -= log_softmax_at(scores, i)
    assert loss.item() == pytest.approx(expected / 2, rel=1e-5)


def test_mnr_symmetric_by_hand() -> None:
    rows = [[a, p, n] for a, p, n in zip(ANCHORS, POSITIVES, NEGATIVES, strict=True)]
    loss = losses.MultipleNegativesRankingLoss(scale=10, symmetric=True)(output(rows), None)
    forward = backward = 0.0
    for i, anchor in enumerate(ANCHORS):
        forward -= log_softmax_at([10 * cos(anchor, c) for c in POSITIVES + NEGATIVES], i)
    for i, positive in enumerate(POSITIVES):
        backward -= log_softmax_at([10 * cos(positive, a) for a in ANCHORS], i)
    assert loss.item() == pytest.approx((forward / 2 + backward / 2) / 2, rel=1e-5)


def test_cosent_by_hand() -> None:
    a, b = [[1.0, 0.0], [1.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]
    rows = [[a[0], b[0]], [a[1], b[1]]]
    c0, c1 = cos(a[0], b[0]), cos(a[1], b[1])  # 0 and 0.707
    # gold says pair 0 is more similar than pair 1, the cosines say the opposite
    loss = losses.CoSENTLoss(scale=20)(output(rows), torch.tensor([4.0, 1.0]))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(20 * (c1 - c0))), rel=1e-5)
    right = losses.CoSENTLoss(scale=20)(output(rows), torch.tensor([1.0, 4.0]))
    assert right.item() == pytest.approx(math.log(1 + math.exp(20 * (c0 - c1))), abs=1e-7)


def test_get_loss_by_name_and_unknown() -> None:
    assert isinstance(losses.get_loss("mnr"), losses.MultipleNegativesRankingLoss)
    assert isinstance(losses.get_loss("Cosine"), losses.CosineSimilarityLoss)
    with pytest.raises(
        ValueError,
        match=r"'triplet'.*\['angle', 'cached_maxsim_mnr', 'cached_mnr', 'cosent', 'cosine', .*'mnr', 'scored_mnr', "
        r"'softmax', 'sparse_list_distill', 'sparse_margin_mse', 'sparse_mnr'\]",
    ):
        losses.get_loss("triplet")


@pytest.mark.parametrize(
    ("loss", "labels", "kwargs"),
    [
        (losses.CosineSimilarityLoss(), torch.tensor([0.9, 0.1]), {}),
        (losses.CoSENTLoss(), torch.tensor([0.9, 0.1]), {}),
        (losses.SoftmaxLoss(), torch.tensor([0, 2]), {"num_labels": 3, "normalize": True}),
        (losses.MultipleNegativesRankingLoss(), None, {}),
    ],
)
def test_gradients_reach_the_encoder(loss, labels, kwargs, tiny_tokenizer) -> None:
    model = make_tiny_model(**kwargs).train()
    batch = tiny_tokenizer(["a man plays", "a dog", "the red car", "two cats"], padding=True, return_tensors="pt")
    value = loss(model(**{k: v.reshape(2, 2, -1) for k, v in batch.items()}), labels)
    value.backward()
    grad = model.encoder.embeddings.word_embeddings.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    assert model.encoder.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
