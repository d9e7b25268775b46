"""Learning a sparse model (SPLADE, inference-free) from a teacher's scores: the dense distillation losses
(`MarginMSELoss`, `ListDistillationLoss`) on the dot products of term-weight vectors, plus the FLOPS regulariser
that keeps the vectors sparse (`FlopsRegularizedLoss`: warmed up, queries regularised only where they are encoded)."""

from __future__ import annotations

from typing import Any

import torch

from .distillation import ListDistillationLoss, ListTeacher, MarginMSELoss, MarginTeacher
from .sparse import FlopsRegularizedLoss

ROWS = "(query, positive, negative[, negative_2, ...])"


class SparseMarginMSELoss(MarginTeacher, FlopsRegularizedLoss):
    """`MarginMSELoss` on the dot products of sparse vectors (`SparseSiameseModel`), plus the FLOPS regulariser:

        loss = mean over rows i and negatives j of (scale * (q_i . p_i - q_i . n_ij) - margin_ij) ** 2
               + f(progress) * (document_regularizer * FLOPS(d) + query_regularizer * FLOPS(q))

    Rows and labels as `MarginMSELoss`'s: `anchor, positive, negative` (or `negative_1..k`) and a `label` with the
    teacher's view of each row: one margin, `k` margins, or the `1 + k` scores (positive first; `mine --teacher` writes
    those). d holds the positives and negatives, q the queries (not regularised for an inference-free model, whose
    queries are looked up); f rises quadratically to 1 over the first `warmup_ratio` of training. The distillation
    recipe of SPLADE v2 / SPLADE++ (Formal et al. 2021-22).

    Args:
        scale: multiplies the student's margins (default 1: SPLADE's dot products and a cross-encoder's logits have
            similar spreads).
        query_regularizer: the FLOPS weight of the queries (`FlopsRegularizedLoss`).
        document_regularizer: the FLOPS weight of the documents.
        warmup_ratio: the share of training over which the FLOPS term rises to its full weight.
    """

    label_kind = MarginMSELoss.label_kind
    num_texts = None

    def __init__(
        self,
        scale: float = 1.0,
        query_regularizer: float = 5e-5,
        document_regularizer: float = 3e-5,
        warmup_ratio: float = 1 / 3,
    ) -> None:
        super().__init__(query_regularizer, document_regularizer, warmup_ratio)
        self._distil_margins(scale)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        vectors, queries, documents = self.split_rows(output, 3, ROWS)
        labels = self._margin_labels(labels, len(vectors), vectors.shape[1] - 2)
        return self.distillation(output, labels) + self.regularizer(queries, documents)


class SparseListDistillationLoss(ListTeacher, FlopsRegularizedLoss):
    """`ListDistillationLoss` on the dot products of sparse vectors (`SparseSiameseModel`), plus the FLOPS
    regulariser:

        loss = mean over rows i of KL(softmax(t_i / teacher_temperature) || softmax(scale * q_i . d_i))
               + f(progress) * (document_regularizer * FLOPS(d) + query_regularizer * FLOPS(q))

    Rows: `anchor, positive, negative_1..k` and a `label` with the teacher's `1 + k` scores (positive first; `mine
    --teacher` writes them). The FLOPS term as `SparseMarginMSELoss`'s.

    Args:
        scale: the student's inverse temperature (default 1: dot products of term weights as they are).
        teacher_temperature: divides the teacher's scores (default 1: its logits as they are).
        query_regularizer: the FLOPS weight of the queries (`FlopsRegularizedLoss`).
        document_regularizer: the FLOPS weight of the documents.
        warmup_ratio: the share of training over which the FLOPS term rises to its full weight.
    """

    label_kind = ListDistillationLoss.label_kind
    num_texts = None

    def __init__(
        self,
        scale: float = 1.0,
        teacher_temperature: float = 1.0,
        query_regularizer: float = 5e-5,
        document_regularizer: float = 3e-5,
        warmup_ratio: float = 1 / 3,
    ) -> None:
        super().__init__(query_regularizer, document_regularizer, warmup_ratio)
        self._distil_lists(scale, teacher_temperature)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        vectors, queries, documents = self.split_rows(output, 3, ROWS)
        labels = self._list_labels(labels, len(vectors), vectors.shape[1] - 1)
        return self.distillation(output, labels) + self.regularizer(queries, documents)


__all__ = ["SparseListDistillationLoss", "SparseMarginMSELoss"]
