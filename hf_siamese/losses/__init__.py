"""Training objectives for siamese sentence encoders.

Every loss is a small `nn.Module` with one contract for the trainer: `loss.compute(model, inputs, labels)` runs the
model on a grouped batch (the collator's tensors, without `labels`) and returns `(loss, output)`. Most losses only need
the model's output: their `compute` is one forward pass followed by `loss(output, labels)`, where `output` is the
`SiameseBertOutput` (`sentence_embedding` of shape `(batch, num_texts, hidden)`; for pairs also `similarity` and, with
a classifier head, `logits`) and `labels` is the collator's `labels` tensor or `None`. A loss that must drive the
model itself (`CachedMultipleNegativesRankingLoss` embeds in chunks, twice) overrides `compute`.

| loss | rows it expects | labels | use it when |
|---|---|---|---|
| `CosineSimilarityLoss` | pairs | float score in `score_range` | you have graded similarity scores (STSb) |
| `CoSENTLoss` | pairs | float score | same data; ranks pairs instead of regressing, often a little better |
| `SoftmaxLoss` | pairs | class id / label string | NLI-style labelled pairs (the Sentence-BERT NLI objective) |
| `MultipleNegativesRankingLoss` | anchor, positive[, negatives] | none | positive pairs (+ hard negatives) |
| `CachedMultipleNegativesRankingLoss` | the same | none | the same, with batches larger than memory allows |
| `MatryoshkaLoss(base, dims)` | the base loss's | the base loss's | embeddings that still work cut to fewer dims |
"""

from __future__ import annotations

from typing import Any

from .base import SiameseLoss
from .cached import CachedMultipleNegativesRankingLoss  # noqa: I001 - after ranking, which it builds on
from .matryoshka import MatryoshkaLoss, truncated_output
from .pairs import CoSENTLoss, CosineSimilarityLoss, SoftmaxLoss
from .ranking import MultipleNegativesRankingLoss

LOSSES: dict[str, type[SiameseLoss]] = {
    "cosine": CosineSimilarityLoss,
    "cosent": CoSENTLoss,
    "softmax": SoftmaxLoss,
    "mnr": MultipleNegativesRankingLoss,
    "cached_mnr": CachedMultipleNegativesRankingLoss,
}


def get_loss(loss: str | SiameseLoss, **kwargs: Any) -> SiameseLoss:
    """A loss object from itself or from its name (`cosine`, `cosent`, `softmax`, `mnr`, `cached_mnr`)."""
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
    "CachedMultipleNegativesRankingLoss",
    "MatryoshkaLoss",
    "truncated_output",
    "LOSSES",
    "get_loss",
]
