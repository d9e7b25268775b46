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
| `AnglELoss` | pairs | float score | same data; CoSENT on an angle score in complex space (Li & Li 2023) |
| `ScoredPairsRankingLoss(threshold)` | pairs | float score | in-batch negatives; pairs >= threshold are positives |
| `SoftmaxLoss` | pairs | class id / label string | NLI-style labelled pairs (the Sentence-BERT NLI objective) |
| `MultipleNegativesRankingLoss` | anchor, positive[, negatives] | none | positive pairs (+ hard negatives) |
| `CachedMultipleNegativesRankingLoss` | the same | none | the same, with batches larger than memory allows |
| `MarginMSELoss` | anchor, positive, negative(s) | teacher margins / scores | a cross-encoder teaches (GPL) |
| `EmbeddingMSELoss` | sentence (or source, translation) | teacher embedding | a smaller / multilingual student |
| `ListDistillationLoss` | anchor, positive, negative(s) | teacher's 1 + k scores | KL to the teacher's softmax |
| `DenoisingAutoEncoderLoss(model, tok)` | sentence / text | none | no labels: TSDAE (a decoder rebuilds the text) |
| `MatryoshkaLoss(base, dims)` | the base loss's | the base loss's | embeddings that still work cut to fewer dims |
| `QuantizationAwareLoss(base, precision)` | the base loss's | the base loss's | int8 / binary codes ranking as floats |
| `CombinedLoss({loss: weight})` | its losses' (which must agree) | the same | several objectives on one forward pass |
| `SparseMultipleNegativesRankingLoss` | query, positive[, negatives] | none | a sparse model: dot + FLOPS |
| `SparseMarginMSELoss` | query, positive, negative(s) | teacher margins / scores | sparse: MarginMSE + FLOPS |
| `SparseListDistillationLoss` | query, positive, negative(s) | teacher's 1 + k scores | sparse: KL + FLOPS |
| `CSRLoss` | query, positive[, negatives] | none | a CSR model: reconstruction + ranking |
| `MultiVectorMultipleNegativesRankingLoss` | query, positive[, negatives] | none | a multi-vector model: MaxSim |
| `CachedMultiVectorMultipleNegativesRankingLoss` | the same | none | the same, batches larger than memory |
| `MultiVectorMarginMSELoss` | query, positive, negative(s) | teacher margins / scores | multi-vector: MarginMSE |
| `MultiVectorListDistillationLoss` | query, positive, negative(s) | teacher's 1 + k scores | multi-vector: KL |

