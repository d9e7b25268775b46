"""Building the ANN index of `hf_siamese.retrieval.index.ann` from vectors that arrive in chunks: two passes, a random
(reservoir) training sample, the chunks added one by one, recall@10 measured against exact neighbours of held-out rows
(see the `ann` module docstring for the folder and the memory it takes).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...storage import replace_folder, staging_folder
from ..exact import best_first, unit_rows
from .ann import (
    FORMAT_NAME,
    FORMAT_VERSION,
    IDS_FILE,
    INDEX_FILE,
    INFO_FILE,
    LARGEST_SMALL_IVF,
    PART_BYTES,
    RECALL_AT,
    RECALL_TARGET,
    TRAIN_PER_CENTROID,
    AnnIndex,
    Chunk,
    _check_int,
    _extract_ivf,
    _read_info,
    _search_params,
    choose_factory,
    import_faiss,
    ivf_lists,
    load_ann_index,
    part_name,
)
from .ann_chunks import _chunks, _collect_ids, _passes, _reservoir_sample, drop_self
from .parts import FAISS_METRICS

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ build


def _recall_setup(recall_queries: Any, similarity: str) -> tuple[np.ndarray | None, int]:
    """(calibration query vectors or None, corpus rows to hold out): an int holds out that many sample rows, an
    array (n, dim) gives the queries themselves (e.g. embedded calibration queries: what users will search with)."""
    if isinstance(recall_queries, int | np.integer) and not isinstance(recall_queries, bool):
        _check_int("recall_queries", recall_queries, 0)
        return None, int(recall_queries)
    queries = np.asarray(recall_queries, dtype=np.float32) if recall_queries is not None else None
    if queries is None or queries.ndim != 2 or not len(queries):
        shape = None if queries is None else queries.shape
        raise ValueError(f"recall_queries: expected an int >= 0 or a non-empty (n, dim) array of queries, got {shape}")
    if not np.isfinite(queries).all():
        raise ValueError("recall_queries hold NaN or inf values; expected finite vectors")
    return np.ascontiguousarray(unit_rows(queries) if similarity == "cosine" else queries), 0


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
    recall_queries: int | np.ndarray = 1000,
    recall_target: float = RECALL_TARGET,
    count: int | None = None,
    part_bytes: int = PART_BYTES,
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
        train_size: training vectors (default min(N, 39 * k) for IVF with k lists, else min(N, 39 * 256)).
        seed: for the sample and faiss' k-means.
        nprobe: IVF lists searched by default; None picks the smallest of 1, 2, 3, 4, 6, 8, ..., k (`nprobe_ladder`)
            whose measured recall@10 reaches `recall_target` (the best one tried if none does, with a warning).
        recall_queries: what recall@10 is measured with. An int: that many sample rows held out of training (0:
            measure nothing; then an IVF index needs an explicit nprobe). An (n, dim) array: query vectors (e.g.
            calibration queries embedded with the query prompt), better than corpus rows when queries are not
            distributed like the documents (short questions against abstracts). `ann.json` says which was used.
        count: the number of rows, when known (e.g. from the shards' manifest): the sample is then sized for it
            instead of for the largest default factory; checked against the chunks.
        part_bytes: codes held in memory while adding; each part is written to disk and freed when full.
        overwrite: replace an existing non-empty `output_dir`. The index is written beside it and renamed into place,
            so a failed build leaves what was there intact.
    """
    faiss = import_faiss()
    _check_build(similarity, train_size, nprobe, count, part_bytes, recall_target)
    calibration, held_out = _recall_setup(recall_queries, similarity)
    source, output, start = _passes(chunks), Path(output_dir), time.perf_counter()
    if output.exists() and not overwrite and (output.is_file() or any(output.iterdir())):
        what = "an existing ANN index" if _read_info(output) else "not empty and not an ANN index"
        raise ValueError(f"output_dir {os.fspath(output)!r} is {what}; pass overwrite=True to replace it")
    positions, sample, count, dim, factory, training_rows = _draw_sample(
        source, factory, compress, count, dim, train_size, held_out, seed, similarity
    )
    queries, own_rows, k_eval = _recall_queries(calibration, sample, positions, held_out, count, dim)
    if ivf_lists(factory) and nprobe is None and not (k_eval and len(queries)):
        raise ValueError("nprobe=None picks nprobe by measured recall: give recall_queries >= 1 (and 2+ vectors)")
    training = sample[len(sample) - training_rows :]  # the shuffled sample's end: disjoint from the queries if N allows
    index, ivf = _new_index(faiss, dim, factory, similarity, seed)
    trained = not index.is_trained
    if trained:
        logger.info("%s: %d x %d vectors, training %s on %d", output, count, dim, factory, len(training))
        index.train(np.ascontiguousarray(training))
    if nprobe is not None and ivf is None:
        logger.warning("nprobe=%d ignored: %s has no inverted lists", nprobe, factory)
        nprobe = None
    del sample, training, positions

    staging = staging_folder(output, "ann")
    try:
        parts, ids, best, search = _fill_index(
            faiss, index, ivf, staging, source, count, dim, similarity, part_bytes, queries, k_eval
        )
        nprobe, recall, curve = _measure_recall(
            search, ivf, queries, own_rows, best, k_eval, nprobe, recall_target, output
        )
        measured = "calibration queries" if calibration is not None else "held-out corpus rows"
        recall_record = {
            "at": k_eval, "value": recall, "target": recall_target, "queries": len(queries), "measured_on": measured,
            "by_nprobe": curve,
        }  # fmt: skip
        info = _record(
            faiss, factory, similarity, count, dim, ids, nprobe if ivf is not None else None, recall_record,
            training_rows if trained else 0, seed, parts, time.perf_counter() - start,
        )  # fmt: skip
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        del search  # nothing of the staging folder stays open while it is moved
        replace_folder(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info(
        "%s: built in %.1f s, nprobe %s, recall@%d %s on %d %s",
        output, info["build_seconds"], nprobe, k_eval, recall, len(queries), measured,
    )  # fmt: skip
    return load_ann_index(output)


def _check_build(
    similarity: str, train_size: Any, nprobe: Any, count: Any, part_bytes: Any, recall_target: Any
) -> None:
    """`build_ann_index`'s numbers and similarity checked before any pass over the chunks."""
    if similarity not in FAISS_METRICS:
        raise ValueError(f"similarity={similarity!r}: the ANN index serves {', '.join(FAISS_METRICS)}")
    for name, value, low in (("train_size", train_size, 1), ("nprobe", nprobe, 1), ("count", count, 1)):
        if value is not None:
            _check_int(name, value, low)
    _check_int("part_bytes", part_bytes, 1)
    if not 0 < recall_target <= 1:
        raise ValueError(f"recall_target={recall_target!r}: expected a number in (0, 1]")


def _draw_sample(
    source: Any, factory: str | None, compress: str | None, count: int | None, dim: int | None,
    train_size: int | None, held_out: int, seed: int, similarity: str,
) -> tuple[np.ndarray, np.ndarray, int, int, str, int]:  # fmt: skip
    """(positions, shuffled sample, row count, dim, factory, training rows) from the first pass: the reservoir is
    sized for the factory (the largest default one while the count is unknown), and drawn again where the factory
    chosen for the real count wants more."""

    def wanted_training(lists: int | None, rows: int) -> int:
        return min(rows, train_size or TRAIN_PER_CENTROID * (lists or 256))

    if count is None:  # the row count is not known before the first pass: size the sample for the largest case
        lists = ivf_lists(factory) if factory else LARGEST_SMALL_IVF
        cap = wanted_training(lists, 1 << 62) + held_out
    else:
        cap = wanted_training(ivf_lists(factory or choose_factory(count, 4)), count) + held_out
    positions, sample, rows, dim = _reservoir_sample(source, cap, seed=seed, dim=dim, similarity=similarity)
    if count is not None and rows != count:
        raise ValueError(f"count={count} but the chunks gave {rows} rows")
    count = rows
    factory = factory or choose_factory(count, dim, compress)
    training_rows = wanted_training(ivf_lists(factory), count)
    if len(sample) < min(count, training_rows + held_out):  # a default factory above 1M wants more: re-draw
        positions, sample, _, _ = _reservoir_sample(
            source, training_rows + held_out, seed=seed, dim=dim, similarity=similarity
        )
    return positions, sample, count, dim, factory, training_rows


def _recall_queries(
    calibration: np.ndarray | None, sample: np.ndarray, positions: np.ndarray, held_out: int, count: int, dim: int
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(queries, their own corpus rows or None, k) the recall is measured with: the calibration queries, else the
    sample's first `held_out` rows (each must not find itself)."""
    if calibration is not None:
        if calibration.shape[1] != dim:
            raise ValueError(f"recall_queries have dim {calibration.shape[1]}; the vectors have dim {dim}")
        return calibration, None, min(RECALL_AT, count)
    n_held = min(held_out, len(sample))
    return sample[:n_held].copy(), positions[:n_held], min(RECALL_AT, count - 1)


def _new_index(faiss: Any, dim: int, factory: str, similarity: str, seed: int) -> tuple[Any, Any]:
    """(the untrained faiss index of `factory`, its IVF part or None), k-means seeded."""
    metric = faiss.METRIC_INNER_PRODUCT if FAISS_METRICS[similarity] == "inner_product" else faiss.METRIC_L2
    try:
        index = faiss.index_factory(dim, factory, metric)
    except RuntimeError as err:
        raise ValueError(f"factory={factory!r}: faiss cannot make this index ({str(err).strip()[-200:]})") from None
    ivf = _extract_ivf(faiss, index)
    if ivf is not None:
        ivf.cp.seed = seed
    return index, ivf


def _fill_index(
    faiss: Any, index: Any, ivf: Any, staging: Path, source: Any, count: int, dim: int, similarity: str,
    part_bytes: int, queries: np.ndarray, k_eval: int,
) -> tuple[int, np.ndarray | None, Any, Callable[..., np.ndarray]]:  # fmt: skip
    """The second pass: every row added (an IVF index's lists in parts), the index and ids written to `staging`.
    Returns (parts, ids or None, the queries' exact best rows, `search(queries, k, nprobe) -> rows`)."""
    if ivf is not None:
        adder = _PartWriter(faiss, index, ivf, staging, part_bytes)
    add = adder.add if ivf is not None else index.add
    ids, best, added = _add_pass(source, dim, similarity, add, queries, k_eval)
    if added != count:
        raise ValueError(
            f"the chunks gave {count} rows in the first pass and {added} in the second; they must not change"
        )
    parts = adder.finish() if ivf is not None else 0
    faiss.write_index(index, str(staging / INDEX_FILE))  # an IVF index's trained shell: the parts hold the lists
    if ids is not None:
        np.save(staging / IDS_FILE, ids)
    if ivf is not None:
        return parts, ids, best, _part_search(faiss, index, ivf, [staging / part_name(n) for n in range(parts)])

    def search(queries: np.ndarray, k: int, probes: int | None) -> np.ndarray:
        return index.search(queries, k, params=_search_params(faiss, index, probes, None)[0])[1]

    return 0, ids, best, search


def _record(
    faiss: Any, factory: str, similarity: str, count: int, dim: int, ids: np.ndarray | None, nprobe: int | None,
    recall: dict[str, Any], train_size: int, seed: int, parts: int, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """The `ann.json` of a built index."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "faiss_version": faiss.__version__,
        "factory": factory,
        "similarity": similarity,
        "metric": FAISS_METRICS[similarity],
        "count": count,
        "dim": dim,
        "ids": "positions" if ids is None else "str" if ids.dtype.kind == "U" else "int",
        "nprobe": nprobe,
        "recall": recall,
        "train_size": train_size,
        "seed": seed,
        "parts": parts,
        "build_seconds": round(seconds, 3),
    }


class _PartWriter:
    """Adds vectors to an IVF index in parts of at most `part_bytes` of codes: each part is a copy of the trained
    shell (sharing its quantizer while adding), written with an empty quantizer (the lists are all it holds) as soon
    as it is full, and freed. Row positions are the faiss ids."""

    def __init__(self, faiss: Any, index: Any, ivf: Any, folder: Path, part_bytes: int) -> None:
        self.faiss, self.ivf, self.folder = faiss, ivf, folder
        self.rows_per_part = max(1, part_bytes // (ivf.code_size + 8))  # a code and its int64 row number
        shell = faiss.clone_index(index)
        shell_ivf = _extract_ivf(faiss, shell)
        self._empty = faiss.IndexFlat(ivf.d, ivf.metric_type)  # kept alive: the shell points to it
        shell_ivf.own_fields, shell_ivf.quantizer = False, self._empty
        self.template = faiss.serialize_index(shell)  # the shell without its (possibly large) quantizer
        del shell, shell_ivf
        self.parts, self.added, self.current = 0, 0, None

    def add(self, vectors: np.ndarray) -> None:
        done = 0
        while done < len(vectors):
            if self.current is None:
                part = self.faiss.deserialize_index(self.template)
                part_ivf = _extract_ivf(self.faiss, part)
                self.own = part_ivf.quantizer
                part_ivf.own_fields, part_ivf.quantizer = False, self.ivf.quantizer  # assign with the real one
                self.current, self.filled = (part, part_ivf), 0
            piece = vectors[done : done + self.rows_per_part - self.filled]
            self.current[0].add_with_ids(np.ascontiguousarray(piece), np.arange(self.added, self.added + len(piece)))
            self.added, self.filled, done = self.added + len(piece), self.filled + len(piece), done + len(piece)
            if self.filled >= self.rows_per_part:
                self._flush()

    def _flush(self) -> None:
        part, part_ivf = self.current
        part_ivf.quantizer = self.own  # an empty quantizer in the file; it owns it again, and frees it
        part_ivf.own_fields = True
        self.faiss.write_index(part, str(self.folder / part_name(self.parts)))
        self.parts, self.current = self.parts + 1, None

    def finish(self) -> int:
        if self.current is not None:
            self._flush()
        return self.parts


def _add_pass(
    source: Callable[[], Iterator[Chunk]], dim: int, similarity: str, add: Callable, queries: np.ndarray, k: int
) -> tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray], int]:
    """The second pass: every chunk added (`add`), and the exact top k+1 rows of each recall query kept as it goes.
    Returns (the chunks' ids or None, (scores, rows) of the exact neighbours, the rows added)."""
    from ..exact import exact_search

    exact_similarity = "euclidean" if similarity == "euclidean" else "dot"  # cosine: the vectors are unit already
    best = (np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64))
    added, id_parts, with_ids = 0, [], None
    for ids, vectors in _chunks(source, dim, similarity):
        if with_ids is None:
            with_ids = ids is not None
        if with_ids != (ids is not None):
            raise ValueError("some chunks came with ids and some without; give ids with every chunk or none")
        add(vectors)
        if ids is not None:
            id_parts.append(ids)
        if k and len(queries):
            # small corpus blocks: 1000 queries x 8192 rows of scores at a time, not x the whole chunk
            found = exact_search(queries, vectors, k + 1, similarity=exact_similarity, corpus_chunk_size=8192)
            both = np.concatenate([best[0], found[0]], 1), np.concatenate([best[1], found[1] + added], 1)
            best = best_first(*both, k + 1)
        added += len(vectors)
    return (_collect_ids(id_parts) if with_ids else None), best, added


def _part_search(faiss: Any, index: Any, ivf: Any, files: list[Path]) -> Callable[..., np.ndarray]:
    """search(queries, k, nprobe) -> (n, k) row ids over all parts, one part in memory at a time (read, searched with
    the trained quantizer, freed) and the hits merged: measuring recall then holds one 64 MiB part, not every list
    (searching the memory-mapped stack at a large nprobe made the whole index resident: +295 MiB at 200k rows)."""
    larger_is_better = ivf.metric_type == faiss.METRIC_INNER_PRODUCT

    def search(queries: np.ndarray, k: int, probes: int | None) -> np.ndarray:
        scores, rows = [], []
        for file in files:
            part = faiss.read_index(str(file))
            part_ivf = _extract_ivf(faiss, part)
            own, part_ivf.own_fields = part_ivf.quantizer, False
            part_ivf.quantizer = ivf.quantizer
            try:
                params = _search_params(faiss, part, probes or ivf.nprobe, None)
                found_scores, found_rows = part.search(queries, k, params=params[0])
            finally:
                part_ivf.quantizer, part_ivf.own_fields = own, True
            scores.append(found_scores)
            rows.append(found_rows)
            del part
        scores, rows = np.concatenate(scores, axis=1), np.concatenate(rows, axis=1)
        return best_first(scores if larger_is_better else -scores, rows, k)[1]  # empty slots (-1) last

    return search


def nprobe_ladder(lists: int) -> list[int]:
    """The nprobe values recall is measured at: 1, 2, 3, 4, 6, 8, 12, 16, ... (powers of two and the halves between:
    the step from 32 to 64 lists halves the speed, and on SciFact 32 of 64 still lost 0.4 nDCG@10), up to `lists`."""
    ladder = sorted({n for i in range(lists.bit_length()) for n in (1 << i, 3 << i >> 1) if 1 <= n < lists})
    return [*ladder, lists]


def _measure_recall(
    search: Callable[[np.ndarray, int, int | None], np.ndarray],
    ivf: Any,
    queries: np.ndarray,
    own_rows: Any,
    best: tuple,
    k: int,
    nprobe: int | None,
    target: float,
    output: Path,
) -> tuple[int | None, float | None, list[list[float]]]:
    """(nprobe, recall@k at it, the nprobe -> recall curve tried): the smallest of `nprobe_ladder` reaching
    `target`, or the given nprobe measured, or nothing when there are no queries."""
    curve: list[list[float]] = []
    recall = None
    if not (k and len(queries)):
        return nprobe, recall, curve
    exact = drop_self(best[1], own_rows, k)
    ladder = [nprobe] if nprobe or ivf is None else nprobe_ladder(ivf.nlist)
    # (a non-IVF index: one measurement, at its defaults)
    for probes in dict.fromkeys(ladder):
        found = drop_self(search(queries, k + 1, probes), own_rows, k)
        recall = float((found[:, :, None] == exact[:, None, :]).any(2).mean())
        curve.append([probes, round(recall, 4)])
        if recall >= target:
            break
    if ivf is not None and nprobe is None:
        reached = [point for point in curve if point[1] >= target]
        nprobe, recall = reached[0] if reached else max(curve, key=lambda point: (point[1], -point[0]))
        if not reached:
            logger.warning("%s: no nprobe reaches recall %.2f (best %.3f)", output, target, recall)
        elif nprobe * 8 > ivf.nlist:  # benchmarks/bench_ann.py: scanning 1/4 of the lists was slower than exact
            logger.warning("%s: nprobe %d of %d lists: barely faster than exact search", output, nprobe, ivf.nlist)
    return nprobe, recall, curve
