"""Quantization-aware training: a bi-encoder trained so that the int8 or binary codes of its embeddings (what an index
of compact vectors searches, `retrieval/compact.py`) rank as its float embeddings do."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..modeling.modeling_siamese import SiameseBertOutput
from .base import SiameseLoss, non_negative_number
from .wrapping import WrappingLoss

QUANTIZATION_AWARE = ("int8", "binary")


def quantize_straight_through(embeddings: torch.Tensor, precision: str) -> torch.Tensor:
    """Unit-length `embeddings` (..., dim) replaced by what their codes at `precision` score as, in the forward pass;
    the gradient passes straight through (as if the quantizer were the identity).

    binary: the sign vector scaled to unit length (its dot products are `1 - 2 x Hamming / dim`, the index's binary
    score). int8: each dimension rounded to 255 levels across the batch's range of that dimension (the index
    calibrates the range on the corpus)."""
    unit = F.normalize(embeddings, p=2, dim=-1)
    if precision == "binary":
        codes = torch.where(unit > 0, 1.0, -1.0).to(unit.dtype) / math.sqrt(unit.shape[-1])
    elif precision == "int8":
        flat = unit.detach().reshape(-1, unit.shape[-1])
        low, high = flat.min(dim=0).values, flat.max(dim=0).values
        center, step = (low + high) / 2, ((high - low) / 254).clamp_min(1e-12)
        codes = center + torch.round((unit.detach() - center) / step).clamp(-127, 127) * step
    else:
        raise ValueError(
            f"precision={precision!r}; quantization-aware training accepts {', '.join(QUANTIZATION_AWARE)}"
        )
    return unit + (codes - unit).detach()


def quantized_output(output: Any, precision: str, model: nn.Module | None = None) -> SiameseBertOutput:
    """`output` with its sentence embeddings quantized (`quantize_straight_through`), and for pairs the similarity
    recomputed on them (with `model.pair_similarity`, else cosine)."""
    embeddings = quantize_straight_through(output.sentence_embedding, precision)
    similarity = None
    if embeddings.dim() == 3 and embeddings.shape[1] == 2:
        u, v = embeddings[:, 0], embeddings[:, 1]
        similarity = model.pair_similarity(u, v) if model is not None else F.cosine_similarity(u, v, dim=-1)
    return SiameseBertOutput(sentence_embedding=embeddings, similarity=similarity)


class QuantizationAwareLoss(WrappingLoss):
    """`float_weight x base_loss(embeddings) + base_loss(their int8 or binary codes)`, the codes straight-through
    (`quantize_straight_through`): the model learns embeddings whose codes keep the ranking. Composes with Matryoshka
    either way round (`MatryoshkaLoss(QuantizationAwareLoss(base))` quantizes each cut).

    Args:
        base_loss: any dense loss but `SoftmaxLoss` (its classifier reads the float embedding), or its name.
        precision: "binary" (default) or "int8", as the index will store the vectors (`index --precision`).
        float_weight: the weight of the float embeddings' loss (>= 0; 0 trains the codes alone).
    """

    nested = "one QuantizationAwareLoss quantizes already."

    def __init__(self, base_loss: SiameseLoss | str, precision: str = "binary", float_weight: float = 1.0) -> None:
        if precision not in QUANTIZATION_AWARE:
            raise ValueError(
                f"QuantizationAwareLoss: precision={precision!r}; accepted: {', '.join(QUANTIZATION_AWARE)}"
            )
        super().__init__(base_loss)
        if getattr(self.base_loss, "sparse", False) or getattr(self.base_loss, "multivector", False):
            raise ValueError(
                "QuantizationAwareLoss wraps a dense loss (a bi-encoder's embeddings); "
                f"{type(self.base_loss).__name__} trains a sparse or multi-vector model"
            )
        self.precision = precision
        self.float_weight = non_negative_number("QuantizationAwareLoss", "float_weight", float_weight)

    def forward(self, output: Any, labels: torch.Tensor | None, model: nn.Module | None = None) -> torch.Tensor:
        """The weighted sum for an output computed already (without `model`, pairs are compared by cosine)."""
        quantized = self.base_loss(quantized_output(output, self.precision, model), labels)
        if not self.float_weight:
            return quantized
        return self.float_weight * self.base_loss(output, labels) + quantized


__all__ = ["QUANTIZATION_AWARE", "QuantizationAwareLoss", "quantize_straight_through", "quantized_output"]
