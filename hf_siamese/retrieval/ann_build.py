"""Building the ANN index of `hf_siamese.retrieval.ann` from vectors that arrive in chunks: two passes, a random
(reservoir) training sample, the chunks added one by one, recall@10 measured against exact neighbours of held-out rows
(see the `ann` module docstring for the folder and the memory it takes).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .ann import (
    FORMAT_NAME,
    FORMAT_VERSION,
    IDS_FILE,
    INDEX_FILE,
    INFO_FILE,
    LARGEST_SMALL_IVF,
    RECALL_AT,
    TRAIN_PER_CENTROID,
    AnnIndex,
    Chunk,
    _check_int,
    _extract_ivf,
    _import_faiss,
    _ivf_lists,
    _read_info,
    _search_params,
    choose_factory,
    load_ann_index,
)
from .index_parts import FAISS_METRICS, move_into_place, unit_rows

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ chunks


def _passes(chunks: Any) -> Callable[[], Iterator[Chunk]]:
    """A function giving a fresh iterator over the chunks per pass (a one-shot iterator would give nothing twice)."""
    if isinstance(chunks, np.ndarray):
        return lambda: iter([chunks])
    if callable(chunks):
        return lambda: iter(chunks())
    if isinstance(chunks, Iterator) or not isinstance(chunks, Iterable):
        raise ValueError(
            f"chunks is a {type(chunks).__name__}; the build reads the chunks more than once, so pass a list of arrays "
            "or a zero-argument callable returning a fresh iterator (e.g. lambda: read_shards())"
        )
    return lambda: iter(chunks)


def _chunks(source: Callable[[], Iterator[Chunk]], dim: int | None, similarity: str) -> Iterator[tuple[Any, Any]]:
    """(ids or None, float32 (n, dim) vectors, unit length for cosine) per non-empty chunk, checked."""
    for number, item in enumerate(source()):
        ids = None
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ValueError(f"chunk {number} is a tuple of {len(item)}; expected an array or (ids, array)")
            ids, item = item
        vectors = np.asarray(item, dtype=np.float32)
        if vectors.ndim != 2:
            raise ValueError(f"chunk {number} has shape {vectors.shape}; expected a 2-D (n, dim) array")
        if dim is not None and vectors.shape[1] != dim:
            raise ValueError(f"chunk {number} has dim {vectors.shape[1]}, expected dim {dim} (as the earlier chunks)")
        dim = vectors.shape[1]
        if not len(vectors):
            continue
        if not np.isfinite(vectors).all():
            raise ValueError(f"chunk {number} holds NaN or inf values; expected finite vectors")
        if ids is not None:
            ids = np.asarray(ids)
            if ids.shape != (len(vectors),):
                raise ValueError(f"chunk {number}: {ids.shape} ids for {len(vectors)} vectors; give one id per row")
        yield ids, unit_rows(vectors) if similarity == "cosine" else vectors


def _reservoir_sample(
    chunks: Any, size: int, *, seed: int = 0, dim: int | None = None, similarity: str = "dot"
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(row positions, vectors, row count, dim): a uniformly random sample of `size` rows (all if fewer), shuffled,
    drawn in one pass over chunks of unknown number and size: Algorithm R (Vitter, 1985), vectorized per chunk."""
    rng = np.random.default_rng(seed)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    kept, count = 0, 0
    sample = positions = None
    for _, vectors in _chunks(_passes(chunks), dim, similarity):
        dim, n = vectors.shape[1], len(vectors)
        fill = min(size - kept, n) if sample is None else 0
        if fill:  # the first `size` rows fill the reservoir
            parts.append((np.arange(count, count + fill), vectors[:fill].copy()))
            kept += fill
        if sample is None and kept == size and parts:
            positions, sample = (np.concatenate(column) for column in zip(*parts, strict=True))
            parts = []
        if sample is not None and fill < n:  # row t then replaces slot j ~ U{0..t} when j < size
            rows = np.arange(fill, n)
            slots = rng.integers(0, count + rows + 1)
            rows, slots = rows[slots < size][::-1], slots[slots < size][::-1]
            slots, last = np.unique(slots, return_index=True)  # reversed: the first found is the last write
            sample[slots], positions[slots] = vectors[rows[last]], count + rows[last]
        count += n
    if not count:
        raise ValueError("chunks yielded no vectors; an index needs at least one")
    if sample is None:
        positions = np.concatenate([p for p, _ in parts]) if parts else np.empty(0, np.int64)
        sample = np.concatenate([v for _, v in parts]) if parts else np.empty((0, dim), np.float32)
    order = rng.permutation(len(sample))
    return positions[order], sample[order], count, dim


