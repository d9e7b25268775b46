"""Export a trained model for serving, either kind through one function, `export_model`: a bi-encoder
(`SiameseBertModel`) as a plain sentence-transformers folder (the encoder's own `config.json` and weights at the
root, the pipeline files beside them), a cross-encoder (`CrossEncoder`) in its `save_pretrained` layout; either
optionally with an ONNX or OpenVINO graph, in float32 or int8.

What reads the result: text-embeddings-inference (TEI: the root `config.json` with a model type it knows,
`1_Pooling/config.json`, `modules.json`, `tokenizer.json`, `model.safetensors`, `onnx/model.onnx` for its ONNX
backend; `/rerank` for a cross-encoder), `SentenceTransformer(folder)` / `CrossEncoder(folder)` with
`backend="torch" | "onnx" | "openvino"`, MTEB, and `ExportedEncoder` / `ExportedCrossEncoder` (encoder.py,
reranker.py). What differs by kind (the layout, the graph, the calibration items) is in hooks.py; the graphs are
written and checked in graphs.py.
"""

from __future__ import annotations

import logging
import numbers
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..cross_encoder.model import CrossEncoder
from ..cross_encoder.source import model_kind
from ..storage import recover_output, replace_folder, staging_folder
from .hooks import (
    ExportHooks,
    check_calibration,
    check_calibration_pairs,
    check_calibration_size,
    cross_encoder_graph_spec,
    encoder_graph_spec,
    export_tokenizer,
    write_plain_layout,
)
from .names import DEFAULT_CALIBRATION_SIZE, FORMATS, ONNX_OPSETS, QUANTIZATION, TEI_MODEL_TYPES, TEI_POOLING, require

logger = logging.getLogger(__name__)


def export_model(
    model: Any,
    output_dir: str | os.PathLike,
    *,
    format: str = "sentence-transformers",
    quantize: str = "none",
    calibration_texts: Iterable[Any] | None = None,
    calibration_size: int = DEFAULT_CALIBRATION_SIZE,
    tokenizer: Any = None,
    overwrite: bool = False,
    opset: int = 17,
) -> Path:
    """Write `model` to `output_dir` for serving: a `SiameseBertModel` (or a path / Hub id `load_model` reads), or a
    `hf_siamese.cross_encoder.CrossEncoder`, whose graph returns `logits` and whose calibration items are (query,
    document) pairs, or a learned-sparse `SparseSiameseModel` (SPLADE or inference-free; or a local folder of one):
    sentence-transformers' SparseEncoder layout plus the graph of its document path to the MLM logits in the
    Transformer module's folder (`SparseEncoder(folder, backend="onnx")` and `ExportedSparseEncoder` pool them;
    sparse_export.py). A graph of a CSR sparse model is refused by name.

    Args:
        format: `"sentence-transformers"` (the plain layout only), `"onnx"` (plus `onnx/model.onnx`) or `"openvino"`
            (plus `openvino/openvino_model.xml` / `.bin`).
        quantize: `"none"`, `"int8-dynamic"` (int8 weights, activations quantized on the fly: ONNX Runtime's
            dynamic quantization, OpenVINO weight compression) or `"int8-static"` (weights and activations int8,
            activation ranges calibrated on `calibration_texts`). The int8 graph is written beside the float32 one
            (`ONNX_FILES` / `OPENVINO_FILES`), which stays the reference and what TEI loads.
        calibration_texts: texts like those the model will serve (for `int8-static`; (query, document) pairs for a
            cross-encoder); `calibration_size` of them, drawn at random (seed 0) when there are more, are run to
            measure activation ranges.
        tokenizer: (bi-encoders) defaults to `model.tokenizer` or the one saved with the model; a folder for serving
            needs one. A cross-encoder is exported with its own.
        overwrite: replace an existing `output_dir` (it is swapped in whole once the export succeeded).
        opset: the ONNX opset of the graph, one of `ONNX_OPSETS` (14 to the highest torch's exporter writes).

    Nothing is written to `output_dir` until everything succeeded: the export runs in a staging folder beside it
    (`.NAME.export-PID-XXXXXXXX`), swapped in by `hf_siamese.storage.replace_folder`; what a killed export left there
    (its staging folder, or the old output renamed aside mid-swap) is mended at the start of the next export.
    The float32 graph is checked against the torch model on a few texts or pairs (max abs difference of the
    embeddings or logits <= 1e-4) before the folder is moved into place. Returns the output folder.
    """
    target = check_export_options(output_dir, format, quantize, opset, overwrite, calibration_texts)
    hooks = export_hooks(model, tokenizer, calibration_size)
    if hooks.check_options is not None:
        hooks.check_options(format, quantize)
    calibration = hooks.calibration(calibration_texts, calibration_size) if quantize == "int8-static" else None

    def write(stage: Path) -> None:
        hooks.write_plain(stage)
        if format != "sentence-transformers":
            from .graphs import write_graphs

            write_graphs(hooks.graph_spec(), stage / hooks.graph_folder, format, quantize, calibration, int(opset))

    write_export(target, write)
    logger.info("export: wrote %s (%s, quantize=%s)", target, format, quantize)
    return target


