"""Training objectives for siamese sentence encoders.

Every loss is a small `nn.Module` called as `loss(output, labels)`, where `output` is the `SiameseBertOutput` of a
grouped batch (`sentence_embedding` of shape `(batch, num_texts, hidden)`; for pairs also `similarity` and, with a
classifier head, `logits`) and `labels` is the collator's `labels` tensor or `None`. Each returns a scalar.

| loss | rows it expects | labels | use it when |
|---|---|---|---|
| `CosineSimilarityLoss` | pairs | float score in `score_range` | you have graded similarity scores (STSb) |
| `CoSENTLoss` | pairs | float score | same data; ranks pairs instead of regressing, often a little better |
| `SoftmaxLoss` | pairs | class id / label string | NLI-style labelled pairs (the Sentence-BERT NLI objective) |
| `MultipleNegativesRankingLoss` | anchor, positive[, negatives] | none | positive pairs (+ hard negatives) |
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .distributed import gather_with_grad


class SiameseLoss(nn.Module):
    """Base class. `label_kind` is `"score"`, `"class"` or `None` (no labels); `num_texts` is 2 or `None` (any)."""

    label_kind: str | None = None
    num_texts: int | None = 2
    score_range: tuple[float, float] | None = None

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _pair(self, output: Any) -> tuple[torch.Tensor, torch.Tensor]:
        embeddings = output.sentence_embedding
        if embeddings.dim() != 3 or embeddings.shape[1] != 2:
            raise ValueError(
                f"{type(self).__name__} needs pairs: sentence_embedding of shape (batch, 2, hidden), got "
                f"{tuple(embeddings.shape)}."
            )
        return embeddings[:, 0], embeddings[:, 1]

    @staticmethod
    def _need_labels(labels: torch.Tensor | None, name: str, what: str) -> torch.Tensor:
        if labels is None:
            raise ValueError(f"{name} needs {what} labels; the batch has no `labels` (no score/label column).")
        return labels


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
        labels = self._need_labels(labels, "CoSENTLoss", "float score").float()
        cos = F.cosine_similarity(u, v, dim=-1).float() * self.scale
        differences = cos[None, :] - cos[:, None]  # [i, j] = s_j - s_i
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


LOSSES: dict[str, type[SiameseLoss]] = {
    "cosine": CosineSimilarityLoss,
    "cosent": CoSENTLoss,
    "softmax": SoftmaxLoss,
    "mnr": MultipleNegativesRankingLoss,
}


def get_loss(loss: str | SiameseLoss, **kwargs: Any) -> SiameseLoss:
    """A loss object from itself or from its name (`cosine`, `cosent`, `softmax`, `mnr`)."""
    if isinstance(loss, SiameseLoss):
        return loss
    if isinstance(loss, str) and loss.lower() in LOSSES:
        return LOSSES[loss.lower()](**kwargs)
    raise ValueError(f"Unknown loss {loss!r}; accepted: {sorted(LOSSES)} or a hf_siamese.losses.SiameseLoss.")


__all__ = [
    "SiameseLoss",
    "CosineSimilarityLoss",
    "CoSENTLoss",
    "SoftmaxLoss",
    "MultipleNegativesRankingLoss",
    "LOSSES",
    "get_loss",
]
