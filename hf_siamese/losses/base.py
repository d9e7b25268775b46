"""The contract every loss follows (see the package docstring)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


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