def export_hooks(model: Any, tokenizer: Any, calibration_size: object) -> ExportHooks:
    """The `ExportHooks` of `model`'s kind. A `CrossEncoder`: its `save_pretrained` files, its logits graph,
    (query, document) pairs to calibrate on. A learned-sparse model (or a local folder of one): its SparseEncoder
    layout, its document path's graph (sparse_export.py), texts. Else a bi-encoder (loaded first when `model` is a
    path, its tokenizer found, what the plain layout drops warned about): the sentence-transformers layout, its
    encoder's graph, texts."""
    from .sparse_export import is_sparse_source, sparse_export_hooks

    if is_sparse_source(model):
        return sparse_export_hooks(model, tokenizer, calibration_size)
    if isinstance(model, CrossEncoder):
        if tokenizer is not None:
            raise ValueError(
                f"export: tokenizer= is for bi-encoders; a {type(model).__name__} is exported with its own tokenizer."
            )
        return ExportHooks(model.write_files, lambda: cross_encoder_graph_spec(model), check_calibration_pairs)
    check_calibration_size(calibration_size)
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    check_representable(model)
    return ExportHooks(
        lambda folder: write_plain_layout(model, folder, tokenizer),
        lambda: encoder_graph_spec(model, tokenizer),
        check_calibration,
    )


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
    """`export_model` of a cross-encoder given as a `CrossEncoder` or as a folder / Hub id
    `CrossEncoder.from_pretrained` reads (with `max_length` tokens per pair); `export_model`'s options (`format`,
    `quantize`, `overwrite`, `opset`), with (query, document) `calibration_pairs` for `quantize="int8-static"`. The
    float32 graph's logits must equal torch's within 1e-4 on sample pairs, or nothing is written. Returns the output
    folder."""
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


def check_export_options(
    output_dir: str | os.PathLike,
    format: str,
    quantize: str,
    opset: object,
    overwrite: bool,
    calibration: object,
) -> Path:
    """Check the options every export shares (format, quantization, opset, the output folder, the extras the format
    needs) before any work is done; return the output folder. `calibration` (`calibration_texts`) may be given
    only with `int8-static`."""
    if format not in FORMATS:
        raise ValueError(f"export: format={format!r} is not one of {list(FORMATS)}.")
    if quantize not in QUANTIZATION:
        raise ValueError(f"export: quantize={quantize!r} is not one of {list(QUANTIZATION)}.")
    if format == "sentence-transformers" and quantize != "none":
        raise ValueError(
            f"export: quantize={quantize!r} needs a graph format (format='onnx' or 'openvino'); the "
            "sentence-transformers layout holds float weights for PyTorch only."
        )
    if calibration is not None and quantize != "int8-static":
        raise ValueError(
            f"export: calibration_texts is used only with quantize='int8-static', not quantize={quantize!r} (CLI: "
            "--calibration is used only with --quantize int8-static); drop them or choose int8-static."
        )
    check_opset(opset)
    target = Path(output_dir)
    recover_output(target)  # an output a killed export left renamed aside counts as existing below
    if target.is_file():
        raise FileExistsError(f"export: {str(target)!r} is a file; give a folder to write the export into.")
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise FileExistsError(
            f"export: {str(target)!r} already exists and is not empty; choose another folder or pass overwrite=True "
            "(--overwrite), which replaces it once the export has succeeded."
        )
    if format == "onnx":
        require("onnx", "export(format='onnx')")
    if format == "openvino":
        require("openvino", "export(format='openvino')")
        require("onnx", "export(format='openvino') (the graph is converted from ONNX)")
        if quantize != "none":
            require("nncf", f"export(format='openvino', quantize={quantize!r})")
    return target


