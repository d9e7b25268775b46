"""Export a trained model for serving: a plain sentence-transformers folder (the encoder's own `config.json` and
weights at the root, the pipeline files beside them), optionally with an ONNX or OpenVINO graph of the encoder, in
float32 or int8.

What reads the result: text-embeddings-inference (TEI: the root `config.json` with a model type it knows,
`1_Pooling/config.json`, `modules.json`, `tokenizer.json`, `model.safetensors`, `onnx/model.onnx` for its ONNX
backend), `SentenceTransformer(folder)` with `backend="torch" | "onnx" | "openvino"`, MTEB, and `ExportedEncoder`
(formats/runtime.py). The graphs hold the encoder only (inputs `input_ids`, `attention_mask`[, `token_type_ids`],
output `last_hidden_state`): pooling, Dense layers and normalization run after the graph, as TEI and
sentence-transformers apply them from the pipeline files.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import random
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..modeling.configuration_siamese import is_cross_encoder_config
from ..storage import recover_output, replace_folder, staging_folder
from .export_names import (
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
    require,
)
from .sentence_transformers_save import write_layout

logger = logging.getLogger(__name__)
T = TypeVar("T")


def export_model(
    model: Any,
    output_dir: str | os.PathLike,
    *,
    format: str = "sentence-transformers",
    quantize: str = "none",
    calibration_texts: Iterable[str] | None = None,
    calibration_size: int = DEFAULT_CALIBRATION_SIZE,
    tokenizer: Any = None,
    overwrite: bool = False,
    opset: int = 17,
) -> Path:
    """Write `model` (a `SiameseBertModel`, a path / Hub id `load_model` reads, or a model with `export_hooks()`:
    a `hf_siamese.cross_encoder.CrossEncoder`, whose graph returns `logits` and whose calibration items are (query,
    document) pairs) to `output_dir` for serving.

    Args:
        format: `"sentence-transformers"` (the plain layout only), `"onnx"` (plus `onnx/model.onnx`) or `"openvino"`
            (plus `openvino/openvino_model.xml` / `.bin`).
        quantize: `"none"`, `"int8-dynamic"` (int8 weights, activations quantized on the fly: ONNX Runtime's
            dynamic quantization, OpenVINO weight compression) or `"int8-static"` (weights and activations int8,
            activation ranges calibrated on `calibration_texts`). The int8 graph is written beside the float32 one
            (`ONNX_FILES` / `OPENVINO_FILES`), which stays the reference and what TEI loads.
        calibration_texts: texts like those the model will serve (for `int8-static`); `calibration_size` of them,
            drawn at random (seed 0) when there are more, are embedded to measure activation ranges.
        tokenizer: defaults to `model.tokenizer` or the one saved with the model; a folder for serving needs one.
        overwrite: replace an existing `output_dir` (it is swapped in whole once the export succeeded).
        opset: the ONNX opset of the graph, one of `ONNX_OPSETS` (14 to the highest torch's exporter writes).

    Nothing is written to `output_dir` until everything succeeded: the export runs in a staging folder beside it
    (`.NAME.export-PID-XXXXXXXX`), swapped in by `hf_siamese.storage.replace_folder`; what a killed export left there
    (its staging folder, or the old output renamed aside mid-swap) is mended at the start of the next export.
    The float32 graph is checked against the torch model on a few texts (max abs difference of the embeddings <=
    1e-4) before the folder is moved into place. Returns the output folder.
    """
    target = check_export_options(
        output_dir, format, quantize, opset, overwrite, calibration_texts, "calibration_texts"
    )
    if hasattr(model, "export_hooks"):  # a model that says how it is exported (a CrossEncoder)
        if tokenizer is not None:
            raise ValueError(
                f"export: tokenizer= is for bi-encoders; a {type(model).__name__} is exported with its own tokenizer."
            )
        hooks = model.export_hooks()
    else:
        check_calibration_size(calibration_size)
        model, tokenizer = _model_and_tokenizer(model, tokenizer)
        check_representable(model)
        hooks = bi_encoder_hooks(model, tokenizer)
    calibration = hooks.calibration(calibration_texts, calibration_size) if quantize == "int8-static" else None

    def write(stage: Path) -> None:
        hooks.write_plain(stage)
        if format != "sentence-transformers":
            from .export_graphs import write_graphs

            write_graphs(hooks.graph_spec(), stage, format, quantize, calibration, int(opset))

    write_export(target, write)
    logger.info("export: wrote %s (%s, quantize=%s)", target, format, quantize)
    return target


@dataclass
class ExportHooks:
    """What `export_model` does that depends on the kind of model: write its plain layout into a folder, describe its
    graph (`export_graphs.GraphSpec`), and check and draw its `int8-static` calibration items."""

    write_plain: Callable[[Path], None]
    graph_spec: Callable[[], Any]
    calibration: Callable[[Any, int], list[Any]]


def bi_encoder_hooks(model: Any, tokenizer: Any) -> ExportHooks:
    """The `ExportHooks` of a `SiameseBertModel`: the sentence-transformers layout, its encoder's graph, texts."""

    def graph_spec() -> Any:
        from .export_graphs import encoder_graph_spec

        return encoder_graph_spec(model, tokenizer)

    return ExportHooks(lambda folder: write_plain_layout(model, folder, tokenizer), graph_spec, check_calibration)


def check_export_options(
    output_dir: str | os.PathLike,
    format: str,
    quantize: str,
    opset: object,
    overwrite: bool,
    calibration: object,
    calibration_name: str,
) -> Path:
    """Check the options every export shares (format, quantization, opset, the output folder, the extras the format
    needs) before any work is done; return the output folder. `calibration` (named `calibration_name`) may be given
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
            f"export: {calibration_name} is used only with quantize='int8-static', not quantize={quantize!r} (CLI: "
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


def check_calibration(texts: Iterable[str] | None, size: int) -> list[str]:
    """The calibration texts to use: `size` of `texts` (all when fewer; a seeded random sample when more)."""
    check_calibration_size(size)
    if texts is None:
        raise ValueError(
            "export: quantize='int8-static' calibrates activation ranges on texts like the ones you will serve; pass "
            "calibration_texts=[...] (CLI: --calibration FILE, one text per line, or a .jsonl/.csv/.parquet with "
            "--calibration-column)."
        )
    if isinstance(texts, str):
        raise TypeError("export: calibration_texts is one string; pass a list of texts.")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"export: calibration_texts[{index}] is {type(text).__name__} ({text!r}); expected str.")
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise ValueError("export: calibration_texts holds no non-empty text; give texts like the ones you will serve.")
    return draw_calibration(texts, size)


def check_calibration_size(size: object) -> None:
    """Raise unless `size` (how many calibration items are drawn) is a positive int."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(
            f"export: calibration_size={size!r} must be a positive int (default {DEFAULT_CALIBRATION_SIZE})."
        )


