"""The multi-vector (MaxSim) losses against by-hand computations on small tensors: in-batch negatives, MarginMSE and
listwise KL on MaxSim scores (MeanMaxSim where the model scores so), the cached (GradCache) form's loss and gradient;
bad rows, labels and settings refused by name."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from hf_siamese.losses import (
    LOSSES,
    CachedMultiVectorMultipleNegativesRankingLoss,
    MultiVectorListDistillationLoss,
    MultiVectorMarginMSELoss,
    MultiVectorMultipleNegativesRankingLoss,
    get_loss,
)
from hf_siamese.modeling.modeling_multivector import MultiVectorOutput


def _output(batch: int = 3, texts: int = 3, seq: int = 4, dim: int = 5, seed: int = 0) -> MultiVectorOutput:
    generator = torch.Generator().manual_seed(seed)
    vectors = F.normalize(torch.randn(batch, texts, seq, dim, generator=generator), dim=-1)
    mask = torch.rand(batch, texts, seq, generator=generator) > 0.3
    mask[..., 0] = True  # every text keeps a token
    return MultiVectorOutput(token_embeddings=vectors, token_mask=mask)


def _maxsim(q: torch.Tensor, qm: torch.Tensor, d: torch.Tensor, dm: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """MaxSim of one query and one document by loops: sum over kept query tokens of the best kept document token."""
    total = torch.zeros(())
    for i in range(q.shape[0]):
        if qm[i]:
            total = total + max(float(q[i] @ d[j]) for j in range(d.shape[0]) if dm[j])
    return total / qm.sum() if mean else total


def _by_hand_scores(output: MultiVectorOutput, documents: list[tuple[int, int]], mean: bool = False) -> torch.Tensor:
    v, m = output.token_embeddings, output.token_mask
    return torch.stack(
        [torch.stack([_maxsim(v[b, 0], m[b, 0], v[r, t], m[r, t], mean) for r, t in documents]) for b in range(len(v))]
    )


def test_maxsim_mnr_is_cross_entropy_over_every_document_of_the_batch() -> None:
    output = _output()
    documents = [(r, 1) for r in range(3)] + [(r, 2) for r in range(3)]  # positives first, then negatives
    scores = _by_hand_scores(output, documents)
    for scale in (1.0, 3.0):
        expected = F.cross_entropy(scores * scale, torch.arange(3))
        torch.testing.assert_close(MultiVectorMultipleNegativesRankingLoss(scale=scale)(output), expected)
    pairs = MultiVectorOutput(token_embeddings=output.token_embeddings[:, :2], token_mask=output.token_mask[:, :2])
    expected = F.cross_entropy(_by_hand_scores(output, [(r, 1) for r in range(3)]), torch.arange(3))
    torch.testing.assert_close(get_loss("maxsim_mnr")(pairs), expected)


def test_the_loss_scores_by_meanmaxsim_where_the_model_does() -> None:
    output = _output()
    loss = MultiVectorMultipleNegativesRankingLoss()
    model = torch.nn.Module()
    model.config = type("Config", (), {"similarity": "meanmaxsim"})()
    loss.note_model(model)
    documents = [(r, 1) for r in range(3)] + [(r, 2) for r in range(3)]
    expected = F.cross_entropy(_by_hand_scores(output, documents, mean=True), torch.arange(3))
    torch.testing.assert_close(loss(output), expected)


def test_maxsim_margin_mse_regresses_maxsim_margins_on_the_teachers() -> None:
    output = _output(texts=4)
    v, m = output.token_embeddings, output.token_mask
    scores = torch.stack(
        [torch.stack([_maxsim(v[b, 0], m[b, 0], v[b, t], m[b, t]) for t in (1, 2, 3)]) for b in range(3)]
    )
    teacher = torch.tensor([[5.0, 2.0, 1.0], [3.0, 3.0, 0.0], [1.0, 2.0, 4.0]])
    margins = 2.0 * (scores[:, :1] - scores[:, 1:])
    expected = F.mse_loss(margins, teacher[:, :1] - teacher[:, 1:])
    loss = MultiVectorMarginMSELoss(scale=2.0)
    torch.testing.assert_close(loss(output, teacher), expected)  # the teacher's scores (positive first)
    torch.testing.assert_close(loss(output, teacher[:, :1] - teacher[:, 1:]), expected)  # or its margins
    assert get_loss("maxsim_margin_mse").scale == 1.0


def test_maxsim_list_distill_is_kl_to_the_teachers_softmax() -> None:
    output = _output(texts=4)
    v, m = output.token_embeddings, output.token_mask
    scores = torch.stack(
        [torch.stack([_maxsim(v[b, 0], m[b, 0], v[b, t], m[b, t]) for t in (1, 2, 3)]) for b in range(3)]
    )
    teacher = torch.tensor([[5.0, 2.0, 1.0], [3.0, 3.0, 0.0], [1.0, 2.0, 4.0]])
    loss = MultiVectorListDistillationLoss(scale=2.0, teacher_temperature=0.5)
    target = F.softmax(teacher / 0.5, dim=-1)
    expected = (target * (target.log() - F.log_softmax(2.0 * scores, dim=-1))).sum(dim=-1).mean()
    torch.testing.assert_close(loss(output, teacher), expected)
    assert (loss.scale, loss.teacher_temperature) == (2.0, 0.5)


def test_the_losses_are_registered_by_name() -> None:
    assert LOSSES["maxsim_mnr"] is MultiVectorMultipleNegativesRankingLoss
    assert LOSSES["cached_maxsim_mnr"] is CachedMultiVectorMultipleNegativesRankingLoss
    assert LOSSES["maxsim_margin_mse"] is MultiVectorMarginMSELoss
    assert LOSSES["maxsim_list_distill"] is MultiVectorListDistillationLoss
    assert all(getattr(LOSSES[name], "multivector", False) for name in LOSSES if "maxsim" in name)


def test_bad_rows_and_labels_are_refused() -> None:
    output = _output(texts=3)
    single = MultiVectorOutput(token_embeddings=output.token_embeddings[:, :1], token_mask=output.token_mask[:, :1])
    with pytest.raises(ValueError, match=re.escape("needs rows of (query, positive[, negatives...])")):
        MultiVectorMultipleNegativesRankingLoss()(single)
    pairs = MultiVectorOutput(token_embeddings=output.token_embeddings[:, :2], token_mask=output.token_mask[:, :2])
    for loss in (MultiVectorMarginMSELoss(), MultiVectorListDistillationLoss()):
        with pytest.raises(ValueError, match=re.escape("needs rows of (query, positive, negative[, negative_2, ...])")):
            loss(pairs, torch.zeros(3, 2))
        with pytest.raises(ValueError, match="labels; the batch has no `labels`"):
            loss(output, None)
    with pytest.raises(ValueError, match=re.escape("need labels of shape (3, 1) (the teacher's margins), (3, 2)")):
        MultiVectorMarginMSELoss()(output, torch.zeros(3, 4))
    with pytest.raises(
        ValueError, match=re.escape("need labels of shape (3, 2) (the teacher's scores, positive first)")
    ):
        MultiVectorListDistillationLoss()(output, torch.zeros(3, 3))
    with pytest.raises(ValueError, match="trains a MultiVectorModel: it needs token_embeddings"):
        MultiVectorMultipleNegativesRankingLoss()(object())


@pytest.mark.parametrize(
    ("name", "setting", "value"),
    [("maxsim_mnr", "scale", 0.0), ("maxsim_margin_mse", "scale", -1.0),
     ("maxsim_list_distill", "teacher_temperature", float("inf")), ("cached_maxsim_mnr", "mini_batch_size", 0)],
)  # fmt: skip
def test_bad_settings_are_refused_by_name(name, setting, value) -> None:
    with pytest.raises(ValueError, match=f"{LOSSES[name].__name__}: {setting}={value!r}"):
        get_loss(name, **{setting: value})