By name (`get_loss`, `SiameseTrainer(loss=...)`): `cosine`, `cosent`, `angle`, `scored_mnr`, `softmax`, `mnr`,
`cached_mnr`, `margin_mse`, `embedding_mse`, `list_distill`, `sparse_mnr`, `sparse_margin_mse`, `sparse_list_distill`
and `csr` (the sparse models' own), `maxsim_mnr`, `cached_maxsim_mnr`, `maxsim_margin_mse` and `maxsim_list_distill`
(the multi-vector models' own), or a weighted sum of them such as `"cosent+angle"` (weights 1) or
`"cosent+0.5*angle"`: a `CombinedLoss`.
"""

from __future__ import annotations

from typing import Any

from .angle import AnglELoss, angle_similarity
from .base import SiameseLoss
from .cached import CachedMultipleNegativesRankingLoss  # noqa: I001 - after ranking, which it builds on
from .combined import CombinedLoss, parse_loss_spec
from .denoising import DenoisingAutoEncoderLoss
from .distillation import EmbeddingMSELoss, ListDistillationLoss, MarginMSELoss
from .matryoshka import MatryoshkaLoss, truncated_output
from .multivector import (
    CachedMultiVectorMultipleNegativesRankingLoss,
    MultiVectorListDistillationLoss,
    MultiVectorMarginMSELoss,
    MultiVectorMultipleNegativesRankingLoss,
)
from .pairs import CoSENTLoss, CosineSimilarityLoss, SoftmaxLoss, cosent_ranking
from .quantization_aware import QuantizationAwareLoss
from .ranking import MultipleNegativesRankingLoss
from .scored_ranking import ScoredPairsRankingLoss
from .sparse import CSRLoss, FlopsRegularizedLoss, SparseMultipleNegativesRankingLoss
from .sparse_distillation import SparseListDistillationLoss, SparseMarginMSELoss

LOSSES: dict[str, type[SiameseLoss]] = {
    "cosine": CosineSimilarityLoss,
    "cosent": CoSENTLoss,
    "angle": AnglELoss,
    "scored_mnr": ScoredPairsRankingLoss,
    "softmax": SoftmaxLoss,
    "mnr": MultipleNegativesRankingLoss,
    "cached_mnr": CachedMultipleNegativesRankingLoss,
    "margin_mse": MarginMSELoss,
    "embedding_mse": EmbeddingMSELoss,
    "list_distill": ListDistillationLoss,
    "sparse_mnr": SparseMultipleNegativesRankingLoss,
    "sparse_margin_mse": SparseMarginMSELoss,
    "sparse_list_distill": SparseListDistillationLoss,
    "csr": CSRLoss,
    "maxsim_mnr": MultiVectorMultipleNegativesRankingLoss,
    "cached_maxsim_mnr": CachedMultiVectorMultipleNegativesRankingLoss,
    "maxsim_margin_mse": MultiVectorMarginMSELoss,
    "maxsim_list_distill": MultiVectorListDistillationLoss,
}
_BUILT_IN = frozenset(LOSSES)


def register_loss(name: str, loss_class: type[SiameseLoss]) -> None:
    """Make `loss_class` (a `SiameseLoss` subclass) a loss by `name`: `get_loss(name)`, `SiameseTrainer(loss=name)`
    and the weighted sums (`"mnr+0.5*name"`) then take it. A registered name is replaced; a built-in one is refused."""
    key = name.strip().lower() if isinstance(name, str) else name
    if not isinstance(key, str) or not key.isidentifier():
        raise ValueError(f"loss name {name!r}: expected a name of letters, digits and '_'")
    if not (isinstance(loss_class, type) and issubclass(loss_class, SiameseLoss)):
        raise ValueError(f"register_loss({name!r}, {loss_class!r}): expected a hf_siamese.losses.SiameseLoss subclass")
    if key in _BUILT_IN:
        raise ValueError(f"loss name {name!r} is a built-in loss; choose another name")
    LOSSES[key] = loss_class


def get_loss(loss: str | SiameseLoss, **kwargs: Any) -> SiameseLoss:
    """A loss object from itself, from its name (`cosine`, `cosent`, `angle`, `scored_mnr`, `softmax`, `mnr`,
    `cached_mnr`, `margin_mse`, `embedding_mse`, `list_distill`, `sparse_mnr`, `sparse_margin_mse`,
    `sparse_list_distill`, `csr`, `maxsim_mnr`, `cached_maxsim_mnr`, `maxsim_margin_mse`, `maxsim_list_distill`;
    `kwargs` go to its constructor), or from a weighted sum of names such as `"cosent+0.5*angle"` (a `CombinedLoss`;
    each of `kwargs` goes to the losses whose constructor takes it)."""
    if isinstance(loss, SiameseLoss):
        return loss
    if isinstance(loss, str) and ("+" in loss or "*" in loss):
        return CombinedLoss.from_string(loss, **kwargs)
    if isinstance(loss, str) and loss.strip().lower() in LOSSES:
        return LOSSES[loss.strip().lower()](**kwargs)
    raise ValueError(
        f"Unknown loss {loss!r}; accepted: {sorted(LOSSES)}, a weighted sum of them such as 'cosent+0.5*angle', or a "
        "hf_siamese.losses.SiameseLoss."
    )


__all__ = [
    "SiameseLoss",
    "DenoisingAutoEncoderLoss",
    "CosineSimilarityLoss",
    "CoSENTLoss",
    "AnglELoss",
    "ScoredPairsRankingLoss",
    "SoftmaxLoss",
    "MultipleNegativesRankingLoss",
    "CachedMultipleNegativesRankingLoss",
    "EmbeddingMSELoss",
    "ListDistillationLoss",
    "MarginMSELoss",
    "MatryoshkaLoss",
    "QuantizationAwareLoss",
    "CombinedLoss",
    "SparseMultipleNegativesRankingLoss",
    "SparseMarginMSELoss",
    "SparseListDistillationLoss",
    "FlopsRegularizedLoss",
    "CSRLoss",
    "MultiVectorMultipleNegativesRankingLoss",
    "CachedMultiVectorMultipleNegativesRankingLoss",
    "MultiVectorMarginMSELoss",
    "MultiVectorListDistillationLoss",
    "angle_similarity",
    "cosent_ranking",
    "parse_loss_spec",
    "truncated_output",
    "LOSSES",
    "get_loss",
    "register_loss",
]