def _collect_ids(parts: list[np.ndarray]) -> np.ndarray:
    kinds = {part.dtype.kind for part in parts}
    if not kinds <= {"i", "u"} and kinds != {"U"}:
        raise ValueError(f"chunk ids must be all int or all str, got numpy kinds {sorted(kinds)}")
    ids = np.concatenate(parts) if kinds == {"U"} else np.concatenate(parts).astype(np.int64)
    if ids.dtype.kind == "i" and (ids < 0).any():  # -1 means "no hit" in search results, as in faiss
        raise ValueError(f"int ids must be >= 0, got {ids.min()}")
    ordered = np.sort(ids)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(repeated):
        raise ValueError(f"duplicate id {repeated[0]!r} in the chunks' ids; ids must be unique")
    return ids


def _merge_top(best: tuple[np.ndarray, np.ndarray], found: tuple[np.ndarray, np.ndarray], offset: int, k: int):
    scores, rows = np.concatenate([best[0], found[0]], 1), np.concatenate([best[1], found[1] + offset], 1)
    order = np.lexsort((rows, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


def _drop_self(found: np.ndarray, own: np.ndarray, k: int) -> np.ndarray:
    """The first k of each row other than the query's own row (the held-out queries are corpus rows; real queries are
    not, so finding themselves must not count as recall)."""
    order = np.argsort(found == own[:, None], axis=1, kind="stable")
    return np.take_along_axis(found, order, 1)[:, :k]


# ------------------------------------------------------------------------------------------------ build


def build_ann_index(
    chunks: Any,
    output_dir: str | os.PathLike,
    *,
    dim: int | None = None,
    similarity: str = "cosine",
    factory: str | None = None,
    compress: str | None = None,
    train_size: int | None = None,
    seed: int = 0,
    nprobe: int | None = None,
    recall_queries: int = 1000,
    recall_target: float = 0.95,
    overwrite: bool = False,
) -> AnnIndex:
    """Build an ANN index from chunks of vectors in `output_dir`; returns it loaded (memory-mapped).

    Args:
        chunks: a zero-argument callable returning a fresh iterator of chunks (e.g. `lambda: read_shards()`), a list
            of chunks, or one array. A chunk is a float (n, dim) array or an `(ids, array)` tuple (all chunks with ids
            or none; ids all int >= 0 or all str, unique; default ids are the row positions). Read twice; both
            passes must yield the same rows.
        dim: check the chunks' dimension (default: the first chunk's).
        similarity: "cosine" (vectors L2-normalized, inner product), "dot" (inner product) or "euclidean" (L2).
        factory: a faiss index factory string; default `choose_factory(N, dim, compress)`.
        train_size: training vectors (default min(N, 64 * k) for IVF with k lists, else min(N, 64 * 256)).
        seed: for the sample and faiss' k-means.
        nprobe: IVF lists searched by default; None picks the smallest of 1, 2, 4, ..., k whose measured recall@10
            reaches `recall_target` (the best one tried if none does, with a warning).
        recall_queries: sample rows held out of training to measure recall@10 against exact search (0: measure
            nothing; then an IVF index needs an explicit nprobe).
        overwrite: replace an existing non-empty `output_dir`. The index is written beside it and renamed into place,
            so a failed build leaves what was there intact.
    """
    faiss = _import_faiss()
    if similarity not in FAISS_METRICS:
        raise ValueError(f"similarity={similarity!r}: the ANN index serves {', '.join(FAISS_METRICS)}")
    for name, value, low in (
        ("train_size", train_size, 1),
        ("nprobe", nprobe, 1),
        ("recall_queries", recall_queries, 0),
    ):
        if value is not None:
            _check_int(name, value, low)
    if not 0 < recall_target <= 1:
        raise ValueError(f"recall_target={recall_target!r}: expected a number in (0, 1]")
    source, output, start = _passes(chunks), Path(output_dir), time.perf_counter()
    if output.exists() and not overwrite and (output.is_file() or any(output.iterdir())):
        what = "an existing ANN index" if _read_info(output) else "not empty and not an ANN index"
        raise ValueError(f"output_dir {os.fspath(output)!r} is {what}; pass overwrite=True to replace it")

    def wanted_training(lists: int | None, count: int) -> int:
        return min(count, train_size or TRAIN_PER_CENTROID * (lists or 256))

    big = 1 << 62  # the row count is not known before the first pass: size the sample for the largest case
    cap = wanted_training(_ivf_lists(factory) if factory else LARGEST_SMALL_IVF, big) + recall_queries
    positions, sample, count, dim = _reservoir_sample(source, cap, seed=seed, dim=dim, similarity=similarity)
    factory = factory or choose_factory(count, dim, compress)
    lists, training_rows = _ivf_lists(factory), wanted_training(_ivf_lists(factory), count)
    if len(sample) < min(count, training_rows + recall_queries):  # a default factory above 1M wants more: re-draw
        positions, sample, _, _ = _reservoir_sample(
            source, training_rows + recall_queries, seed=seed, dim=dim, similarity=similarity
        )
    k_eval, n_queries = min(RECALL_AT, count - 1), min(recall_queries, len(sample))
    if lists and nprobe is None and not (k_eval and n_queries):
        raise ValueError("nprobe=None picks nprobe by measured recall: give recall_queries >= 1 (and 2+ vectors)")
    queries, own_rows = sample[:n_queries].copy(), positions[:n_queries]
    training = sample[len(sample) - training_rows :]  # the shuffled sample's end: disjoint from the queries if N allows
    metric = faiss.METRIC_INNER_PRODUCT if FAISS_METRICS[similarity] == "inner_product" else faiss.METRIC_L2
    try:
        index = faiss.index_factory(dim, factory, metric)
    except RuntimeError as err:
        raise ValueError(f"factory={factory!r}: faiss cannot make this index ({str(err).strip()[-200:]})") from None
    ivf = _extract_ivf(faiss, index)
    if ivf is not None:
        ivf.cp.seed = seed
    trained = not index.is_trained
    if trained:
        logger.info("%s: %d x %d vectors, training %s on %d", output, count, dim, factory, len(training))
        index.train(np.ascontiguousarray(training))
    if nprobe is not None and ivf is None:
        logger.warning("nprobe=%d ignored: %s has no inverted lists", nprobe, factory)
        nprobe = None
    del sample, training

    from ..metrics import exact_search

    exact_similarity = "euclidean" if similarity == "euclidean" else "dot"  # cosine: the vectors are unit already
    best = (np.empty((n_queries, 0), np.float32), np.empty((n_queries, 0), np.int64))
    added, id_parts, with_ids = 0, [], None
    for ids, vectors in _chunks(source, dim, similarity):
        if with_ids is None:
            with_ids = ids is not None
        if with_ids != (ids is not None):
            raise ValueError("some chunks came with ids and some without; give ids with every chunk or none")
        index.add(vectors)
        if ids is not None:
            id_parts.append(ids)
        if k_eval and n_queries:
            # small corpus blocks: 1000 queries x 8192 rows of scores at a time, not x the whole chunk
            found = exact_search(queries, vectors, k_eval + 1, similarity=exact_similarity, corpus_chunk_size=8192)
            best = _merge_top(best, found, added, k_eval + 1)
        added += len(vectors)
    if added != count:
        raise ValueError(
            f"the chunks gave {count} rows in the first pass and {added} in the second; they must not change"
        )
    ids = _collect_ids(id_parts) if with_ids else None
    if ivf is not None:
        ivf.make_direct_map()  # reconstruct() for rerank; 8 bytes a vector

    curve: list[list[float]] = []
    recall = None
    if k_eval and n_queries:
        exact = _drop_self(best[1], own_rows, k_eval)
        ladder = [nprobe] if nprobe or ivf is None else [*(1 << i for i in range(ivf.nlist.bit_length())), ivf.nlist]
        # (a non-IVF index: one measurement, at its defaults)
        for probes in dict.fromkeys(ladder):
            params = _search_params(faiss, index, probes, None)
            found = _drop_self(index.search(queries, k_eval + 1, params=params[0])[1], own_rows, k_eval)
            recall = float((found[:, :, None] == exact[:, None, :]).any(2).mean())
            curve.append([probes, round(recall, 4)])
            if recall >= recall_target:
                break
        if ivf is not None and nprobe is None:
            reached = [point for point in curve if point[1] >= recall_target]
            nprobe, recall = reached[0] if reached else max(curve, key=lambda point: (point[1], -point[0]))
            if not reached:
                logger.warning("%s: no nprobe reaches recall %.2f (best %.3f)", output, recall_target, recall)
            elif nprobe * 8 > ivf.nlist:  # benchmarks/bench_ann.py: scanning 1/4 of the lists was slower than exact
                logger.warning("%s: nprobe %d of %d lists: barely faster than exact search", output, nprobe, ivf.nlist)
    info = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "faiss_version": faiss.__version__,
        "factory": factory,
        "similarity": similarity,
        "metric": FAISS_METRICS[similarity],
        "count": count,
        "dim": dim,
        "ids": "positions" if ids is None else "str" if ids.dtype.kind == "U" else "int",
        "nprobe": nprobe if ivf is not None else None,
        "recall": {"at": k_eval, "value": recall, "target": recall_target, "queries": n_queries, "by_nprobe": curve},
        "train_size": training_rows if trained else 0,
        "seed": seed,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(f".{output.name}.building-{uuid.uuid4().hex[:8]}")
    staging.mkdir()  # beside output: the same file system, so the final rename is atomic
    try:
        faiss.write_index(index, str(staging / INDEX_FILE))
        if ids is not None:
            np.save(staging / IDS_FILE, ids)
        info["build_seconds"] = round(time.perf_counter() - start, 3)
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        move_into_place(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("%s: built in %.1f s, nprobe %s, recall@%d %s", output, info["build_seconds"], nprobe, k_eval, recall)
    return load_ann_index(output)
