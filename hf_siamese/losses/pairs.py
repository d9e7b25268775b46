"""Losses on pairs with a score or a class label: cosine regression, CoSENT, softmax classification."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .base import SiameseLoss


class CosineSimilarityLoss(SiameseLoss):
    """MSE between the pair similarity and the gold score rescaled to [0, 1].

    Rows: two texts and a float score. `score_range=(low, high)` is the range of the gold scores, e.g. `(0, 5)` for
    STS Benchmark; scores are mapped with `(score - low) / (high - low)`. The similarity is the model's pair
    similarity: cosine by default, followed by the learned affine map when the model has `cosine_affine=True`.
    """

    label_kind = "score"

    def __init__(self, score_range: tuple[float, float] = (0.0, 1.0)) -> None:
        super().__init__()
        low, high = (float(x) for x in score_range)
        if not high > low:
            raise ValueError(f"CosineSimilarityLoss: score_range={score_range!r} needs low < high, e.g. (0, 5).")
        self.score_range = (low, high)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        self._pair(output)
        labels = self._need_labels(labels, "CosineSimilarityLoss", "float score")
        low, high = self.score_range
        target = (labels.float() - low) / (high - low)
        return F.mse_loss(output.similarity.float(), target)


class CoSENTLoss(SiameseLoss):
    """CoSENT: for every two pairs whose gold scores differ, penalise the lower-scored pair having the higher cosine.

    `loss = log(1 + sum over (i, j) with y_i > y_j of exp(scale * (cos_j - cos_i)))`. Only the order of the scores
    matters, so no score range is needed. Rows: two texts and a float score.
    """

    label_kind = "score"

    def __init__(self, scale: float = 20.0) -> None:
        super().__init__()
        self.scale = float(scale)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        u, v = self._pair(output)
        labels = self._need_labels(labels, "CoSENTLoss", "float score")
        return cosent_ranking(F.cosine_similarity(u, v, dim=-1).float() * self.scale, labels)


def cosent_ranking(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The CoSENT objective on scaled pair scores `s` (shape `(batch,)`, larger = more similar) and gold `labels`:
    `log(1 + sum over (i, j) with y_i > y_j of exp(s_j - s_i))`, 0 when all gold scores tie."""
    labels = labels.float()
    differences = scores[None, :] - scores[:, None]  # [i, j] = s_j - s_i
    wrong_order = labels[:, None] > labels[None, :]  # pairs (i, j) where i should score higher
    differences = differences.masked_fill(~wrong_order, float("-inf"))
    # The zero term is the "1 +" inside the log.
    return torch.logsumexp(torch.cat([differences.new_zeros(1), differences.flatten()]), dim=0)


class SoftmaxLoss(SiameseLoss):
    """Cross-entropy of the model's classifier head on the pair features (by default `u, v, |u-v|`).

    Rows: two texts and a class label (int id or a string in the model's `label2id`). The head belongs to the model
    (`SiameseBertModel.from_encoder(..., label2id={...})`), so it is saved and reloaded with it.

    Why the encoder is not wrecked here: with unit-norm embeddings the pair features are tiny (about
    `1/sqrt(hidden)` per dimension), so a classifier trained at the encoder's learning rate barely moves, and the
    fastest way to lower the loss is to move the encoder: it spreads embeddings apart to make the three NLI classes
    separable, which destroys the similarity structure STS relies on. The model therefore scales the features by
    `sqrt(hidden)` (config `classifier_feature_scale`), and `SiameseTrainer` trains the head at a higher learning
    rate (`head_learning_rate`, default 100x) so the head, not the encoder, does most of the fitting.
    """

    label_kind = "class"

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        self._pair(output)
        if output.logits is None:
            raise ValueError(
                "SoftmaxLoss needs a model with a classifier head: build it with "
                "SiameseBertModel.from_encoder(..., label2id={...}) or num_labels=N."
            )
        labels = self._need_labels(labels, "SoftmaxLoss", "class")
        if labels.is_floating_point():
            raise ValueError("SoftmaxLoss needs integer class labels, got float scores; use CosineSimilarityLoss.")
        num_labels = output.logits.shape[-1]
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_labels):
            raise ValueError(
                f"SoftmaxLoss: label ids must be in 0..{num_labels - 1}, got {labels.min().item()}..."
                f"{labels.max().item()}."
            )
        return F.cross_entropy(output.logits.float(), labels)
