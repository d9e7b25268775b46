"""Exact search: the one top-k of the package. Every exact search (the vector index, mining, `search --corpus`, the
reranker's candidates, the lexical stage, an approximate index's recall) ranks through this module, by one rule:
larger score first, equal scores by the lower corpus row.

* `exact_search(queries, corpus, top_k, similarity)`: chunked, never an N x M matrix; faiss' brute-force kernel
  (`faiss.knn`, 2.2x the queries/s on a 20k x 384 index) where it is exact (float32, dot, or cosine over unit rows).
* `top_k(scores, k)`: the k best columns of each row of a score matrix (the lexical stage's BM25 scores).
* `best_first(scores, rows, k)`: hits from several places (parts, chunks) merged by the same rule.
* `retrieval_metrics_from_embeddings`: exact search, then the `evaluate` script's `retrieval_metrics`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..modeling.configuration_siamese import SIMILARITY_FUNCTIONS

# Extra neighbours faiss fetches beyond top_k, so that ties at the cut are decided by row number.
TIE_MARGIN = 8


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def check_similarity(similarity: Any) -> str:
    if not isinstance(similarity, str) or similarity not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"unknown similarity {similarity!r}; accepted: {list(SIMILARITY_FUNCTIONS)}")
    return similarity


def as_matrix(values: Any, name: str) -> np.ndarray:
    """`values` as a 2-D numeric numpy array, without copying or converting what is already one."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"{name} must be a numeric array-like of shape (N, D) (a numpy array, a CPU tensor, nested lists): {err}"
        ) from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got an array of dtype {array.dtype}")
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"{name} must be a 2-D array of shape (N, D) with D >= 1, got shape {array.shape}")
    return array


def _check_finite(array: np.ndarray, name: str, row_offset: int = 0) -> None:
    finite = np.isfinite(array)
    if not finite.all():
        row, column = (int(i) for i in np.argwhere(~finite)[0])
        value = float(array[row, column])
        described = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        raise ValueError(
            f"{name} contains a non-finite value ({described}) at row {row + row_offset}, column {column}; all "
            "values must be finite"
        )


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def unit_length_rows(vectors: np.ndarray, chunk: int = 16_384) -> bool:
    """Whether every row of `vectors` (a memmap is read a chunk at a time) is finite and of unit length, within
    float32 rounding."""
    return all(
        np.allclose(
            np.linalg.norm(np.asarray(vectors[start : start + chunk], dtype=np.float32), axis=1), 1.0, atol=1e-4
        )
        for start in range(0, len(vectors), chunk)
    )


# ---------------------------------------------------------------- ranking rules


