"""What the bi-encoder's export (`hf_siamese.formats.export.export_model`: option checks, staging folder and swap,
ONNX / OpenVINO graphs, int8, the float32 check against torch) needs to export a `CrossEncoder`: its `ExportHooks`.

What is written: the `CrossEncoder.save_pretrained` layout (transformers, sentence-transformers' `CrossEncoder` and
text-embeddings-inference's `/rerank` read it) and, with `format="onnx" | "openvino"`, the model as a graph from
`input_ids`, `attention_mask` (and `token_type_ids` where the tokenizer makes them) to `logits` `(batch,
num_labels)` under the names sentence-transformers' `backend="onnx" | "openvino"` (through optimum's
`ORTModelForSequenceClassification` / `OVModelForSequenceClassification`) looks for: `onnx/model.onnx`,
`openvino/openvino_model.xml`. `ExportedCrossEncoder` (exported.py) scores over them; `export_cross_encoder`
(export.py) is the entry point.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..formats.export import ExportHooks, check_calibration_size, draw_calibration
from ..formats.export_graphs import CALIBRATION_BATCH, GraphSpec, float_cpu_copy, graph_inputs
from .exported import OUTPUT_NAME, ExportedCrossEncoder
from .tokenization import check_pair_texts, tokenize_pairs

# Pairs of several lengths the float32 graph is checked on (with up to 16 calibration pairs, when given).
CHECK_PAIRS = (
    ("what plays music?", "A man is playing a guitar."),
    ("hello", ""),
    ("who watches the fox?", "The quick brown fox jumps over the lazy dog while the farmer watches from the porch."),
    ("are exports checked?", "Exports are checked against the torch model before they are kept."),
    ("numbers", "Numbers 1, 2 and 3; symbols #, @ and %."),
    ("a", "a"),
)


class _LogitsGraph(torch.nn.Module):
    """The classifier with positional inputs in `names` order, returning its logits only."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs, strict=True)), return_dict=True).logits


def cross_encoder_hooks(model: Any) -> ExportHooks:
    """`export_model`'s hooks for `model` (a `CrossEncoder`; not imported here, which imports this module): its
    `save_pretrained` files, its logits graph, (query, document) pairs to calibrate on."""
    return ExportHooks(model.write_files, lambda: cross_encoder_graph_spec(model), check_calibration_pairs)


def check_calibration_pairs(pairs: Any, size: int) -> list[tuple[str, str]]:
    """The calibration pairs to use: `size` of `pairs` (all when fewer; a seeded random sample when more)."""
    check_calibration_size(size)
    if pairs is None:
        raise ValueError(
            "export: quantize='int8-static' calibrates activation ranges on pairs like the ones you will score; pass "
            "calibration_pairs=[(query, document), ...] (CLI: --calibration FILE of pairs: .tsv / .csv / .jsonl with "
            "two text columns)."
        )
    if isinstance(pairs, str):
        raise TypeError("export: the calibration pairs are one string; pass a list of (query, document) pairs.")
    rows = []
    for index, pair in enumerate(pairs):
        if isinstance(pair, str) or not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"export: calibration pair {index} is {pair!r}; expected a (query, document) pair.")
        rows.append((pair[0], pair[1]))
    check_pair_texts([q for q, _ in rows], [d for _, d in rows], "export calibration")
    rows = [(q, d) for q, d in rows if q.strip() or d.strip()]
    if not rows:
        raise ValueError(
            "export: the calibration pairs hold no non-empty pair; give pairs like the ones you will score."
        )
    return draw_calibration(rows, size)


def cross_encoder_graph_spec(model: Any) -> GraphSpec:
    """The `GraphSpec` of a `CrossEncoder`: the whole classifier, `logits` out, raw logits compared (float32)."""
    torch_model = copy.copy(model)  # the same settings over a float32 CPU copy of the weights (when not already)
    torch_model.model = float_cpu_copy(model.model).eval()
    tokenizer = model.tokenizer
    names = graph_inputs(None, tokenizer)
    sample = tokenizer(
        ["a short query", "a query"],
        ["a document", "a somewhat longer document to give the padding a shape"],
        padding=True,
        return_tensors="pt",
    )

    def compare(folder: Path, backend: str, file_name: str, pairs: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        graph = ExportedCrossEncoder(folder, backend=backend, file_name=file_name)
        expected = torch_model.predict(pairs, activation=False, dtype=None, device="cpu")
        return np.asarray(expected), np.asarray(graph.predict(pairs, activation=False))

    def batches(pairs: list[Any] | None) -> list[dict[str, np.ndarray]]:
        if not pairs:
            return []
        tokens = tokenize_pairs(tokenizer, [q for q, _ in pairs], [d for _, d in pairs], model.max_length, warn=False)
        order = np.argsort([-len(ids) for ids in tokens.input_ids], kind="stable")
        padded = []
        for start in range(0, len(order), CALIBRATION_BATCH):
            batch = tokenizer.pad(
                tokens.features(order[start : start + CALIBRATION_BATCH].tolist()), return_tensors="np"
            )
            padded.append({name: _input(batch, name) for name in names})
        return padded

    return GraphSpec(
        module=_LogitsGraph(torch_model.model, names),
        names=names,
        output_name=OUTPUT_NAME,
        output_axes={0: "batch_size"},
        sample={name: sample[name] for name in names},
        compare=compare,
        check_items=list(CHECK_PAIRS),
        calibration_batches=batches,
        agreement=_agreement,
        what="logits",
    )


def _input(batch: Any, name: str) -> np.ndarray:
    """`batch[name]` as int64; `token_type_ids` all 0 where the tokenizer made none."""
    if name == "token_type_ids" and name not in batch:
        return np.zeros_like(np.asarray(batch["input_ids"]), dtype=np.int64)
    return np.asarray(batch[name], dtype=np.int64)


def _agreement(expected: np.ndarray, got: np.ndarray) -> tuple[float, str]:
    """Max abs difference of the int8 logits, and how many pairs keep their place in the float32 ranking."""
    diff = float(np.abs(expected - got).max()) if expected.size else 0.0
    first, second = expected.reshape(len(expected), -1)[:, 0], got.reshape(len(got), -1)[:, 0]
    same = int((np.argsort(-first, kind="stable") == np.argsort(-second, kind="stable")).sum())
    return diff, f"logits at most {diff:.3f} from the float32 model's; {same} of {len(first)} pairs keep their rank"


__all__ = [
    "CHECK_PAIRS",
    "check_calibration_pairs",
    "cross_encoder_graph_spec",
    "cross_encoder_hooks",
]
