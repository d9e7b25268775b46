"""Serving a learned-sparse model (`SparseSiameseModel`, SPLADE or inference-free) from an ONNX graph: what
`export_model` needs for it (`sparse_export_hooks`) and `ExportedSparseEncoder`, its runtime.

The folder is sentence-transformers' SparseEncoder layout (`formats.sparse_layout.write_sparse_encoder`) plus the
graph of the document path's masked-language encoder: `input_ids`, `attention_mask` (and `token_type_ids` where the
encoder takes them) in, the MLM `logits` `(batch, sequence, vocab)` out, written as `onnx/model.onnx` inside the
Transformer module's folder (the root for SPLADE, `document_0_Transformer/` for inference-free). That is what
sentence-transformers' `SparseEncoder(folder, backend="onnx")` loads (through optimum's `ORTModelForMaskedLM`, whose
`logits` its `SpladePooling` pools in torch); the pooling (max or sum of log1p(ReLU)), `max_active_dims` and the
inference-free query table (a lookup: no graph) run after the graph, here as in the torch model. `format="openvino"`
converts that graph to `openvino/openvino_model.xml` in the same folder (where `backend="openvino"` looks), int8 as
for the other kinds.

A CSR model (a dense encoder and a sparse autoencoder) has no graph export: refused by name.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ..modeling.kinds import kind_of_model, kind_of_path
from ..modeling.modeling_sparse import TASKS, looked_up_weights
from ..modeling.sparse_pooling import keep_largest, pooled_weights
from ..modeling.text_encoding import longest_first, max_tokens, rows_in_input_order, tokenizer_limit
from .graphs import CALIBRATION_BATCH, GraphSpec, float_cpu_copy
from .hooks import ExportHooks, check_calibration, check_calibration_size, export_tokenizer, text_graph_spec
from .names import CROSS_ENCODER_OUTPUT
from .runtime import ExportedGraph, ExportedGraphError, check_settings

logger = logging.getLogger(__name__)

# The graph's output: the MLM logits, under the name optimum's ORTModelForMaskedLM reads.
SPARSE_OUTPUT = CROSS_ENCODER_OUTPUT
# Where write_sparse_encoder puts the document route's Transformer of an inference-free model (the graph goes there).
INFERENCE_FREE_TRANSFORMER = "document_0_Transformer"
# SpladePooling's activation names -> SparseSiameseConfig's.
_ACTIVATIONS = {"relu": "log1p_relu", "log1p_relu": "log1p_log1p_relu"}


def is_sparse_source(model: Any) -> bool:
    """Whether `model` is a learned-sparse model, or a local folder holding one (its config, or sentence-transformers'
    SparseEncoder layout: the model-kind registry's answer, `modeling.kinds`)."""
    if not isinstance(model, (str, os.PathLike)):
        return kind_of_model(model) == "sparse"
    return Path(model).is_dir() and kind_of_path(model) == "sparse"


def load_sparse_source(path: str | os.PathLike) -> Any:
    """The `SparseSiameseModel` of a local folder (saved with `save_pretrained`, or a SparseEncoder folder) on the
    CPU in eval mode, its tokenizer as `model.tokenizer` where the folder has one."""
    from transformers import AutoModel, AutoTokenizer

    from ..formats.sparse_layout import is_sparse_encoder_folder, read_sparse_encoder

    if is_sparse_encoder_folder(path):
        return read_sparse_encoder(path).eval()
    model = AutoModel.from_pretrained(path).eval()
    try:
        model.tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):  # no tokenizer saved beside it: tokenizer=... must be given
        pass
    return model


def graph_folder_of(architecture: str) -> str:
    """The folder (relative to the export) holding the Transformer module, and so the graph, of a sparse model."""
    return INFERENCE_FREE_TRANSFORMER if architecture == "inference_free" else ""


