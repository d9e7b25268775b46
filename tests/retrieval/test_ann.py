"""The ANN index: the factory choice follows the faiss guidelines, an IVF index built from chunks reaches the recall it
records against exact search, the training sample is uniform over all chunks (not the first rows), ids, memory-mapped
loading, exact re-ranking, bad input, and atomic writes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from hf_siamese.retrieval import exact_search  # noqa: E402
from hf_siamese.retrieval.index.ann import (  # noqa: E402
    EXACT_BELOW,
    RECALL_TARGET,
    TRAIN_PER_CENTROID,
    choose_factory,
    load_ann_index,
)
from hf_siamese.retrieval.index.ann_build import _reservoir_sample, build_ann_index, nprobe_ladder  # noqa: E402

DIM, CLUSTERS, NOISE = 32, 200, 0.8  # clusters that overlap enough for nprobe to matter
CENTERS = np.random.default_rng(0).standard_normal((CLUSTERS, DIM)).astype(np.float32)


def clustered(n: int, seed: int, cluster: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLUSTERS, n) if cluster is None else np.full(n, cluster)
    return (CENTERS[labels] + NOISE * rng.standard_normal((n, DIM))).astype(np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / exact.shape[1] for a, b in zip(found, exact, strict=True)]))


CORPUS = clustered(20_000, seed=1)
QUERIES = clustered(1000, seed=2)  # fresh points from the same clusters, not corpus rows
EXACT = exact_search(QUERIES, CORPUS, 10, similarity="cosine")


@pytest.fixture(scope="module")
def ivf(tmp_path_factory) -> tuple:
    calls = []

    def read_shards():  # several chunks of uneven size, as shards on disk would come
        calls.append(1)
        for start in range(0, len(CORPUS), 3000):
            yield CORPUS[start : start + 3000]

    index = build_ann_index(read_shards, tmp_path_factory.mktemp("ann") / "ivf", factory="IVF64,Flat")
    return index, calls


# ------------------------------------------------------------------------------------------------ factory


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, "Flat"),
        (EXACT_BELOW - 1, "Flat"),
        (EXACT_BELOW, "IVF2048,Flat"),
        (500_000, "IVF4096,Flat"),
        (1_000_000, "IVF4096,Flat"),
        (1_500_000, "IVF32768_HNSW32,Flat"),  # 65536 lists would get < 30 training vectors each
        (2_000_000, "IVF65536_HNSW32,Flat"),
        (10_000_000, "IVF65536_HNSW32,Flat"),
        (50_000_000, "IVF262144_HNSW32,Flat"),
        (1_000_000_000, "IVF1048576_HNSW32,Flat"),
    ],
)
def test_choose_factory_follows_the_guidelines(n: int, expected: str) -> None:
    assert choose_factory(n, 384) == expected


def test_choose_factory_ivf_lists_and_compression() -> None:
    for n in (100_000, 250_000, 640_000, 1_000_000):  # the wiki's 4*sqrt(N) to 16*sqrt(N) lists, a power of two
        k = int(choose_factory(n, 64).split(",")[0][3:])
        assert 4 * math.sqrt(n) <= k <= 16 * math.sqrt(n) and k & (k - 1) == 0
    assert choose_factory(1_000_000, 384, "sq8") == "IVF4096,SQ8"
    assert choose_factory(1_000_000, 384, "pq") == "IVF4096,PQ96x8"
    assert choose_factory(5_000_000, 768, "pq") == "IVF65536_HNSW32,PQ192x8"
    assert choose_factory(10, 384, "sq8") == "SQ8"
    for bad in [{"num_vectors": 0}, {"dim": -1}, {"compress": "int4"}, {"dim": 30, "compress": "pq"}]:
        with pytest.raises(ValueError):
            choose_factory(**{"num_vectors": 1000, "dim": 32, **bad})


# ------------------------------------------------------------------------------------------------ build + recall


def test_ivf_reaches_the_recall_it_records(ivf) -> None:
    index, calls = ivf
    assert len(calls) == 2  # two passes over the chunks: sample, then add
    info = index.info
    assert (info["count"], info["dim"], info["factory"], info["similarity"]) == (20_000, DIM, "IVF64,Flat", "cosine")
    assert (
        info["train_size"] == TRAIN_PER_CENTROID * 64
        and info["recall"]["queries"] == 1000
        and info["build_seconds"] > 0
    )
    curve = info["recall"]["by_nprobe"]
    assert [p for p, _ in curve] == nprobe_ladder(64)[: len(curve)]  # 1, 2, 3, 4, 6, ... up to the first that reaches
    assert all(r < RECALL_TARGET for _, r in curve[:-1]) and curve[-1][1] >= RECALL_TARGET and len(curve) > 1
    assert index.nprobe == curve[-1][0] and info["recall"]["value"] == curve[-1][1]
    scores, ids = index.search(QUERIES, 10)
    measured = recall(ids, EXACT[1])
    assert measured >= RECALL_TARGET - 0.02
    assert abs(measured - info["recall"]["value"]) <= 0.02
    assert json.loads((index.path / "ann.json").read_text()) == info
    # the scores are the cosine similarities of the ids found
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", unit(CORPUS)[ids], unit(QUERIES)), atol=1e-5)
    more = index.search(QUERIES, 10, nprobe=64)[1]  # every list: exact
    assert recall(more, EXACT[1]) == 1.0


def test_training_sample_is_uniform_over_all_chunks(tmp_path: Path) -> None:
    # The first chunk is a single cluster: a first-rows sample (as in `datasets`' faiss integration) trains the
    # centroids on that cluster alone.
    chunks = [clustered(4096, seed=5, cluster=0)] + [clustered(4000, seed=6 + i) for i in range(4)]
    starts = np.cumsum([0] + [len(c) for c in chunks])
    data = np.concatenate(chunks)
    positions, sample, count, dim = _reservoir_sample(chunks, 4096, seed=0)
    assert (count, dim, sample.shape) == (len(data), DIM, (4096, DIM))
    np.testing.assert_array_equal(sample, data[positions])  # positions are the rows drawn
    assert len(set(positions.tolist())) == 4096
    shares = np.bincount(np.searchsorted(starts, positions, side="right") - 1, minlength=len(chunks)) / 4096
    np.testing.assert_allclose(shares, np.diff(starts) / len(data), atol=0.03)  # each chunk in proportion

    # Algorithm R is uniform: each of 50 rows (in uneven chunks) is drawn with probability 10/50
    small = [np.arange(n * DIM, dtype=np.float32).reshape(n, DIM) for n in (7, 1, 20, 12, 10)]
    counts = np.zeros(50)
    for seed in range(2000):
        counts[_reservoir_sample(lambda: iter(small), 10, seed=seed)[0]] += 1
    np.testing.assert_allclose(counts / 2000, 0.2, atol=0.04)

    index = build_ann_index(chunks, tmp_path / "ann", factory="IVF64,Flat", recall_target=0.95)
    first_rows = faiss.index_factory(DIM, "IVF64,Flat", faiss.METRIC_INNER_PRODUCT)
    first_rows.train(unit(data[: TRAIN_PER_CENTROID * 64]))  # as many rows as ours, but the first ones
    first_rows.add(unit(data))
    first_rows.nprobe = index.nprobe
    exact = exact_search(QUERIES, data, 10, similarity="cosine")[1]
    ours = recall(index.search(QUERIES, 10)[1], exact)
    assert ours >= 0.95 and recall(first_rows.search(unit(QUERIES), 10)[1], exact) < ours - 0.05


@pytest.mark.parametrize("kind", ["str", "int"])
def test_ids_given_with_chunks_come_back(tmp_path: Path, kind: str) -> None:
    data = clustered(3000, seed=3)
    names = np.array([f"doc-{i}" for i in range(3000)]) if kind == "str" else np.arange(3000) * 7 + 100
    chunks = [(names[s : s + 1000], data[s : s + 1000]) for s in range(0, 3000, 1000)]
    index = build_ann_index(lambda: iter(chunks), tmp_path / "ann")
    assert index.info["ids"] == kind and index.info["factory"] == "Flat" and index.nprobe is None
    scores, ids = index.search(data[[5, 2500]], 3)
    assert ids[:, 0].tolist() == names[[5, 2500]].tolist()
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    assert load_ann_index(tmp_path / "ann", mmap=False).search(data[[5, 2500]], 3)[1].tolist() == ids.tolist()
    with pytest.raises(ValueError, match="duplicate id"):
        build_ann_index([(names[:2], data[:2]), (names[:2], data[2:4])], tmp_path / "dup")
    with pytest.raises(ValueError, match="with ids and some without"):
        build_ann_index([(names[:2], data[:2]), data[2:4]], tmp_path / "mixed")


@pytest.mark.parametrize("factory", ["IVF64,Flat", "IVF64,SQ8", "Flat"])
def test_mmap_load_equals_a_normal_load(tmp_path: Path, factory: str) -> None:
    build_ann_index(CORPUS, tmp_path / "ann", factory=factory)
    mapped, read = load_ann_index(tmp_path / "ann"), load_ann_index(tmp_path / "ann", mmap=False)
    assert (mapped.io, read.io) == ("mmap", "memory")
    for a, b in zip(mapped.search(QUERIES, 10), read.search(QUERIES, 10), strict=True):
        np.testing.assert_array_equal(a, b)


def test_rerank_scores_exactly(tmp_path: Path, ivf) -> None:
    index = build_ann_index(CORPUS, tmp_path / "sq8", factory="IVF64,SQ8")
    truth = unit(CORPUS)
    approx, ids = index.search(QUERIES, 10, nprobe=64)
    assert np.abs(approx - np.einsum("qkd,qd->qk", truth[ids], unit(QUERIES))).max() > 1e-3  # SQ8 scores: close

    scores, ids = index.search(QUERIES, 10, nprobe=64, rerank=30, rerank_vectors=lambda rows: CORPUS[rows])
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", truth[ids], unit(QUERIES)), atol=1e-5)
    assert recall(ids, EXACT[1]) == 1.0
    assert (np.diff(scores, axis=1) <= 0).all()

    flat, _ = ivf  # IVF,Flat reconstructs the stored vectors exactly
    scores, ids = flat.search(QUERIES, 10, rerank=20)
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", truth[ids], unit(QUERIES)), atol=1e-5)


@pytest.mark.parametrize("similarity", ["euclidean", "dot"])
def test_other_similarities_match_exact_search(tmp_path: Path, similarity: str) -> None:
    index = build_ann_index(CORPUS, tmp_path / "ann", factory="IVF64,Flat", similarity=similarity, nprobe=64)
    assert index.info["metric"] == ("l2" if similarity == "euclidean" else "inner_product")
    scores, ids = index.search(QUERIES[:50], 5)
    expected = exact_search(QUERIES[:50], CORPUS, 5, similarity=similarity)
    np.testing.assert_allclose(scores, expected[0], rtol=1e-4, atol=1e-3)
    assert ids.tolist() == expected[1].tolist()


# ------------------------------------------------------------------------------------------------ bad input + writes


def test_bad_input(tmp_path: Path, ivf) -> None:
    index, _ = ivf
    with pytest.raises(ValueError, match="top_k"):
        index.search(QUERIES, 0)
    with pytest.raises(ValueError, match=r"dim 16 .*dim 32"):
        index.search(np.ones((2, 16), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        index.search(np.full((1, DIM), np.nan, np.float32))
    with pytest.raises(ValueError, match="rerank"):
        index.search(QUERIES, 10, rerank=5)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not an ANN index"):
        load_ann_index(tmp_path / "other")
    with pytest.raises(FileNotFoundError):
        load_ann_index(tmp_path / "missing")
    with pytest.raises(ValueError, match="manhattan"):
        build_ann_index(CORPUS, tmp_path / "m", similarity="manhattan")
    with pytest.raises(ValueError, match="callable"):
        build_ann_index(iter([CORPUS]), tmp_path / "g")  # one-shot: the second pass would see nothing
    with pytest.raises(ValueError, match="dim 8, expected dim 32"):
        build_ann_index([CORPUS[:10], np.ones((3, 8), np.float32)], tmp_path / "d")
    with pytest.raises(ValueError, match="no vectors"):
        build_ann_index([np.empty((0, DIM), np.float32)], tmp_path / "e")
    shrinking = iter([[CORPUS[:500]], [CORPUS[:400]]])
    with pytest.raises(ValueError, match="500 rows in the first pass and 400"):
        build_ann_index(lambda: next(shrinking), tmp_path / "s")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # nothing half-written


def test_failed_build_leaves_the_earlier_index(tmp_path: Path) -> None:
    target = tmp_path / "ann"
    before = build_ann_index(CORPUS[:2000], target)
    passes = []

    def failing():
        passes.append(1)
        if len(passes) == 2:
            raise RuntimeError("shard 3 is unreadable")
        return iter([CORPUS[:3000]])

    with pytest.raises(RuntimeError, match="unreadable"):
        build_ann_index(failing, target, overwrite=True)
    after = load_ann_index(target)
    assert after.info == before.info and len(after) == 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ann"]  # no staging folder left


def test_refuses_a_non_empty_folder_unless_overwrite(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and not an ANN index"):
        build_ann_index(CORPUS[:100], tmp_path / "busy")
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"
    build_ann_index(CORPUS[:100], tmp_path / "idx")
    with pytest.raises(ValueError, match="existing ANN index"):
        build_ann_index(CORPUS[:200], tmp_path / "idx")
    assert len(build_ann_index(CORPUS[:200], tmp_path / "idx", overwrite=True)) == 200


def test_without_faiss_says_how_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError
    with pytest.raises(ImportError, match=r"hf-siamese\[index\]"):
        build_ann_index(CORPUS[:10], tmp_path / "ann")
