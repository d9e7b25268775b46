"""What `export_model` does that depends on the kind of model, the parts of its `ExportHooks` (put together by
`export.export_hooks`): how the plain layout is written, the `GraphSpec` (graphs.py: what is traced, what it is
checked on, how results are compared) and how the `int8-static` calibration items are checked and drawn.

- A bi-encoder (`SiameseBertModel`): the plain sentence-transformers layout (the encoder's config and weights at the
  root, the pipeline files beside them), a graph of its encoder to `last_hidden_state` (pooling, Dense layers and
  normalization run after the graph, as TEI and sentence-transformers apply them), texts to calibrate on.
- A cross-encoder (`CrossEncoder`): its `save_pretrained` layout (transformers, sentence-transformers' `CrossEncoder`
  and TEI's `/rerank` read it), a graph of the whole classifier to `logits` `(batch, num_labels)` under the names
  sentence-transformers' `backend="onnx" | "openvino"` looks for, (query, document) pairs to calibrate on.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..cross_encoder.tokenization import check_pair_texts, tokenize_pairs
from ..formats.sentence_transformers_save import write_layout
from ..modeling.batching import tokenize_sorted
from .encoder import ExportedEncoder
from .graphs import CALIBRATION_BATCH, GraphSpec, float_cpu_copy, graph_inputs
from .names import CROSS_ENCODER_OUTPUT, DEFAULT_CALIBRATION_SIZE, ENCODER_OUTPUT
from .reranker import ExportedCrossEncoder

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Texts of several lengths a bi-encoder's float32 graph is checked on (with up to 16 calibration texts, when given).
CHECK_TEXTS = (
    "A man is playing a guitar.",
    "hello",
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch of the old red barn.",
    "Exports are checked against the torch model before they are kept.",
    "",
    "Numbers 1, 2 and 3; symbols #, @ and %.",
)
# Pairs of several lengths a cross-encoder's float32 graph is checked on (with up to 16 calibration pairs).
CHECK_PAIRS = (
    ("what plays music?", "A man is playing a guitar."),
    ("hello", ""),
    ("who watches the fox?", "The quick brown fox jumps over the lazy dog while the farmer watches from the porch."),
    ("are exports checked?", "Exports are checked against the torch model before they are kept."),
    ("numbers", "Numbers 1, 2 and 3; symbols #, @ and %."),
    ("a", "a"),
)


@dataclass
class ExportHooks:
    """What `export_model` does that depends on the kind of model: write its plain layout into a folder, describe its
    graph (`graphs.GraphSpec`), check and draw its `int8-static` calibration items; `graph_folder`: where in the
    layout the graph files go (`""`: the root; a sparse inference-free model's: its document Transformer's folder);
    `check_options(format, quantize)`: raise for a format or quantization this kind is not exported in."""

    write_plain: Callable[[Path], None]
    graph_spec: Callable[[], GraphSpec]
    calibration: Callable[[Any, int], list[Any]]
    graph_folder: str = ""
    check_options: Callable[[str, str], None] | None = None


def check_calibration_size(size: object) -> None:
    """Raise unless `size` (how many calibration items are drawn) is a positive int."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(
            f"export: calibration_size={size!r} must be a positive int (default {DEFAULT_CALIBRATION_SIZE})."
        )


def draw_calibration(items: list[T], size: int) -> list[T]:
    """`size` of `items`: all when fewer, else a random sample drawn with seed 0 (the same export twice is the same)."""
    return random.Random(0).sample(items, size) if len(items) > size else items


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
    from ..formats.model_card import write_model_card

    try:
        write_model_card(model, folder)
    except Exception as error:  # noqa: BLE001 - the card is documentation; the export is complete without it
        logger.warning("export: no model card written (%s)", error)


def sample_inputs(tokenizer: Any, names: list[str]) -> dict[str, Any]:
    """The inputs `names` of a padded batch of two texts of different lengths: what a graph is traced on."""
    sample = tokenizer(
        ["a short text", "a somewhat longer text to give the padding a shape"], padding=True, return_tensors="pt"
    )
    return {name: sample[name] for name in names}


def cosine_agreement(what: str) -> Callable[[np.ndarray, np.ndarray], tuple[float, str]]:
    """A `GraphSpec.agreement`: the mean cosine similarity of the int8 graph's rows to the float32 `what`."""

    def agreement(expected: np.ndarray, got: np.ndarray) -> tuple[float, str]:
        norms = np.linalg.norm(expected, axis=1) * np.linalg.norm(got, axis=1) + 1e-12
        cosine = float(((expected * got).sum(1) / norms).mean())
        return cosine, f"mean cosine similarity to the float32 {what} {cosine:.4f}"

    return agreement


