"""Learning from a teacher: its score margins (MarginMSE, Hofstätter et al. 2020, the loss GPL trains with) or its
embeddings (EmbeddingMSE, the multilingual-distillation paper's loss)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .base import SiameseLoss, check_list_labels, check_margin_labels, positive_number

SIMILARITIES = ("dot", "cosine")


class MarginMSELoss(SiameseLoss):
    """The student's score margins between a query's positive and each of its negatives regress on the teacher's.

    Rows: `anchor, positive, negative` (or `negative_1..k`) and a `label` column with the teacher's view of the row:
    one margin `t(q, p) - t(q, n)` for one negative, `k` margins `[t(q, p) - t(q, n_j)]`, or the `1 + k` scores
    `[t(q, p), t(q, n_1), ..., t(q, n_k)]` (the length says which). With `s` the student's similarity of the query and
    a document (`similarity`: the dot product, as GPL and the paper use, or the cosine),

        loss = mean over rows i and negatives j of (scale * (s(q_i, p_i) - s(q_i, n_ij)) - margin_ij) ** 2

    Only differences are learned, so the teacher's scores may sit on any scale (a cross-encoder's logits, say): the
    student keeps its own offset. Teacher margins come from `CrossEncoder.predict(..., activation=False)` on the
    (query, positive) and (query, negative) pairs.

    A normalized student (all-MiniLM-L6-v2) has margins within [-2, 2] while a cross-encoder's logit margins span
    tens: `scale` stretches the student's margins onto the teacher's (e.g. the ratio of their spreads on the rows).

    Args:
        similarity: `"dot"` (default) or `"cosine"`.
        scale: multiplies the student's margins (default 1).
    """

    label_kind = "score"
    num_texts = None

    def __init__(self, similarity: str = "dot", scale: float = 1.0) -> None:
        super().__init__()
        if similarity not in SIMILARITIES:
            raise ValueError(f"MarginMSELoss: similarity={similarity!r}; accepted: {list(SIMILARITIES)}")
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0:
            raise ValueError(f"MarginMSELoss: scale={scale!r} must be a positive number")
        self.similarity, self.scale = similarity, float(scale)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        scores = query_document_scores(output.sentence_embedding, self.similarity, "MarginMSELoss")
        labels = self._need_labels(labels, "MarginMSELoss", "teacher margin (or score)")
        margins = self.scale * (scores[:, :1] - scores[:, 1:])
        return F.mse_loss(margins, teacher_margins(labels.float(), margins.shape))


def query_document_scores(embeddings: torch.Tensor, similarity: str, owner: str) -> torch.Tensor:
    """The student's float32 scores `(batch, k)` of each row's query (text 0) and its documents (texts 1..k) under
    `similarity` (`"dot"` or `"cosine"`), for (anchor, positive, negative[, ...]) rows."""
    if embeddings.dim() != 3 or embeddings.shape[1] < 3:
        raise ValueError(
            f"{owner} needs (anchor, positive, negative[, negative_2, ...]) rows: sentence_embedding of shape "
            f"(batch, 3+, hidden), got {tuple(embeddings.shape)}."
        )
    query, documents = embeddings[:, 0].float(), embeddings[:, 1:].float()
    if similarity == "cosine":
        query, documents = F.normalize(query, dim=-1), F.normalize(documents, dim=-1)
    return torch.einsum("bh,bkh->bk", query, documents)


def teacher_margins(labels: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The teacher's margins `(batch, k)` from labels of shape `(batch,)` (k = 1), `(batch, k)` (margins) or
    `(batch, k + 1)` (scores, positive first)."""
    batch, k = shape
    if labels.dim() == 1:
        labels = labels[:, None]
    if labels.shape == (batch, k):
        return labels
    if labels.shape == (batch, k + 1):
        return labels[:, :1] - labels[:, 1:]
    raise ValueError(
        f"MarginMSELoss: rows with {k} negative(s) need {k} teacher margin(s) or {k + 1} scores per row; the labels "
        f"have shape {tuple(labels.shape)}"
    )


class EmbeddingMSELoss(SiameseLoss):
    """Every text of a row is embedded onto the row's target vector, a teacher's embedding (Reimers & Gurevych 2020).

    Rows: one text (`sentence` or `text`) or several (`sentence1, sentence2`: a source sentence and its translation,
    both mapped to the teacher's embedding of the source, the multilingual-distillation recipe) and a `label` column
    holding the target vector (a list of floats; `hf_siamese.training.students.teacher_embeddings` writes it, projected
    by PCA when the student is narrower than the teacher).

        loss = mean over rows i, texts j and dimensions d of (student(text_ij)_d - target_id) ** 2
    """

    label_kind = "score"
    num_texts = None

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        embeddings = output.sentence_embedding
        labels = self._need_labels(labels, "EmbeddingMSELoss", "target embedding (a list of floats per row)")
        if embeddings.dim() == 2:
            embeddings = embeddings[:, None]
        if labels.dim() != 2 or labels.shape[0] != embeddings.shape[0]:
            raise ValueError(
                f"EmbeddingMSELoss needs one target vector per row: labels of shape ({embeddings.shape[0]}, width), "
                f"got {tuple(labels.shape)}"
            )
        if labels.shape[1] != embeddings.shape[-1]:
            raise ValueError(
                f"EmbeddingMSELoss: the targets are {labels.shape[1]} wide, the student's embeddings "
                f"{embeddings.shape[-1]}: write the targets with teacher_embeddings(..., dim={embeddings.shape[-1]}) "
                "(a PCA projection of the teacher's), or give the student a projection to that width"
            )
        target = labels.float()[:, None, :].expand(-1, embeddings.shape[1], -1)
        return F.mse_loss(embeddings.float(), target)