def best_first(scores: np.ndarray, rows: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's hits sorted by score descending, equal scores by the lower row, cut to `k`. Row -1 (no hit) sorts
    after every hit, whatever its score."""
    missing = rows < 0
    keyed = np.where(missing, -np.inf, scores) if missing.any() else scores
    order = np.lexsort((rows, -keyed), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


def merge_top_k(
    best_scores: np.ndarray, best_rows: np.ndarray, block: np.ndarray, start: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of (running best, new block of scores) per row, as (scores, corpus rows), in no particular order.

    Column p of the candidates is the running best p for p < width, else corpus row start + p - width. Among equal
    scores at the cut, the lower corpus rows are kept.
    """
    width = best_scores.shape[1]
    candidates = np.concatenate([best_scores, block], axis=1) if width else block
    n_rows, n_candidates = candidates.shape

    def to_corpus(rows: np.ndarray | slice, positions: np.ndarray) -> np.ndarray:
        if not width:
            return positions.astype(np.int64) + start
        kept = np.take_along_axis(best_rows[rows], np.minimum(positions, width - 1), axis=-1)
        return np.where(positions < width, kept, positions.astype(np.int64) - width + start)

    if n_candidates <= k:
        positions = np.broadcast_to(np.arange(n_candidates), (n_rows, n_candidates))
        return candidates, to_corpus(slice(None), positions)
    import torch

    # torch's top-k runs on every core (numpy's argpartition on one: 2x the search time of a 20k index); NaN counts
    # as the largest value, so a NaN score is always kept and seen by the caller's check.
    shared = torch.from_numpy(np.ascontiguousarray(candidates))
    top = torch.topk(shared, k, dim=1, largest=True, sorted=False)
    positions = top.indices.numpy()
    threshold = top.values.min(dim=1, keepdim=True).values  # the k-th best score
    kept_equal = (top.values == threshold).sum(dim=1).numpy()
    equal = (shared == threshold).sum(dim=1).numpy()
    threshold, above = threshold.numpy(), k - kept_equal
    # topk picks arbitrarily among scores equal to the k-th best; redo the rows where it had to choose, by corpus row.
    for row in np.flatnonzero(equal > kept_equal):
        tied = np.flatnonzero(candidates[row] == threshold[row, 0])
        order = np.argsort(to_corpus(row, tied), kind="stable")[: k - above[row]]
        positions[row] = np.concatenate([np.flatnonzero(candidates[row] > threshold[row, 0]), tied[order]])
    return np.take_along_axis(candidates, positions, axis=1), to_corpus(slice(None), positions)


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's `k` largest scores of a (n, m) matrix as (scores, columns), best first, ties by the lower column."""
    n_rows, k = scores.shape[0], min(k, scores.shape[1])
    if k == 0:
        return np.zeros((n_rows, 0), scores.dtype), np.zeros((n_rows, 0), np.int64)
    empty = np.empty((n_rows, 0), scores.dtype)
    return best_first(*merge_top_k(empty, np.empty((n_rows, 0), np.int64), scores, 0, k))


# ---------------------------------------------------------------- exact search


def _prepare_side(array: np.ndarray, similarity: str) -> tuple[np.ndarray, np.ndarray | None]:
    """What each side needs besides its vectors: inverse norms (cosine, 0 for a zero vector) or squared norms."""
    if similarity == "cosine":
        norms = np.sqrt(np.einsum("ij,ij->i", array, array))
        inverse = np.zeros_like(norms)
        np.divide(1.0, norms, out=inverse, where=norms > 0)
        return array, inverse
    if similarity == "euclidean":
        return array, np.einsum("ij,ij->i", array, array)
    return array, None


def _score_block(
    queries: tuple[np.ndarray, np.ndarray | None], corpus: tuple[np.ndarray, np.ndarray | None], similarity: str
) -> np.ndarray:
    """Similarity of every query row with every corpus row, shape (queries, corpus); larger = more similar."""
    q, q_extra = queries
    c, c_extra = corpus
    if similarity == "manhattan":
        from scipy.spatial import distance

        return -distance.cdist(q, c, metric="cityblock").astype(q.dtype, copy=False)
    dots = q @ c.T
    if similarity == "dot":
        return dots
    if similarity == "cosine":
        # The raw dot products scaled elementwise (rather than normalized vectors multiplied): identical documents get
        # bit-identical scores, so the tie rule applies to them however the corpus is chunked.
        dots *= q_extra[:, None]
        dots *= c_extra[None, :]
        return dots
    squared = q_extra[:, None] + c_extra[None, :] - 2.0 * dots
    np.maximum(squared, 0.0, out=squared)
    return -np.sqrt(squared, out=squared)


def _faiss_knn(
    queries: np.ndarray, corpus: np.ndarray, k: int, similarity: str, unit_corpus: bool | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact top-k by faiss' brute-force kernel (reading `corpus`, e.g. a read-only memmap, in place), or None where
    it does not apply: no faiss, not float32 on both sides, a corpus it cannot read in place, or a similarity other
    than dot or cosine over unit-length rows. `unit_corpus` None: checked here (one pass)."""
    if similarity not in ("dot", "cosine") or queries.dtype != np.float32 or corpus.dtype != np.float32:
        return None
    if not corpus.flags.c_contiguous:
        return None
    try:
        import faiss
    except ImportError:
        return None
    if similarity == "cosine":
        # unit_length_rows is False for non-finite rows too: the chunked path then names them
        if not (unit_length_rows(corpus) if unit_corpus is None else unit_corpus):
            return None
        queries = unit_rows(queries)
    elif unit_corpus is None and not all(
        np.isfinite(corpus[i : i + 16_384]).all() for i in range(0, len(corpus), 16_384)
    ):
        return None
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    depth = min(len(corpus), k + TIE_MARGIN)
    scores, rows = faiss.knn(queries, corpus, depth, metric=faiss.METRIC_INNER_PRODUCT)
    return best_first(scores, rows, k)


def exact_search(
    query_embeddings: Any,
    corpus_embeddings: Any,
    top_k: int,
    similarity: str = "cosine",
    corpus_chunk_size: int = 50_000,
    query_chunk_size: int = 1024,
    *,
    unit_corpus: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k corpus search for every query.

    Float32 dot or cosine over unit-length corpus rows runs faiss' brute-force kernel when faiss is installed. Any
    other case scores `query_chunk_size` queries against `corpus_chunk_size` corpus rows at a time and keeps a running
    top-k, so no n_queries x n_corpus matrix is ever built; `corpus_embeddings` may be a large `np.memmap`, each
    chunk is read and converted on its own.

    Args:
        query_embeddings: array-like (numpy array, CPU torch tensor, anything with `__array__`) of shape (N, D).
        corpus_embeddings: array-like of shape (M, D), M >= 1.
        top_k: how many documents to return per query (at most M are).
        similarity: "cosine" (a zero vector scores 0), "dot", "euclidean" or "manhattan"; the distances are
            negated, so a larger score always means more similar.
        corpus_chunk_size: corpus rows scored at a time.
        query_chunk_size: queries scored at a time.
        unit_corpus: what the caller already knows of the corpus (an index checks it once when opened): True, its
            rows are finite and of unit length; False, finite but not all of unit length. None (the default): checked
            here.

    Returns:
        `(scores, indices)`, each of shape (N, min(top_k, M)): row i holds the corpus row indices (int64) of the
        best documents for query i and their scores, sorted by score descending. Equal scores are ordered by
        corpus index, lower first; that rule also decides which of several equal scores make the top-k cut.
        Scores are float64 when either input is float64, else float32 (the dtype the search runs in).

    Raises:
        ValueError: top_k or a chunk size not a positive int, an unknown similarity, an empty corpus, inputs that
            are not 2-D numeric arrays, different dimensions D, or a NaN/inf value (first position named).
    """
    k = _check_positive_int(top_k, "top_k")
    similarity = check_similarity(similarity)
    corpus_step = _check_positive_int(corpus_chunk_size, "corpus_chunk_size")
    query_step = _check_positive_int(query_chunk_size, "query_chunk_size")
    queries = as_matrix(query_embeddings, "query_embeddings")
    corpus = as_matrix(corpus_embeddings, "corpus_embeddings")
    n_corpus = corpus.shape[0]
    if n_corpus == 0:
        raise ValueError("corpus_embeddings is empty (0 documents); the corpus needs at least one document")
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"query_embeddings and corpus_embeddings must have the same dimension D, got D={queries.shape[1]} "
            f"for the queries and D={corpus.shape[1]} for the corpus"
        )
    dtype = np.float64 if np.float64 in (queries.dtype, corpus.dtype) else np.float32
    queries = np.asarray(queries, dtype=dtype)
    _check_finite(queries, "query_embeddings")
    n_queries, k = queries.shape[0], min(k, n_corpus)
    if n_queries and (found := _faiss_knn(queries, corpus, k, similarity, unit_corpus)) is not None:
        return found

    prepared_queries = _prepare_side(queries, similarity)
    best_scores = np.empty((n_queries, 0), dtype=dtype)
    best_rows = np.empty((n_queries, 0), dtype=np.int64)
    for start in range(0, n_corpus, corpus_step):
        chunk = np.asarray(corpus[start : start + corpus_step], dtype=dtype)
        _check_finite(chunk, "corpus_embeddings", row_offset=start)
        prepared_chunk = _prepare_side(chunk, similarity)
        width = min(k, start + chunk.shape[0])
        next_scores = np.empty((n_queries, width), dtype=dtype)
        next_rows = np.empty((n_queries, width), dtype=np.int64)
        for q_start in range(0, n_queries, query_step):
            rows = slice(q_start, q_start + query_step)
            extra = None if prepared_queries[1] is None else prepared_queries[1][rows]
            block = _score_block((prepared_queries[0][rows], extra), prepared_chunk, similarity)
            next_scores[rows], next_rows[rows] = merge_top_k(best_scores[rows], best_rows[rows], block, start, width)
            if np.isnan(next_scores[rows]).any():  # a NaN anywhere in the block is among the kept (see merge_top_k)
                raise ValueError(
                    f"{similarity} similarity overflowed to nan (embedding values too large for {np.dtype(dtype)}); "
                    "rescale the embeddings or pass float64 arrays"
                )
        best_scores, best_rows = next_scores, next_rows
    return best_first(best_scores, best_rows)


# ---------------------------------------------------------------- metrics of embeddings


def _check_ids(ids: Any, name: str, expected: int, what: str) -> list[Any]:
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of ids, got a single string {ids!r}")
    try:
        ids = list(ids)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of ids, got {type(ids).__name__}") from None
    if len(ids) != expected:
        raise ValueError(f"{name} and {what} must have the same length, got {len(ids)} ids and {expected} rows")
    if len(set(ids)) != len(ids):
        seen: set[Any] = set()
        duplicates = [i for i in ids if i in seen or seen.add(i)]
        raise ValueError(
            f"{name} holds {len(duplicates)} duplicate id(s), first {duplicates[0]!r}; every id must be unique"
        )
    return ids


def retrieval_metrics_from_embeddings(
    query_embeddings: Any,
    corpus_embeddings: Any,
    query_ids: Sequence[str],
    corpus_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    k_values: Sequence[int] = (1, 3, 5, 10, 100),
    similarity: str = "cosine",
    corpus_chunk_size: int = 50_000,
    percent: bool = False,
    query_chunk_size: int = 1024,
) -> dict[str, float]:
    """Retrieval metrics of embeddings: rank the corpus for each query by `exact_search`, then `retrieval_metrics`.

    Args:
        query_embeddings: array-like (N, D); row i is the query `query_ids[i]`.
        corpus_embeddings: array-like (M, D); row j is the document `corpus_ids[j]`.
        query_ids: unique ids, one per row of `query_embeddings`.
        corpus_ids: unique ids, one per row of `corpus_embeddings`.
        qrels: query id -> {document id: relevance}; every id must be in `query_ids` / `corpus_ids`. Queries of
            `query_ids` without judgements are not evaluated (nor searched).
        k_values: as in `retrieval_metrics`; the search keeps the top max(k_values).
        percent: as in `retrieval_metrics`.
        similarity: as in `exact_search`.
        corpus_chunk_size: as in `exact_search`.
        query_chunk_size: as in `exact_search`.

    Raises:
        ValueError: as `exact_search` and `retrieval_metrics`, plus ids whose count differs from the rows,
            duplicate ids, and qrels naming query or document ids that are not among the given ids.
    """
    from ..metrics.retrieval.retrieval import check_k_values, check_qrels, retrieval_metrics

    ks = check_k_values(k_values)
    judgements = check_qrels(qrels)
    queries = as_matrix(query_embeddings, "query_embeddings")
    corpus = as_matrix(corpus_embeddings, "corpus_embeddings")
    if corpus.shape[0] == 0:
        raise ValueError("corpus_embeddings is empty (0 documents); the corpus needs at least one document")
    query_ids = _check_ids(query_ids, "query_ids", queries.shape[0], "query_embeddings")
    corpus_ids = _check_ids(corpus_ids, "corpus_ids", corpus.shape[0], "corpus_embeddings")
    query_row = {query_id: i for i, query_id in enumerate(query_ids)}
    unknown = [q for q in judgements if q not in query_row]
    if unknown:
        raise ValueError(
            f"qrels name {len(unknown)} query id(s) not in query_ids, first {unknown[0]!r}; every judged query "
            "needs an embedding"
        )
    known_docs = set(corpus_ids)
    unknown = list(dict.fromkeys(d for judged in judgements.values() for d in judged if d not in known_docs))
    if unknown:
        raise ValueError(
            f"qrels name {len(unknown)} document id(s) not in corpus_ids, first {unknown[0]!r}; every judged "
            "document must be in the corpus"
        )
    evaluated = [q for q, judged in judgements.items() if any(rel > 0 for rel in judged.values())]
    rankings: dict[Any, list[Any]] = {}
    if evaluated:
        rows = np.asarray([query_row[q] for q in evaluated], dtype=np.int64)
        _, indices = exact_search(
            queries[rows], corpus, ks[-1], similarity, corpus_chunk_size=corpus_chunk_size,
            query_chunk_size=query_chunk_size,
        )  # fmt: skip
        rankings = {q: [corpus_ids[j] for j in row] for q, row in zip(evaluated, indices.tolist(), strict=True)}
    return retrieval_metrics(rankings, judgements, ks, percent=percent)


__all__ = [
    "best_first",
    "exact_search",
    "merge_top_k",
    "retrieval_metrics_from_embeddings",
    "top_k",
    "unit_length_rows",
    "unit_rows",
]
