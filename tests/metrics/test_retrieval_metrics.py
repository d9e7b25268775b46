"""Retrieval metrics: values against hand computations, exact chunked search against the full ranking, the tie rule,
every similarity, errors, and the `evaluate` module in process and loaded offline."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hf_siamese.metrics import (
    DEFAULT_K_VALUES,
    RETRIEVAL,
    Retrieval,
    exact_search,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
)

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
L3, L5 = math.log2(3), math.log2(5)  # the discounts of ranks 2 and 4

# Graded judgements (gains 1 and 2, a judged-irrelevant document), a query without any relevant document (q3,
# skipped), a judged query without a ranking (q4, all zeros) and a ranking without judgements (qx, ignored).
QRELS = {
    "q1": {"d1": 2, "d3": 1, "d5": 1, "d4": 0},
    "q2": {"d2": 1},
    "q3": {"d4": 0},
    "q4": {"d6": 1},
}
RANKINGS = {
    "q1": ["d3", "d2", "d1", "d4"],
    "q2": ["d1", "d2", "d3"],
    "q3": ["d4", "d1"],
    "qx": ["d1", "d2"],
}
K = (1, 3, 5)  # 5 is longer than every ranking


def hand_metrics() -> dict[str, float]:
    """The expected values of RANKINGS / QRELS at K, from the formulas, over the 3 evaluated queries q1, q2, q4.

    q1 gains by rank: 1, 0, 2, 0; ideal 2, 1, 1 (3 relevant); q2: relevant d2 at rank 2 (1 relevant); q4: nothing.
    """
    idcg_q1 = 2 + 1 / L3 + 1 / 2
    per_query = {
        "ndcg": ([1 / 2, 2 / idcg_q1, 2 / idcg_q1], [0, 1 / L3, 1 / L3]),
        "mrr": ([1, 1, 1], [0, 1 / 2, 1 / 2]),
        "recall": ([1 / 3, 2 / 3, 2 / 3], [0, 1, 1]),
        "map": ([1 / 3, (1 + 2 / 3) / 3, (1 + 2 / 3) / 3], [0, 1 / 2, 1 / 2]),
        "precision": ([1, 2 / 3, 2 / 5], [0, 1 / 3, 1 / 5]),
    }
    expected: dict[str, float] = {}
    for name, (q1, q2) in per_query.items():
        for k, a, b in zip(K, q1, q2, strict=True):
            expected[f"{name}@{k}"] = (a + b + 0.0) / 3
    expected["num_queries"] = 3
    return expected


# A dot-product case with ties: corpus rows a and c are equal, and a, c, d all score 1 for query A; b and d score 2
# for query B. Lower corpus row first: A ranks [a, c, d, b], B ranks [b, d, a, c].
TIE_CORPUS = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
TIE_CORPUS_IDS = ["a", "b", "c", "d"]
TIE_QUERIES = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 1.0]])
TIE_QUERY_IDS = ["A", "B", "C", "D"]
TIE_QRELS = {"A": {"d": 2, "b": 1}, "B": {"d": 1}, "C": {"a": 0}}  # C has no relevant document, D no judgements
TIE_K = (1, 2, 10)  # 10 is more than the corpus


def tie_hand_metrics() -> dict[str, float]:
    # A: gains by rank 0, 0, 2, 1 (2 relevant, ideal 2, 1). B: d at rank 2 (1 relevant).
    ndcg_a10 = (2 / math.log2(4) + 1 / L5) / (2 + 1 / L3)
    per_query = {
        "ndcg": ([0, 0, ndcg_a10], [0, 1 / L3, 1 / L3]),
        "mrr": ([0, 0, 1 / 3], [0, 1 / 2, 1 / 2]),
        "recall": ([0, 0, 1], [0, 1, 1]),
        "map": ([0, 0, (1 / 3 + 2 / 4) / 2], [0, 1 / 2, 1 / 2]),
        "precision": ([0, 0, 2 / 10], [0, 1 / 2, 1 / 10]),
    }
    expected: dict[str, float] = {}
    for name, (a, b) in per_query.items():
        for k, x, y in zip(TIE_K, a, b, strict=True):
            expected[f"{name}@{k}"] = (x + y) / 2
    expected["num_queries"] = 2
    return expected


def hand_similarity(a, b, name: str) -> float:
    """Plain-Python definitions, independent of the numpy implementation."""
    if name == "cosine":
        dot = sum(u * v for u, v in zip(a, b, strict=True))
        return dot / (math.sqrt(sum(u * u for u in a)) * math.sqrt(sum(v * v for v in b)))
    if name == "dot":
        return sum(u * v for u, v in zip(a, b, strict=True))
    if name == "euclidean":
        return -math.sqrt(sum((u - v) ** 2 for u, v in zip(a, b, strict=True)))
    return -sum(abs(u - v) for u, v in zip(a, b, strict=True))


def full_matrix(queries: np.ndarray, corpus: np.ndarray, name: str) -> np.ndarray:
    """The whole (queries x corpus) similarity matrix, float64, computed directly."""
    if name == "cosine":
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        c = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
        return q @ c.T
    if name == "dot":
        return queries @ corpus.T
    diff = queries[:, None, :] - corpus[None, :, :]
    if name == "euclidean":
        return -np.sqrt((diff * diff).sum(-1))
    return -np.abs(diff).sum(-1)


def sorted_ranking(row: np.ndarray) -> list[int]:
    """Corpus rows by score descending, equal scores by lower row first."""
    return sorted(range(len(row)), key=lambda j: (-row[j], j))


def random_set(seed: int, n_queries: int = 6, n_docs: int = 17, dim: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian queries and corpus, with three corpus rows repeated (exact ties)."""
    rng = np.random.default_rng(seed)
    corpus = rng.normal(size=(n_docs, dim))
    corpus[7], corpus[12], corpus[16] = corpus[2], corpus[2], corpus[9]
    return rng.normal(size=(n_queries, dim)), corpus