def draw_calibration(items: list[T], size: int) -> list[T]:
    """`size` of `items`: all when fewer, else a random sample drawn with seed 0 (the same export twice is the same)."""
    return random.Random(0).sample(items, size) if len(items) > size else items


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


def write_plain_layout(model: Any, folder: Path, tokenizer: Any) -> None:
    """The plain sentence-transformers layout: the encoder's config, weights and tokenizer at the root."""
    encoder = model.encoder
    state = {k: v.detach().to("cpu").contiguous() for k, v in encoder.state_dict().items()}
    encoder.save_pretrained(folder, state_dict=state)
    tokenizer.save_pretrained(folder)
    write_layout(model, folder, tokenizer=None, transformer_path="")
    if not (folder / "tokenizer.json").is_file():
        logger.warning(
            "export: the tokenizer is a slow (Python) one and wrote no tokenizer.json; text-embeddings-inference "
            "needs tokenizer.json: export from a model whose tokenizer has a fast version."
        )
    from .model_card import write_model_card

    try:
        write_model_card(model, folder)
    except Exception as error:  # noqa: BLE001 - the card is documentation; the export is complete without it
        logger.warning("export: no model card written (%s)", error)


def _model_and_tokenizer(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    if isinstance(model, (str, os.PathLike)):
        from .loading import load_model

        if _is_cross_encoder_folder(Path(model)):
            raise ValueError(
                f"export: {os.fspath(model)!r} is a cross-encoder (config.json names a ...ForSequenceClassification): "
                "export the loaded model, export_model(CrossEncoder.from_pretrained(path), ...), or use "
                "hf_siamese.cross_encoder.export_cross_encoder or hf-siamese export."
            )

        model, loaded = load_model(str(model), device="cpu")
        tokenizer = tokenizer if tokenizer is not None else loaded
    if not hasattr(model, "encoder") or not hasattr(model.config, "pooling"):
        raise TypeError(f"export: model is a {type(model).__name__}; give a SiameseBertModel or a path to one.")
    if tokenizer is None:
        try:
            tokenizer = model._resolve_tokenizer(None)
        except Exception as error:  # noqa: BLE001 - named in the message below
            raise ValueError(
                f"export: no tokenizer known for this model ({error}); a folder for serving needs one: pass "
                "tokenizer=... or set model.tokenizer."
            ) from error
    return model, tokenizer


def _is_cross_encoder_folder(folder: Path) -> bool:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and is_cross_encoder_config(config)


__all__ = [
    "DEFAULT_CALIBRATION_SIZE",
    "EXTRAS",
    "ExportHooks",
    "TEI_POOLING",
    "FORMATS",
    "MissingExtraError",
    "ONNX_FILES",
    "ONNX_OPSETS",
    "OPENVINO_FILES",
    "QUANTIZATION",
    "TEI_MODEL_TYPES",
    "bi_encoder_hooks",
    "check_calibration",
    "check_calibration_size",
    "check_export_options",
    "check_opset",
    "draw_calibration",
    "export_model",
    "require",
    "write_export",
    "write_plain_layout",
]
