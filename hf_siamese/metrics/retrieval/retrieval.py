"""Retrieval (IR) metrics: nDCG@k, MRR@k, Recall@k, MAP@k and Precision@k, and the exact chunked top-k search.

This file is both an `evaluate` metric script and a plain Python module. `evaluate.load` copies it into its
module cache and imports it from there, so it must stay self-contained: stdlib, numpy, scipy, datasets and
evaluate only, and no relative imports.

The metric definitions are trec_eval's (as used by BEIR and MTEB through pytrec_eval), written here from those
definitions:

* nDCG@k = DCG@k / IDCG@k, DCG@k = sum over ranks i <= k of rel_i / log2(i + 1), the gain being the graded
  relevance itself (trec_eval `ndcg_cut`); IDCG@k is the DCG@k of the query's judged relevances sorted
  descending.
* MRR@k = 1 / rank of the first document with relevance > 0 within the top k, else 0.
* Recall@k = |relevant in the top k| / |relevant|.
* Precision@k = |relevant in the top k| / k (k, not the length of the ranking: trec_eval `P_k`).
* MAP@k = (sum of Precision@i over the ranks i <= k that hold a relevant document) / |relevant| (trec_eval
  `map_cut`).

Each is averaged over the queries that have at least one relevant document (relevance > 0).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import evaluate
import numpy as np
from scipy.spatial import distance

SIMILARITY_FUNCTIONS: tuple[str, ...] = ("cosine", "dot", "euclidean", "manhattan")
DEFAULT_K_VALUES: tuple[int, ...] = (1, 3, 5, 10, 100)
METRIC_NAMES: tuple[str, ...] = ("ndcg", "mrr", "recall", "map", "precision")

_DESCRIPTION = """\
Information-retrieval evaluation with the BEIR / MTEB definitions (those of trec_eval): nDCG@k (linear gain:
the graded relevance), MRR@k, Recall@k, MAP@k (divided by the number of relevant documents) and Precision@k
(divided by k), for each k in `k_values`, averaged over the queries that have at least one relevant document.
`num_queries` says how many queries were evaluated.

Each example is one query. Two input modes:

* rankings: `predictions` are rankings, one list of document ids (strings, best first) per query.
* embeddings: `query_embeddings` (N, D), one row per query, plus `corpus_embeddings` (M, D) and `corpus_ids`
  (M strings) given to `compute`. The corpus is ranked here by exact search (chunked, never an N x M matrix)
  with `similarity` ("cosine", "dot", "euclidean", "manhattan"; distances negated), in float64; equal scores
  are ranked by corpus position (lower first).

`references` are the relevance judgements of each query, as `{doc_id: relevance}` dicts, or as lists of relevant
document ids with an optional parallel `relevance` argument (lists of ints; default 1 for each). Relevance 0
means judged not relevant. A query with no document of relevance > 0 is not evaluated. Metrics are in [0, 1]
by default; pass `percent=True` to get them x100.
"""

_CITATION = """\
@inproceedings{thakur2021beir,
    title = "{BEIR}: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval Models",
    author = "Thakur, Nandan and Reimers, Nils and R{\\"u}ckl{\\'e}, Andreas and Srivastava, Abhishek and
              Gurevych, Iryna",
    booktitle = "Thirty-fifth Conference on Neural Information Processing Systems Datasets and Benchmarks Track",
    year = "2021",
    url = "https://openreview.net/forum?id=wCu6T5xFjeJ",
}
@article{jarvelin2002cumulated,
    title = "Cumulated Gain-Based Evaluation of {IR} Techniques",
    author = "J{\\"a}rvelin, Kalervo and Kek{\\"a}l{\\"a}inen, Jaana",
    journal = "ACM Transactions on Information Systems",
    volume = "20",
    number = "4",
    pages = "422--446",
    year = "2002",
    doi = "10.1145/582415.582418",
}
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of list of str, one per query): ranked document ids, best first. Leave out when passing
        `query_embeddings`.
    references (one per query): the query's judgements, either a dict {doc_id: relevance} or a list of the
        ids of its relevant documents. An empty dict / list: the query has no relevant document and is skipped.
    relevance (list of list of int, optional): with list references, the relevance of each listed document
        (parallel lists); default 1 each. Not allowed with dict references.
    query_embeddings (array-like, shape (N, D)): embeddings mode, one row per query.
    corpus_embeddings (array-like, shape (M, D), compute only): embeddings mode, the corpus.
    corpus_ids (list of str, length M, compute only): embeddings mode, the id of each corpus row.
    k_values (sequence of int): cut-offs, default (1, 3, 5, 10, 100); any k >= 1, larger than the corpus too.
    similarity (str, embeddings mode): "cosine" (default), "dot", "euclidean" or "manhattan".
    corpus_chunk_size (int, embeddings mode): corpus rows scored at a time, default 50000.
    query_chunk_size (int, embeddings mode): queries scored at a time, default 1024.
    percent (bool): multiply the metrics by 100. Default False (values in [0, 1]).