def write_export(target: Path, write: Callable[[Path], None]) -> Path:
    """Run `write(stage)` in a staging folder beside `target` and swap it in whole once it returned; on any error
    the staging folder is removed and `target` is left as it was."""
    stage = staging_folder(target, "export")
    try:
        write(stage)
        replace_folder(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return target


def check_opset(opset: object) -> None:
    """Raise unless `opset` is an int in `ONNX_OPSETS`: torch's exporter fails on others deep inside (printing its
    graph), or writes a graph it does not support."""
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral) or opset not in ONNX_OPSETS:
        raise ValueError(
            f"export: opset={opset!r} is not an ONNX opset the export writes: give an int from {ONNX_OPSETS[0]} (the "
            f"first with scaled_dot_product_attention, the encoders' attention) to {ONNX_OPSETS[-1]} (the highest "
            "torch's TorchScript exporter writes); the default is 17."
        )


def check_representable(model: Any) -> None:
    """Warn about what the plain layout drops or what TEI will not serve; nothing here changes the embedding."""
    config = model.config
    if config.classifier_head:
        logger.warning(
            "export: the softmax classifier head is not written (sentence-transformers and TEI have no place for it); "
            "the embeddings are unchanged. save_pretrained keeps it."
        )
    if config.cosine_affine:
        logger.warning("export: the learned cosine map (cosine_affine) is not written; the embeddings are unchanged.")
    model_type = getattr(config.encoder_config, "model_type", None)
    if model_type not in TEI_MODEL_TYPES:
        logger.warning(
            "export: text-embeddings-inference does not build encoders of type %r (it builds %s); "
            "sentence-transformers and our runtime still load the export.",
            model_type,
            ", ".join(TEI_MODEL_TYPES),
        )
    if config.pooling not in TEI_POOLING:
        logger.warning(
            "export: pooling=%r is not one text-embeddings-inference offers (%s): TEI would refuse the folder; "
            "sentence-transformers and our runtime apply it.",
            config.pooling,
            ", ".join(TEI_POOLING),
        )
    if config.include_prompt is False and config.prompts:
        logger.warning(
            "export: include_prompt=False (prompt tokens left out of the pooling) is kept by sentence-transformers "
            "and our runtime; text-embeddings-inference pools the prompt tokens too."
        )


def _model_and_tokenizer(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    if isinstance(model, (str, os.PathLike)):
        from ..formats.loading import load_model

        if model_kind(model) == "cross-encoder":
            raise ValueError(
                f"export: {os.fspath(model)!r} is a cross-encoder (config.json names a ...ForSequenceClassification): "
                "export the loaded model, export_model(CrossEncoder.from_pretrained(path), ...), or use "
                "hf_siamese.export_cross_encoder or hf-siamese export."
            )

        model, loaded = load_model(str(model), device="cpu")
        tokenizer = tokenizer if tokenizer is not None else loaded
    if not hasattr(model, "encoder") or not hasattr(model.config, "pooling"):
        raise TypeError(f"export: model is a {type(model).__name__}; give a SiameseBertModel or a path to one.")
    if tokenizer is None:
        tokenizer = export_tokenizer(model, None)
    return model, tokenizer


__all__ = [
    "check_export_options",
    "check_opset",
    "check_representable",
    "export_cross_encoder",
    "export_hooks",
    "export_model",
    "write_export",
]