def export_tokenizer(model: Any, tokenizer: Any, what: str = "model") -> Any:
    """`tokenizer`, else the model's own (`model._resolve_tokenizer`); none known: refused, naming the model as
    `what`, since a folder for serving needs one."""
    try:
        return model._resolve_tokenizer(tokenizer)
    except Exception as error:  # noqa: BLE001 - named in the message below
        raise ValueError(
            f"export: no tokenizer known for this {what} ({error}); a folder for serving needs one: pass "
            "tokenizer=... or set model.tokenizer."
        ) from error


def encoder_graph_spec(model: Any, tokenizer: Any) -> GraphSpec:
    """The `GraphSpec` of a `SiameseBertModel`: its encoder, `last_hidden_state` out, embeddings compared."""
    model = float_cpu_copy(model)
    names = graph_inputs(model, tokenizer)

    def compare(folder: Path, backend: str, file_name: str, texts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        encoder = ExportedEncoder(folder, backend=backend, file_name=file_name)
        expected = model.encode(texts, tokenizer=tokenizer, convert_to_numpy=True)
        return expected, encoder.encode(texts)

    def batches(texts: list[str] | None) -> list[dict[str, np.ndarray]]:
        """The calibration texts as the model would see them (prompt, lowercasing, max length), padded batches."""
        if not texts:
            return []
        prompt = model.resolve_prompt()
        inputs = [model.prepare_text(text, prompt) for text in texts]
        padded, _, _ = tokenize_sorted(inputs, tokenizer, model.config.effective_max_seq_length, CALIBRATION_BATCH)
        return [{name: batch[name].numpy() for name in names} for batch in padded]

    return text_graph_spec(model, tokenizer, names, ENCODER_OUTPUT, compare, batches)


def text_graph_spec(
    model: Any,
    tokenizer: Any,
    names: list[str],
    output_name: str,
    compare: Callable[[Path, str, str, list[Any]], tuple[np.ndarray, np.ndarray]],
    batches: Callable[[list[Any] | None], list[dict[str, np.ndarray]]],
    what: str = "embeddings",
) -> GraphSpec:
    """The `GraphSpec` of a model over texts whose `encoder` is the graph: `output_name` out per token (batch and
    sequence axes dynamic), traced on `sample_inputs`, checked on `CHECK_TEXTS` by `compare`, calibrated on
    `batches`, its int8 results (`what`) judged by their mean cosine similarity to the float32 ones."""
    return GraphSpec(
        model=model.encoder,
        names=names,
        output_name=output_name,
        output_axes={0: "batch_size", 1: "sequence_length"},
        sample=sample_inputs(tokenizer, names),
        compare=compare,
        check_items=list(CHECK_TEXTS),
        calibration_batches=batches,
        agreement=cosine_agreement(what),
        what=what,
    )


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
        model=torch_model.model,
        names=names,
        output_name=CROSS_ENCODER_OUTPUT,
        output_axes={0: "batch_size"},
        sample={name: sample[name] for name in names},
        compare=compare,
        check_items=list(CHECK_PAIRS),
        calibration_batches=batches,
        agreement=_rank_agreement,
        what="logits",
    )


def _input(batch: Any, name: str) -> np.ndarray:
    """`batch[name]` as int64; `token_type_ids` all 0 where the tokenizer made none."""
    if name == "token_type_ids" and name not in batch:
        return np.zeros_like(np.asarray(batch["input_ids"]), dtype=np.int64)
    return np.asarray(batch[name], dtype=np.int64)


def _rank_agreement(expected: np.ndarray, got: np.ndarray) -> tuple[float, str]:
    """Max abs difference of the int8 logits, and how many pairs keep their place in the float32 ranking."""
    diff = float(np.abs(expected - got).max()) if expected.size else 0.0
    first, second = expected.reshape(len(expected), -1)[:, 0], got.reshape(len(got), -1)[:, 0]
    same = int((np.argsort(-first, kind="stable") == np.argsort(-second, kind="stable")).sum())
    return diff, f"logits at most {diff:.3f} from the float32 model's; {same} of {len(first)} pairs keep their rank"


__all__ = [
    "CHECK_PAIRS",
    "CHECK_TEXTS",
    "ExportHooks",
    "check_calibration",
    "check_calibration_pairs",
    "check_calibration_size",
    "cross_encoder_graph_spec",
    "draw_calibration",
    "encoder_graph_spec",
    "text_graph_spec",
    "write_plain_layout",
]
