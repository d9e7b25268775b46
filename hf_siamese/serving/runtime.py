"""The runtime of an exported graph, for either kind of model: a runner over ONNX Runtime or OpenVINO that several
threads may call at once (`open_graph`), the checks of a graph against its folder, and `ExportedGraph`, what
`ExportedEncoder` (encoder.py) and `ExportedCrossEncoder` (reranker.py) share: the settings, the graph file found
and opened, its inputs and output width checked. `load_exported` (exported.py) picks the class by the folder.

On the CPU several batches run at once, one thread each (as the torch `encode` does with `cpu_workers`): ONNX Runtime
sessions and OpenVINO streams both allow it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..modeling.low_precision import native_low_precision
from .names import ONNX_FILES, OPENVINO_FILES, require

logger = logging.getLogger(__name__)

BACKENDS = ("onnx", "openvino")
PRECISIONS = ("f32", "bf16")
_WARNED: set[str] = set()


class ExportedGraphError(ValueError):
    """An exported graph that is missing, unreadable, or does not fit its folder; the message names the file."""


class ExportedGraph:
    """The graph half of `ExportedEncoder` and `ExportedCrossEncoder`: a subclass names its graph's output
    (`output_name`), itself in messages (`owner`), what its output's last axis is (`width_name`, the config setting
    it must equal) and what a graph without that output may be (`output_hint`), reads its folder (config,
    tokenizer), then calls `_open_graph`."""

    output_name: str
    owner: str
    width_name: str
    output_hint: str = ""
    tokenizer: Any

    def _open_graph(
        self,
        folder: Path,
        backend: str,
        file_name: str | None,
        precision: str,
        threads: int | None,
        workers: int | None,
        width: int,
    ) -> None:
        """Find and open `file_name` (default: the float32 graph of `backend`) in `folder` with `threads` CPU threads,
        `workers` batches at once; check its inputs against the tokenizer and its output's width against `width`."""
        self.folder, self.backend = folder, backend
        self.file_name = file_name or (ONNX_FILES if backend == "onnx" else OPENVINO_FILES)["none"]
        self.threads = threads or torch.get_num_threads()
        self.workers = max(1, min(workers or self.threads, self.threads))
        path = find_graph(folder, backend, self.file_name, self.owner)
        self._runner = open_graph(path, backend, precision, self.threads, self.workers, self.output_name, self.owner)
        inputs, found = checked_signature(
            self._runner, self.tokenizer, folder, path, self.output_name, self.owner, self.output_hint
        )
        if found is not None and found != width:
            raise ExportedGraphError(
                f"{self.owner}: {path} returns {self.output_name} of width {found}, but {folder}/config.json says "
                f"{self.width_name}={width} (the graph belongs to another model)."
            )
        self.input_names = inputs

    def _run(self, batch: dict[str, torch.Tensor]) -> np.ndarray:
        """The graph's output for a tokenized batch (`token_type_ids` all 0 where the tokenizer made none)."""
        inputs = {}
        for name in self.input_names:
            value = batch.get(name)
            inputs[name] = (torch.zeros_like(batch["input_ids"]) if value is None else value).numpy()
        return self._runner.run(inputs)


def check_settings(backend: str, precision: str, owner: str) -> None:
    """ValueError for a backend or precision these runners do not know, or bf16 asked of an ONNX graph; `owner` names
    the class in the message."""
    if backend not in BACKENDS:
        raise ValueError(f"{owner}: backend={backend!r} is not one of {list(BACKENDS)}.")
    if precision not in PRECISIONS:
        raise ValueError(f"{owner}: precision={precision!r} is not one of {list(PRECISIONS)}.")
    if precision == "bf16" and backend != "openvino":
        raise ValueError(f"{owner}: precision='bf16' is an OpenVINO setting; ONNX graphs run as exported.")


def checked_signature(
    runner: Any, tokenizer: Any, folder: Path, path: Path, output_name: str, owner: str, hint: str = ""
) -> tuple[list[str], int | None]:
    """`(input names, output width or None)` of the graph `runner` runs (from `path`), or `ExportedGraphError` where
    it takes inputs the tokenizer of `folder` does not make or has no output `output_name` (`hint` ends that
    message)."""
    inputs, output, width = runner.signature()
    made = set(tokenizer.model_input_names) | {"input_ids", "attention_mask"}
    unknown = [name for name in inputs if name not in made]
    if unknown or "input_ids" not in inputs:
        raise ExportedGraphError(
            f"{owner}: {path} takes inputs {inputs}; the tokenizer of {folder} makes {sorted(made)} "
            "(was the graph exported from another model?)."
        )
    if output is None:
        raise ExportedGraphError(f"{owner}: {path} has no output named {output_name!r}{hint}.")
    return inputs, width