Returns:
    {"ndcg@k", "mrr@k", "recall@k", "map@k", "precision@k" for each k, "num_queries"}: floats, and the number
    of queries evaluated (an int).
Examples:
    >>> metric = evaluate.load(RETRIEVAL)
    >>> metric.compute(predictions=[["d2", "d1"], ["d3"]], references=[{"d1": 2}, ["d3"]], k_values=[1, 2])
    {'ndcg@1': 0.5, 'ndcg@2': 0.815..., 'mrr@1': 0.5, 'mrr@2': 0.75, ..., 'num_queries': 2}
    >>> metric.compute(query_embeddings=q, references=refs, corpus_embeddings=c, corpus_ids=ids)["ndcg@10"]
"""


# ---------------------------------------------------------------- argument checks


def _describe(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_similarity(similarity: Any) -> str:
    if not isinstance(similarity, str) or similarity not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"unknown similarity {similarity!r}; accepted: {list(SIMILARITY_FUNCTIONS)}")
    return similarity


def _check_k_values(k_values: Any) -> list[int]:
    if isinstance(k_values, (numbers.Integral, np.integer)) and not isinstance(k_values, bool):
        k_values = [k_values]
    try:
        values = list(k_values)
    except TypeError:
        raise ValueError(f"k_values must be a sequence of positive ints, got {k_values!r}") from None
    if not values:
        raise ValueError("k_values is empty; give at least one cut-off k >= 1")
    for k in values:
        if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)) or k <= 0:
            raise ValueError(f"k_values must hold positive ints (k >= 1), got {k!r} in {values!r}")
    return sorted({int(k) for k in values})


def _as_matrix(values: Any, name: str) -> np.ndarray:
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
        raise ValueError(
            f"{name} contains a non-finite value ({_describe(float(array[row, column]))}) at row "
            f"{row + row_offset}, column {column}; all values must be finite"
        )


def _relevance_value(value: Any, query_id: Any, doc_id: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"relevance of document {doc_id!r} for query {query_id!r} must be an int >= 0, got {value!r}")
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"relevance of document {doc_id!r} for query {query_id!r} must be an int >= 0, got {value!r}")
    if value < 0:
        raise ValueError(
            f"negative relevance {value!r} for document {doc_id!r} of query {query_id!r}; relevance must be >= 0 "
            "(0 = judged not relevant)"
        )
    return int(value)


def _check_qrels(qrels: Any) -> dict[Any, dict[Any, int]]:
    if not isinstance(qrels, Mapping):
        raise ValueError(f"qrels must be a mapping {{query_id: {{doc_id: relevance}}}}, got {type(qrels).__name__}")
    if not qrels:
        raise ValueError("qrels is empty; it needs the relevance judgements of at least one query")
    checked: dict[Any, dict[Any, int]] = {}
    for query_id, judged in qrels.items():
        if not isinstance(judged, Mapping):
            raise ValueError(
                f"qrels[{query_id!r}] must be a mapping {{doc_id: relevance}}, got {type(judged).__name__}"
            )
        checked[query_id] = {doc_id: _relevance_value(rel, query_id, doc_id) for doc_id, rel in judged.items()}
    return checked


def _check_ranking(ranking: Any, query_id: Any) -> list[Any]:
    if isinstance(ranking, (str, bytes)) or not isinstance(ranking, (Sequence, np.ndarray)):
        raise ValueError(
            f"the ranking of query {query_id!r} must be a sequence of document ids (best first), "
            f"got {type(ranking).__name__}"
        )
    docs = list(ranking)
    if len(set(docs)) != len(docs):
        seen: set[Any] = set()
        duplicate = next(d for d in docs if d in seen or seen.add(d))
        raise ValueError(
            f"the ranking of query {query_id!r} holds document {duplicate!r} more than once; each document may "
            "appear once per ranking"
        )
    return docs


# ---------------------------------------------------------------- exact search


def _working_dtype(*arrays: np.ndarray) -> type:
    return np.float64 if any(a.dtype == np.float64 for a in arrays) else np.float32


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
        return -distance.cdist(q, c, metric="cityblock").astype(q.dtype, copy=False)
    dots = q @ c.T
    if similarity == "dot":
        return dots
    if similarity == "cosine":
        # The raw dot products scaled elementwise (rather than normalized vectors multiplied): identical
        # documents get bit-identical scores, so the tie rule applies to them however the corpus is chunked.
        dots *= q_extra[:, None]
        dots *= c_extra[None, :]
        return dots
    squared = q_extra[:, None] + c_extra[None, :] - 2.0 * dots
    np.maximum(squared, 0.0, out=squared)
    return -np.sqrt(squared, out=squared)


def _rows(values: np.ndarray | None, rows: slice) -> np.ndarray | None:
    return None if values is None else values[rows]


def _merge_top_k(
    best_scores: np.ndarray, best_indices: np.ndarray, block: np.ndarray, start: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of (running best, new block) per row, as (scores, corpus indices), in no particular order.

    Column p of the candidates is the running best p for p < width, else corpus row start + p - width. Among
    equal scores at the cut, the lower corpus indices are kept.
    """
    width = best_scores.shape[1]
    candidates = np.concatenate([best_scores, block], axis=1) if width else block
    n_rows, n_candidates = candidates.shape

    def to_corpus(rows: np.ndarray | slice, positions: np.ndarray) -> np.ndarray:
        if not width:
            return positions.astype(np.int64) + start
        kept = np.take_along_axis(best_indices[rows], np.minimum(positions, width - 1), axis=-1)
        return np.where(positions < width, kept, positions.astype(np.int64) - width + start)

    if n_candidates <= k:
        positions = np.broadcast_to(np.arange(n_candidates), (n_rows, n_candidates))
        return candidates, to_corpus(slice(None), positions)
    import torch

    # torch's top-k runs on every core (numpy's argpartition on one: 2x the search time of a 20k index); NaN counts
    # as the largest value, so a NaN score is always kept and seen by the caller's check.
    shared = torch.from_numpy(candidates)
    top = torch.topk(shared, k, dim=1, largest=True, sorted=False)
    positions = top.indices.numpy()
    threshold = top.values.min(dim=1, keepdim=True).values  # the k-th best score
    kept_equal = (top.values == threshold).sum(dim=1).numpy()
    equal = (shared == threshold).sum(dim=1).numpy()
    threshold, above = threshold.numpy(), k - kept_equal
    # topk picks arbitrarily among scores equal to the k-th best; redo the rows where it had to choose, by corpus index.
    for row in np.flatnonzero(equal > kept_equal):
        tied = np.flatnonzero(candidates[row] == threshold[row, 0])
        order = np.argsort(to_corpus(row, tied), kind="stable")[: k - above[row]]
        positions[row] = np.concatenate([np.flatnonzero(candidates[row] > threshold[row, 0]), tied[order]])
    return np.take_along_axis(candidates, positions, axis=1), to_corpus(slice(None), positions)


