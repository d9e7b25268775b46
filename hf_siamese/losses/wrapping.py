"""The shape of a loss that wraps another (`MatryoshkaLoss`, `QuantizationAwareLoss`): it applies its base loss to
changed embeddings, reads the base loss's rows and labels, and around a loss that caches embeddings
(`CachedMultipleNegativesRankingLoss`) sums on the cached embeddings, so the encoder still runs twice per batch."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..modeling.modeling_siamese import SiameseBertOutput
from .base import SiameseLoss
from .pairs import SoftmaxLoss


class WrappingLoss(SiameseLoss):
    """Base class: `self.base_loss` from a loss or its name; `SoftmaxLoss` (its classifier reads the whole float
    embedding) and a second wrapper of the same class (`nested`: why one is enough) are refused. Subclasses define
    `forward(output, labels, model=None)`."""

    nested = "one is enough."

    def __init__(self, base_loss: SiameseLoss | str) -> None:
        super().__init__()
        from . import get_loss

        self.base_loss = get_loss(base_loss)
        name = type(self).__name__
        if isinstance(self.base_loss, SoftmaxLoss):
            raise ValueError(f"{name} cannot wrap SoftmaxLoss: its classifier head reads the full float embedding.")
        if isinstance(self.base_loss, type(self)):
            raise ValueError(f"{name} cannot wrap {name}: {self.nested}")
        self.label_kind = self.base_loss.label_kind
        self.num_texts = self.base_loss.num_texts
        self.score_range = self.base_loss.score_range

    def compute(
        self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        unwrapped = getattr(model, "module", model)  # DDP keeps the model in .module
        if getattr(self.base_loss, "caches_embeddings", False):

            def summed(embeddings: torch.Tensor) -> torch.Tensor:
                return self(SiameseBertOutput(sentence_embedding=embeddings), labels, unwrapped)

            return self.base_loss.compute(model, inputs, labels, embedding_loss=summed)
        output = model(**inputs)
        return self(output, labels, unwrapped), output


__all__ = ["WrappingLoss"]
