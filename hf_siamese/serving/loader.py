"""`load_exported`: an exported folder of either kind, opened with the class its `config.json` calls for."""

from __future__ import annotations

import os
from typing import Any

from ..cross_encoder.source import model_kind
from .encoder import ExportedEncoder
from .reranker import ExportedCrossEncoder


def load_exported(
    folder: str | os.PathLike, backend: str = "onnx", **options: Any
) -> ExportedEncoder | ExportedCrossEncoder:
    """The exported graph in `folder` on `backend` (`"onnx"` or `"openvino"`): an `ExportedCrossEncoder` where the
    folder holds a cross-encoder (a `...ForSequenceClassification`), else an `ExportedEncoder`; `options`
    (`file_name`, `precision`, `threads`, `workers`, and for a cross-encoder `max_length`, `activation`) go to it."""
    if model_kind(folder) == "cross-encoder":
        return ExportedCrossEncoder(folder, backend, **options)
    return ExportedEncoder(folder, backend, **options)


__all__ = ["load_exported"]