def exact_search(
    query_embeddings: Any,
    corpus_embeddings: Any,
    top_k: int,
    similarity: str = "cosine",
    corpus_chunk_size: int = 50_000,
    query_chunk_size: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k corpus search for every query, chunk by chunk.

    Scores `query_chunk_size` queries against `corpus_chunk_size` corpus rows at a time and keeps a running top-k
    (np.argpartition), so no n_queries x n_corpus matrix is ever built; `corpus_embeddings` may be a large
    `np.memmap`, each chunk is read and converted on its own.

    Args:
        query_embeddings: array-like (numpy array, CPU torch tensor, anything with `__array__`) of shape (N, D).
        corpus_embeddings: array-like of shape (M, D), M >= 1.
        top_k: how many documents to return per query (at most M are).
        similarity: "cosine" (a zero vector scores 0), "dot", "euclidean" or "manhattan"; the distances are
            negated, so a larger score always means more similar.
        corpus_chunk_size: corpus rows scored at a time.
        query_chunk_size: queries scored at a time.

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
    similarity = _check_similarity(similarity)
    corpus_step = _check_positive_int(corpus_chunk_size, "corpus_chunk_size")
    query_step = _check_positive_int(query_chunk_size, "query_chunk_size")
    queries = _as_matrix(query_embeddings, "query_embeddings")
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings")
    n_corpus = corpus.shape[0]
    if n_corpus == 0:
        raise ValueError("corpus_embeddings is empty (0 documents); the corpus needs at least one document")
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"query_embeddings and corpus_embeddings must have the same dimension D, got D={queries.shape[1]} "
            f"for the queries and D={corpus.shape[1]} for the corpus"
        )
    dtype = _working_dtype(queries, corpus)
    queries = np.asarray(queries, dtype=dtype)
    _check_finite(queries, "query_embeddings")
    prepared_queries = _prepare_side(queries, similarity)
    n_queries, k = queries.shape[0], min(k, n_corpus)

    best_scores = np.empty((n_queries, 0), dtype=dtype)
    best_indices = np.empty((n_queries, 0), dtype=np.int64)
    for start in range(0, n_corpus, corpus_step):
        chunk = np.asarray(corpus[start : start + corpus_step], dtype=dtype)
        _check_finite(chunk, "corpus_embeddings", row_offset=start)
        prepared_chunk = _prepare_side(chunk, similarity)
        width = min(k, start + chunk.shape[0])
        next_scores = np.empty((n_queries, width), dtype=dtype)
        next_indices = np.empty((n_queries, width), dtype=np.int64)
        for q_start in range(0, n_queries, query_step):
            rows = slice(q_start, q_start + query_step)
            block = _score_block(
                (prepared_queries[0][rows], _rows(prepared_queries[1], rows)), prepared_chunk, similarity
            )
            next_scores[rows], next_indices[rows] = _merge_top_k(
                best_scores[rows], best_indices[rows], block, start, width
            )
            if np.isnan(next_scores[rows]).any():  # a NaN anywhere in the block is among the kept (see _merge_top_k)
                raise ValueError(
                    f"{similarity} similarity overflowed to nan (embedding values too large for {np.dtype(dtype)}); "
                    "rescale the embeddings or pass float64 arrays"
                )
        best_scores, best_indices = next_scores, next_indices

    order = np.lexsort((best_indices, -best_scores), axis=1)
    return np.take_along_axis(best_scores, order, axis=1), np.take_along_axis(best_indices, order, axis=1)


