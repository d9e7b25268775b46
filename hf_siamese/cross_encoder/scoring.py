"""The scoring loop a cross-encoder shares with its exported graphs: pairs checked, each distinct pair tokenized once
(the document cut before the query), batches sorted by length so each pads only to its own longest pair, several
batches at once on the CPU, logits in float32, then the activation, results in input order.

What runs a batch is the caller's: the torch model (`CrossEncoder.predict`) or an ONNX Runtime / OpenVINO graph
(`ExportedCrossEncoder.predict`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..modeling.batching import run_batches
from .tokenization import check_pair_texts, tokenize_pairs

# activation name -> the torch class sentence-transformers records (and instantiates) for it
ACTIVATIONS = {"sigmoid": "torch.nn.modules.activation.Sigmoid", "identity": "torch.nn.modules.linear.Identity"}
# A padded batch (`tokenizer.pad` output: CPU tensors) -> `(batch, num_labels)` logits.
BatchLogits = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def activation_name(value: Any, num_labels: int) -> str:
    if value is None:
        return "sigmoid" if num_labels == 1 else "identity"
    if value in ACTIVATIONS:
        return value
    for name, path in ACTIVATIONS.items():
        if value == path or value == path.rsplit(".", 1)[-1]:
            return name
    raise ValueError(f"activation={value!r}: expected one of {sorted(ACTIVATIONS)} (or None: the model's default)")


def recorded_activation(folder: Path, config: Any) -> str | None:
    """The activation sentence-transformers recorded: `config_sentence_transformers.json` (v5.4+) or the
    `sentence_transformers` entry of config.json (v4-v5.3), or None."""
    path = folder / "config_sentence_transformers.json"
    if path.exists():
        try:
            recorded = json.loads(path.read_text(encoding="utf-8")).get("activation_fn")
        except (OSError, ValueError):
            recorded = None
        if recorded:
            return recorded
    old = getattr(config, "sentence_transformers", None)
    if isinstance(old, dict) and old.get("activation_fn"):
        return old["activation_fn"]
    return getattr(config, "sbert_ce_default_activation_function", None)


def checked_pairs(pairs: Any, batch_size: object, where: str = "predict()") -> tuple[list[tuple[str, str]], bool]:
    """`(the pairs as tuples, whether one pair was given alone)`; ValueError naming a bad pair or batch size."""
    single = isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(text, str) for text in pairs)
    pairs = [pairs] if single else pairs
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
    if isinstance(pairs, str) or not isinstance(pairs, Sequence):
        raise ValueError(f"pairs: expected a list of (query, document) pairs, got {type(pairs).__name__}")
    rows = []
    for row, pair in enumerate(pairs):
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"pairs[{row}] is {pair!r}: expected a (query, document) pair of strings")
        rows.append((pair[0], pair[1]))
    check_pair_texts([q for q, _ in rows], [d for _, d in rows], where)
    return rows, single


def chosen_activation(scorer: Any, activation: bool | str) -> str:
    """`predict`'s `activation` as a name: True, the scorer's own (`scorer.activation`); False, `"identity"` (raw
    logits); or a name (checked against `scorer.num_labels`)."""
    name = activation if isinstance(activation, str) else (scorer.activation if activation else "identity")
    return activation_name(name, scorer.num_labels)


def checked_max_length(scorer: Any, max_length: Any) -> int:
    """The tokens per pair to score with: `max_length`, or None for the scorer's own (`scorer.max_length`). Refused
    (ValueError naming it) unless a positive int within the scorer's position table (`position_limit`, where the
    scorer has one: `CrossEncoder`), which a longer pair would index past."""
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ValueError(f"max_length={max_length!r}: expected a positive number of tokens, or None for the model's")
    length = max_length or scorer.max_length
    positions = getattr(scorer, "position_limit", None)
    if positions is not None and length > positions[0] - positions[1]:
        table, offset = positions
        limit = table - offset
        reads = f"max_position_embeddings={table}" + (
            f" less {offset}: its position ids start at {offset}" if offset else ""
        )
        if max_length is None:
            raise ValueError(
                f"CrossEncoder.max_length={length}: this model reads at most {limit} tokens a pair ({reads}); set "
                f"max_length <= {limit}"
            )
        own = f", or None for the model's own ({scorer.max_length})" if scorer.max_length <= limit else ""
        raise ValueError(
            f"max_length={length}: this model reads at most {limit} tokens a pair ({reads}); give max_length <= "
            f"{limit}{own}"
        )
    return length


def score_pairs(
    scorer: Any,
    rows: list[tuple[str, str]],
    max_length: int | None,
    activation: str,
    batch_size: int,
    logits_of: BatchLogits,
    workers: int,
    show_progress_bar: bool = False,
) -> torch.Tensor:
    """`(len(rows), num_labels)` float32 scores of `rows` in input order: `logits_of` on length-sorted batches of the
    distinct pairs (`workers` batches at a time), then `activation` (`"sigmoid"` or `"identity"`). The tokenizer,
    `num_labels` and the default of `max_length` are the scorer's (a `CrossEncoder` or `ExportedCrossEncoder`)."""
    max_length = checked_max_length(scorer, max_length)
    tokenizer, num_labels = scorer.tokenizer, scorer.num_labels
    if not rows:
        return torch.empty((0, num_labels))
    unique = list(dict.fromkeys(rows))  # each distinct pair once
    tokens = tokenize_pairs(tokenizer, [q for q, _ in unique], [d for _, d in unique], max_length)
    lengths = np.fromiter((len(ids) for ids in tokens.input_ids), dtype=np.int64, count=len(unique))
    order = np.argsort(-lengths, kind="stable")
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

    def score(index: np.ndarray) -> torch.Tensor:
        batch = dict(tokenizer.pad(tokens.features(index.tolist()), return_tensors="pt"))
        if getattr(tokenizer, "padding_side", "right") == "right":
            batch["text_lengths"] = lengths[index].tolist()  # host ints: packing reads nothing back
        return logits_of(batch).float()

    progress = None
    if show_progress_bar:
        from tqdm.auto import tqdm

        progress = tqdm(total=len(batches), desc="Scoring pairs", unit="batch")
    try:  # run_batches restores torch's thread count itself
        items = [(torch.from_numpy(index), index) for index in batches]
        positions, chunks = run_batches(score, items, max(1, min(workers, len(batches))), progress)
    finally:
        if progress is not None:
            progress.close()
    logits = torch.empty((len(unique), num_labels), dtype=torch.float32)
    logits[torch.cat(positions)] = torch.cat([chunk.cpu() for chunk in chunks])
    scores = torch.sigmoid(logits) if activation == "sigmoid" else logits
    where = {pair: position for position, pair in enumerate(unique)}
    return scores[torch.tensor([where[pair] for pair in rows])]


