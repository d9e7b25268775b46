"""The contract every loss follows (see the package docstring)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def positive_number(owner: str, name: str, value: Any) -> float:
    """`value` as a float if it is a positive finite number (not a bool), else a `ValueError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"{owner}: {name}={value!r} must be a positive finite number.")
    return float(value)


def non_negative_number(owner: str, name: str, value: Any) -> float:
    """`value` as a float if it is a finite number >= 0 (not a bool), else a `ValueError` naming `owner` and `name`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(f"{owner}: {name}={value!r} must be a finite number >= 0.")
    return float(value)


def check_margin_labels(owner: str, labels: torch.Tensor, rows: int, negatives: int) -> None:
    """Refuse teacher labels of a margin loss that are not `(rows, negatives)` margins, `(rows, negatives + 1)`
    scores (positive first) or, with one negative, `(rows,)` margins."""
    shape = tuple(labels.shape)
    accepted = [(rows, negatives), (rows, negatives + 1)] + ([(rows,)] if negatives == 1 else [])
    if shape not in accepted:
        raise ValueError(
            f"{owner}: {rows} rows with {negatives} negative(s) need labels of shape ({rows}, "
            f"{negatives}) (the teacher's margins), ({rows}, {negatives + 1}) (its scores, positive first)"
            + (f" or ({rows},) (one margin each)" if negatives == 1 else "")
            + f"; got {shape}"
        )


def check_list_labels(owner: str, labels: torch.Tensor, expected: tuple[int, int]) -> None:
    """Refuse teacher score lists that are not `expected` = (rows, documents per row)."""
    if tuple(labels.shape) != tuple(expected):
        raise ValueError(
            f"{owner}: {expected[0]} rows with {expected[1]} documents each need labels of "
            f"shape {tuple(expected)} (the teacher's scores, positive first); got {tuple(labels.shape)}"
        )


class SiameseLoss(nn.Module):
    """Base class. `label_kind` is `"score"`, `"class"` or `None` (no labels); `num_texts` is 2 or `None` (any)."""

    label_kind: str | None = None
    num_texts: int | None = 2
    score_range: tuple[float, float] | None = None

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def compute(
        self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        """Run `model` on the grouped batch `inputs` and return `(loss, output)`: one forward pass, then
        `self(output, labels)`. Backward is the caller's (the trainer's) as usual."""
        output = model(**inputs)
        return self(output, labels), output

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