# ---------------------------------------------------------------- metrics


def _query_metrics(ranking: list[Any], judged: dict[Any, int], k_values: list[int]) -> dict[str, list[float]]:
    """The five metrics of one query (with at least one relevant document) at every k of `k_values`."""
    depth = min(k_values[-1], len(ranking))
    ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)
    n_relevant = len(ideal)
    # Running sums after rank i (index i, rank i + 1).
    dcg = hits = precision_sum = 0.0
    first_hit = 0
    running: list[tuple[float, float, float, int]] = []
    for i, doc in enumerate(ranking[:depth]):
        rel = judged.get(doc, 0)
        if rel > 0:
            hits += 1
            precision_sum += hits / (i + 1)
            first_hit = first_hit or i + 1
        dcg += rel / math.log2(i + 2)
        running.append((dcg, hits, precision_sum, first_hit))
    ideal_running, total = [], 0.0
    for i, rel in enumerate(ideal[: k_values[-1]]):
        total += rel / math.log2(i + 2)
        ideal_running.append(total)

    out: dict[str, list[float]] = {name: [] for name in METRIC_NAMES}
    for k in k_values:
        dcg_k, hits_k, precision_sum_k, first_k = running[min(k, depth) - 1] if depth else (0.0, 0.0, 0.0, 0)
        out["ndcg"].append(dcg_k / ideal_running[min(k, n_relevant) - 1])
        out["mrr"].append(1.0 / first_k if first_k else 0.0)
        out["recall"].append(hits_k / n_relevant)
        out["map"].append(precision_sum_k / n_relevant)
        out["precision"].append(hits_k / k)
    return out


