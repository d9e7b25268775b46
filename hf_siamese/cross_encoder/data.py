"""Training rows for rerankers: (query, positive) pairs -> hard negatives mined by a bi-encoder
(`hf_siamese.mine_hard_negatives`: ranks, margin, sampling) plus random negatives from the corpus, as labelled pairs
(query, document, label 1/0) or tuples (query, positive, negative_1..k).

Why random negatives too: a reranker reorders a first stage's top 100, not only its top 10. Trained on the hardest
negatives alone it never sees the easy, clearly irrelevant documents that fill the bottom of those lists, and it
scores them unpredictably; a few random ones per query keep the deep part of the ranking sane.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

from .collator import QUERY_COLUMNS

logger = logging.getLogger(__name__)

OUTPUTS = ("pairs", "tuples")
# Column names read as (query, positive) when no others are given, before the bi-encoder layouts.

POSITIVE_COLUMNS = ("positive", "document", "passage", "answer")


def _query_positive_columns(dataset: Any, query_column: str | None, positive_column: str | None) -> tuple[list, list]:
    if isinstance(dataset, Sequence) and not hasattr(dataset, "column_names"):
        rows = list(dataset)
        bad = next((i for i, row in enumerate(rows) if isinstance(row, str) or len(row) != 2), None)
        if bad is not None:
            raise ValueError(f"reranker_training_rows: row {bad} is {rows[bad]!r:.80}; expected a (query, positive)")
        queries, positives = [row[0] for row in rows], [row[1] for row in rows]
    else:
        from ..data.columns import detect_layout

        names = list(dataset.column_names)
        query_column = query_column or next((c for c in QUERY_COLUMNS if c in names), None)
        positive_column = positive_column or next((c for c in POSITIVE_COLUMNS if c in names), None)
        if query_column is None or positive_column is None:
            texts = detect_layout(names).texts
            if len(texts) < 2:
                raise ValueError(f"reranker_training_rows: need query and positive columns, got columns {names}")
            query_column, positive_column = query_column or texts[0], positive_column or texts[1]
        for column in (query_column, positive_column):
            if column not in names:
                raise ValueError(f"reranker_training_rows: column {column!r} is not in the dataset (columns: {names})")
        queries, positives = list(dataset[query_column]), list(dataset[positive_column])
    for side, values in (("query", queries), ("positive", positives)):
        bad = next((i for i, value in enumerate(values) if not isinstance(value, str)), None)
        if bad is not None:
            raise ValueError(f"reranker_training_rows: row {bad}: the {side} is {values[bad]!r:.80}; expected a string")
    if not queries:
        raise ValueError("reranker_training_rows: the dataset has no rows")
    return queries, positives


def _check_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"reranker_training_rows: {name}={value!r} must be an int >= 0")
    return value


def reranker_training_rows(
    dataset: Any,
    bi_encoder: Any = None,
    corpus: Sequence[str] | Mapping[str, str] | None = None,
    *,
    num_negatives: int = 5,
    random_negatives: int = 2,
    output: str = "pairs",
    range_min: int = 0,
    range_max: int | None = None,
    margin: float | None = None,
    max_score: float | None = None,
    sampling: str = "top",
    query_column: str | None = None,
    positive_column: str | None = None,
    tokenizer: Any = None,
    batch_size: int = 32,
    seed: int = 42,
    shuffle: bool = True,
    show_progress_bar: bool = False,
    negatives_from: str | None = None,
) -> Any:
    """Reranker training rows from (query, positive) pairs: `num_negatives` hard negatives per pair mined by
    `bi_encoder`, plus `random_negatives` drawn uniformly (seeded) from the corpus.

    Args:
        dataset: (query, positive) rows: a `datasets.Dataset` (columns `query`/`positive`, `anchor`/`positive`, ...,
            or named with `query_column` / `positive_column`) or a list of (query, positive) tuples.
        bi_encoder: the `SiameseBertModel` that mines the hard negatives (not needed with `num_negatives=0`).
        corpus: the documents (a list of texts, or {id: text}); default: the distinct positives.
        num_negatives: hard negatives per row, by `hf_siamese.mine_hard_negatives` with `range_min`, `range_max`,
            `margin`, `max_score`, `sampling` (see there: the other positives of the same query and the query itself
            are never negatives; rows with too few candidates are dropped, with a warning), ranked as
            `negatives_from` says: "dense" (the bi-encoder), "lexical" (BM25) or "hybrid" (both, fused); default
            (None): hybrid where bm25s is installed, else dense (`retrieval.hybrid.default_first_stage`), since
            hybrid-mined negatives trained the better reranker over SciFact's held-out train claims.
        random_negatives: random corpus documents per row, never a positive of the query, the query itself, or one
            of the row's hard negatives.
        output: `"pairs"`: columns `query`, `document`, `label` (1.0 for the positive, 0.0 for each negative), one
            row per pair, for BCE; `"tuples"`: `query`, `positive`, `negative_1`, ..., for MNR / LambdaLoss.
        seed: the seed of the random negatives (and of mining's `sampling="random"`).
        shuffle: shuffle the output rows (seeded), so a batch mixes queries.

    Returns:
        A `datasets.Dataset`.

    Raises:
        ValueError: `num_negatives + random_negatives == 0`, a bad `output`, texts that are not strings, no
            `bi_encoder` for hard negatives, or no row left with enough negatives.
    """
    num_negatives, random_negatives = _check_request(num_negatives, random_negatives, output, bi_encoder)
    queries, positives = _query_positive_columns(dataset, query_column, positive_column)
    texts = _corpus_texts(corpus, positives)
    if num_negatives:
        if negatives_from is None:
            from ..retrieval.fusion.hybrid import default_first_stage

            negatives_from = default_first_stage()
        rows = _hard_negative_rows(
            queries, positives, bi_encoder, texts, num_negatives=num_negatives, range_min=range_min,
            range_max=range_max, margin=margin, max_score=max_score, sampling=sampling, tokenizer=tokenizer,
            batch_size=batch_size, seed=seed, show_progress_bar=show_progress_bar, negatives_from=negatives_from,
        )  # fmt: skip
    else:
        rows = [(query, positive, []) for query, positive in zip(queries, positives, strict=True)]
    if random_negatives:
        rows = _add_random_negatives(rows, queries, positives, texts, random_negatives, seed)
    return _training_dataset(rows, output, num_negatives + random_negatives, shuffle, seed)


def _check_request(num_negatives: Any, random_negatives: Any, output: str, bi_encoder: Any) -> tuple[int, int]:
    """The two negative counts, after refusing counts that are not ints >= 0 or are both 0, an unknown `output`,
    and hard negatives without a bi-encoder to mine them."""
    num_negatives = _check_count(num_negatives, "num_negatives")
    random_negatives = _check_count(random_negatives, "random_negatives")
    if num_negatives + random_negatives == 0:
        raise ValueError("reranker_training_rows: num_negatives=0 and random_negatives=0: no negatives to train on")
    if output not in OUTPUTS:
        raise ValueError(f"reranker_training_rows: output={output!r} is not one of {list(OUTPUTS)}")
    if num_negatives and bi_encoder is None:
        raise ValueError(
            f"reranker_training_rows: num_negatives={num_negatives} needs a bi_encoder to mine them (or pass "
            "num_negatives=0 for random negatives only)"
        )
    return num_negatives, random_negatives


def _corpus_texts(corpus: Sequence[str] | Mapping[str, str] | None, positives: list[str]) -> list[str]:
    """The distinct corpus texts (a mapping's values; no corpus: the positives); refuses one that is no string."""
    texts = list(corpus.values()) if isinstance(corpus, Mapping) else corpus
    texts = list(dict.fromkeys(positives if texts is None else texts))
    bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise ValueError(f"reranker_training_rows: corpus entry {bad} is {texts[bad]!r:.80}; expected a string")
    return texts


def _hard_negative_rows(
    queries: list[str], positives: list[str], bi_encoder: Any, texts: list[str], *, num_negatives: int,
    **mining: Any,
) -> list[tuple[str, str, list[str]]]:  # fmt: skip
    """`(query, positive, hard negatives)` rows: `num_negatives` per pair mined from `texts` by
    `hf_siamese.mine_hard_negatives` with the `mining` settings (rows with too few candidates dropped there)."""
    import datasets

    from ..retrieval.mining.negatives import mine_hard_negatives

    mined = mine_hard_negatives(
        datasets.Dataset.from_dict({"query": queries, "positive": positives}), bi_encoder, texts,
        num_negatives=num_negatives, anchor_column="query", positive_column="positive", **mining,
    )  # fmt: skip
    return [(row["query"], row["positive"], [row[f"negative_{n + 1}"] for n in range(num_negatives)]) for row in mined]


def _training_dataset(rows: list[tuple[str, str, list[str]]], output: str, width: int, shuffle: bool, seed: int) -> Any:
    """The rows (shuffled, seeded, if asked) as a `datasets.Dataset`: `tuples` (query, positive, negative_1 ..
    negative_{width}) or `pairs` (query, document, label: 1.0 for the positive, 0.0 for each negative)."""
    import datasets

    order = list(range(len(rows)))
    if shuffle:
        random.Random(seed).shuffle(order)
    if output == "tuples":
        columns: dict[str, list] = {"query": [rows[i][0] for i in order], "positive": [rows[i][1] for i in order]}
        for n in range(width):
            columns[f"negative_{n + 1}"] = [rows[i][2][n] for i in order]
        return datasets.Dataset.from_dict(columns)
    pairs = []
    for i in order:
        query, positive, negatives = rows[i]
        pairs.append((query, positive, 1.0))
        pairs.extend((query, negative, 0.0) for negative in negatives)
    return datasets.Dataset.from_dict(
        {"query": [p[0] for p in pairs], "document": [p[1] for p in pairs], "label": [p[2] for p in pairs]}
    )


def _add_random_negatives(
    rows: list[tuple[str, str, list[str]]],
    queries: list[str],
    positives: list[str],
    corpus: list[str],
    count: int,
    seed: int,
) -> list[tuple[str, str, list[str]]]:
    """Each row with `count` more negatives drawn uniformly from `corpus`, never a positive of its query, the query
    itself or a negative it has; rows the corpus cannot fill are dropped (with a warning)."""
    rng = random.Random(seed)
    positives_of: dict[str, set[str]] = {}
    for query, positive in zip(queries, positives, strict=True):
        positives_of.setdefault(query, set()).add(positive)
    kept, dropped = [], 0
    for query, positive, negatives in rows:
        excluded = positives_of.get(query, set()) | {query, positive, *negatives}
        chosen: list[str] = []
        # Rejection sampling: cheap on a large corpus; a bounded number of tries, then the eligible list itself.
        for _ in range(20 * count + len(excluded)):
            text = corpus[rng.randrange(len(corpus))]
            if text not in excluded and text not in chosen:
                chosen.append(text)
                if len(chosen) == count:
                    break
        if len(chosen) < count:
            eligible = [text for text in corpus if text not in excluded and text not in chosen]
            if len(eligible) < count - len(chosen):
                dropped += 1
                continue
            chosen.extend(rng.sample(eligible, count - len(chosen)))
        kept.append((query, positive, [*negatives, *chosen]))
    if not kept:
        raise ValueError(
            f"reranker_training_rows: the corpus ({len(corpus)} distinct texts) has fewer than {count} random "
            "negatives for every row (after leaving out each query's positives and hard negatives); give a larger "
            "corpus or lower random_negatives"
        )
    if dropped:
        logger.warning(
            "reranker_training_rows: %d of %d rows had fewer than %d random negatives left in the corpus; dropped.",
            dropped,
            len(rows),
            count,
        )
    return kept


__all__ = ["OUTPUTS", "reranker_training_rows"]
