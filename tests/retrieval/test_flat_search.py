"""flat_search (faiss' brute-force kernel over the memory-mapped vectors) gives exact_search's hits: same rows, ties
by lower row, scores within float32 rounding; it declines where it would not be exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from hf_siamese.metrics import exact_search  # noqa: E402
from hf_siamese.retrieval.index_parts import flat_search, unit_length_rows  # noqa: E402


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_flat_search_equals_exact_search_on_a_memmap(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    corpus = unit(rng.normal(size=(3000, 24)))
    corpus[100] = corpus[7]  # a tie: the lower row first
    np.save(tmp_path / "v.npy", corpus)
    vectors = np.load(tmp_path / "v.npy", mmap_mode="r")
    queries = rng.normal(size=(50, 24)).astype(np.float32)
    queries[0] = corpus[7] * 3.0  # not unit length: cosine normalizes it
    assert unit_length_rows(vectors) and not unit_length_rows(queries)
    for similarity in ("cosine", "dot"):
        scores, rows = flat_search(vectors, queries, 10, similarity, unit_vectors=True)
        want_scores, want_rows = exact_search(queries, vectors, 10, similarity=similarity)
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)
        # the same rows, up to near-ties that BLAS rounding orders either way (identical rows 7 and 100 included)
        differ = rows != want_rows
        assert differ.sum() <= 4 and set(map(tuple, np.sort(rows, 1))) == set(map(tuple, np.sort(want_rows, 1)))
    # an exact tie (the scores are exactly 1.0): the lower row first, as exact_search orders it
    basis = np.eye(4, dtype=np.float32)[[0, 1, 2, 1, 3, 1]]
    assert list(flat_search(basis, basis[[1]], 3, "cosine", True)[1][0]) == [1, 3, 5]


def test_flat_search_declines_where_it_would_not_be_exact() -> None:
    vectors = np.ones((5, 4), dtype=np.float32)
    queries = np.ones((1, 4), dtype=np.float32)
    assert flat_search(vectors, queries, 2, "cosine", unit_vectors=False) is None  # rows not unit length
    assert flat_search(vectors, queries, 2, "euclidean", unit_vectors=True) is None
    assert flat_search(vectors.astype(np.float64), queries, 2, "dot", unit_vectors=True) is None
    assert not unit_length_rows(vectors)