def sparse_export_hooks(model: Any, tokenizer: Any, calibration_size: object) -> ExportHooks:
    """The `ExportHooks` of a sparse model (or a local folder of one): the SparseEncoder layout, the graph of its
    document path to the MLM logits (in the Transformer module's folder: `onnx/`, or `openvino/` converted from it),
    texts to calibrate on. A CSR model exports only the layout (`format="sentence-transformers"`)."""
    check_calibration_size(calibration_size)
    if isinstance(model, (str, os.PathLike)):
        model = load_sparse_source(model)
    tokenizer = export_tokenizer(model, tokenizer, "sparse model")
    architecture = model.config.architecture

    def check_options(format: str, quantize: str) -> None:
        if format == "sentence-transformers":
            return
        if architecture == "csr":
            raise ValueError(
                f"export: format={format!r} of a sparse model with architecture='csr' (a dense encoder and a sparse "
                "autoencoder) is not written: its graph would be the dense model's and the autoencoder would run "
                "after it; graph exports are for architecture 'splade' and 'inference_free'. "
                "format='sentence-transformers' writes its SparseEncoder layout."
            )

    from ..formats.sparse_layout import write_sparse_encoder

    return ExportHooks(
        lambda folder: write_sparse_encoder(model, folder, tokenizer),
        lambda: sparse_graph_spec(model, tokenizer),
        check_calibration,
        graph_folder=graph_folder_of(architecture),
        check_options=check_options,
    )


def encoder_inputs(encoder: torch.nn.Module, tokenizer: Any) -> list[str]:
    """The inputs of the graph: `input_ids`, `attention_mask`, and `token_type_ids` where the tokenizer makes them
    and the encoder takes them."""
    accepted = set(inspect.signature(encoder.forward).parameters)
    made = set(getattr(tokenizer, "model_input_names", ("input_ids", "attention_mask")))
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if "token_type_ids" in accepted & made else [])


