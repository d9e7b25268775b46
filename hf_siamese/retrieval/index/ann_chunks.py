"""The chunks an ANN index is built from: read in passes (`passes`), checked (`vector_chunks`), sampled uniformly in one
pass (`reservoir_sample`), their ids collected, and the exact neighbours of the recall queries merged chunk by chunk."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..exact import unit_rows
from .ann import Chunk


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
    kept, count = 0, 0
    # Allocated at the first chunk for `size` rows and filled in place: pages never written (a sample larger than the
    # corpus) are never resident, and there is no second copy while it fills.
    sample = positions = None
    for _, vectors in _chunks(_passes(chunks), dim, similarity):
        dim, n = vectors.shape[1], len(vectors)
        if sample is None:
            sample, positions = np.empty((size, dim), np.float32), np.empty(size, np.int64)
        fill = min(size - kept, n)
        if fill:  # the first `size` rows fill the reservoir
            sample[kept : kept + fill] = vectors[:fill]
            positions[kept : kept + fill] = np.arange(count, count + fill)
            kept += fill
        if kept == size and fill < n:  # row t then replaces slot j ~ U{0..t} when j < size
            rows = np.arange(fill, n)
            slots = rng.integers(0, count + rows + 1)
            rows, slots = rows[slots < size][::-1], slots[slots < size][::-1]
            slots, last = np.unique(slots, return_index=True)  # reversed: the first found is the last write
            sample[slots], positions[slots] = vectors[rows[last]], count + rows[last]
        count += n
    if not count:
        raise ValueError("chunks yielded no vectors; an index needs at least one")
    sample, positions = sample[:kept], positions[:kept]
    order = rng.permutation(kept)
    _permute_rows(sample, order)
    return positions[order], sample, count, dim


def _permute_rows(matrix: np.ndarray, order: np.ndarray) -> None:
    """`matrix[:] = matrix[order]` in place, one row of scratch (following the permutation's cycles), so shuffling the
    sample does not hold it twice."""
    done = np.zeros(len(order), dtype=bool)
    for start in range(len(order)):
        if done[start] or order[start] == start:
            done[start] = True
            continue
        first = matrix[start].copy()
        here = start
        while True:
            done[here] = True
            source = order[here]
            if source == start:
                matrix[here] = first
                break
            matrix[here] = matrix[source]
            here = source


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


def drop_self(found: np.ndarray, own: np.ndarray | None, k: int) -> np.ndarray:
    """The first k of each row other than the query's own row (held-out queries are corpus rows; real queries are
    not, so finding themselves must not count as recall). `own` None: calibration queries, nothing to drop."""
    if own is None:
        return found[:, :k]
    order = np.argsort(found == own[:, None], axis=1, kind="stable")
    return np.take_along_axis(found, order, 1)[:, :k]
