"""`ExportedEncoder`: `encode` over a bi-encoder folder written by `export_model`, on ONNX Runtime or OpenVINO
instead of torch.

Everything around the graph is the torch `encode`'s: the prompts, lowercasing and maximum length of the folder's
pipeline files, texts tokenized once and batched by exact token length (each batch pads only to its own longest
text), repeated texts embedded once, pooling / Dense layers / normalization from `pool_token_states` and the
model's own head, results in input order. The graph itself is opened and checked by `runtime.ExportedGraph`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..formats.sentence_transformers_read import read_layout
from ..modeling.batching import SortedBatches, run_batches
from ..modeling.configuration_siamese import SiameseBertConfig
from ..modeling.encoding import SiameseEncodingMixin, checked_texts, in_input_order, prompt_token_count
from ..modeling.modeling_siamese import SiameseBertModel
from ..modeling.pooling import SiameseProjection
from .names import ENCODER_OUTPUT
from .runtime import ExportedGraph, ExportedGraphError, check_settings


class ExportedEncoder(ExportedGraph):
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

    output_name = ENCODER_OUTPUT
    owner = "ExportedEncoder"
    width_name = "hidden_size"

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

        check_settings(backend, precision, self.owner)
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
        self.folder = folder
        if layout.projection_state:
            self.load_projections(layout.projection_state)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self._open_graph(folder, backend, file_name, precision, threads, workers, self.config.hidden_size)

    # The prompt and text handling and the head (pooling, projections, truncation, normalization) are the model's.
    resolve_prompt = SiameseEncodingMixin.resolve_prompt
    prepare_text = SiameseEncodingMixin.prepare_text
    _head = SiameseBertModel._head

    def load_projections(self, state: dict[str, torch.Tensor]) -> None:
        """Load the Dense layers' weights (`projections.N.…`) read from the folder's pipeline files."""
        own = {f"projections.{k}": v for k, v in self.projections.state_dict().items()}
        if set(own) != set(state):
            raise ExportedGraphError(f"{self.folder}: Dense weights {sorted(state)} do not match modules.json")
        self.projections.load_state_dict({k.removeprefix("projections."): v for k, v in state.items()})

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
            states = self._run(batch)
            with torch.no_grad():
                return self._head(torch.from_numpy(states).float(), batch["attention_mask"], prompt_length)

        # The torch encode's batch runner: `workers` batches at a time, each on its own thread (it sets torch's
        # thread count to 1 for them and restores it).
        try:
            positions, chunks = run_batches(embed, source, min(self.workers, len(source)), progress)
        finally:
            if progress is not None:
                progress.close()
        embeddings = in_input_order(positions, chunks, texts, unique, single)
        return embeddings.numpy() if convert_to_numpy else embeddings


__all__ = ["ExportedEncoder"]
