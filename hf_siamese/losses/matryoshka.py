"""Matryoshka representation learning (Kusupati et al. 2022): train embeddings whose first d dimensions still work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..modeling.modeling_siamese import SiameseBertOutput
from .base import SiameseLoss
from .wrapping import WrappingLoss


class MatryoshkaLoss(WrappingLoss):
    """`sum_d weight_d * base_loss(embeddings cut to their first d dims)` over `dims`.

    Each cut embedding is L2-normalized again when the model normalizes, and the pair similarity is recomputed on it
    with the model's own similarity function (and learned affine map, if any), so a scored-pair loss sees what a model
    loaded with `truncate_dim=d` would give. Load or save such a model with `truncate_dim` (`from_pretrained(...,
    truncate_dim=128)`) to get the short embeddings from `encode` and `AutoModel`.

    Rows and labels are the base loss's. Around `CachedMultipleNegativesRankingLoss` the encoder still runs twice per
    batch, not once per dim: the sum over dims is taken on the cached embeddings.

    Args:
        base_loss: any loss but `SoftmaxLoss` (its classifier head reads the full embedding), or its name.
        dims: the sizes to train, e.g. `[384, 256, 128, 64]`; each at most the model's embedding size.
        weights: one positive weight per dim; defaults to 1 each.
    """

    nested = "one MatryoshkaLoss already sums over all the dims."

    def __init__(
        self,
        base_loss: SiameseLoss | str,
        dims: Sequence[int] = (384, 256, 128, 64),
        weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__(base_loss)
        dims = list(dims)
        if (
            not dims
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims)
            or len(set(dims)) < len(dims)
        ):
            raise ValueError(f"MatryoshkaLoss: dims={dims!r} must be distinct positive ints, e.g. [384, 256, 128, 64].")
        weights = [1.0] * len(dims) if weights is None else [float(w) for w in weights]
        if len(weights) != len(dims) or any(not w > 0 for w in weights):
            raise ValueError(
                f"MatryoshkaLoss: weights={weights!r} must be {len(dims)} positive numbers, one per dim in {dims}."
            )
        self.dims, self.weights = dims, weights

    def forward(self, output: Any, labels: torch.Tensor | None, model: nn.Module | None = None) -> torch.Tensor:
        """The weighted sum over dims for an output computed already. Without `model`, cut embeddings are not
        renormalized and pairs are compared by cosine."""
        return sum(
            weight * self.base_loss(truncated_output(output, dim, model), labels)
            for dim, weight in zip(self._checked_dims(output.sentence_embedding), self.weights, strict=True)
        )

    def _checked_dims(self, embeddings: torch.Tensor) -> list[int]:
        size = embeddings.shape[-1]
        too_large = [d for d in self.dims if d > size]
        if too_large:
            raise ValueError(
                f"MatryoshkaLoss: dims {too_large} exceed the model's embedding size {size}; use dims <= {size}."
            )
        return self.dims


def truncated_output(output: Any, dim: int, model: nn.Module | None = None) -> SiameseBertOutput:
    """`output` with its sentence embeddings cut to their first `dim` dims (renormalized when `model` normalizes), and
    for pairs the similarity recomputed on them (with `model.pair_similarity`, else cosine)."""
    embeddings = output.sentence_embedding[..., :dim]
    if model is not None and model.config.normalize:
        embeddings = F.normalize(embeddings, p=2, dim=-1)
    similarity = None
    if embeddings.dim() == 3 and embeddings.shape[1] == 2:
        u, v = embeddings[:, 0], embeddings[:, 1]
        similarity = model.pair_similarity(u, v) if model is not None else F.cosine_similarity(u, v, dim=-1)
    return SiameseBertOutput(sentence_embedding=embeddings, similarity=similarity)


__all__ = ["MatryoshkaLoss", "truncated_output"]
