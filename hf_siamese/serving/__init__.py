"""Serving, for both kinds of model: exporting a bi-encoder or a cross-encoder (`export_model`: the plain layout TEI
and sentence-transformers read, ONNX / OpenVINO graphs, int8) and running the exported graphs (`ExportedEncoder`,
`ExportedCrossEncoder`, or `load_exported`, which picks by the folder). Imports modeling, storage, formats,
retrieval and cross_encoder; only cli imports it (the package root re-exports its public names).

Modules: `export` (the one export path and its option checks), `hooks` (what differs by kind: layout, graph spec,
calibration items), `graphs` (the traced module, the ONNX / OpenVINO graphs and their check), `quantize` (int8),
`runtime` (ONNX Runtime / OpenVINO runners and `ExportedGraph`, what the exported classes share), `encoder`,
`reranker`, `sparse_export` (a learned-sparse model's graph and `ExportedSparseEncoder`), `loader`, `names` (formats,
file names, extras).
"""

from .encoder import ExportedEncoder
from .export import export_cross_encoder, export_model
from .loader import load_exported
from .names import (
    DEFAULT_CALIBRATION_SIZE,
    EXTRAS,
    FORMATS,
    ONNX_FILES,
    ONNX_OPSETS,
    OPENVINO_FILES,
    QUANTIZATION,
    TEI_MODEL_TYPES,
    TEI_POOLING,
    MissingExtraError,
)
from .reranker import ExportedCrossEncoder
from .runtime import BACKENDS, PRECISIONS, ExportedGraphError
from .sparse_export import ExportedSparseEncoder

__all__ = [
    "BACKENDS",
    "DEFAULT_CALIBRATION_SIZE",
    "EXTRAS",
    "ExportedCrossEncoder",
    "ExportedEncoder",
    "ExportedGraphError",
    "ExportedSparseEncoder",
    "FORMATS",
    "MissingExtraError",
    "ONNX_FILES",
    "ONNX_OPSETS",
    "OPENVINO_FILES",
    "PRECISIONS",
    "QUANTIZATION",
    "TEI_MODEL_TYPES",
    "TEI_POOLING",
    "export_cross_encoder",
    "export_model",
    "load_exported",
]
