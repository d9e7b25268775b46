"""AnglE (Li & Li 2023, "AnglE-optimized Text Embeddings"): CoSENT's ranking objective on an angle score in complex
space instead of the cosine, whose gradient vanishes near its extremes (cos close to 1 or -1)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .base import SiameseLoss
from .pairs import cosent_ranking


def angle_similarity(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """AnglE's pair score, shape `(batch,)`, larger = more similar, for embeddings `u`, `v` of shape `(batch, hidden)`.

    Each embedding is read as a complex vector: the first half of its dims is the real part, the second half the
    imaginary part (`u = a + ib`, `v = c + id`). Per complex dim k, the quotient `u_k / v_k = u_k conj(v_k) / |v_k|^2`
    is taken as in the authors' reference code, with the whole vector's norms in place of `|v_k|^2`:

        z_k = u_k conj(v_k) / (|u| |v|) = ((a_k c_k + b_k d_k) + i (b_k c_k - a_k d_k)) / (|u| |v|)

    and the score is `s(u, v) = | sum_k (Re z_k + Im z_k) |`, i.e. `|cos(u, v) + sum_k (b_k c_k - a_k d_k) / (|u| |v|)|`
    (the normalized real and imaginary parts of the quotient, summed over dims, in absolute value). Like the cosine it
    ignores the embeddings' lengths, so normalized and unnormalized embeddings score the same. An odd size gets one
    zero dim appended first (the same pairing the sentence-transformers implementation uses).
    """
    u, v = u.float(), v.float()
    if u.shape[-1] % 2:
        u, v = F.pad(u, (0, 1)), F.pad(v, (0, 1))
    a, b = u.chunk(2, dim=-1)
    c, d = v.chunk(2, dim=-1)
    lengths = (u.norm(dim=-1) * v.norm(dim=-1)).clamp_min(1e-12)
    real = (a * c + b * d).sum(dim=-1)
    imaginary = (b * c - a * d).sum(dim=-1)
    return ((real + imaginary) / lengths).abs()


class AnglELoss(SiameseLoss):
    """AnglE: for every two pairs whose gold scores differ, penalise the lower-scored pair having the higher angle
    score `s` (see `angle_similarity` for `s`, computed on the model's `sentence_embedding` as given).

    `loss = log(1 + sum over (i, j) with y_i > y_j of exp(scale * (s_j - s_i)))`: the CoSENT objective with `s` in
    place of the cosine. Only the order of the gold scores matters, so no score range is needed. Rows: two texts and
    a float score. The paper trains it together with the cosine objective and in-batch negatives; here
    `"cosent+angle"` (or `CombinedLoss`) adds it to CoSENT on one forward pass.

    Note: the score follows the authors' reference code and sentence-transformers' `AnglELoss` (larger = more
    similar); it is not a geometric angle, and the paper's Eq. 3 writes the subtraction the other way round.
    """

    label_kind = "score"

    def __init__(self, scale: float = 20.0) -> None:
        super().__init__()
        if not scale > 0:
            raise ValueError(f"AnglELoss: scale={scale!r} must be positive.")
        self.scale = float(scale)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        u, v = self._pair(output)
        labels = self._need_labels(labels, "AnglELoss", "float score")
        return cosent_ranking(angle_similarity(u, v) * self.scale, labels)


__all__ = ["AnglELoss", "angle_similarity"]
