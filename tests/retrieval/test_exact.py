"""Exact search (`hf_siamese.retrieval.exact`): the chunked search against the full ranking and hand similarities,
the tie rule, every similarity, faiss' kernel where it applies, the one top-k, errors, and metrics of embeddings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import hand_similarity

from hf_siamese.metrics import retrieval_metrics
from hf_siamese.retrieval.exact import (
    best_first,
    exact_search,
    retrieval_metrics_from_embeddings,
    top_k,
    unit_length_rows,
)

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
L3, L5 = math.log2(3), math.log2(5)  # the discounts of ranks 2 and 4


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
    for depth in (1, 4, 6, 23, 40):
        scores, indices = exact_search(
            queries,
            corpus,
            top_k=depth,
            similarity=name,
            corpus_chunk_size=corpus_chunk_size,
            query_chunk_size=query_chunk_size,
        )
        np.testing.assert_array_equal(indices, full_indices[:, :depth])
        np.testing.assert_array_equal(scores, full_scores[:, :depth])


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


# ---------------------------------------------------------------- faiss' kernel, and the one ranking rule


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_faiss_kernel_gives_the_chunked_search_hits_on_a_memmap(tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    corpus = unit(rng.normal(size=(3000, 24)))
    corpus[100] = corpus[7]  # a tie: the lower row first
    np.save(tmp_path / "v.npy", corpus)
    vectors = np.load(tmp_path / "v.npy", mmap_mode="r")
    queries = rng.normal(size=(50, 24)).astype(np.float32)
    queries[0] = corpus[7] * 3.0  # not unit length: cosine normalizes it
    assert unit_length_rows(vectors) and not unit_length_rows(queries)
    for similarity in ("cosine", "dot"):
        scores, rows = exact_search(queries, vectors, 10, similarity=similarity)  # faiss' kernel
        # float64 queries take the chunked path
        want_scores, want_rows = exact_search(queries.astype(np.float64), vectors, 10, similarity=similarity)
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)
        # the same rows, up to near-ties that BLAS rounding orders either way (identical rows 7 and 100 included)
        differ = rows != want_rows
        assert differ.sum() <= 4 and set(map(tuple, np.sort(rows, 1))) == set(map(tuple, np.sort(want_rows, 1)))
        assert 7 in rows[0] and list(rows[0]).index(7) < list(rows[0]).index(100)
    # an exact tie (the scores are exactly 1.0): the lower row first
    basis = np.eye(4, dtype=np.float32)[[0, 1, 2, 1, 3, 1]]
    assert exact_search(basis[[1]], basis, 3)[1][0].tolist() == [1, 3, 5]
    assert exact_search(basis[[1]], basis, 3, unit_corpus=True)[1][0].tolist() == [1, 3, 5]


def test_the_kernel_is_skipped_where_it_would_not_be_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    faiss = pytest.importorskip("faiss")
    calls = []
    knn = faiss.knn
    monkeypatch.setattr(faiss, "knn", lambda *a, **k: calls.append(1) or knn(*a, **k))
    ones = np.ones((5, 4), dtype=np.float32)
    exact_search(ones[:1], ones, 2, "cosine")  # rows not of unit length
    exact_search(ones[:1], ones, 2, "euclidean")
    exact_search(ones[:1], ones.astype(np.float64), 2, "dot")
    bad = ones.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"\(nan\) at row 3, column 1"):  # named by the chunked path
        exact_search(ones[:1], bad, 2, "dot")
    assert calls == []
    exact_search(ones[:1], ones, 2, "dot")
    exact_search(ones[:1], unit(ones), 2, "cosine")
    assert calls == [1, 1]


def test_top_k_and_best_first_break_ties_by_the_lower_row() -> None:
    scores, rows = top_k(np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.5, 0.5, 0.0, 0.0, 0.0]], np.float32), 3)
    assert rows.tolist() == [[1, 2, 4], [0, 1, 2]] and scores[0].tolist() == [3.0, 3.0, 3.0]
    assert top_k(np.array([[0.5, 0.5]]), 5)[1].tolist() == [[0, 1]]
    assert top_k(np.zeros((2, 0)), 3)[1].shape == (2, 0)
    # merged hits from several parts: -1 (no hit) last whatever its score, then score, then row
    merged = best_first(np.array([[9.0, 1.0, 2.0, 2.0]]), np.array([[-1, 5, 8, 3]]), 3)
    assert merged[1].tolist() == [[3, 8, 5]]
