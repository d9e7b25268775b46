"""In-batch negatives for sparse vectors (SPLADE), with the FLOPS regulariser that keeps them sparse."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .base import SiameseLoss


def flops(vectors: torch.Tensor) -> torch.Tensor:
    """The FLOPS regulariser of a batch of term-weight vectors `(n, vocab)`: sum over terms of the squared mean
    weight, sum_j (mean_i w_ij)^2 (Paria et al. 2020), the expected cost of an inverted-index dot product; it pushes
    the weights of common terms to zero."""
    return (vectors.float().mean(dim=0) ** 2).sum()


class SparseMultipleNegativesRankingLoss(SiameseLoss):
    """Each query must pick its own positive among all positives and hard negatives of the batch, scored by the dot
    product of sparse vectors (`SparseSiameseModel`), plus the FLOPS regulariser of the documents (positives and
    negatives) and, where queries run through the encoder (SPLADE, not inference-free), of the queries:

        loss = CE(scale * q @ d.T) + f(step) * (document_regularizer * FLOPS(d) + query_regularizer * FLOPS(q))

    f rises quadratically from 0 to 1 over the first `warmup_ratio` of the training steps (the regulariser at full
    weight from the first step collapses every weight to zero), as SPLADE trains. Rows: `query, positive[, negative,
    ...]`, no labels. The trainer tells the loss its progress (`set_progress`).
    """

    label_kind = None
    num_texts = None
    sparse = True

    def __init__(
        self,
        scale: float = 1.0,
        query_regularizer: float = 5e-5,
        document_regularizer: float = 3e-5,
        warmup_ratio: float = 1 / 3,
    ) -> None:
        super().__init__()
        for name, value in (("scale", scale), ("query_regularizer", query_regularizer)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ValueError(f"SparseMultipleNegativesRankingLoss: {name}={value!r} must be a finite number >= 0.")
        if isinstance(document_regularizer, bool) or not 0 <= float(document_regularizer) < float("inf"):
            raise ValueError(
                f"SparseMultipleNegativesRankingLoss: document_regularizer={document_regularizer!r} must be a finite "
                "number >= 0."
            )
        if isinstance(warmup_ratio, bool) or not 0 <= float(warmup_ratio) <= 1:
            raise ValueError(f"SparseMultipleNegativesRankingLoss: warmup_ratio={warmup_ratio!r} must be in [0, 1].")
        if not scale > 0:
            raise ValueError(f"SparseMultipleNegativesRankingLoss: scale={scale!r} must be positive.")
        self.scale = float(scale)
        self.query_regularizer = float(query_regularizer)
        self.document_regularizer = float(document_regularizer)
        self.warmup_ratio = float(warmup_ratio)
        self.progress = 1.0
        self._queries_encoded = True

    def set_progress(self, step: int, total: int) -> None:
        """The share of training done (step of total); the regulariser's warm-up follows it."""
        self.progress = min(max(step / total, 0.0), 1.0) if total and total > 0 else 1.0

    @property
    def regularizer_factor(self) -> float:
        """f(progress): (progress / warmup_ratio)^2, capped at 1."""
        if self.warmup_ratio == 0:
            return 1.0
        return min(self.progress / self.warmup_ratio, 1.0) ** 2

    def compute(self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> Any:
        inner = getattr(model, "module", model)
        self._queries_encoded = getattr(inner, "query_weights", None) is None
        return super().compute(model, inputs, labels)

    def forward(self, output: Any, labels: torch.Tensor | None = None) -> torch.Tensor:
        vectors = output.sentence_embedding
        if vectors.dim() != 3 or vectors.shape[1] < 2:
            raise ValueError(
                "SparseMultipleNegativesRankingLoss needs rows of (query, positive[, negatives...]): vectors of shape "
                f"(batch, >=2, vocab), got {tuple(vectors.shape)}."
            )
        queries = vectors[:, 0].float()
        documents = torch.cat([vectors[:, 1], vectors[:, 2:].reshape(-1, vectors.shape[-1])]).float()
        scores = queries @ documents.T * self.scale
        loss = F.cross_entropy(scores, torch.arange(queries.shape[0], device=queries.device))
        regularizer = self.document_regularizer * flops(documents)
        if self._queries_encoded:
            regularizer = regularizer + self.query_regularizer * flops(queries)
        return loss + self.regularizer_factor * regularizer


__all__ = ["SparseMultipleNegativesRankingLoss", "flops"]
