"""`ExportedEncoder`: `encode` over a folder written by `export_model`, on ONNX Runtime or OpenVINO instead of torch.

Everything around the graph is the torch `encode`'s: the prompts, lowercasing and maximum length of the folder's
pipeline files, texts tokenized once and batched by exact token length (each batch pads only to its own longest
text), repeated texts embedded once, pooling / Dense layers / normalization from `pool_token_states` and the
model's own head, results in input order. On the CPU several batches run at once, one thread each (as the torch
`encode` does with `cpu_workers`): ONNX Runtime sessions and OpenVINO streams both allow it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..modeling.batching import SortedBatches
from ..modeling.configuration_siamese import SiameseBertConfig
from ..modeling.encoding import (
    SiameseEncodingMixin,
    checked_texts,
    in_input_order,
    native_low_precision,
    prompt_token_count,
)
from ..modeling.modeling_siamese import SiameseBertModel
from ..modeling.pooling import SiameseProjection
from .export_names import ONNX_FILES, OPENVINO_FILES, require
from .sentence_transformers_read import read_layout

logger = logging.getLogger(__name__)

BACKENDS = ("onnx", "openvino")
PRECISIONS = ("f32", "bf16")
OUTPUT_NAME = "last_hidden_state"
_WARNED: set[str] = set()


class ExportedGraphError(ValueError):
    """An exported graph that is missing, unreadable, or does not fit its folder; the message names the file."""


class ExportedEncoder:
    """Sentence embeddings from an exported folder (`export_model(..., format="onnx" | "openvino")`).

    Args:
        folder: the export folder (the plain sentence-transformers layout plus `onnx/` or `openvino/`).
        backend: `"onnx"` (ONNX Runtime) or `"openvino"`.
        file_name: the graph inside `folder`; defaults to the float32 one (`onnx/model.onnx`,
            `openvino/openvino_model.xml`); e.g. `"onnx/model_qint8_dynamic.onnx"` for an int8 export.
        precision: OpenVINO's inference precision: `"f32"` (default: the embeddings of the torch model, within
            1e-4) or `"bf16"` (faster on CPUs with AVX512-BF16 / AMX; on others float32 runs, with a log line saying
            so). OpenVINO itself would pick bf16 on such CPUs; here the choice is explicit.
        threads: CPU threads in all (default: torch's thread count).
        workers: batches run at once, each on `threads // workers` threads (default: `threads`, one thread each).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        backend: str = "onnx",
        *,
        file_name: str | None = None,
        precision: str = "f32",
        threads: int | None = None,
        workers: int | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        check_settings(backend, precision, "ExportedEncoder")
        folder = Path(folder)
        if not (folder / "modules.json").is_file():
            raise FileNotFoundError(
                f"ExportedEncoder: {str(folder)!r} has no modules.json; give a folder written by export_model "
                "(hf-siamese export)."
            )
        layout = read_layout(folder)
        encoder_config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.config = SiameseBertConfig(encoder_config=encoder_config, **layout.settings)
        self.projections = torch.nn.ModuleList(SiameseProjection(**spec) for spec in self.config.projections)
        if layout.projection_state:
            self.load_projections(layout.projection_state)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.folder, self.backend = folder, backend
        self.file_name = file_name or (ONNX_FILES if backend == "onnx" else OPENVINO_FILES)["none"]
        self.threads = threads or torch.get_num_threads()
        self.workers = max(1, min(workers or self.threads, self.threads))
        path = find_graph(folder, backend, self.file_name, "ExportedEncoder")
        self._runner = open_graph(path, backend, precision, self.threads, self.workers, OUTPUT_NAME, "ExportedEncoder")
        self._check_graph(path)

    # The prompt and text handling and the head (pooling, projections, truncation, normalization) are the model's.
    resolve_prompt = SiameseEncodingMixin.resolve_prompt
    prepare_text = SiameseEncodingMixin.prepare_text
    _head = SiameseBertModel._head

    def load_projections(self, state: dict[str, torch.Tensor]) -> None:
        own = {f"projections.{k}": v for k, v in self.projections.state_dict().items()}
        if set(own) != set(state):
            raise ExportedGraphError(f"{self.folder}: Dense weights {sorted(state)} do not match modules.json")
        self.projections.load_state_dict({k.removeprefix("projections."): v for k, v in state.items()})

    def _check_graph(self, path: Path) -> None:
        """The graph's inputs are ones the tokenizer makes, and its output has this folder's hidden size."""
        inputs, width = checked_signature(
            self._runner, self.tokenizer, self.folder, path, OUTPUT_NAME, "ExportedEncoder"
        )
        hidden = self.config.hidden_size
        if width is not None and width != hidden:
            raise ExportedGraphError(
                f"ExportedEncoder: {path} returns token states of width {width}, but {self.folder}/config.json says "
                f"hidden_size={hidden} (the graph belongs to another model)."
            )
        self.input_names = inputs

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 64,
        prompt_name: str | None = None,
        prompt: str | None = None,
        convert_to_numpy: bool = True,
        show_progress_bar: bool = False,
    ) -> np.ndarray | torch.Tensor:
        """`(len(texts), dim)` float32 embeddings (`(dim,)` for one string), as `SiameseBertModel.encode` gives."""
        texts, single = checked_texts(texts, batch_size)
        prompt = self.resolve_prompt(prompt_name, prompt)
        if not texts:
            empty = torch.empty(0, self.config.embedding_size)
            return empty.numpy() if convert_to_numpy else empty
        unique = list(dict.fromkeys(texts))
        inputs = [self.prepare_text(text, prompt) for text in unique]
        prompt_length = prompt_token_count(self.tokenizer, self.prepare_text("", prompt)) if prompt else None
        source = SortedBatches(inputs, self.tokenizer, self.config.effective_max_seq_length, batch_size)
        progress = None
        if show_progress_bar:
            from tqdm.auto import tqdm

            progress = tqdm(total=len(source), desc="Encoding", unit="batch")

        def embed(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            states = self._runner.run({name: batch[name].numpy() for name in self.input_names})
            with torch.no_grad():
                return self._head(torch.from_numpy(states).float(), batch["attention_mask"], prompt_length)

        # The torch encode's batch runner: `workers` batches at a time, each on its own thread (it sets torch's
        # thread count to 1 for them, restored here).
        threads = torch.get_num_threads()
        try:
            positions, chunks = SiameseEncodingMixin._run_batches(
                embed, source, min(self.workers, len(source)), progress
            )
        finally:
            torch.set_num_threads(threads)
            if progress is not None:
                progress.close()
        embeddings = in_input_order(positions, chunks, texts, unique, single)
        return embeddings.numpy() if convert_to_numpy else embeddings


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

    def __init__(
        self, path: Path, threads: int, output_name: str = OUTPUT_NAME, owner: str = "ExportedEncoder"
    ) -> None:
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
        output_name: str = OUTPUT_NAME,
        owner: str = "ExportedEncoder",
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
    "ExportedEncoder",
    "ExportedGraphError",
    "PRECISIONS",
    "effective_precision",
    "find_graph",
    "open_graph",
]