def integer_set(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Small-integer vectors (every dot product and distance exact), with duplicated rows and a zero query."""
    rng = np.random.default_rng(seed)
    corpus = rng.integers(-3, 4, size=(23, 4)).astype(np.float64)
    corpus[[5, 11, 22]] = corpus[0]
    corpus[[14, 15]] = corpus[3]
    corpus[(corpus == 0).all(1)] = 1.0  # no zero document (its cosine would tie with everything)
    queries = rng.integers(-3, 4, size=(7, 4)).astype(np.float64)
    queries[6] = 0.0  # cosine 0 with every document: one big tie
    return queries, corpus


# ---------------------------------------------------------------- retrieval_metrics


def test_retrieval_path_is_a_local_metric_folder() -> None:
    assert os.path.isabs(RETRIEVAL)
    assert os.path.isfile(os.path.join(RETRIEVAL, "retrieval.py"))
    assert os.path.isfile(os.path.join(RETRIEVAL, "README.md"))


def test_metrics_against_hand_computation() -> None:
    result = retrieval_metrics(RANKINGS, QRELS, k_values=K)
    expected = hand_metrics()
    assert list(result) == list(expected)  # ndcg@1, ndcg@3, ndcg@5, mrr@1, ..., precision@5, num_queries
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key
    assert result["num_queries"] == 3
    assert all(type(v) is float for k, v in result.items() if k != "num_queries")


def test_percent_and_k_values_order() -> None:
    plain = retrieval_metrics(RANKINGS, QRELS, k_values=K)
    percent = retrieval_metrics(RANKINGS, QRELS, k_values=[5, 1, 3, 3], percent=True)
    assert list(percent) == list(plain)  # sorted, each k once
    for key, value in plain.items():
        assert percent[key] == pytest.approx(value if key == "num_queries" else 100 * value, rel=1e-12)
    assert [k for k in retrieval_metrics(RANKINGS, QRELS) if k.startswith("ndcg")] == [
        f"ndcg@{k}" for k in DEFAULT_K_VALUES
    ]


def test_graded_gain_is_linear() -> None:
    # One query, relevances 2 and 1. Ranked [1-doc, 2-doc]: DCG = 1 + 2/log2(3), IDCG = 2 + 1/log2(3).
    qrels = {"q": {"hi": 2, "lo": 1}}
    worse = retrieval_metrics({"q": ["lo", "hi"]}, qrels, k_values=[1, 2])
    assert worse["ndcg@1"] == pytest.approx(1 / 2, abs=1e-15)
    assert worse["ndcg@2"] == pytest.approx((1 + 2 / L3) / (2 + 1 / L3), abs=1e-15)
    best = retrieval_metrics({"q": ["hi", "lo"]}, qrels, k_values=[1, 2])
    assert best["ndcg@1"] == best["ndcg@2"] == 1.0
    # Relevance does not weigh on MRR / recall / precision / MAP: both orders give the same.
    for name in ("mrr@2", "recall@2", "precision@2", "map@2"):
        assert worse[name] == best[name] == 1.0


def test_k_beyond_ranking_and_documents_outside_qrels() -> None:
    # Precision divides by k, not by the ranking length; unjudged documents count as not relevant.
    result = retrieval_metrics({"q": ["x", "r"]}, {"q": {"r": 1, "s": 3}}, k_values=[1, 100])
    assert result["precision@100"] == pytest.approx(1 / 100, abs=1e-15)
    assert result["recall@100"] == pytest.approx(1 / 2, abs=1e-15)
    assert result["map@100"] == pytest.approx((1 / 2) / 2, abs=1e-15)
    assert result["mrr@1"] == 0.0 and result["mrr@100"] == 0.5
    assert result["ndcg@100"] == pytest.approx((1 / L3) / (3 + 1 / L3), abs=1e-15)


def test_no_relevant_query_is_skipped_and_missing_ranking_counts_zero() -> None:
    with_skipped = retrieval_metrics({"a": ["d"]}, {"a": {"d": 1}, "b": {"d": 0}, "c": {}}, k_values=[1])
    assert with_skipped["num_queries"] == 1 and with_skipped["ndcg@1"] == 1.0
    with_missing = retrieval_metrics({"a": ["d"]}, {"a": {"d": 1}, "b": {"d": 1}}, k_values=[1])
    assert with_missing["num_queries"] == 2 and with_missing["ndcg@1"] == 0.5


@pytest.mark.parametrize(
    ("rankings", "qrels", "k_values", "message"),
    [
        (RANKINGS, QRELS, [1, 0], r"k_values must hold positive ints \(k >= 1\), got 0"),
        (RANKINGS, QRELS, [-3], "got -3"),
        (RANKINGS, QRELS, [], "k_values is empty"),
        (RANKINGS, QRELS, [2.5], "got 2.5"),
        (RANKINGS, {}, K, "qrels is empty"),
        (RANKINGS, {"q1": {"d1": -1}}, K, "negative relevance -1 for document 'd1' of query 'q1'"),
        (RANKINGS, {"q1": {"d1": 1.5}}, K, "must be an int >= 0, got 1.5"),
        (RANKINGS, {"q1": ["d1"]}, K, r"qrels\['q1'\] must be a mapping"),
        (RANKINGS, {"q3": {"d4": 0}}, K, "no query in qrels has a relevant document"),
        ({"q1": ["d3", "d1", "d3"]}, QRELS, K, "ranking of query 'q1' holds document 'd3' more than once"),
        ({"q2": "d2"}, QRELS, K, "ranking of query 'q2' must be a sequence of document ids"),
        ([["d1"]], QRELS, K, "rankings must be a mapping"),
    ],
)
def test_metric_errors(rankings, qrels, k_values, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        retrieval_metrics(rankings, qrels, k_values=k_values)


# ---------------------------------------------------------------- exact_search


def test_exact_search_tie_rule_by_hand() -> None:
    scores, indices = exact_search(TIE_QUERIES, TIE_CORPUS, top_k=10, similarity="dot")
    assert indices.shape == scores.shape == (4, 4)  # min(top_k, corpus size)
    assert indices.dtype == np.int64 and scores.dtype == np.float64
    assert indices[:2].tolist() == [[0, 2, 3, 1], [1, 3, 0, 2]]
    assert scores[:2].tolist() == [[1, 1, 1, 0], [2, 2, 0, 0]]
    # At the cut: of the three documents scoring 1, the two lowest rows are kept, whatever the chunking.
    for corpus_chunk_size in (1, 2, 3, 4):
        _, top2 = exact_search(TIE_QUERIES, TIE_CORPUS, 2, "dot", corpus_chunk_size=corpus_chunk_size)
        assert top2[0].tolist() == [0, 2]


def test_exact_search_all_equal_scores_keep_corpus_order() -> None:
    corpus = np.ones((9, 3))
    for chunk in (1, 2, 4, 9):
        scores, indices = exact_search(np.ones((2, 3)), corpus, top_k=5, corpus_chunk_size=chunk, query_chunk_size=1)
        assert indices.tolist() == [[0, 1, 2, 3, 4]] * 2
        np.testing.assert_allclose(scores, 1.0, rtol=1e-15)


@pytest.mark.parametrize("name", SIMILARITIES)
def test_exact_search_against_hand_similarities(name: str) -> None:
    queries = [[1.0, 2.0, 2.0], [0.5, -1.0, 3.0]]
    corpus = [[2.0, 0.0, 1.0], [1.0, -1.5, 2.0], [-1.0, 1.0, 1.0], [3.0, 0.0, -2.0], [0.2, 0.4, 0.9]]
    scores, indices = exact_search(queries, corpus, top_k=5, similarity=name)
    for q, (row_scores, row_indices) in enumerate(zip(scores, indices, strict=True)):
        expected = [hand_similarity(queries[q], doc, name) for doc in corpus]
        assert row_indices.tolist() == sorted_ranking(np.array(expected))
        np.testing.assert_allclose(row_scores, [expected[j] for j in row_indices], rtol=0, atol=1e-12)


def test_cosine_zero_vector_scores_zero() -> None:
    scores, indices = exact_search([[0.0, 0.0]], [[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]], top_k=3)
    assert scores.tolist() == [[0.0, 0.0, 0.0]] and indices.tolist() == [[0, 1, 2]]
    scores, indices = exact_search([[1.0, 0.0]], [[-1.0, 0.0], [0.0, 0.0], [2.0, 0.0]], top_k=3)
    assert indices.tolist() == [[2, 1, 0]] and scores[0].tolist() == pytest.approx([1.0, 0.0, -1.0])


@pytest.mark.parametrize("name", SIMILARITIES)
@pytest.mark.parametrize(
    ("corpus_chunk_size", "query_chunk_size"), [(1, 1), (2, 3), (3, 2), (5, 7), (7, 1), (22, 4), (23, 1024), (50, 2)]
)
def test_chunked_search_equals_full_ranking(name: str, corpus_chunk_size: int, query_chunk_size: int) -> None:
    queries, corpus = integer_set(seed=3)
    # The whole corpus in one piece, returned in full: nothing but the final sort decides the order.
    full_scores, full_indices = exact_search(queries, corpus, top_k=len(corpus), similarity=name)
    for row_scores, row_indices in zip(full_scores, full_indices, strict=True):
        assert row_indices.tolist() == sorted_ranking(row_scores[np.argsort(row_indices)])
    for top_k in (1, 4, 6, 23, 40):
        scores, indices = exact_search(
            queries,
            corpus,
            top_k=top_k,
            similarity=name,
            corpus_chunk_size=corpus_chunk_size,
            query_chunk_size=query_chunk_size,
        )
        np.testing.assert_array_equal(indices, full_indices[:, :top_k])
        np.testing.assert_array_equal(scores, full_scores[:, :top_k])


@pytest.mark.parametrize("name", SIMILARITIES)
def test_exact_search_matches_full_matrix_sort(name: str) -> None:
    queries, corpus = random_set(seed=0)
    scores, indices = exact_search(queries, corpus, top_k=8, similarity=name, corpus_chunk_size=5)
    matrix = full_matrix(queries, corpus, name)
    for q in range(len(queries)):
        expected = sorted_ranking(matrix[q])[:8]
        assert indices[q].tolist() == expected
        np.testing.assert_allclose(scores[q], matrix[q, expected], rtol=0, atol=1e-12)
    # The repeated rows tie exactly and keep their corpus order.
    for q in range(len(queries)):
        listed = indices[q].tolist()
        if 2 in listed and 7 in listed:
            assert listed.index(2) < listed.index(7)


def test_exact_search_dtypes_and_array_likes() -> None:
    queries, corpus = random_set(seed=1)

    class ArrayLike:
        def __init__(self, array: np.ndarray) -> None:
            self.array = array

        def __array__(self, dtype=None, copy=None) -> np.ndarray:
            return self.array if dtype is None else self.array.astype(dtype)

    s64, i64 = exact_search(queries, corpus, top_k=4)
    s32, i32 = exact_search(queries.astype(np.float32), corpus.astype(np.float32), top_k=4)
    assert s64.dtype == np.float64 and s32.dtype == np.float32
    np.testing.assert_array_equal(i32, i64)
    np.testing.assert_allclose(s32, s64, atol=1e-5)
    s_like, i_like = exact_search(ArrayLike(queries), ArrayLike(corpus), top_k=4)
    np.testing.assert_array_equal(i_like, i64)
    np.testing.assert_array_equal(s_like, s64)
    s_list, i_list = exact_search(queries.tolist(), corpus.tolist(), top_k=4)
    np.testing.assert_array_equal(i_list, i64)
    empty_scores, empty_indices = exact_search(np.zeros((0, 5)), corpus, top_k=3)
    assert empty_scores.shape == empty_indices.shape == (0, 3)


def test_exact_search_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    queries, corpus = random_set(seed=2)
    scores, indices = exact_search(torch.from_numpy(queries).float(), torch.from_numpy(corpus).float(), top_k=4)
    reference_scores, reference_indices = exact_search(queries.astype(np.float32), corpus.astype(np.float32), top_k=4)
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(indices, reference_indices)
    np.testing.assert_array_equal(scores, reference_scores)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "top_k must be a positive int, got 0"),
        ({"top_k": -2}, "top_k must be a positive int, got -2"),
        ({"top_k": 2.0}, r"top_k must be a positive int, got 2\.0"),
        ({"top_k": True}, "top_k must be a positive int, got True"),
        ({"similarity": "l2"}, r"unknown similarity 'l2'; accepted: \['cosine', 'dot', 'euclidean', 'manhattan'\]"),
        ({"corpus_chunk_size": 0}, "corpus_chunk_size must be a positive int, got 0"),
        ({"query_chunk_size": -1}, "query_chunk_size must be a positive int, got -1"),
        ({"corpus_embeddings": np.zeros((0, 2))}, r"corpus_embeddings is empty \(0 documents\)"),
        ({"corpus_embeddings": np.ones((3, 3))}, "got D=2 for the queries and D=3 for the corpus"),
        ({"query_embeddings": np.ones(2)}, r"query_embeddings must be a 2-D array .* got shape \(2,\)"),
        ({"corpus_embeddings": [["a", "b"]]}, "corpus_embeddings must be numeric"),
        ({"query_embeddings": [[1.0, np.nan]]}, r"query_embeddings .*\(nan\) at row 0, column 1"),
        ({"corpus_embeddings": [[1.0, 2.0]] * 3 + [[np.inf, 0.0]]}, r"corpus_embeddings .*\(inf\) at row 3, column 0"),
    ],
)
def test_exact_search_errors(kwargs: dict, message: str) -> None:
    arguments = {"query_embeddings": TIE_QUERIES, "corpus_embeddings": TIE_CORPUS, "top_k": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        exact_search(**arguments)


def test_non_finite_found_in_a_later_chunk() -> None:
    corpus = np.ones((10, 2))
    corpus[8, 1] = -np.inf
    with pytest.raises(ValueError, match=r"\(-inf\) at row 8, column 1"):
        exact_search(np.ones((1, 2)), corpus, top_k=3, corpus_chunk_size=3)


# ---------------------------------------------------------------- retrieval_metrics_from_embeddings


def test_from_embeddings_hand_computed_with_ties() -> None:
    result = retrieval_metrics_from_embeddings(
        TIE_QUERIES, TIE_CORPUS, TIE_QUERY_IDS, TIE_CORPUS_IDS, TIE_QRELS, k_values=TIE_K, similarity="dot"
    )
    expected = tie_hand_metrics()
    assert list(result) == list(expected)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("name", SIMILARITIES)
def test_from_embeddings_equals_metrics_of_full_matrix_ranking(name: str) -> None:
    queries, corpus = random_set(seed=4, n_queries=8, n_docs=17)
    query_ids = [f"q{i}" for i in range(len(queries))]
    corpus_ids = [f"doc-{j}" for j in range(len(corpus))]
    rng = np.random.default_rng(5)
    qrels = {
        query_ids[i]: {corpus_ids[j]: int(rng.integers(0, 3)) for j in rng.choice(len(corpus), 4, replace=False)}
        for i in range(7)  # q7 unjudged
    }
    qrels["q0"] = {corpus_ids[2]: 1, corpus_ids[7]: 2, corpus_ids[12]: 0}  # the three copies of one document
    k_values = (1, 2, 5, 10, 20)  # 20 > 17 documents
    matrix = full_matrix(queries, corpus, name)
    rankings = {query_ids[i]: [corpus_ids[j] for j in sorted_ranking(matrix[i])] for i in range(len(queries))}
    expected = retrieval_metrics(rankings, qrels, k_values=k_values)
    for chunk in (3, 50_000):
        got = retrieval_metrics_from_embeddings(
            queries, corpus, query_ids, corpus_ids, qrels, k_values, similarity=name, corpus_chunk_size=chunk
        )
        assert got == pytest.approx(expected, abs=1e-12)
    percent = retrieval_metrics_from_embeddings(queries, corpus, query_ids, corpus_ids, qrels, k_values, name, 3, True)
    assert percent == pytest.approx(retrieval_metrics(rankings, qrels, k_values=k_values, percent=True), abs=1e-10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"qrels": {"A": {"d": 1}, "Z": {"a": 1}, "Y": {"a": 1}}},
            "qrels name 2 query id.* not in query_ids, first 'Z'",
        ),
        ({"qrels": {"A": {"x": 1, "y": 0}, "B": {"x": 1}}}, "qrels name 2 document id.* not in corpus_ids, first 'x'"),
        ({"query_ids": ["A", "B", "C"]}, "query_ids and query_embeddings must have the same length, got 3 ids and 4"),
        ({"corpus_ids": ["a", "b", "c", "d", "e"]}, "corpus_ids and corpus_embeddings .* got 5 ids and 4 rows"),
        ({"corpus_ids": ["a", "b", "a", "d"]}, "corpus_ids holds 1 duplicate id.*, first 'a'"),
        ({"query_ids": ["A", "A", "C", "C"]}, "query_ids holds 2 duplicate id.*, first 'A'"),
        ({"k_values": [0, 1]}, "k_values must hold positive ints"),
        ({"qrels": {}}, "qrels is empty"),
        ({"qrels": {"C": {"a": 0}}}, "no query in qrels has a relevant document"),
        ({"corpus_embeddings": np.zeros((0, 2)), "corpus_ids": []}, "corpus_embeddings is empty"),
        ({"similarity": "cos"}, "unknown similarity 'cos'"),
        ({"corpus_embeddings": TIE_CORPUS[:, :1]}, "got D=2 for the queries and D=1 for the corpus"),
    ],
)
def test_from_embeddings_errors(kwargs: dict, message: str) -> None:
    arguments = {
        "query_embeddings": TIE_QUERIES,
        "corpus_embeddings": TIE_CORPUS,
        "query_ids": TIE_QUERY_IDS,
        "corpus_ids": TIE_CORPUS_IDS,
        "qrels": TIE_QRELS,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        retrieval_metrics_from_embeddings(**arguments)


# ---------------------------------------------------------------- the evaluate metric, in process

# RANKINGS / QRELS as evaluate examples, one per query (q4 has an empty ranking; qx has no judgements, so it is left
# out: as an example with no relevant document it would be skipped anyway).
EXAMPLE_QUERIES = ["q1", "q2", "q3", "q4"]
EXAMPLE_PREDICTIONS = [RANKINGS.get(q, []) for q in EXAMPLE_QUERIES]
EXAMPLE_DICTS = [QRELS[q] for q in EXAMPLE_QUERIES]


@pytest.fixture
def metric(tmp_path: Path) -> Retrieval:
    # The class itself, not evaluate.load (see tests/test_metric.py); evaluate.load is checked in a subprocess below.
    return Retrieval(cache_dir=str(tmp_path), keep_in_memory=True)


def test_metric_rankings_mode_with_dict_references(metric: Retrieval) -> None:
    expected = retrieval_metrics(RANKINGS, QRELS, k_values=K)
    assert metric.compute(predictions=EXAMPLE_PREDICTIONS, references=EXAMPLE_DICTS, k_values=K) == expected


def test_metric_rankings_mode_with_lists_and_relevance(metric: Retrieval) -> None:
    references = [list(judged) for judged in EXAMPLE_DICTS]
    relevance = [list(judged.values()) for judged in EXAMPLE_DICTS]
    got = metric.compute(predictions=EXAMPLE_PREDICTIONS, references=references, relevance=relevance, k_values=K)
    assert got == retrieval_metrics(RANKINGS, QRELS, k_values=K)


def test_metric_lists_without_relevance_are_binary(metric: Retrieval) -> None:
    references = [[d for d, rel in judged.items() if rel > 0] for judged in EXAMPLE_DICTS]
    binary = {q: dict.fromkeys(docs, 1) for q, docs in zip(EXAMPLE_QUERIES, references, strict=True)}
    got = metric.compute(predictions=EXAMPLE_PREDICTIONS, references=references, k_values=K)
    assert got == retrieval_metrics(RANKINGS, binary, k_values=K)


def test_metric_batches_and_single_examples(metric: Retrieval) -> None:
    metric.add_batch(predictions=EXAMPLE_PREDICTIONS[:2], references=EXAMPLE_DICTS[:2])
    metric.add(prediction=EXAMPLE_PREDICTIONS[2], reference=EXAMPLE_DICTS[2])
    metric.add_batch(predictions=EXAMPLE_PREDICTIONS[3:], references=[["d6"]], relevance=[[1]])
    assert metric.compute(k_values=K, percent=True) == retrieval_metrics(RANKINGS, QRELS, k_values=K, percent=True)


def test_metric_on_disk_cache(tmp_path: Path) -> None:
    on_disk = Retrieval(cache_dir=str(tmp_path))
    for start in range(0, 4, 3):
        on_disk.add_batch(
            predictions=EXAMPLE_PREDICTIONS[start : start + 3], references=EXAMPLE_DICTS[start : start + 3]
        )
    assert on_disk.compute(k_values=K) == retrieval_metrics(RANKINGS, QRELS, k_values=K)


def test_metric_embeddings_mode(metric: Retrieval) -> None:
    references = [TIE_QRELS.get(q, {}) for q in TIE_QUERY_IDS]
    got = metric.compute(
        query_embeddings=TIE_QUERIES,
        references=references,
        corpus_embeddings=TIE_CORPUS,
        corpus_ids=TIE_CORPUS_IDS,
        similarity="dot",
        k_values=TIE_K,
    )
    assert got == pytest.approx(tie_hand_metrics(), abs=1e-12)
    assert got == retrieval_metrics_from_embeddings(
        TIE_QUERIES, TIE_CORPUS, TIE_QUERY_IDS, TIE_CORPUS_IDS, TIE_QRELS, TIE_K, "dot"
    )
    metric.add_batch(query_embeddings=TIE_QUERIES[:3], references=references[:3])
    metric.add(query_embedding=TIE_QUERIES[3], reference=references[3])
    batched = metric.compute(corpus_embeddings=TIE_CORPUS, corpus_ids=TIE_CORPUS_IDS, k_values=TIE_K)
    assert batched == retrieval_metrics_from_embeddings(
        TIE_QUERIES, TIE_CORPUS, TIE_QUERY_IDS, TIE_CORPUS_IDS, TIE_QRELS, TIE_K
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": [["a"]], "query_embeddings": TIE_QUERIES[:1], "references": [["a"]]}, "not both"),
        ({"predictions": [["a"]]}, "references are missing"),
        ({"references": [["a"]]}, "pass predictions .* or query_embeddings"),
        ({"predictions": [["a"], ["b"]], "references": [["a"]]}, "got 2 predictions and 1 references"),
        ({"predictions": [["a"]], "references": [{"a": 2}], "relevance": [[2]]}, "pass relevance only with lists"),
        ({"predictions": [["a"]], "references": [["a", "b"]], "relevance": [[1]]}, "lists 2 doc ids but its relevance"),
        ({"predictions": [["a"]], "references": [["a"]], "relevance": [[-1]]}, "negative relevance -1"),
        ({"predictions": [["a"]], "references": [["a", "a"]]}, "lists a doc id more than once"),
        ({"predictions": [["a", "a"]], "references": [["a"]]}, "holds document 'a' more than once"),
        ({"predictions": [[1, 2]], "references": [["a"]]}, "ranking 0: document ids must be strings"),
        ({"predictions": [["a"]], "references": [["a"]], "k_values": [0]}, "k_values must hold positive ints"),
        ({"predictions": [["a"]], "references": [[]]}, "no query in qrels has a relevant document"),
        (
            {"predictions": [["a"]], "references": [["a"]], "corpus_embeddings": TIE_CORPUS},
            "corpus_embeddings was given, but the predictions are rankings",
        ),
        ({"query_embeddings": TIE_QUERIES[:1], "references": [["a"]]}, "pass corpus_embeddings and corpus_ids"),
        (
            {"query_embeddings": TIE_QUERIES[:1], "references": [["zz"]], "corpus_embeddings": TIE_CORPUS},
            "corpus_ids is missing",
        ),
        (
            {
                "query_embeddings": TIE_QUERIES[:1],
                "references": [["zz"]],
                "corpus_embeddings": TIE_CORPUS,
                "corpus_ids": TIE_CORPUS_IDS,
            },
            "qrels name 1 document id.* not in corpus_ids, first 'zz'",
        ),
        (
            {"query_embeddings": TIE_QUERIES[:2], "references": [["a"]]},
            "got 2 query embeddings and 1 references",
        ),
        ({"predictions": [], "references": []}, "the retrieval metric got 0 queries"),
    ],
)
def test_evaluate_metric_errors(metric: Retrieval, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        metric.compute(**kwargs)


# ---------------------------------------------------------------- evaluate.load, offline, in a clean process

OFFLINE_SCRIPT = textwrap.dedent(
    """
    import json, socket, sys

    def no_network(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    socket.socket.connect = no_network
    socket.create_connection = no_network
    socket.getaddrinfo = no_network

    import evaluate
    import numpy as np
    from hf_siamese.metrics import RETRIEVAL

    data = json.loads(sys.argv[1])
    by_folder = evaluate.load(RETRIEVAL)
    by_script = evaluate.load(RETRIEVAL + "/retrieval.py")
    out = {
        "module_file": sys.modules[type(by_folder).__module__].__file__,
        "rankings": by_folder.compute(
            predictions=data["predictions"], references=data["references"], k_values=data["k"]
        ),
        "percent": by_script.compute(
            predictions=data["predictions"], references=data["references"], k_values=data["k"], percent=True
        ),
        "embeddings": by_folder.compute(
            query_embeddings=np.array(data["queries"]),
            references=data["tie_references"],
            corpus_embeddings=np.array(data["corpus"]),
            corpus_ids=data["corpus_ids"],
            similarity="dot",
            k_values=data["tie_k"],
        ),
    }
    try:
        by_folder.compute(predictions=data["predictions"], references=data["references"], k_values=[0])
    except ValueError as err:
        out["error"] = str(err)
    print(json.dumps(out))
    """
)


def test_evaluate_load_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_CACHE"))}
    env.update(
        HF_HOME=str(tmp_path / "hf_home"),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    data = {
        "predictions": EXAMPLE_PREDICTIONS,
        "references": EXAMPLE_DICTS,
        "k": list(K),
        "queries": TIE_QUERIES.tolist(),
        "corpus": TIE_CORPUS.tolist(),
        "corpus_ids": TIE_CORPUS_IDS,
        "tie_references": [TIE_QRELS.get(q, {}) for q in TIE_QUERY_IDS],
        "tie_k": list(TIE_K),
    }
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT, json.dumps(data)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert Path(out["module_file"]).is_relative_to(tmp_path / "hf_home")
    assert out["rankings"] == pytest.approx(hand_metrics(), abs=1e-12)
    assert out["rankings"] == retrieval_metrics(RANKINGS, QRELS, k_values=K)
    assert out["percent"] == retrieval_metrics(RANKINGS, QRELS, k_values=K, percent=True)
    assert out["embeddings"] == pytest.approx(tie_hand_metrics(), abs=1e-12)
    assert "k_values must hold positive ints" in out["error"]
