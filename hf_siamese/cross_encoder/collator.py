"""CrossEncoderCollator: raw rows of (query, document) texts -> one padded batch of pairs for a cross-encoder.

Three row shapes, found from the column names (and, for a document column holding lists, its type):

- pairs: `query`, `document` (or sentence1/sentence2, premise/hypothesis, question/answer, ...) and `label` (or
  `score`, ...): labels `(batch,)`, float32 scores or int64 class ids;
- tuples: `query` (or `anchor`, `question`), `positive`, [`negative` or `negative_1`, `negative_2`, ...] and an
  optional label column (`scores`, `margins`, `label`, ...): no labels, or `(batch, n)` float32 (teacher scores or
  margins);
- lists: `query`, `documents` (or `docs`, `passages`, `candidates`): list[str], `scores` (or `labels`, `label`):
  list[float]: labels `(batch, max_docs)` float32, 0 where padded.

Every text goes through `tokenize_pairs` (the document is cut, not the query), then `tokenizer.pad`; rows of a train set
tokenized before training (`tokenize_pair_rows`) bring their token ids, and are only padded.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..data.columns import LABEL_COLUMNS, PAIR_LAYOUTS
from ..training.collator import SiamesePairCollator, _tokenizer_limit
from ..training.streaming import stream_row_names
from .losses import LISTS, PAIRS, TUPLES
from .tokenization import PAIR_PREFIX, PAIR_TOKENS, PAIR_TYPES, TokenizedPairs, tokenize_pairs

logger = logging.getLogger(__name__)

QUERY_COLUMNS = ("query", "anchor", "question")
LIST_COLUMNS = ("documents", "docs", "passages", "candidates")
LIST_LABEL_COLUMNS = ("scores", "labels", "label", "score")
TUPLE_LABEL_COLUMNS = ("scores", "margins", "margin", *LABEL_COLUMNS)
EXTRA_PAIR_LAYOUTS = (("query", "passage"), ("question", "answer"), ("question", "passage"))
ACCEPTED = (
    "pairs (query, document, label), e.g. (sentence1, sentence2, score) or (premise, hypothesis, label); tuples "
    "(query, positive, negative_1, ..., negative_k[, scores]); lists (query, documents: list[str], scores: "
    "list[float]); other names work with columns={'query': ..., 'document' | 'positive' + 'negatives' | "
    "'documents': ..., 'label': ...}"
)
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class PairLayout:
    """The shape of the rows (`pairs`, `tuples` or `lists`), the query column, the document column(s) (for tuples:
    positive, then negatives) and the label column, if any."""

    shape: str
    query: str
    documents: tuple[str, ...]
    label: str | None = None


@dataclass
class PairRows:
    """Rows read into flat pairs (row by row, in the tuple / list order) and their labels and shape info."""

    queries: list[str]
    documents: list[str]
    labels: torch.Tensor | None
    group_size: int | None = None
    mask: torch.Tensor | None = None


def detect_pair_layout(
    column_names: Sequence[str], first_row: Mapping[str, Any] | None = None, columns: Mapping[str, Any] | None = None
) -> PairLayout:
    """Find the shape, text columns and label column of cross-encoder rows (see the module docstring).

    Raises:
        ValueError: naming the columns seen and the layouts accepted, or a pair layout without a label column.
    """
    names = list(column_names)
    if columns is not None:
        return _explicit_layout(names, columns)
    query = next((c for c in QUERY_COLUMNS if c in names), None)
    if query is not None and "positive" in names:
        negatives = [c for c in names if c == "negative" or re.fullmatch(r"negative_\d+", c)]
        negatives.sort(key=lambda c: -1 if c == "negative" else int(c.removeprefix("negative_")))
        label = next((c for c in TUPLE_LABEL_COLUMNS if c in names), None)
        return PairLayout(TUPLES, query, ("positive", *negatives), label)
    listed = next((c for c in LIST_COLUMNS if c in names), None)
    if query is not None and listed is not None:
        return PairLayout(LISTS, query, (listed,), _list_label(names))
    for first, second in (*PAIR_LAYOUTS, *EXTRA_PAIR_LAYOUTS):
        if first in names and second in names and second != "positive":
            if first_row is not None and isinstance(first_row.get(second), list):
                return PairLayout(LISTS, first, (second,), _list_label(names))
            label = next((c for c in LABEL_COLUMNS if c in names), None)
            if label is None:
                raise ValueError(
                    f"rows with columns {names} are (text, text) pairs without a label column (one of "
                    f"{list(LABEL_COLUMNS)}); pairs need a label. Accepted: {ACCEPTED}."
                )
            return PairLayout(PAIRS, first, (second,), label)
    raise ValueError(f"cannot read cross-encoder rows with columns {names}. Accepted: {ACCEPTED}.")


def _list_label(names: list[str]) -> str:
    label = next((c for c in LIST_LABEL_COLUMNS if c in names), None)
    if label is None:
        raise ValueError(
            f"list rows with columns {names} have no scores column (one of {list(LIST_LABEL_COLUMNS)}): each list of "
            "documents needs a list of relevance scores, one per document."
        )
    return label


def _explicit_layout(names: list[str], columns: Mapping[str, Any]) -> PairLayout:
    keys = set(columns)
    allowed = {"query", "document", "positive", "negatives", "documents", "label"}
    kinds = [k for k in ("document", "positive", "documents") if k in keys]
    if "query" not in keys or len(kinds) != 1 or keys - allowed or ("negatives" in keys and kinds != ["positive"]):
        raise ValueError(
            f"columns={dict(columns)!r}: expected 'query' and one of 'document' (pairs), 'positive' with optional "
            "'negatives' (tuples) or 'documents' (lists), and 'label'."
        )
    kind = kinds[0]
    shape = {"document": PAIRS, "positive": TUPLES, "documents": LISTS}[kind]
    texts = (columns[kind], *columns.get("negatives", ()))
    label = columns.get("label")
    missing = [c for c in (columns["query"], *texts, label) if c is not None and c not in names]
    if missing:
        raise ValueError(f"columns={dict(columns)!r} names {missing}, but the rows have columns {names}.")
    if shape != TUPLES and label is None:
        raise ValueError(f"columns={dict(columns)!r}: {shape} rows need a 'label' column.")
    return PairLayout(shape, columns["query"], tuple(texts), label)


class CrossEncoderCollator:
    """Tokenize and pad rows of (query, document) texts for a `...ForSequenceClassification` cross-encoder.

    Returns a dict with `input_ids`, `attention_mask` (and `token_type_ids` when the tokenizer makes them) of shape
    `(num_pairs, seq_len)`: one pair per row for pairs, `1 + k` per row for tuples (positive first, then the
    negatives in column order), each row's documents for lists (rows one after the other); and

    - `labels`: pairs `(batch,)` (float32 scores, int64 class ids); tuples with a label column `(batch, n)` float32
      (n = the numbers per row, e.g. `1 + k` teacher scores or `k` margins); lists `(batch, max_docs)` float32;
    - `group_size` (tuples): `1 + k`, an int;
    - `documents_mask` (lists): `(batch, max_docs)` bool, True where the row has a document
      (lists may differ in length);
    - `text_lengths` (right padding): each pair's real tokens, a list of ints (the packed route's layout, forward.py).

    Args:
        tokenizer: the cross-encoder's tokenizer.
        max_length: tokens per pair (query and document together); defaults to the tokenizer's limit (512 without one).
        pad_to_multiple_of: round the padded length up to a multiple of this.
        columns: an explicit layout, `{"query": ..., "document": ..., "label": ...}` (pairs), `{"query": ...,
            "positive": ..., "negatives": [...]}` (tuples) or `{"query": ..., "documents": ..., "label": ...}` (lists).
        label2id: maps string class labels to ids (`CrossEncoderTrainer` fills it from the model config).
    """

    def __init__(
        self,
        tokenizer: Any,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        columns: Mapping[str, Any] | None = None,
        label2id: Mapping[str, int] | None = None,
    ) -> None:
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"CrossEncoderCollator: max_length={max_length!r} must be a positive int or None.")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.columns = dict(columns) if columns is not None else None
        self.label2id = dict(label2id) if label2id is not None else None
        self.documents_cut = 0  # pairs whose document lost tokens, over all batches
        self._warned = False

    def layout(self, column_names: Sequence[str], first_row: Mapping[str, Any] | None = None) -> PairLayout:
        """The layout of rows with these columns (see `detect_pair_layout`)."""
        return detect_pair_layout(column_names, first_row, self.columns)

    def read_rows(self, rows: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> PairRows:
        """Check the rows and flatten them into pairs, without tokenizing. `names` name the rows in errors (default
        `batch row i`). Raises a ValueError naming the row, column and value for a text that is not a string, a
        missing or non-numeric label, a row with no documents or scores that do not match its documents."""
        if len(rows) == 0:
            raise ValueError("CrossEncoderCollator got an empty batch; is the dataset empty?")
        layout = self.layout(list(rows[0].keys()), rows[0])
        names = list(names or stream_row_names(rows) or [f"batch row {i}" for i in range(len(rows))])
        queries: list[str] = []
        documents: list[str] = []
        if layout.shape in (PAIRS, TUPLES):
            for name, row in zip(names, rows, strict=True):
                query = _text(row.get(layout.query), layout.query, name)
                for column in layout.documents:
                    queries.append(query)
                    documents.append(_text(row.get(column), column, name))
            group = len(layout.documents) if layout.shape == TUPLES else None
            labels = None
            if layout.label is not None and layout.shape == PAIRS:
                labels = self._labels([row.get(layout.label) for row in rows], layout.label, names)
            elif layout.label is not None:
                labels = _number_lists([row.get(layout.label) for row in rows], layout.label, names, same_length=True)
            return PairRows(queries, documents, labels, group_size=group)
        column, label = layout.documents[0], layout.label
        counts = []
        for name, row in zip(names, rows, strict=True):
            query = _text(row.get(layout.query), layout.query, name)
            listed = row.get(column)
            if not isinstance(listed, (list, tuple)) or len(listed) == 0:
                raise ValueError(
                    f"{name}: column {column!r} holds {listed!r}; expected a non-empty list of document strings "
                    "(a query with no candidates cannot be ranked: drop the row)."
                )
            for position, text in enumerate(listed):
                queries.append(query)
                documents.append(_text(text, f"{column}[{position}]", name))
            counts.append(len(listed))
        scores = [row.get(label) for row in rows]
        for name, values, count in zip(names, scores, counts, strict=True):
            if not isinstance(values, (list, tuple)) or len(values) != count:
                raise ValueError(
                    f"{name}: column {label!r} holds {values!r}; expected a list of {count} numbers, one per document."
                )
        padded = _number_lists(scores, label, names, same_length=False)
        mask = torch.arange(padded.shape[1])[None, :] < torch.tensor(counts)[:, None]
        return PairRows(queries, documents, padded, mask=mask)

    def _labels(self, labels: list[Any], column: str, names: list[str]) -> torch.Tensor:
        # The bi-encoder collator's rules: numbers (finite, not bool) or strings through label2id.
        if any(value is None for value in labels):
            index = next(i for i, value in enumerate(labels) if value is None)
            raise ValueError(f"{names[index]}: label column {column!r} is missing (None); every pair needs a label.")
        return SiamesePairCollator.labels_to_tensor(self, labels, column, lambda i: names[i])  # type: ignore[arg-type]

    def token_limit(self) -> int:
        """Tokens per pair: `max_length`, else the tokenizer's limit (512 without one)."""
        return self.max_length or _tokenizer_limit(self.tokenizer)

    def pairs_per_row(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """How many pairs each row makes (1 for pairs, 1 + negatives for tuples, its documents for lists)."""
        layout = self.layout(list(rows[0].keys()), rows[0])
        if layout.shape == PAIRS:
            return [1] * len(rows)
        if layout.shape == TUPLES:
            return [len(layout.documents)] * len(rows)
        return [len(row[layout.documents[0]]) for row in rows]

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if rows and PAIR_TOKENS in rows[0]:  # tokenized before training (tokenization.tokenize_pair_rows)
            tokens = TokenizedPairs(
                [ids for row in rows for ids in row[PAIR_TOKENS]],
                [types for row in rows for types in row[PAIR_TYPES]] if PAIR_TYPES in rows[0] else None,
                0,
                0,
            )
            read = self.read_rows([{k: v for k, v in row.items() if not k.startswith(PAIR_PREFIX)} for row in rows])
        else:
            read = self.read_rows(rows)
            tokens = tokenize_pairs(self.tokenizer, read.queries, read.documents, self.token_limit(), not self._warned)
        if tokens.documents_cut:
            self._warned = True
            self.documents_cut += tokens.documents_cut
        batch: dict[str, Any] = dict(
            self.tokenizer.pad(
                tokens.features(), padding="longest", pad_to_multiple_of=self.pad_to_multiple_of, return_tensors="pt"
            )
        )
        if getattr(self.tokenizer, "padding_side", "right") == "right":  # pairs' real tokens, known on the host
            batch["text_lengths"] = [len(ids) for ids in tokens.input_ids]
        if read.labels is not None:
            batch["labels"] = read.labels
        if read.group_size is not None:
            batch["group_size"] = read.group_size
        if read.mask is not None:
            batch["documents_mask"] = read.mask
        return batch


def _text(value: Any, column: str, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: column {column!r} holds {value!r} ({type(value).__name__}); expected a string.")
    return value


def _number(value: Any, column: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: column {column!r} holds {value!r}; expected a finite number.")
    return float(value)


def _number_lists(values: list[Any], column: str, names: list[str], same_length: bool) -> torch.Tensor:
    """Numbers or lists of numbers per row -> float32 `(batch, longest)`, 0 where a row's list is shorter."""
    lists = [list(v) if isinstance(v, (list, tuple)) else [v] for v in values]
    lists = [[_number(x, column, name) for x in row] for name, row in zip(names, lists, strict=True)]
    width = max(len(row) for row in lists)
    if same_length:
        short = next((i for i, row in enumerate(lists) if len(row) != width), None)
        if short is not None:
            raise ValueError(
                f"{names[short]}: column {column!r} holds {len(lists[short])} numbers, other rows {width}; every tuple "
                "row needs as many (e.g. 1 + k teacher scores)."
            )
    return torch.tensor([row + [0.0] * (width - len(row)) for row in lists], dtype=torch.float32)