def retrieval_metrics(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    percent: bool = False,
) -> dict[str, float]:
    """nDCG@k, MRR@k, Recall@k, MAP@k and Precision@k of rankings against graded relevance judgements.

    Args:
        rankings: query id -> document ids, best first (only the first max(k_values) are read). A query of `qrels`
            missing here counts with an empty ranking (every metric 0); queries not in `qrels` are ignored.
        qrels: query id -> {document id: relevance}, relevance an int >= 0 (0: judged not relevant). Documents
            not listed have relevance 0. Only queries with at least one relevance > 0 are evaluated.
        k_values: cut-offs (ints >= 1, any size: k beyond the ranking or the corpus is fine), default
            (1, 3, 5, 10, 100). Reported in increasing order, each once.
        percent: multiply the metrics by 100 (default False: values in [0, 1]).

    Returns:
        `ndcg@k` for each k, then `mrr@k`, `recall@k`, `map@k`, `precision@k` (floats, the means over the
        evaluated queries), then `num_queries` (int, how many queries were evaluated). The definitions are
        trec_eval's (see the module docstring): linear gain in nDCG, Precision@k divided by k, MAP@k divided by
        the number of relevant documents.

    Raises:
        ValueError: a k <= 0, empty qrels, a relevance that is negative or not an int, no query with a relevant
            document, a ranking that is not a sequence or that holds a document twice.
    """
    ks = _check_k_values(k_values)
    judgements = _check_qrels(qrels)
    if not isinstance(rankings, Mapping):
        raise ValueError(f"rankings must be a mapping {{query_id: [doc_id, ...]}}, got {type(rankings).__name__}")
    evaluated = [q for q, judged in judgements.items() if any(rel > 0 for rel in judged.values())]
    if not evaluated:
        raise ValueError(
            f"no query in qrels has a relevant document (relevance > 0) among its {len(judgements)} queries; "
            "there is nothing to evaluate"
        )
    sums = {name: [0.0] * len(ks) for name in METRIC_NAMES}
    for query_id in evaluated:
        ranking = _check_ranking(rankings.get(query_id, ()), query_id)
        for name, values in _query_metrics(ranking, judgements[query_id], ks).items():
            totals = sums[name]
            for i, value in enumerate(values):
                totals[i] += value
    factor = (100.0 if percent else 1.0) / len(evaluated)
    results: dict[str, float] = {}
    for name in METRIC_NAMES:
        for k, total in zip(ks, sums[name], strict=True):
            results[f"{name}@{k}"] = float(total * factor)
    results["num_queries"] = len(evaluated)
    return results


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
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    similarity: str = "cosine",
    corpus_chunk_size: int = 50_000,
    percent: bool = False,
    query_chunk_size: int = 1024,
) -> dict[str, float]:
    """Retrieval metrics of embeddings: rank the corpus for each query by exact search, then `retrieval_metrics`.

    Args:
        query_embeddings: array-like (N, D); row i is the query `query_ids[i]`.
        corpus_embeddings: array-like (M, D); row j is the document `corpus_ids[j]`.
        query_ids / corpus_ids: unique ids, one per row.
        qrels: query id -> {document id: relevance}; every id must be in `query_ids` / `corpus_ids`. Queries of
            `query_ids` without judgements are not evaluated (nor searched).
        k_values, percent: as in `retrieval_metrics`; the search keeps the top max(k_values).
        similarity, corpus_chunk_size, query_chunk_size: as in `exact_search` (equal scores: lower corpus row
            first).

    Returns:
        The dict of `retrieval_metrics`.

    Raises:
        ValueError: as `exact_search` and `retrieval_metrics`, plus ids whose count differs from the rows,
            duplicate ids, and qrels naming query or document ids that are not among the given ids.
    """
    ks = _check_k_values(k_values)
    judgements = _check_qrels(qrels)
    queries = _as_matrix(query_embeddings, "query_embeddings")
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings")
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
            queries[rows],
            corpus,
            top_k=ks[-1],
            similarity=similarity,
            corpus_chunk_size=corpus_chunk_size,
            query_chunk_size=query_chunk_size,
        )
        rankings = {q: [corpus_ids[j] for j in row] for q, row in zip(evaluated, indices.tolist(), strict=True)}
    return retrieval_metrics(rankings, judgements, ks, percent=percent)


