"""The graph half of `export_model`: the encoder as an ONNX graph (`torch.onnx.export`), int8 versions of it (ONNX
Runtime's quantization tools), and its OpenVINO conversion (`openvino.convert_model`, int8 through `nncf`).

Each graph takes the tokenizer's `input_ids`, `attention_mask` (and `token_type_ids` when the encoder uses them),
batch and sequence dimensions dynamic, and returns `last_hidden_state`, the input of the pooling. The float32 graph is
checked against the torch model before anything is kept.
"""

from __future__ import annotations

import copy
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .export_names import ONNX_FILES, OPENVINO_FILES

logger = logging.getLogger(__name__)

OUTPUT_NAME = "last_hidden_state"
# Embeddings of the float32 graph may differ from torch's by at most this much (max abs, per dimension).
FLOAT_TOLERANCE = 1e-4
CALIBRATION_BATCH = 32
# Texts of several lengths the float32 graph is checked on (with up to 16 calibration texts, when given).
CHECK_TEXTS = (
    "A man is playing a guitar.",
    "hello",
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch of the old red barn.",
    "Exports are checked against the torch model before they are kept.",
    "",
    "Numbers 1, 2 and 3; symbols #, @ and %.",
)


class _EncoderGraph(torch.nn.Module):
    """The encoder with positional inputs in `names` order, returning the last hidden states only."""

    def __init__(self, encoder: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.encoder, self.names = encoder, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.encoder(**dict(zip(self.names, inputs, strict=True)), return_dict=True).last_hidden_state


def graph_inputs(model: Any, tokenizer: Any) -> list[str]:
    """The inputs a graph of this encoder takes: what the tokenizer makes and the encoder accepts."""
    accepted = set(getattr(model, "_encoder_arguments", ()) or ("input_ids", "attention_mask", "token_type_ids"))
    made = set(getattr(tokenizer, "model_input_names", ("input_ids", "attention_mask")))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if {"token_type_ids"} <= accepted & made else [])
    return names


def _float_cpu_copy(model: Any) -> Any:
    """`model` itself when it is float32 on the CPU, else a float32 CPU copy (the caller's model is not moved)."""
    parameter = next(model.parameters())
    if parameter.dtype == torch.float32 and parameter.device.type == "cpu":
        return model
    return copy.deepcopy(model).to("cpu", torch.float32)


def write_graphs(
    model: Any,
    tokenizer: Any,
    folder: Path,
    format: str,
    quantize: str,
    calibration: list[str] | None,
    opset: int,
) -> None:
    """Write the float32 graph of `format` (and its int8 version for `quantize`) into `folder`."""
    model = _float_cpu_copy(model)
    names = graph_inputs(model, tokenizer)
    scratch = folder / ".onnx-scratch"
    onnx_path = folder / ONNX_FILES["none"] if format == "onnx" else scratch / "model.onnx"
    export_onnx(model, tokenizer, onnx_path, names, opset)
    if format == "onnx":
        check_float_graph(model, tokenizer, folder, "onnx", ONNX_FILES["none"], calibration)
        if quantize != "none":
            from .quantize_graphs import quantize_onnx

            quantize_onnx(
                onnx_path,
                folder / ONNX_FILES[quantize],
                quantize,
                calibration_batches(model, tokenizer, calibration, names),
            )
            report_int8(model, tokenizer, folder, "onnx", ONNX_FILES[quantize], calibration)
        return
    import openvino

    xml = folder / OPENVINO_FILES["none"]
    xml.parent.mkdir(parents=True, exist_ok=True)
    graph = openvino.convert_model(str(onnx_path))
    openvino.save_model(graph, str(xml), compress_to_fp16=False)
    check_float_graph(model, tokenizer, folder, "openvino", OPENVINO_FILES["none"], calibration)
    if quantize != "none":
        from .quantize_graphs import quantize_openvino

        batches = calibration_batches(model, tokenizer, calibration, names) if calibration else None
        quantize_openvino(xml, folder / OPENVINO_FILES[quantize], quantize, batches)
        report_int8(model, tokenizer, folder, "openvino", OPENVINO_FILES[quantize], calibration)
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)


