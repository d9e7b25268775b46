"""Tokenizing (query, document) pairs for a cross-encoder: the document is cut, not the query.

A pair `[CLS] query [SEP] document [SEP]` longer than `max_length` loses tokens from the end of the document
(`truncation="only_second"`). Only where the query alone leaves fewer than `MIN_DOCUMENT_TOKENS` for the document are
both cut (`"longest_first"`: the longer one first), since a reranker that never sees the document cannot rank it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# Document tokens a pair keeps at least; a longer query is cut to make room for them.
MIN_DOCUMENT_TOKENS = 32
# Columns a pretokenized train set gains: per row, the token ids (and token types) of each of its pairs.
PAIR_PREFIX = "__hf_siamese_pair_"
PAIR_TOKENS = PAIR_PREFIX + "input_ids"
PAIR_TYPES = PAIR_PREFIX + "token_type_ids"


@dataclass
class TokenizedPairs:
    """Token ids of each pair (unpadded lists), and how many pairs lost document or query tokens."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    documents_cut: int
    queries_cut: int

    def features(self, rows: Sequence[int] | None = None) -> list[dict[str, list[int]]]:
        """One dict per pair (all, or `rows`), as `tokenizer.pad` takes them."""
        rows = range(len(self.input_ids)) if rows is None else rows
        if self.token_type_ids is None:
            return [{"input_ids": self.input_ids[r]} for r in rows]
        return [{"input_ids": self.input_ids[r], "token_type_ids": self.token_type_ids[r]} for r in rows]


def check_pair_texts(queries: Sequence[Any], documents: Sequence[Any], where: str) -> None:
    """ValueError naming the first query or document that is not a string."""
    for name, texts in (("query", queries), ("document", documents)):
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"{where}: the {name} of pair {row} is {type(text).__name__} {text!r}; expected str")


def tokenize_pairs(
    tokenizer: Any, queries: Sequence[str], documents: Sequence[str], max_length: int, warn: bool = True
) -> TokenizedPairs:
    """Tokenize `(queries[i], documents[i])` pairs to at most `max_length` tokens each, cutting the document first;
    one warning (if `warn`) with the number of pairs cut."""
    if len(queries) != len(documents):
        raise ValueError(f"{len(queries)} queries but {len(documents)} documents: expected one document per query")
    if max_length < MIN_DOCUMENT_TOKENS + 8:
        raise ValueError(f"max_length={max_length!r}: expected at least {MIN_DOCUMENT_TOKENS + 8} tokens for a pair")
    special = tokenizer.num_special_tokens_to_add(pair=True)
    query_lengths = [len(ids) for ids in tokenizer(list(queries), add_special_tokens=False)["input_ids"]]
    room = max_length - special - MIN_DOCUMENT_TOKENS
    long_rows = [row for row, n in enumerate(query_lengths) if n > room]
    short_rows = [row for row, n in enumerate(query_lengths) if n <= room]
    input_ids: list[list[int]] = [[] for _ in queries]
    type_ids: list[list[int]] | None = [[] for _ in queries]
    documents_cut = 0
    for rows, strategy in ((short_rows, "only_second"), (long_rows, "longest_first")):
        if not rows:
            continue
        encoded = tokenizer(
            [queries[r] for r in rows],
            [documents[r] for r in rows],
            truncation=strategy,
            max_length=max_length,
            padding=False,
        )
        cut = _cut_rows(encoded, tokenizer, [queries[r] for r in rows], [documents[r] for r in rows], max_length)
        documents_cut += cut
        has_types = "token_type_ids" in encoded
        for position, row in enumerate(rows):
            input_ids[row] = encoded["input_ids"][position]
            if has_types and type_ids is not None:
                type_ids[row] = encoded["token_type_ids"][position]
        if not has_types:
            type_ids = None
    if warn and (documents_cut or long_rows):
        logger.warning(
            "%d of %d pairs were longer than max_length=%d tokens: their documents were truncated%s.",
            documents_cut,
            len(queries),
            max_length,
            f" ({len(long_rows)} queries longer than {room} tokens were cut too)" if long_rows else "",
        )
    return TokenizedPairs(input_ids, type_ids, documents_cut, len(long_rows))


def _cut_rows(encoded: Any, tokenizer: Any, queries: list[str], documents: list[str], max_length: int) -> int:
    """How many pairs of `encoded` lost tokens to `max_length`."""
    encodings = getattr(encoded, "encodings", None)
    if encodings:
        return sum(1 for e in encodings if e.overflowing)
    full = tokenizer(
        [q for q, ids in zip(queries, encoded["input_ids"], strict=True) if len(ids) >= max_length],
        [d for d, ids in zip(documents, encoded["input_ids"], strict=True) if len(ids) >= max_length],
        truncation=False,
    )["input_ids"]
    return sum(1 for ids in full if len(ids) > max_length)


def tokenize_pair_rows(collator: Any, dataset: Any) -> Any:
    """`dataset` (a map-style `datasets.Dataset` of cross-encoder rows) with each row's pairs tokenized as `collator`
    (a `CrossEncoderCollator`) tokenizes them: columns `PAIR_TOKENS` (and `PAIR_TYPES`) hold a list of token-id lists,
    one per pair of the row in the collator's order. The other columns stay (labels are read from them). Batched, and
    cached under the dataset's cache files by a fingerprint of the rows, the tokenizer and `max_length`; one warning
    says how many pairs were cut."""
    from ..training.pretokenize import tokenizer_fingerprint

    max_length = collator.token_limit()
    cut = {"documents": 0, "pairs": 0}

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        names = list(batch)
        rows = [dict(zip(names, values, strict=True)) for values in zip(*batch.values(), strict=True)]
        read = collator.read_rows(rows, [f"train_dataset row {i}" for i in range(len(rows))])
        tokens = tokenize_pairs(collator.tokenizer, read.queries, read.documents, max_length, warn=False)
        cut["documents"] += tokens.documents_cut
        cut["pairs"] += len(read.queries)
        counts = collator.pairs_per_row(rows)
        out: dict[str, list] = {PAIR_TOKENS: [], PAIR_TYPES: []}
        start = 0
        for count in counts:
            out[PAIR_TOKENS].append(tokens.input_ids[start : start + count])
            if tokens.token_type_ids is not None:
                out[PAIR_TYPES].append(tokens.token_type_ids[start : start + count])
            start += count
        if tokens.token_type_ids is None:
            del out[PAIR_TYPES]
        return out

    settings = repr((max_length, collator.columns, dataset._fingerprint))
    fingerprint = hashlib.sha256((settings + tokenizer_fingerprint(collator.tokenizer)).encode()).hexdigest()[:32]
    tokenized = dataset.map(
        tokenize, batched=True, batch_size=1000, new_fingerprint=fingerprint, desc="Tokenizing the train pairs"
    )
    if cut["documents"]:
        logger.warning(
            "%d of %d train pairs were longer than max_length=%d tokens: their documents were truncated.",
            cut["documents"],
            cut["pairs"],
            max_length,
        )
    return tokenized