# ---------------------------------------------------------------- the evaluate module


def _split_references(references: Any, relevance: Any) -> tuple[list[list[Any]], list[list[int]]]:
    """Per-query judgements as parallel (document ids, relevance) lists, from dicts or id lists (+ relevance)."""
    if isinstance(references, (str, bytes, Mapping)):
        raise ValueError(
            "references must be a list with one entry per query (a {doc_id: relevance} dict or a list of relevant "
            f"doc ids), got {type(references).__name__}"
        )
    references = list(references)
    if relevance is not None:
        relevance = list(relevance)
        if len(relevance) != len(references):
            raise ValueError(
                f"relevance and references must have the same length, got {len(relevance)} relevance lists and "
                f"{len(references)} references"
            )
    doc_lists: list[list[Any]] = []
    rel_lists: list[list[int]] = []
    for i, reference in enumerate(references):
        if isinstance(reference, Mapping):
            if relevance is not None:
                raise ValueError(
                    f"reference {i} is a {{doc_id: relevance}} dict: pass relevance only with lists of doc ids"
                )
            docs, rels = list(reference), list(reference.values())
        elif isinstance(reference, (str, bytes)) or not isinstance(reference, (Sequence, np.ndarray)):
            raise ValueError(
                f"reference {i} must be a {{doc_id: relevance}} dict or a list of doc ids, got {reference!r}"
            )
        else:
            docs = list(reference)
            rels = [1] * len(docs) if relevance is None else list(relevance[i])
            if len(rels) != len(docs):
                raise ValueError(
                    f"reference {i} lists {len(docs)} doc ids but its relevance list has {len(rels)} values"
                )
            if len(set(docs)) != len(docs):
                raise ValueError(f"reference {i} lists a doc id more than once: {docs!r}")
        for doc in docs:
            if not isinstance(doc, str):
                raise ValueError(f"reference {i}: document ids must be strings, got {doc!r}")
        doc_lists.append(docs)
        rel_lists.append([_relevance_value(rel, i, doc) for doc, rel in zip(docs, rels, strict=True)])
    return doc_lists, rel_lists