def export_onnx(model: Any, tokenizer: Any, path: Path, names: list[str], opset: int) -> None:
    """`torch.onnx.export` of the encoder (TorchScript exporter: no extra dependency, and it records the dynamic
    batch and sequence axes as named dimensions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sample = tokenizer(
        ["a short text", "a somewhat longer text to give the padding a shape"], padding=True, return_tensors="pt"
    )
    inputs = tuple(sample[name] for name in names)
    encoder = model.encoder
    was_training = encoder.training
    encoder.eval()
    axes = {name: {0: "batch_size", 1: "sequence_length"} for name in [*names, OUTPUT_NAME]}
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's tracer and deprecation warnings: nothing for the user
            torch.onnx.export(
                _EncoderGraph(encoder, names),
                inputs,
                str(path),
                input_names=names,
                output_names=[OUTPUT_NAME],
                dynamic_axes=axes,
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
    finally:
        encoder.train(was_training)  # the exporter leaves the module in training mode


def calibration_batches(
    model: Any, tokenizer: Any, texts: list[str] | None, names: list[str]
) -> list[dict[str, np.ndarray]]:
    """The calibration texts as the model would see them (prompt, lowercasing, max length), in padded batches."""
    from ..modeling.batching import tokenize_sorted

    if not texts:
        return []
    prompt = model.resolve_prompt()
    inputs = [model.prepare_text(text, prompt) for text in texts]
    batches, _, _ = tokenize_sorted(inputs, tokenizer, model.config.effective_max_seq_length, CALIBRATION_BATCH)
    return [{name: batch[name].numpy() for name in names} for batch in batches]


def _compare(model: Any, tokenizer: Any, folder: Path, backend: str, file_name: str, texts: list[str]) -> np.ndarray:
    """(torch embeddings, graph embeddings) of `texts`."""
    from .runtime import ExportedEncoder

    encoder = ExportedEncoder(folder, backend=backend, file_name=file_name)
    expected = model.encode(texts, tokenizer=tokenizer, convert_to_numpy=True)
    return expected, encoder.encode(texts)


def check_float_graph(
    model: Any, tokenizer: Any, folder: Path, backend: str, file_name: str, calibration: list[str] | None
) -> None:
    """Raise when the float32 graph's embeddings differ from the torch model's by more than `FLOAT_TOLERANCE`."""
    texts = [*CHECK_TEXTS, *(calibration or [])[:16]]
    expected, got = _compare(model, tokenizer, folder, backend, file_name, texts)
    diff = float(np.abs(expected - got).max())
    if not diff <= FLOAT_TOLERANCE:
        raise RuntimeError(
            f"export: {file_name} gives embeddings {diff:.2e} away from the torch model's (tolerance "
            f"{FLOAT_TOLERANCE:.0e}); nothing was written."
        )
    logger.info("export: %s matches the torch model (max abs difference %.1e)", file_name, diff)


def report_int8(
    model: Any, tokenizer: Any, folder: Path, backend: str, file_name: str, calibration: list[str] | None
) -> float:
    """Log (and return) the mean cosine similarity of the int8 graph's embeddings to the torch model's."""
    texts = [*CHECK_TEXTS[:4], *CHECK_TEXTS[5:], *(calibration or [])[:32]]
    expected, got = _compare(model, tokenizer, folder, backend, file_name, texts)
    cosine = (expected * got).sum(1) / (np.linalg.norm(expected, axis=1) * np.linalg.norm(got, axis=1) + 1e-12)
    logger.info("export: %s: mean cosine similarity to the float32 embeddings %.4f", file_name, float(cosine.mean()))
    return float(cosine.mean())
