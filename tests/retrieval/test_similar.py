"""Similar pairs and clusters from the k-nearest-neighbour graph: equal to exact all-pairs where top_k suffices."""

from __future__ import annotations

import numpy as np
import pytest

from hf_siamese.retrieval import exact_search
from hf_siamese.retrieval.similar import cluster, kmeans, neighbour_pairs, similar_pairs


def planted(groups: int = 20, size: int = 4, singles: int = 60, dim: int = 24, seed: int = 0):
    """Unit vectors: `groups` tight groups of `size` near-duplicates, then `singles` unrelated vectors."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(groups, dim))
    members = np.repeat(centres, size, axis=0) + 0.05 * rng.normal(size=(groups * size, dim))
    vectors = np.concatenate([members, rng.normal(size=(singles, dim))]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors, [list(range(g * size, (g + 1) * size)) for g in range(groups)]


def all_pairs(vectors: np.ndarray, threshold: float) -> set[tuple[int, int]]:
    scores = vectors @ vectors.T
    a, b = np.nonzero(np.triu(scores >= threshold, k=1))
    return set(zip(a.tolist(), b.tolist(), strict=True))


def test_pairs_equal_exact_all_pairs() -> None:
    vectors, _ = planted()
    pairs = similar_pairs(vectors, threshold=0.9, top_k=5)
    assert {(a, b) for a, b, _ in pairs} == all_pairs(vectors, 0.9) and len(pairs) == 20 * 6
    scores = [s for _, _, s in pairs]
    assert scores == sorted(scores, reverse=True) and all(a < b for a, b, _ in pairs)
    a, b, s = pairs[0]
    assert s == pytest.approx(float(vectors[a] @ vectors[b]), abs=1e-5)


def test_small_top_k_keeps_the_best_neighbours_only() -> None:
    vectors, _ = planted(groups=5, size=8, singles=0)
    found = {(a, b) for a, b, _ in similar_pairs(vectors, threshold=0.9, top_k=2)}
    assert found < all_pairs(vectors, 0.9)  # 7 neighbours each above the threshold, 2 asked
    assert len(found) >= 5 * 8  # each vector brings at least its best pair


def test_ids_chunks_and_a_custom_search() -> None:
    vectors, _ = planted()
    ids = [f"doc-{i}" for i in range(len(vectors))]
    calls = []

    def search(queries: np.ndarray, k: int):
        calls.append(len(queries))
        return exact_search(queries, vectors, top_k=k)

    pairs = similar_pairs(vectors, threshold=0.9, top_k=5, ids=ids, search=search, chunk_size=16)
    assert calls and max(calls) == 16
    assert {(a, b) for a, b, _ in pairs} == {(ids[a], ids[b]) for a, b in all_pairs(vectors, 0.9)}


def test_negative_ids_from_an_index_are_skipped() -> None:
    vectors, _ = planted(groups=2, size=2, singles=2)

    def short(queries: np.ndarray, k: int):
        scores, found = exact_search(queries, vectors, top_k=k)
        found[:, -1] = -1  # faiss' "no neighbour"
        return scores, found

    first, second, _ = neighbour_pairs(vectors, threshold=-1.0, top_k=3, search=short)
    assert (first >= 0).all() and (second >= 0).all()


def test_communities_and_components_find_the_planted_groups() -> None:
    vectors, groups = planted()
    assert cluster(vectors, threshold=0.9, top_k=5) == groups
    assert cluster(vectors, threshold=0.9, top_k=5, method="components") == groups
    assert cluster(vectors, threshold=0.9, top_k=5, min_size=5) == []
    named = cluster(vectors, threshold=0.9, top_k=5, ids=[str(i) for i in range(len(vectors))])
    assert named[0] == ["0", "1", "2", "3"]


def test_communities_match_sentence_transformers() -> None:
    util = pytest.importorskip("sentence_transformers.util")
    import torch

    vectors, _ = planted(seed=3)
    theirs = util.community_detection(torch.from_numpy(vectors), threshold=0.9, min_community_size=2)
    ours = cluster(vectors, threshold=0.9, top_k=10)
    assert sorted(map(sorted, theirs)) == sorted(ours)


def test_kmeans_recovers_separated_groups() -> None:
    pytest.importorskip("faiss")
    vectors, groups = planted(groups=4, size=50, singles=0)
    labels = kmeans(vectors, 4, seed=1)
    assert sorted(len(set(labels[g].tolist())) for g in groups) == [1, 1, 1, 1]
    assert len(set(labels.tolist())) == 4


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda v: similar_pairs(v, threshold=1.5),
            r"threshold=1.5 is outside the range of cosine scores \[-1.0, 1.0\]",
        ),
        (lambda v: similar_pairs(v, threshold=0.5, similarity="euclidean"), r"outside the range of euclidean"),
        (lambda v: similar_pairs(v, threshold=0.9, top_k=0), r"top_k=0 must be a positive int"),
        (lambda v: similar_pairs(v, threshold=0.9, similarity="jaccard"), r"similarity='jaccard' is not one of"),
        (lambda v: similar_pairs(v, threshold=0.9, ids=["a"]), r"ids has 1 entries for 140 vectors"),
        (lambda v: cluster(v, threshold=0.9, method="louvain"), r"method='louvain' is not one of"),
        (lambda v: cluster(v, threshold=0.9, min_size=0), r"min_size=0 must be a positive int"),
    ],
)
def test_bad_arguments(call, message: str) -> None:
    vectors, _ = planted()
    with pytest.raises(ValueError, match=message):
        call(vectors)


def test_fewer_than_two_vectors() -> None:
    assert similar_pairs(np.ones((1, 4), dtype=np.float32), threshold=0.5) == []
