"""The graph half of `export_model`: the encoder as an ONNX graph (`torch.onnx.export`), int8 versions of it (ONNX
Runtime's quantization tools), and its OpenVINO conversion (`openvino.convert_model`, int8 through `nncf`).

Each graph takes the tokenizer's `input_ids`, `attention_mask` (and `token_type_ids` when the encoder uses them),
batch and sequence dimensions dynamic, and returns `last_hidden_state`, the input of the pooling (a cross-encoder's
graph, described by its own `GraphSpec`, returns `logits`). The float32 graph is checked against the torch model
before anything is kept.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class GraphSpec:
    """What `write_graphs` exports and how it checks the result; one per kind of model (bi-encoders here,
    cross-encoders in `hf_siamese.cross_encoder.export`).

    Attributes:
        module: the float32 CPU module traced: positional inputs in `names` order, one tensor out.
        names: the graph's input names (what the tokenizer makes and the model accepts).
        output_name: the graph's output name.
        output_axes: the output's dynamic axes (`{0: "batch_size", ...}`).
        sample: tokenized inputs to trace with (two rows of different lengths).
        compare: `(folder, backend, file_name, items) -> (torch results, graph results)` for the check items.
        check_items: what the float32 graph is checked on (texts, or pairs), calibration items added.
        calibration_batches: calibration items -> padded numpy input batches for static int8.
        agreement: `(torch results, int8 graph results) -> (value, log text)` for the int8 report.
        what: the results' name in messages (`"embeddings"`, `"scores"`).
    """

    module: torch.nn.Module
    names: list[str]
    output_name: str
    output_axes: dict[int, str]
    sample: dict[str, torch.Tensor]
    compare: Callable[[Path, str, str, list[Any]], tuple[np.ndarray, np.ndarray]]
    check_items: list[Any]
    calibration_batches: Callable[[list[Any] | None], list[dict[str, np.ndarray]]]
    agreement: Callable[[np.ndarray, np.ndarray], tuple[float, str]]
    what: str = "embeddings"


def graph_inputs(model: Any, tokenizer: Any) -> list[str]:
    """The inputs a graph of this encoder takes: what the tokenizer makes and the encoder accepts."""
    accepted = set(getattr(model, "_encoder_arguments", ()) or ("input_ids", "attention_mask", "token_type_ids"))
    made = set(getattr(tokenizer, "model_input_names", ("input_ids", "attention_mask")))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if {"token_type_ids"} <= accepted & made else [])
    return names


def float_cpu_copy(model: Any) -> Any:
    """`model` itself when it is float32 on the CPU, else a float32 CPU copy (the caller's model is not moved)."""
    parameter = next(model.parameters())
    if parameter.dtype == torch.float32 and parameter.device.type == "cpu":
        return model
    return copy.deepcopy(model).to("cpu", torch.float32)


def encoder_graph_spec(model: Any, tokenizer: Any) -> GraphSpec:
    """The `GraphSpec` of a `SiameseBertModel`: its encoder, `last_hidden_state` out, embeddings compared."""
    model = float_cpu_copy(model)
    names = graph_inputs(model, tokenizer)
    sample = tokenizer(
        ["a short text", "a somewhat longer text to give the padding a shape"], padding=True, return_tensors="pt"
    )

    def compare(folder: Path, backend: str, file_name: str, texts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        from .runtime import ExportedEncoder

        encoder = ExportedEncoder(folder, backend=backend, file_name=file_name)
        expected = model.encode(texts, tokenizer=tokenizer, convert_to_numpy=True)
        return expected, encoder.encode(texts)

    def agreement(expected: np.ndarray, got: np.ndarray) -> tuple[float, str]:
        norms = np.linalg.norm(expected, axis=1) * np.linalg.norm(got, axis=1) + 1e-12
        cosine = float(((expected * got).sum(1) / norms).mean())
        return cosine, f"mean cosine similarity to the float32 embeddings {cosine:.4f}"

    return GraphSpec(
        module=_EncoderGraph(model.encoder, names),
        names=names,
        output_name=OUTPUT_NAME,
        output_axes={0: "batch_size", 1: "sequence_length"},
        sample={name: sample[name] for name in names},
        compare=compare,
        check_items=list(CHECK_TEXTS),
        calibration_batches=lambda texts: calibration_batches(model, tokenizer, texts, names),
        agreement=agreement,
    )


def write_graphs(
    spec: GraphSpec, folder: Path, format: str, quantize: str, calibration: list[Any] | None, opset: int
) -> None:
    """Write the float32 graph of `format` (and its int8 version for `quantize`) of `spec` into `folder`."""
    scratch = folder / ".onnx-scratch"
    onnx_path = folder / ONNX_FILES["none"] if format == "onnx" else scratch / "model.onnx"
    export_onnx(spec, onnx_path, opset)
    if format == "onnx":
        check_float_graph(spec, folder, "onnx", ONNX_FILES["none"], calibration)
        if quantize != "none":
            from .quantize_graphs import quantize_onnx

            batches = spec.calibration_batches(calibration) if quantize == "int8-static" else []
            quantize_onnx(onnx_path, folder / ONNX_FILES[quantize], quantize, batches)
            report_int8(spec, folder, "onnx", ONNX_FILES[quantize], calibration)
        return
    import openvino

    xml = folder / OPENVINO_FILES["none"]
    xml.parent.mkdir(parents=True, exist_ok=True)
    graph = openvino.convert_model(str(onnx_path))
    openvino.save_model(graph, str(xml), compress_to_fp16=False)
    check_float_graph(spec, folder, "openvino", OPENVINO_FILES["none"], calibration)
    if quantize != "none":
        from .quantize_graphs import quantize_openvino

        batches = spec.calibration_batches(calibration) if calibration else None
        quantize_openvino(xml, folder / OPENVINO_FILES[quantize], quantize, batches)
        report_int8(spec, folder, "openvino", OPENVINO_FILES[quantize], calibration)
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)


def export_onnx(spec: GraphSpec, path: Path, opset: int) -> None:
    """`torch.onnx.export` of `spec.module` (TorchScript exporter: no extra dependency, and it records the dynamic
    batch and sequence axes as named dimensions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    inputs = tuple(spec.sample[name] for name in spec.names)
    module = spec.module
    was_training = module.training
    module.eval()
    axes = {name: {0: "batch_size", 1: "sequence_length"} for name in spec.names}
    axes[spec.output_name] = dict(spec.output_axes)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's tracer and deprecation warnings: nothing for the user
            torch.onnx.export(
                module,
                inputs,
                str(path),
                input_names=spec.names,
                output_names=[spec.output_name],
                dynamic_axes=axes,
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
    finally:
        module.train(was_training)  # the exporter leaves the module in training mode


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


def _compare(
    spec: GraphSpec, folder: Path, backend: str, file_name: str, items: list[Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(torch results, graph results) of `items`."""
    return spec.compare(folder, backend, file_name, items)


def check_float_graph(
    spec: GraphSpec, folder: Path, backend: str, file_name: str, calibration: list[Any] | None
) -> None:
    """Raise when the float32 graph's results differ from the torch model's by more than `FLOAT_TOLERANCE`."""
    items = [*spec.check_items, *(calibration or [])[:16]]
    expected, got = _compare(spec, folder, backend, file_name, items)
    diff = float(np.abs(expected - got).max())
    if not diff <= FLOAT_TOLERANCE:
        raise RuntimeError(
            f"export: {file_name} gives {spec.what} {diff:.2e} away from the torch model's (tolerance "
            f"{FLOAT_TOLERANCE:.0e}); nothing was written."
        )
    logger.info("export: %s matches the torch model (max abs difference %.1e)", file_name, diff)


def report_int8(spec: GraphSpec, folder: Path, backend: str, file_name: str, calibration: list[Any] | None) -> float:
    """Log (and return) how close the int8 graph's results are to the torch model's (`spec.agreement`)."""
    items = [item for item in spec.check_items if item != ""] + list((calibration or [])[:32])
    expected, got = _compare(spec, folder, backend, file_name, items)
    value, text = spec.agreement(expected, got)
    logger.info("export: %s: %s", file_name, text)
    return value