class ListDistillationLoss(SiameseLoss):
    """The student's softmax over a query's documents learns the teacher's (KL divergence), a listwise alternative
    to `MarginMSELoss` on the same rows.

    Rows: `anchor, positive, negative_1..k` and a `label` column with the teacher's `1 + k` scores (positive first;
    `teacher_scores(..., output="scores")`). With `s_ij` the student's similarity (dot or cosine) of query i and its
    document j and `t_ij` the teacher's,

        loss = mean over rows i of KL(softmax(t_i / teacher_temperature) || softmax(s_i * scale))

    Args:
        scale: the student's inverse temperature (20, as MNR's, for cosine scores; 1 for dot products).
        teacher_temperature: divides the teacher's scores (1: its logits as they are).
        similarity: `"cosine"` (default) or `"dot"`.
    """

    label_kind = "score"
    num_texts = None

    def __init__(self, scale: float = 20.0, teacher_temperature: float = 1.0, similarity: str = "cosine") -> None:
        super().__init__()
        if similarity not in SIMILARITIES:
            raise ValueError(f"ListDistillationLoss: similarity={similarity!r}; accepted: {list(SIMILARITIES)}")
        for name, value in (("scale", scale), ("teacher_temperature", teacher_temperature)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"ListDistillationLoss: {name}={value!r} must be a positive number")
        self.scale, self.teacher_temperature, self.similarity = float(scale), float(teacher_temperature), similarity

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        scores = query_document_scores(output.sentence_embedding, self.similarity, "ListDistillationLoss")
        labels = self._need_labels(labels, "ListDistillationLoss", "teacher score list")
        count = scores.shape[1]
        if labels.dim() != 2 or labels.shape != scores.shape:
            raise ValueError(
                f"ListDistillationLoss: rows with {count} documents need {count} teacher scores each (positive first); "
                f"the labels have shape {tuple(labels.shape)}"
            )
        student = F.log_softmax(scores * self.scale, dim=-1)
        teacher = F.log_softmax(labels.float() / self.teacher_temperature, dim=-1)
        return F.kl_div(student, teacher, reduction="batchmean", log_target=True)


class MarginTeacher:
    """What the losses that hand their student's scores to a `MarginMSELoss` on dot products (`self.distillation`)
    share, the sparse and multi-vector margin losses: the inner loss built with a checked `scale`, that `scale` read
    back, and the check of the teacher's labels. Mixed in before the loss's `SiameseLoss` base."""

    distillation: MarginMSELoss

    def _distil_margins(self, scale: float) -> None:
        """`self.distillation` on dot products with `scale`, a `ValueError` naming the loss unless it is positive."""
        self.distillation = MarginMSELoss(similarity="dot", scale=positive_number(type(self).__name__, "scale", scale))

    @property
    def scale(self) -> float:
        """The multiplier of the student's margins."""
        return self.distillation.scale

    def _margin_labels(self, labels: torch.Tensor | None, rows: int, negatives: int) -> torch.Tensor:
        """`labels`, refused where they are missing or not the teacher's margins (or scores) of `rows` rows with
        `negatives` negatives each."""
        owner = type(self).__name__
        labels = SiameseLoss._need_labels(labels, owner, "teacher margin (or score)")
        check_margin_labels(owner, labels, rows, negatives)
        return labels


class ListTeacher:
    """What the losses that hand their student's scores to a `ListDistillationLoss` on dot products
    (`self.distillation`) share, the sparse and multi-vector list losses: the inner loss built with a checked `scale`
    and `teacher_temperature`, both read back, and the check of the teacher's score lists. Mixed in before the loss's
    `SiameseLoss` base."""

    distillation: ListDistillationLoss

    def _distil_lists(self, scale: float, teacher_temperature: float) -> None:
        """`self.distillation` on dot products with `scale` and `teacher_temperature`, a `ValueError` naming the loss
        unless both are positive."""
        owner = type(self).__name__
        scale, temperature = (
            positive_number(owner, "scale", scale),
            positive_number(owner, "teacher_temperature", teacher_temperature),
        )
        self.distillation = ListDistillationLoss(scale=scale, teacher_temperature=temperature, similarity="dot")

    @property
    def scale(self) -> float:
        """The student's inverse temperature."""
        return self.distillation.scale

    @property
    def teacher_temperature(self) -> float:
        """What the teacher's scores are divided by."""
        return self.distillation.teacher_temperature

    def _list_labels(self, labels: torch.Tensor | None, rows: int, documents: int) -> torch.Tensor:
        """`labels`, refused where they are missing or not the teacher's scores of `rows` rows with `documents`
        documents each (positive first)."""
        owner = type(self).__name__
        labels = SiameseLoss._need_labels(labels, owner, "teacher score list")
        check_list_labels(owner, labels, (rows, documents))
        return labels