def _prepare_batch(predictions: Any, references: Any, relevance: Any, query_embeddings: Any) -> dict[str, Any]:
    """Turn one batch of user inputs into evaluate's three per-query columns."""
    if predictions is not None and query_embeddings is not None:
        raise ValueError("pass either predictions (rankings) or query_embeddings, not both")
    if references is None:
        raise ValueError("references are missing: pass the relevance judgements of each query")
    if predictions is None and query_embeddings is None:
        raise ValueError("pass predictions (one ranking of doc ids per query) or query_embeddings")
    doc_lists, rel_lists = _split_references(references, relevance)
    if query_embeddings is not None:
        rows: Any = np.asarray(_as_matrix(query_embeddings, "query_embeddings"), dtype=np.float64)
        kind = "query embeddings"
    else:
        if isinstance(predictions, (str, bytes, Mapping)):
            raise ValueError(
                "predictions must be a list with one ranking (list of doc ids) per query, "
                f"got {type(predictions).__name__}"
            )
        rows = [_check_ranking(ranking, i) for i, ranking in enumerate(predictions)]
        for i, ranking in enumerate(rows):
            if any(not isinstance(doc, str) for doc in ranking):
                raise ValueError(f"ranking {i}: document ids must be strings, got {ranking!r}")
        kind = "predictions"
    if len(rows) != len(doc_lists):
        raise ValueError(
            f"{kind} and references must have the same length (one per query), got {len(rows)} {kind} and "
            f"{len(doc_lists)} references"
        )
    return {"predictions": rows, "references": doc_lists, "relevance": rel_lists}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Retrieval(evaluate.Metric):
    """`evaluate` metric: nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k of rankings or of query/corpus embeddings."""

    def _info(self) -> evaluate.MetricInfo:
        judgements = {
            "references": datasets.Sequence(datasets.Value("string")),
            "relevance": datasets.Sequence(datasets.Value("int64")),
        }
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                # Rankings mode: each prediction is the ranked list of doc ids of one query.
                datasets.Features({"predictions": datasets.Sequence(datasets.Value("string")), **judgements}),
                # Embeddings mode: each prediction is the embedding of one query.
                datasets.Features({"predictions": datasets.Sequence(datasets.Value("float64")), **judgements}),
            ],
            reference_urls=[
                "https://github.com/usnistgov/trec_eval",
                "https://github.com/beir-cellar/beir",
            ],
        )

    def add_batch(
        self,
        *,
        predictions: Any = None,
        references: Any = None,
        relevance: Any = None,
        query_embeddings: Any = None,
        **kwargs: Any,
    ) -> None:
        """Add queries: `predictions` (rankings) or `query_embeddings` (N, D), plus `references` [+ `relevance`]."""
        batch = _prepare_batch(predictions, references, relevance, query_embeddings)
        if not batch["references"]:  # evaluate's feature inference would fail on it with an IndexError
            raise ValueError(
                "the retrieval metric got 0 queries (empty predictions / query_embeddings and references); pass at "
                "least one query with its relevant document ids"
            )
        super().add_batch(**batch, **kwargs)

    def add(
        self,
        *,
        prediction: Any = None,
        reference: Any = None,
        relevance: Any = None,
        query_embedding: Any = None,
        **kwargs: Any,
    ) -> None:
        """Add one query: a `prediction` (ranking) or a `query_embedding` (D,), its `reference` [+ `relevance`]."""
        self.add_batch(
            predictions=None if prediction is None else [prediction],
            references=None if reference is None else [reference],
            relevance=None if relevance is None else [relevance],
            query_embeddings=None if query_embedding is None else [query_embedding],
            **kwargs,
        )

    def compute(
        self,
        *,
        predictions: Any = None,
        references: Any = None,
        relevance: Any = None,
        query_embeddings: Any = None,
        **kwargs: Any,
    ) -> dict[str, float] | None:
        """Compute over every query added so far plus this call's (see the module description)."""
        if any(v is not None for v in (predictions, references, relevance, query_embeddings)):
            self.add_batch(
                predictions=predictions, references=references, relevance=relevance, query_embeddings=query_embeddings
            )
        return super().compute(predictions=None, references=None, **kwargs)

    def _compute(
        self,
        predictions: Any,
        references: Any,
        relevance: Any,
        k_values: Sequence[int] = DEFAULT_K_VALUES,
        percent: bool = False,
        corpus_embeddings: Any = None,
        corpus_ids: Any = None,
        similarity: str = "cosine",
        corpus_chunk_size: int = 50_000,
        query_chunk_size: int = 1024,
    ) -> dict[str, float]:
        # Queries are numbered by their position among all the examples added.
        qrels = {
            str(i): dict(zip(docs, rels, strict=True))
            for i, (docs, rels) in enumerate(zip(references, relevance, strict=True))
        }
        as_embeddings = any(len(row) and not isinstance(row[0], str) for row in predictions)
        if corpus_embeddings is None:
            if corpus_ids is not None:
                raise ValueError("corpus_ids was given without corpus_embeddings; pass both (embeddings mode)")
            if as_embeddings:
                raise ValueError(
                    "the queries were given as embeddings: pass corpus_embeddings and corpus_ids to compute"
                )
            return retrieval_metrics(
                {str(i): ranking for i, ranking in enumerate(predictions)}, qrels, k_values, percent
            )
        if not as_embeddings:
            raise ValueError(
                "corpus_embeddings was given, but the predictions are rankings; pass query_embeddings instead"
            )
        if corpus_ids is None:
            raise ValueError("corpus_ids is missing: pass the id of each corpus_embeddings row")
        try:
            queries = np.asarray(predictions, dtype=np.float64)
        except ValueError as err:
            raise ValueError(f"query embeddings must all have the same dimension D: {err}") from None
        return retrieval_metrics_from_embeddings(
            queries,
            corpus_embeddings,
            [str(i) for i in range(len(predictions))],
            corpus_ids,
            qrels,
            k_values=k_values,
            similarity=similarity,
            corpus_chunk_size=corpus_chunk_size,
            percent=percent,
            query_chunk_size=query_chunk_size,
        )
