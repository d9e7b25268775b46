"""Teacher scores as data: a cross-encoder (or a bi-encoder) scores the pairs of training rows into a label column,
which distillation losses then read (`hf_siamese.losses.MarginMSELoss` for the bi-encoder, `MarginMSELoss` /
`MSELoss` of `cross_encoder.losses` for a smaller cross-encoder).

Rows are read as the bi-encoder trainer reads them (`hf_siamese.data.columns.detect_layout`, or `columns=`): a pair
`(sentence1, sentence2)` gets the teacher's score of the pair; a ranking row `(anchor, positive, negative_1..k)` gets
the `1 + k` scores of `(anchor, document)` for each document, positive first (`output="scores"`), or the `k` margins
`score(anchor, positive) - score(anchor, negative_j)` (`output="margins"`). Every distinct pair is scored once, in one
`predict` call (length-sorted batches, bf16 where the CPU has it); a cross-encoder's raw logits are used (no sigmoid),
a bi-encoder's similarity under its own `config.similarity`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..storage.score_store import stored_scores, teacher_id

OUTPUTS = ("scores", "margins")


def _columns(dataset: Any, columns: Mapping[str, Any] | Sequence[str] | None) -> tuple[str, ...]:
    from ..data.columns import detect_layout

    names = list(getattr(dataset, "column_names", None) or [])
    if not names:
        raise ValueError(f"teacher_scores: expected a datasets.Dataset with text columns, got {type(dataset).__name__}")
    return detect_layout(names, columns).texts


def _bi_encoder_scores(teacher: Any, pairs: list[tuple[str, str]], batch_size: int, show: bool) -> np.ndarray:
    import torch

    texts = list(dict.fromkeys(text for pair in pairs for text in pair))
    where = {text: row for row, text in enumerate(texts)}
    embeddings = torch.as_tensor(
        teacher.encode(texts, batch_size=batch_size, show_progress_bar=show, convert_to_numpy=True)
    )
    left = embeddings[[where[a] for a, _ in pairs]]
    right = embeddings[[where[b] for _, b in pairs]]
    scores = teacher.similarity(left[:, None, :], right[:, None, :])[:, 0, 0]
    return scores.float().numpy()


def teacher_scorer(teacher: Any, batch_size: int = 32, show_progress_bar: bool = False) -> Callable[[list], np.ndarray]:
    """`score(pairs) -> float32 scores`: a cross-encoder's raw logits (`predict`, no activation), or a bi-encoder's
    similarity of the two texts' embeddings."""
    from ..evaluation.pairs import score_pairs

    if hasattr(teacher, "predict"):
        raw = {"activation": False} if "activation" in inspect.signature(teacher.predict).parameters else {}
        return lambda pairs: score_pairs(teacher, pairs, batch_size, show_progress_bar, **raw)
    if hasattr(teacher, "encode") and hasattr(teacher, "similarity"):
        return lambda pairs: _bi_encoder_scores(teacher, pairs, batch_size, show_progress_bar)
    raise ValueError(
        f"teacher_scores: teacher is {type(teacher).__name__}; expected a cross-encoder (.predict) or a "
        "bi-encoder (SiameseBertModel)"
    )


def teacher_scores(
    dataset: Any,
    teacher: Any,
    *,
    output: str = "scores",
    column: str = "label",
    columns: Mapping[str, Any] | Sequence[str] | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    overwrite: bool = False,
    cache_dir: str | os.PathLike | None = None,
    chunk_size: int = 20_000,
) -> Any:
    """`dataset` with the teacher's scores (or margins) of each row in `column`.

    Args:
        dataset: a `datasets.Dataset` of pairs or ranking rows (see the module docstring).
        teacher: a cross-encoder (`CrossEncoder`, or anything with `predict(pairs)` giving one score per pair) or a
            bi-encoder (`SiameseBertModel`).
        output: `"scores"` or `"margins"` (ranking rows only: `k` margins per row).
        column: the column written; an existing one is refused unless `overwrite=True`.
        columns: the text columns, when their names are not a known layout.
        cache_dir: a folder the scores are streamed to, `chunk_size` distinct pairs a file
            (`hf_siamese.storage.score_store`): called again after a stop, only the missing chunks are scored.

    Returns:
        A new `datasets.Dataset`: pairs get one float per row; ranking rows a list of `1 + k` (or `k`) floats.
    """
    if output not in OUTPUTS:
        raise ValueError(f"teacher_scores: output={output!r}; accepted: {list(OUTPUTS)}")
    texts = _columns(dataset, columns)
    if column in dataset.column_names and not overwrite:
        raise ValueError(
            f"teacher_scores: the dataset already has a {column!r} column; pass overwrite=True to replace it, or "
            "column='teacher_score'"
        )
    if len(texts) < 2:
        raise ValueError(
            f"teacher_scores: rows need a query and at least one document to score; the text columns are {texts} "
            f"(of {dataset.column_names}): pass columns=['query', 'document', ...]"
        )
    if output == "margins" and len(texts) < 3:
        raise ValueError(f"teacher_scores: output='margins' needs (anchor, positive, negative...) rows; got {texts}")
    values = {name: list(dataset[name]) for name in texts}
    for name, cells in values.items():
        bad = next((row for row, text in enumerate(cells) if not isinstance(text, str)), None)
        if bad is not None:
            raise ValueError(f"teacher_scores: row {bad}: column {name!r} holds {cells[bad]!r:.60}; expected a string")
    anchors, documents = values[texts[0]], [values[name] for name in texts[1:]]
    pairs = [(anchor, docs[row]) for row, anchor in enumerate(anchors) for docs in documents]
    score = teacher_scorer(teacher, batch_size, show_progress_bar)
    unique = list(dict.fromkeys(pairs))
    if cache_dir is None:
        values = np.asarray(score(unique))
    else:
        values = stored_scores(
            score, unique, cache_dir, teacher_id=teacher_id(teacher), chunk_size=chunk_size, show_progress=print
        )
    if values.ndim != 1:
        raise ValueError(f"teacher_scores: the teacher gave scores of shape {values.shape}; expected one per pair")
    where = {pair: row for row, pair in enumerate(unique)}
    scores = values[[where[pair] for pair in pairs]]
    grid = scores.reshape(len(anchors), len(documents)).astype(np.float64)
    if len(texts) == 2:
        labels: list[Any] = grid[:, 0].tolist()
    elif output == "margins":
        labels = (grid[:, :1] - grid[:, 1:]).tolist()
    else:
        labels = grid.tolist()
    if column in dataset.column_names:
        dataset = dataset.remove_columns(column)
    return dataset.add_column(column, labels)


__all__ = ["teacher_scorer", "teacher_scores"]
