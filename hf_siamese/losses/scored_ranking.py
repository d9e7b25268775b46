"""In-batch negatives on scored pairs: the pairs scoring at least a threshold are positives for an MNR-style term."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
import torch.nn.functional as F

from .base import SiameseLoss


class ScoredPairsRankingLoss(SiameseLoss):
    """MNR on graded data: each pair scoring at least `threshold` must pick its own second text among the batch's.

    Rows: two texts and a float score `y`. With `s_ij = scale * cos(u_i, v_j)` over all rows i, j of the batch and
    `P = {i : y_i >= threshold}` the positive rows,

        loss = mean over i in P of -log(exp(s_ii) / sum_j exp(s_ij))

    so every other row's second text is an in-batch negative, and rows below the threshold only serve as negatives.
    `symmetric=True` averages this with the reverse direction (each positive `v_i` picks its `u_i` among all first
    texts). A batch without a positive row gives 0, still connected to the graph so that gradient accumulation and
    DDP see every parameter. This is the in-batch term of the AnglE paper's recipe on STS-style data; combine it with
    a ranking loss on all pairs, e.g. `CombinedLoss([("cosent", 1), (ScoredPairsRankingLoss(4.0), 1)])`. A second
    text repeated in the batch is a false negative; `SiameseTrainingArguments(no_duplicates_sampler=True)` avoids
    repeats.

    Args:
        threshold: the lowest gold score of a positive pair, on the data's own scale (e.g. 4.0 for STSb's 0-5).
        scale: inverse temperature of the softmax, as in `MultipleNegativesRankingLoss`.
        symmetric: add the reverse direction.
    """

    label_kind = "score"

    def __init__(self, threshold: float | None = None, scale: float = 20.0, symmetric: bool = False) -> None:
        super().__init__()
        if threshold is None:
            raise ValueError(
                "ScoredPairsRankingLoss needs threshold=, the lowest gold score of a positive pair on your data's "
                "scale, e.g. ScoredPairsRankingLoss(threshold=4.0) for STSb's 0-5 scores."
            )
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
            raise ValueError(f"ScoredPairsRankingLoss: threshold={threshold!r} must be a finite number, e.g. 4.0.")
        if not scale > 0:
            raise ValueError(f"ScoredPairsRankingLoss: scale={scale!r} must be positive.")
        self.threshold = float(threshold)
        self.scale = float(scale)
        self.symmetric = bool(symmetric)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        u, v = self._pair(output)
        labels = self._need_labels(labels, "ScoredPairsRankingLoss", "float score")
        if labels.shape != u.shape[:1]:
            raise ValueError(
                f"ScoredPairsRankingLoss needs one score per pair: labels of shape ({u.shape[0]},), got "
                f"{tuple(labels.shape)}."
            )
        scores = F.normalize(u.float(), dim=-1) @ F.normalize(v.float(), dim=-1).T * self.scale
        positives = (labels >= self.threshold).nonzero().squeeze(-1)
        if positives.numel() == 0:
            return scores.sum() * 0.0
        loss = F.cross_entropy(scores[positives], positives)
        if self.symmetric:
            loss = (loss + F.cross_entropy(scores.T[positives], positives)) / 2
        return loss


__all__ = ["ScoredPairsRankingLoss"]
