"""`load_exported`: an exported folder of either kind, opened with the class its `config.json` calls for."""

from __future__ import annotations

import os
from typing import Any

from ..cross_encoder.source import model_kind
from ..formats.sparse_layout import is_sparse_encoder_folder
from .encoder import ExportedEncoder
from .reranker import ExportedCrossEncoder
from .sparse_export import ExportedSparseEncoder


def load_exported(
    folder: str | os.PathLike, backend: str = "onnx", **options: Any
) -> ExportedEncoder | ExportedCrossEncoder | ExportedSparseEncoder:
    """The exported graph in `folder` on `backend` (`"onnx"` or `"openvino"`): an `ExportedSparseEncoder` where the
    folder is a SparseEncoder export (a learned-sparse model), an `ExportedCrossEncoder` where it holds a
    cross-encoder (a `...ForSequenceClassification`), else an `ExportedEncoder`; `options` (`file_name`,
    `precision`, `threads`, `workers` (not for a sparse model), and for a cross-encoder `max_length`, `activation`)
    go to it."""
    if is_sparse_encoder_folder(folder):
        return ExportedSparseEncoder(folder, backend, **options)
    if model_kind(folder) == "cross-encoder":
        return ExportedCrossEncoder(folder, backend, **options)
    return ExportedEncoder(folder, backend, **options)


__all__ = ["load_exported"]
