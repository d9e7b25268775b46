"""Exporting a `CrossEncoder` for serving, through the bi-encoder's export (`hf_siamese.formats.export.export_model`:
option checks, staging folder and swap, ONNX / OpenVINO graphs, int8, the float32 check against torch).

What is written: the `CrossEncoder.save_pretrained` layout (transformers, sentence-transformers' `CrossEncoder` and
text-embeddings-inference's `/rerank` read it) and, with `format="onnx" | "openvino"`, the model as a graph from
`input_ids`, `attention_mask` (and `token_type_ids` where the tokenizer makes them) to `logits` `(batch,
num_labels)` under the names sentence-transformers' `backend="onnx" | "openvino"` (through optimum's
`ORTModelForSequenceClassification` / `OVModelForSequenceClassification`) looks for: `onnx/model.onnx`,
`openvino/openvino_model.xml`. The hooks `export_model` calls are in export_graph.py; `ExportedCrossEncoder`
(exported.py) scores over the graphs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..formats.export import DEFAULT_CALIBRATION_SIZE, export_model
from .model import CrossEncoder
from .source import model_kind


def export_cross_encoder(
    model: CrossEncoder | str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    format: str = "sentence-transformers",
    quantize: str = "none",
    calibration_pairs: Iterable[tuple[str, str]] | None = None,
    calibration_size: int = DEFAULT_CALIBRATION_SIZE,
    overwrite: bool = False,
    opset: int = 17,
    max_length: int | None = None,
) -> Path:
    """Write a cross-encoder (a `CrossEncoder`, or a folder / Hub id `CrossEncoder.from_pretrained` reads, with
    `max_length` tokens per pair) to `output_dir` for serving; `export_model`'s options (`format`, `quantize`,
    `overwrite`, `opset`), with (query, document) `calibration_pairs` for `quantize="int8-static"`. The float32 graph's
    logits must equal torch's within 1e-4 on sample pairs, or nothing is written. Returns the output folder."""
    if isinstance(model, (str, os.PathLike)):
        model = CrossEncoder.from_pretrained(model, max_length=max_length, device="cpu")
    elif not isinstance(model, CrossEncoder):
        raise TypeError(f"export_cross_encoder: model is a {type(model).__name__}; give a CrossEncoder or a path.")
    elif max_length is not None:
        raise ValueError(f"export_cross_encoder: max_length={max_length!r} applies to a path; set model.max_length.")
    return export_model(
        model,
        output_dir,
        format=format,
        quantize=quantize,
        calibration_texts=calibration_pairs,
        calibration_size=calibration_size,
        overwrite=overwrite,
        opset=opset,
    )


def is_cross_encoder(source: str | os.PathLike | None) -> bool:
    """Whether `source` is a local cross-encoder folder (a `...ForSequenceClassification`)."""
    return source is not None and model_kind(source) == "cross-encoder"


__all__ = ["export_cross_encoder", "is_cross_encoder"]
