"""`ExportedCrossEncoder`: `predict` / `rank` over a cross-encoder's exported graph (`export_model` of a
`CrossEncoder`, `hf-siamese export --format onnx | openvino`), on ONNX Runtime or OpenVINO instead of torch.

Everything around the graph is `CrossEncoder.predict`'s (cross_encoder/scoring.py): each distinct pair once,
tokenized with the document cut before the query, length-sorted batches, several batches at once on the CPU, logits
in float32, then the activation sentence-transformers recorded in the folder. The graph itself is opened and checked
by `runtime.ExportedGraph`, as `ExportedEncoder`'s is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..cross_encoder.model import check_saved_fusion_weights
from ..cross_encoder.scoring import (
    activation_name,
    checked_pairs,
    chosen_activation,
    rank_documents,
    recorded_activation,
    score_pairs,
    shaped,
)
from ..cross_encoder.source import model_kind
from .names import CROSS_ENCODER_OUTPUT
from .runtime import ExportedGraph, check_settings

OWNER = "ExportedCrossEncoder"


class ExportedCrossEncoder(ExportedGraph):
    """Scores (query, document) pairs with a cross-encoder's exported graph.

    Args:
        folder: a folder written by `export_model` of a `CrossEncoder` (its `save_pretrained` files plus `onnx/` or
            `openvino/`).
        backend: `"onnx"` (ONNX Runtime) or `"openvino"`.
        file_name: the graph inside `folder`; defaults to the float32 one (`onnx/model.onnx`,
            `openvino/openvino_model.xml`); e.g. `"onnx/model_qint8_dynamic.onnx"` for the int8 export.
        max_length: tokens per pair; defaults to the folder's `sentence_bert_config.json` (else the tokenizer's
            limit, at most 512).
        activation: `"sigmoid"` / `"identity"`; defaults to the one recorded in the folder (as `CrossEncoder`).
        precision: OpenVINO's inference precision, `"f32"` (default) or `"bf16"` (as `ExportedEncoder`).
        threads: CPU threads in all (default: torch's thread count).
        workers: batches run at once, each on `threads // workers` threads (default: `threads`).
    """

    output_name = CROSS_ENCODER_OUTPUT
    owner = OWNER
    width_name = "num_labels"
    output_hint = " (a bi-encoder's graph?)"

    def __init__(
        self,
        folder: str | os.PathLike,
        backend: str = "onnx",
        *,
        file_name: str | None = None,
        max_length: int | None = None,
        activation: str | None = None,
        precision: str = "f32",
        threads: int | None = None,
        workers: int | None = None,
    ) -> None:
        from transformers import AutoConfig, AutoTokenizer

        check_settings(backend, precision, OWNER)
        folder = Path(folder)
        kind = model_kind(folder)
        if kind != "cross-encoder":
            what = {"bi-encoder": "a bi-encoder (load it with ExportedEncoder)", "encoder": "an encoder without a head"}
            raise ValueError(
                f"{OWNER}: {str(folder)!r} is {what.get(kind, 'not a model folder')}, not an exported cross-encoder "
                "(a config.json naming a ...ForSequenceClassification, written by hf-siamese export)."
            )
        self.config = AutoConfig.from_pretrained(folder)
        check_saved_fusion_weights(str(folder), self.config)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if max_length is None and (folder / "sentence_bert_config.json").is_file():
            saved = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
            max_length = saved.get("max_seq_length")
        limit = getattr(self.tokenizer, "model_max_length", 512)
        self.max_length = int(max_length or min(limit if isinstance(limit, int) and limit < 100_000 else 512, 512))
        if activation is None:
            activation = recorded_activation(folder, self.config)
        self.activation = activation_name(activation, self.num_labels)
        self._open_graph(folder, backend, file_name, precision, threads, workers, self.num_labels)

    @property
    def num_labels(self) -> int:
        """Scores per pair (the classifier's outputs)."""
        return int(self.config.num_labels)

    @property
    def first_stage_weight(self) -> float:
        """The fusion weight saved with the model (see `CrossEncoder.first_stage_weight`; checked when loaded)."""
        return float(getattr(self.config, "first_stage_weight", None) or 0.0)

    @property
    def stage_weights(self) -> dict[str, float] | None:
        """The three-score weights saved with the model (see `CrossEncoder.stage_weights`), or None."""
        from ..retrieval.fusion.rerank import check_stage_weights

        return check_stage_weights(getattr(self.config, "stage_weights", None))

    @property
    def fusion_corpus(self) -> dict[str, Any] | None:
        """The corpus the saved weights were chosen on (see `CrossEncoder.fusion_corpus`), or None."""
        value = getattr(self.config, "fusion_corpus", None)
        return value if isinstance(value, dict) and isinstance(value.get("fingerprint"), str) else None

    def predict(
        self,
        pairs: Sequence[Sequence[str]],
        batch_size: int = 32,
        show_progress_bar: bool = False,
        activation: bool | str = True,
        convert_to_numpy: bool = True,
        max_length: int | None = None,
        **ignored: Any,
    ) -> np.ndarray | torch.Tensor:
        """Scores of (query, document) pairs, as `CrossEncoder.predict` gives them: float32 `(len(pairs),)` for one
        output, `(len(pairs), num_labels)` for several, in input order. `activation`: True (the folder's), False
        (raw logits) or a name. `dtype` / `device` (torch's) are accepted and ignored: the graph runs as exported."""
        unknown = sorted(set(ignored) - {"dtype", "device"})
        if unknown:
            raise TypeError(f"{OWNER}.predict() got unexpected keyword arguments {unknown}")
        rows, single = checked_pairs(pairs, batch_size)
        scoring = chosen_activation(self, activation)

        def logits_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            return torch.from_numpy(np.asarray(self._run(batch), dtype=np.float32))

        scores = score_pairs(self, rows, max_length, scoring, batch_size, logits_of, self.workers, show_progress_bar)
        return shaped(scores, self.num_labels, single, convert_to_numpy)

    rank = rank_documents  # as `CrossEncoder.rank`: `[{"corpus_id", "score"[, "text"]}]`, best first


__all__ = ["ExportedCrossEncoder"]