def shaped(scores: torch.Tensor, num_labels: int, single: bool, convert_to_numpy: bool) -> np.ndarray | torch.Tensor:
    """`(n,)` for one output, `(n, num_labels)` for several; one row (or value) when one pair was given alone."""
    scores = scores[:, 0] if num_labels == 1 else scores
    scores = scores[0] if single else scores
    return scores.numpy() if convert_to_numpy else scores


def rank_documents(
    scorer: Any,
    query: str,
    documents: Sequence[str],
    top_k: int | None = None,
    return_documents: bool = False,
    **predict_kwargs: Any,
) -> list[dict[str, Any]]:
    """`scorer.rank` (`CrossEncoder.rank`, `ExportedCrossEncoder.rank`): `documents` ranked for `query` by
    `scorer.predict`, `[{"corpus_id": position in documents, "score": float[, "text"]}]`, best first, the first
    `top_k` (all by default). Needs a one-output (relevance) model."""
    if scorer.num_labels != 1:
        raise ValueError(f"rank() needs a one-output (relevance) model; this one has {scorer.num_labels} outputs")
    if not isinstance(query, str):
        raise ValueError(f"query is {type(query).__name__} {query!r}; expected str")
    if isinstance(documents, str) or not isinstance(documents, Sequence):
        raise ValueError(f"documents: expected a list of strings, got {type(documents).__name__}")
    if len(documents) == 0:
        raise ValueError(f"rank(): the query {query[:80]!r} has no candidate documents to rank")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k={top_k!r}: expected a positive int or None (all)")
    scores = scorer.predict([(query, document) for document in documents], **predict_kwargs)
    order = np.argsort(-scores, kind="stable")[: top_k or len(documents)]
    ranked = []
    for position in order.tolist():
        hit = {"corpus_id": position, "score": float(scores[position])}
        if return_documents:
            hit["text"] = documents[position]
        ranked.append(hit)
    return ranked
