"""The second stage of a search: a cross-encoder re-scores a first stage's hits.

Any object with `predict(pairs, batch_size=..., show_progress_bar=...) -> one score per (query, text) pair` reranks
(`hf_siamese.cross_encoder.CrossEncoder`, or sentence-transformers' `CrossEncoder`); retrieval/ does not import the
cross-encoder package, it only calls `predict`. `VectorIndex.search(..., rerank=, rerank_top=)` and
`evaluate_retrieval(..., rerank=, rerank_top=)` use it; `rerank_hits` works on any first stage's hits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .index_parts import check_top_k

logger = logging.getLogger(__name__)

RERANK_TOP = 100  # first-stage hits per query the reranker re-scores by default


def check_reranker(reranker: Any) -> None:
    """Raise `ValueError` unless `reranker` has a callable `predict`."""
    if not callable(getattr(reranker, "predict", None)):
        raise ValueError(
            f"rerank: expected a cross-encoder (an object with .predict(pairs) -> one score per pair), got "
            f"{type(reranker).__name__}; load one with hf_siamese.cross_encoder.CrossEncoder.from_pretrained(DIR)"
        )


def check_rerank(reranker: Any, rerank_top: Any, top_k: int, available: int | None = None) -> int:
    """How many first-stage hits per query to rerank: `rerank_top`, checked (a positive int, at least `top_k`; the
    reranker can only return hits the first stage found) and clamped, with one warning, to the `available`
    documents when it asks for more."""
    check_reranker(reranker)
    if isinstance(rerank_top, bool) or not isinstance(rerank_top, int | np.integer) or rerank_top < 1:
        raise ValueError(f"rerank_top={rerank_top!r}: expected a positive int (first-stage hits per query to rerank)")
    if rerank_top < top_k:
        raise ValueError(
            f"rerank_top={rerank_top} is below top_k={top_k}: the reranker returns only hits the first stage "
            f"found; pass rerank_top >= {top_k}"
        )
    if available is not None and rerank_top > available:
        logger.warning(
            "rerank_top=%d is more than the %d documents searched: reranking all %d", rerank_top, available, available
        )
        return int(available)
    return int(rerank_top)


def rerank_hits(
    reranker: Any,
    queries: str | Sequence[str],
    hits: Sequence[Sequence[dict[str, Any]]],
    top_k: int | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> list[list[dict[str, Any]]]:
    """Re-sort each query's first-stage `hits` by the reranker's score of (query, hit text).

    Args:
        reranker: an object with `predict(pairs, batch_size=, show_progress_bar=)` returning one score per pair.
        queries: one text per query (the raw query: no prompt).
        hits: per query, the first stage's hits, best first: dicts with `"text"` (and usually `"id"`, `"score"`,
            `"rank"`, as `VectorIndex.search` returns them).
        top_k: hits kept per query after reranking (default: all).
        batch_size, show_progress_bar: passed to `predict`.

    Returns:
        Per query, copies of its hits best first by the reranker: `"score"` and `"rank"` (1, 2, ...) are the
        reranker's; `"first_stage_score"` (when the hit had a score) and `"first_stage_rank"` (its rank, or its
        1-based position) are the first stage's. Equal reranker scores keep the first stage's order. All queries'
        pairs go to ONE `predict` call, each distinct pair once, so a cross-encoder sorts its batches across queries.
    """
    check_reranker(reranker)
    queries = [queries] if isinstance(queries, str) else list(queries)
    if isinstance(hits, str | bytes) or not isinstance(hits, Sequence) or len(hits) != len(queries):
        count = len(hits) if isinstance(hits, Sequence) else type(hits).__name__
        raise ValueError(f"hits: expected one list of hits per query ({len(queries)} queries), got {count}")
    keep = None if top_k is None else check_top_k(top_k)
    pairs = []
    for row, (query, found) in enumerate(zip(queries, hits, strict=True)):
        if not isinstance(query, str):
            raise ValueError(f"queries[{row}] is {type(query).__name__} ({query!r:.60}); expected a str")
        for position, hit in enumerate(found):
            if not isinstance(hit, dict) or not isinstance(hit.get("text"), str):
                raise ValueError(f"hits[{row}][{position}] has no text (a str): {hit!r:.80}")
            pairs.append((query, hit["text"]))
    unique = list(dict.fromkeys(pairs))
    scores = np.zeros(0, dtype=np.float32)
    if unique:
        scores = np.asarray(
            reranker.predict(unique, batch_size=batch_size, show_progress_bar=show_progress_bar), dtype=np.float32
        )
    if scores.shape != (len(unique),):
        raise ValueError(
            f"the reranker gave scores of shape {scores.shape} for {len(unique)} pairs; reranking needs one score "
            "per pair (a cross-encoder with one output)"
        )
    where = {pair: position for position, pair in enumerate(unique)}
    results = []
    for query, found in zip(queries, hits, strict=True):
        found_scores = scores[[where[(query, hit["text"])] for hit in found]] if found else scores[:0]
        order = np.argsort(-found_scores, kind="stable")[:keep]
        reranked = []
        for rank, position in enumerate(order.tolist(), start=1):
            hit = found[position]
            first = {"first_stage_rank": hit.get("rank", position + 1)}
            if "score" in hit:
                first["first_stage_score"] = hit["score"]
            reranked.append({**hit, "score": float(found_scores[position]), "rank": rank, **first})
        results.append(reranked)
    return results


__all__ = ["RERANK_TOP", "check_rerank", "check_reranker", "rerank_hits"]
