"""In-batch negatives ranking (MNR)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..modeling.distributed import gather_with_grad
from .base import SiameseLoss


class MultipleNegativesRankingLoss(SiameseLoss):
    """In-batch negatives: each anchor must pick its own positive among all positives (and hard negatives).

    Rows: `anchor, positive[, negative, negative_2, ...]`, no labels. Scores are `scale * cos(anchor, candidate)`
    over every positive and hard negative of the batch; the loss is the cross-entropy of picking the right
    positive. `symmetric=True` adds the reverse direction (each positive picks its anchor among all anchors) and
    averages the two.

    With `gather_across_processes=True`, under `accelerate launch` / `torchrun`, every process scores its anchors
    against the candidates of all processes, so the number of negatives grows with the world size. Gradients stay
    exact: the gather passes the gradients of all processes back to the process that owns each embedding, so after
    DDP averages gradients over processes they equal those of one process holding the whole global batch.
    """

    label_kind = None
    num_texts = None

    def __init__(self, scale: float = 20.0, symmetric: bool = False, gather_across_processes: bool = False) -> None:
        super().__init__()
        if not scale > 0:
            raise ValueError(f"MultipleNegativesRankingLoss: scale={scale!r} must be positive.")
        self.scale = float(scale)
        self.symmetric = bool(symmetric)
        self.gather_across_processes = bool(gather_across_processes)

    def forward(self, output: Any, labels: torch.Tensor | None = None) -> torch.Tensor:
        embeddings = output.sentence_embedding
        if embeddings.dim() != 3 or embeddings.shape[1] < 2:
            raise ValueError(
                "MultipleNegativesRankingLoss needs rows of (anchor, positive[, negatives...]): sentence_embedding "
                f"of shape (batch, >=2, hidden), got {tuple(embeddings.shape)}."
            )
        return self.rank(embeddings[:, 0], embeddings[:, 1], embeddings[:, 2:])

    def rank(self, anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """`anchors`, `positives`: `(batch, hidden)`; `negatives`: `(batch, num_negatives, hidden)`."""
        batch = anchors.shape[0]
        offset = 0
        if self.gather_across_processes:
            positives, offset = gather_with_grad(positives)
            negatives, _ = gather_with_grad(negatives)
            if self.symmetric:
                all_anchors, _ = gather_with_grad(anchors)
        elif self.symmetric:
            all_anchors = anchors
        candidates = torch.cat([positives, negatives.reshape(-1, negatives.shape[-1])])
        anchors_n = F.normalize(anchors.float(), dim=-1)
        scores = anchors_n @ F.normalize(candidates.float(), dim=-1).T * self.scale
        targets = torch.arange(batch, device=anchors.device) + offset
        loss = F.cross_entropy(scores, targets)
        if self.symmetric:
            # Each local positive against all anchors (of all processes when gathering).
            local_positives = positives[offset : offset + batch]
            reverse = F.normalize(local_positives.float(), dim=-1) @ F.normalize(all_anchors.float(), dim=-1).T
            loss = (loss + F.cross_entropy(reverse * self.scale, targets)) / 2
        # No extra factor: the gather's backward sums every process's gradient into the owner of each embedding, so
        # after DDP averages over processes the gradient is that of the mean loss over the global batch.
        return loss
