"""Which columns of a dataset hold the texts and which the label: found by name (sentence1/sentence2,
premise/hypothesis, anchor/positive[/negative...], ...) or given explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Text column layouts recognised by name, tried in order. Ranking layouts may add hard-negative columns.
PAIR_LAYOUTS: tuple[tuple[str, str], ...] = (
    ("sentence1", "sentence2"),
    ("sentence_a", "sentence_b"),
    ("text1", "text2"),
    ("premise", "hypothesis"),
    ("query", "document"),
    ("anchor", "positive"),
)
LABEL_COLUMNS: tuple[str, ...] = ("score", "label", "labels", "similarity")
# One text per row (with a label: a distillation target), when no pair layout matches.
SINGLE_TEXT_COLUMNS: tuple[str, ...] = ("sentence", "text")
ACCEPTED_LAYOUTS = (
    "scored pairs (sentence1, sentence2, score: float), labelled pairs (sentence1, sentence2 or premise, "
    "hypothesis, with label: int or str), ranking rows (anchor, positive[, negative, negative_2, ...]), or one "
    "text (sentence or text, with a label where the loss needs a target); other names work with "
    "columns={'texts': [...], 'label': ...}"
)


@dataclass(frozen=True)
class ColumnLayout:
    """Which columns hold the texts (in order) and which holds the label, if any."""

    texts: tuple[str, ...]
    label: str | None = None

    @property
    def kind(self) -> str:
        """`ranking` (no label), or `pairs` (with a label)."""
        return "ranking" if self.label is None else "pairs"


def detect_layout(
    column_names: Sequence[str], columns: Mapping[str, Any] | Sequence[str] | None = None
) -> ColumnLayout:
    """Find the text and label columns of a dataset from its column names (or an explicit `columns` override).

    Raises:
        ValueError: naming the columns seen and the layouts accepted.
    """
    names = list(column_names)
    if columns is not None:
        if isinstance(columns, Mapping):
            unknown_keys = set(columns) - {"texts", "label"}
            if unknown_keys or "texts" not in columns:
                raise ValueError(
                    f"columns={dict(columns)!r}: expected a dict with 'texts' (a list of text columns) and "
                    "optionally 'label', or a plain list of text columns."
                )
            texts, label = tuple(columns["texts"]), columns.get("label")
        else:
            texts, label = tuple(columns), next((c for c in LABEL_COLUMNS if c in names), None)
        missing = [c for c in (*texts, label) if c is not None and c not in names]
        if missing:
            raise ValueError(f"columns={columns!r} names {missing}, but the dataset has columns {names}.")
        if not texts:
            raise ValueError(f"columns={columns!r}: need at least one text column, got {list(texts)}.")
        return ColumnLayout(texts=texts, label=label)

    for first, second in PAIR_LAYOUTS:
        if first in names and second in names:
            texts = [first, second]
            if first == "anchor":
                negatives = [c for c in names if c == "negative" or c.startswith("negative_")]
                texts += sorted(negatives, key=lambda c: (c != "negative", c))
            label = next((c for c in LABEL_COLUMNS if c in names), None)
            return ColumnLayout(texts=tuple(texts), label=label)
    single = next((c for c in SINGLE_TEXT_COLUMNS if c in names), None)
    label = next((c for c in LABEL_COLUMNS if c in names), None)
    if single is not None:  # one text, with a target (a teacher's embedding) or without (TSDAE)
        return ColumnLayout(texts=(single,), label=label)
    raise ValueError(f"Cannot read a dataset with columns {names}. Accepted layouts: {ACCEPTED_LAYOUTS}.")
