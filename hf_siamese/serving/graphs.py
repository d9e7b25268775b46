"""The graph half of `export_model`, for either kind of model: the model as an ONNX graph (`torch.onnx.export` of
one `GraphModule`), int8 versions of it (ONNX Runtime's quantization tools, quantize.py), and its OpenVINO conversion
(`openvino.convert_model`, int8 through `nncf`).

Each graph takes the tokenizer's `input_ids`, `attention_mask` (and `token_type_ids` when the model uses them), batch
and sequence dimensions dynamic, and returns one output: a bi-encoder's `last_hidden_state`, the input of the pooling,
or a cross-encoder's `logits` (what differs by kind is in a `GraphSpec`, made in hooks.py). The float32 graph is
checked against the torch model before anything is kept.
"""

from __future__ import annotations

import copy
import logging
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .names import ONNX_FILES, OPENVINO_FILES

logger = logging.getLogger(__name__)

# Embeddings / logits of the float32 graph may differ from torch's by at most this much (max abs).
FLOAT_TOLERANCE = 1e-4
CALIBRATION_BATCH = 32


class GraphModule(torch.nn.Module):
    """The module traced for either kind: `model` called with positional inputs in `names` order, returning only its
    output `output` (`last_hidden_state` of a bi-encoder's encoder, `logits` of a cross-encoder's classifier)."""

    def __init__(self, model: torch.nn.Module, names: list[str], output: str) -> None:
        super().__init__()
        self.model, self.names, self.output = model, names, output

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The one output of `model` on these inputs."""
        return getattr(self.model(**dict(zip(self.names, inputs, strict=True)), return_dict=True), self.output)


@dataclass
class GraphSpec:
    """What `write_graphs` exports and how it checks the result; one per kind of model (hooks.py).

    Attributes:
        model: the float32 CPU module traced (in a `GraphModule`): called with the inputs by name, its output
            `output_name` is the graph's.
        names: the graph's input names (what the tokenizer makes and the model accepts).
        output_name: the graph's output name.
        output_axes: the output's dynamic axes (`{0: "batch_size", ...}`).
        sample: tokenized inputs to trace with (two rows of different lengths).
        compare: `(folder, backend, file_name, items) -> (torch results, graph results)` for the check items.
        check_items: what the float32 graph is checked on (texts, or pairs), calibration items added.
        calibration_batches: calibration items -> padded numpy input batches for static int8.
        agreement: `(torch results, int8 graph results) -> (value, log text)` for the int8 report.
        what: the results' name in messages (`"embeddings"`, `"logits"`).
    """

    model: torch.nn.Module
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
            from .quantize import quantize_onnx

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
        from .quantize import quantize_openvino

        batches = spec.calibration_batches(calibration) if calibration else None
        quantize_openvino(xml, folder / OPENVINO_FILES[quantize], quantize, batches)
        report_int8(spec, folder, "openvino", OPENVINO_FILES[quantize], calibration)
    shutil.rmtree(scratch, ignore_errors=True)


def export_onnx(spec: GraphSpec, path: Path, opset: int) -> None:
    """`torch.onnx.export` of `spec.model` in a `GraphModule` (TorchScript exporter: no extra dependency, and it
    records the dynamic batch and sequence axes as named dimensions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    inputs = tuple(spec.sample[name] for name in spec.names)
    module = GraphModule(spec.model, spec.names, spec.output_name)
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