def find_graph(folder: Path, backend: str, file_name: str, owner: str) -> Path:
    """`folder / file_name`, or `ExportedGraphError` naming the graphs the folder does hold (and, for OpenVINO, a
    missing .bin); `owner` names the class in the message."""
    path = folder / file_name
    if not path.is_file():
        present = sorted(str(p.relative_to(folder)) for p in folder.glob("*/*") if p.suffix in (".onnx", ".xml"))
        raise ExportedGraphError(
            f"{owner}: {str(path)!r} does not exist; graphs in this folder: {present or 'none'} (export one with "
            f"hf-siamese export --format {backend})."
        )
    if backend == "openvino" and not path.with_suffix(".bin").is_file():
        raise ExportedGraphError(f"{owner}: {str(path.with_suffix('.bin'))!r} (the weights of {path.name}) is missing.")
    return path


def effective_precision(precision: str, owner: str) -> str:
    """OpenVINO's inference precision to ask for: `precision`, but float32 (with one warning) where bf16 would not
    run natively."""
    if precision == "bf16" and not native_low_precision(torch.bfloat16):
        if "bf16" not in _WARNED:
            _WARNED.add("bf16")
            logger.warning(
                "%s(precision='bf16'): this CPU has no native bfloat16 matrix instructions (AVX512-BF16 / AMX); "
                "running float32 instead, which is faster here and exact.",
                owner,
            )
        return "f32"
    return precision


def open_graph(
    path: Path, backend: str, precision: str, threads: int, workers: int, output_name: str, owner: str
) -> _OnnxRunner | _OpenVinoRunner:
    """A runner for the graph at `path` (`backend` `"onnx"` or `"openvino"`) whose `run(inputs)` returns the output
    `output_name` and may be called from `workers` threads at once, `threads` CPU threads in all."""
    if backend == "onnx":
        require("onnx", f"{owner}(backend='onnx')")
        return _OnnxRunner(path, max(1, threads // workers), output_name, owner)
    require("openvino", f"{owner}(backend='openvino')")
    return _OpenVinoRunner(path, effective_precision(precision, owner), threads, workers, output_name, owner)


class _OnnxRunner:
    """One ONNX Runtime session; `run` may be called from several threads at once."""

    def __init__(self, path: Path, threads: int, output_name: str, owner: str) -> None:
        import onnxruntime

        self.output_name = output_name
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:
            raise ExportedGraphError(f"{owner}: ONNX Runtime cannot load {path}: {error}") from error

    def signature(self) -> tuple[list[str], str | None, int | None]:
        outputs = {o.name: o for o in self.session.get_outputs()}
        output = outputs.get(self.output_name)
        width = output.shape[-1] if output is not None and isinstance(output.shape[-1], int) else None
        return [i.name for i in self.session.get_inputs()], output and self.output_name, width

    def run(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run([self.output_name], inputs)[0]


class _OpenVinoRunner:
    """An OpenVINO model compiled for the CPU with one stream per worker; each thread gets its own request."""

    def __init__(
        self,
        path: Path,
        precision: str,
        threads: int,
        workers: int,
        output_name: str,
        owner: str,
    ) -> None:
        import openvino

        self.output_name = output_name
        core = openvino.Core()
        try:
            graph = core.read_model(str(path))
        except Exception as error:
            raise ExportedGraphError(f"{owner}: OpenVINO cannot read {path}: {error}") from error
        self.graph = graph
        config = {
            "INFERENCE_PRECISION_HINT": precision,
            "NUM_STREAMS": str(workers),
            "INFERENCE_NUM_THREADS": str(threads),
        }
        self.compiled = core.compile_model(graph, "CPU", config)
        self.local = threading.local()

    def signature(self) -> tuple[list[str], str | None, int | None]:
        outputs = [o for o in self.graph.outputs if self.output_name in o.get_names()]
        width = None
        if outputs:
            last = outputs[0].get_partial_shape()[-1]
            width = last.get_length() if last.is_static else None
        return [i.get_any_name() for i in self.graph.inputs], self.output_name if outputs else None, width

    def run(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        request = getattr(self.local, "request", None)
        if request is None:
            request = self.local.request = self.compiled.create_infer_request()
        result = request.infer(inputs)
        return np.asarray(result[self.compiled.output(self.output_name)])


__all__ = [
    "BACKENDS",
    "ExportedGraph",
    "ExportedGraphError",
    "PRECISIONS",
    "check_settings",
    "checked_signature",
    "effective_precision",
    "find_graph",
    "open_graph",
]