def sparse_graph_spec(model: Any, tokenizer: Any) -> GraphSpec:
    """The `GraphSpec` of a sparse model's document path: its masked-language encoder, `logits` out, the pooled
    document vectors compared (those of `ExportedSparseEncoder` over the written folder with torch's)."""
    model = float_cpu_copy(model).eval()
    names = encoder_inputs(model.encoder, tokenizer)
    depth = len(Path(graph_folder_of(model.config.architecture)).parts)

    def compare(folder: Path, backend: str, file_name: str, texts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        root = folder.parents[depth - 1] if depth else folder  # `folder` is the graph's (the Transformer's) folder
        encoder = ExportedSparseEncoder(root, backend=backend, file_name=file_name)
        expected = model.encode(texts, tokenizer, task="document", convert_to_sparse_tensor=False)
        got = encoder.encode(texts, task="document", convert_to_sparse_tensor=False)
        return expected.numpy(), got.numpy()

    def batches(texts: list[str] | None) -> list[dict[str, np.ndarray]]:
        """The calibration texts as the document path sees them (prompt, maximum length), padded batches."""
        if not texts:
            return []
        prefix = (model.config.prompts or {}).get("document", "")
        limit = model._token_limit(tokenizer)
        padded = []
        for start in range(0, len(texts), CALIBRATION_BATCH):
            chunk = [prefix + text for text in texts[start : start + CALIBRATION_BATCH]]
            tokens = tokenizer(chunk, padding=True, truncation=True, max_length=limit, return_tensors="np")
            padded.append({name: np.asarray(tokens[name], dtype=np.int64) for name in names})
        return padded

    return text_graph_spec(model, tokenizer, names, SPARSE_OUTPUT, compare, batches, "sparse vectors")


@dataclass
class SparseLayout:
    """What `ExportedSparseEncoder` reads from a SparseEncoder folder (besides the graph and the tokenizer)."""

    architecture: str
    graph_folder: str
    pooling: str
    activation: str
    max_active_dims: int | None
    prompts: dict[str, str]
    query_weights: torch.Tensor | None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ExportedGraphError(f"ExportedSparseEncoder: cannot read {path}: {error}") from error


def _is(type_name: object, *suffixes: str) -> bool:
    return isinstance(type_name, str) and type_name.rsplit(".", 1)[-1] in suffixes


def read_sparse_layout(folder: Path) -> SparseLayout:
    """The settings of a SparseEncoder folder (SPLADE: a Transformer then a SpladePooling; inference-free: a Router
    of a SparseStaticEmbedding query route and a Transformer + SpladePooling document route)."""
    from ..formats.sparse_csr_layout import is_csr_modules

    modules = _json(folder / "modules.json")
    if is_csr_modules(modules):
        raise ExportedGraphError(
            f"ExportedSparseEncoder: {folder} holds a CSR model (a SparseAutoEncoder after a dense model); served "
            "from a graph are SPLADE and inference-free models only."
        )
    types = [entry.get("type") for entry in modules]
    query_weights = None
    if len(modules) == 1 and _is(types[0], "Router", "Asym"):
        router_path = modules[0].get("path", "")
        router = _json(folder / router_path / "router_config.json")
        document, query = router["structure"].get("document", []), router["structure"].get("query", [])
        kinds = router["types"]
        if (
            len(document) != 2
            or not _is(kinds.get(document[0]), "Transformer", "MLMTransformer")
            or not _is(kinds.get(document[1]), "SpladePooling")
            or len(query) != 1
            or not _is(kinds.get(query[0]), "SparseStaticEmbedding")
        ):
            raise ExportedGraphError(
                f"ExportedSparseEncoder: {folder / router_path / 'router_config.json'} routes {router['structure']}; "
                "read: a query route of one SparseStaticEmbedding and a document route of a Transformer and a "
                "SpladePooling."
            )
        from safetensors.torch import load_file

        graph_folder = Path(router_path, document[0]).as_posix()
        pooling_folder = folder / router_path / document[1]
        query_weights = load_file(str(folder / router_path / query[0] / "model.safetensors"))["weight"].float()
        architecture = "inference_free"
    elif len(modules) == 2 and _is(types[0], "Transformer", "MLMTransformer") and _is(types[1], "SpladePooling"):
        graph_folder = modules[0].get("path", "")
        pooling_folder = folder / modules[1].get("path", "")
        architecture = "splade"
    else:
        raise ExportedGraphError(
            f"ExportedSparseEncoder: {folder / 'modules.json'} lists {types}; read: a Transformer then a "
            "SpladePooling (SPLADE), or one Router (inference-free)."
        )
    settings = _json(pooling_folder / "config.json")
    activation = settings.get("activation_function", "relu")
    if activation not in _ACTIVATIONS:
        raise ExportedGraphError(
            f"ExportedSparseEncoder: {pooling_folder / 'config.json'} has activation_function {activation!r}; "
            f"read: {list(_ACTIVATIONS)}."
        )
    st_config = _json(folder / "config_sentence_transformers.json")
    return SparseLayout(
        architecture=architecture,
        graph_folder=graph_folder,
        pooling=settings.get("pooling_strategy", "max"),
        activation=_ACTIVATIONS[activation],
        max_active_dims=st_config.get("max_active_dims"),
        prompts={k: v for k, v in (st_config.get("prompts") or {}).items() if v},
        query_weights=query_weights,
    )


class ExportedSparseEncoder(ExportedGraph):
    """Sparse vectors from an exported sparse model (`export_model(sparse_model, ..., format="onnx")`), the
    document path on ONNX Runtime (or a graph OpenVINO reads) instead of torch: `encode(texts, task=...)` gives
    what `SparseSiameseModel.encode` gives (to float tolerance).

    Args:
        folder: the export folder (sentence-transformers' SparseEncoder layout plus the graph).
        backend: `"onnx"` (ONNX Runtime) or `"openvino"`.
        file_name: the graph, relative to the Transformer module's folder (the root for SPLADE,
            `document_0_Transformer/` for inference-free: where sentence-transformers looks for it too); defaults to
            `onnx/model.onnx`; e.g. `"onnx/model_qint8_dynamic.onnx"` for an int8 export.
        precision: as `ExportedEncoder`'s.
        threads: CPU threads of the runtime (batches run one at a time), as `ExportedEncoder`'s.

    An inference-free model's queries are a lookup in its query table (no graph), special tokens left out, as
    `read_sparse_encoder` reads that folder.
    """

    output_name = SPARSE_OUTPUT
    owner = "ExportedSparseEncoder"
    width_name = "vocab_size"
    output_hint = " (the MLM logits a sparse model's graph returns: export with hf-siamese export --format onnx)"

    def __init__(
        self,
        folder: str | os.PathLike,
        backend: str = "onnx",
        *,
        file_name: str | None = None,
        precision: str = "f32",
        threads: int | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        from ..formats.sparse_layout import is_sparse_encoder_folder

        check_settings(backend, precision, self.owner)
        root = Path(folder)
        if not is_sparse_encoder_folder(root):
            raise FileNotFoundError(
                f"ExportedSparseEncoder: {str(root)!r} is not a SparseEncoder folder (modules.json and "
                "config_sentence_transformers.json with model_type 'SparseEncoder'); give a folder written by "
                "export_model of a sparse model (hf-siamese export --format onnx)."
            )
        self.layout = read_sparse_layout(root)
        graph_folder = root / self.layout.graph_folder
        encoder_config = _json(graph_folder / "config.json")
        self.tokenizer = AutoTokenizer.from_pretrained(graph_folder)
        self.vocab_size = int(encoder_config["vocab_size"])
        self.token_limit = _token_limit(encoder_config, self.tokenizer)
        self.query_ignore_ids = sorted(set(self.tokenizer.all_special_ids))
        self._open_graph(graph_folder, backend, file_name, precision, threads, 1, self.vocab_size)
        self.root = root

    def encode(
        self,
        texts: str | Sequence[str],
        *,
        task: str = "document",
        batch_size: int = 32,
        max_active_dims: int | None = None,
        convert_to_sparse_tensor: bool = True,
        prompt: str | None = None,
    ) -> torch.Tensor:
        """Sparse vectors of `texts`, as `SparseSiameseModel.encode` gives them: `(n, vocab)` coalesced sparse COO
        (dense with `convert_to_sparse_tensor=False`; one string: one vector). `task` "document" runs the graph
        (as do a SPLADE model's queries), "query" of an inference-free model looks the terms up."""
        if task not in TASKS:
            raise ValueError(f"ExportedSparseEncoder.encode: task={task!r}; accepted: {', '.join(TASKS)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"ExportedSparseEncoder.encode: batch_size={batch_size!r} must be a positive int")
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        for index, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(
                    f"ExportedSparseEncoder.encode: texts[{index}] is {type(text).__name__} ({text!r}); expected str"
                )
        prefix = self.layout.prompts.get(task, "") if prompt is None else prompt
        lookup = task == "query" and self.layout.query_weights is not None
        batches = longest_first(items, batch_size)  # as the torch encode: little padding
        rows = []
        for chosen in batches:
            tokens = self.tokenizer(
                [prefix + items[i] for i in chosen], padding=True, truncation=True, max_length=self.token_limit,
                return_tensors="pt", add_special_tokens=not lookup,
            )  # fmt: skip
            vectors = self._lookup(tokens) if lookup else self._document_vectors(tokens)
            rows.append(keep_largest(vectors, max_active_dims))
        dense = rows_in_input_order(rows, batches, self.vocab_size)
        result = dense.to_sparse().coalesce() if convert_to_sparse_tensor else dense
        return result[0] if single else result

    def encode_query(self, texts: str | Sequence[str], **kwargs: Any) -> torch.Tensor:
        """`encode(texts, task="query")`."""
        return self.encode(texts, task="query", **kwargs)

    def encode_document(self, texts: str | Sequence[str], **kwargs: Any) -> torch.Tensor:
        """`encode(texts, task="document")`."""
        return self.encode(texts, task="document", **kwargs)

    def _document_vectors(self, tokens: Any) -> torch.Tensor:
        """The graph's logits of a tokenized batch, pooled as the torch model pools them."""
        logits = torch.from_numpy(np.array(self._run(dict(tokens)), dtype=np.float32))
        layout = self.layout
        with torch.no_grad():
            return pooled_weights(
                logits, tokens["attention_mask"], layout.pooling, layout.activation, layout.max_active_dims
            )

    def _lookup(self, tokens: Any) -> torch.Tensor:
        """An inference-free model's query vectors: the table's weight of each term present (once; no specials)."""
        layout = self.layout
        ids, mask = tokens["input_ids"], tokens["attention_mask"]
        return looked_up_weights(ids, mask, layout.query_weights, self.query_ignore_ids, layout.max_active_dims)


def _token_limit(encoder_config: dict[str, Any], tokenizer: Any) -> int:
    """Texts are cut to this many tokens: the tokenizer's limit, at most the encoder's positions (less RoBERTa's
    offset): what the model read back from the folder cuts to (`text_encoding.max_tokens`)."""
    return max_tokens(SimpleNamespace(**encoder_config), tokenizer_limit(tokenizer))


__all__ = [
    "ExportedSparseEncoder",
    "SPARSE_OUTPUT",
    "is_sparse_source",
    "load_sparse_source",
    "read_sparse_layout",
    "sparse_export_hooks",
    "sparse_graph_spec",
]
