"""The vectors of an embedded corpus as one matrix, and the search over it: `corpus_matrix` stacks the shards of an
`encode_corpus` folder once into a memory-mapped `vectors.npy` (`keep_one_copy` then drops the shards),
`vector_chunks` reads it a chunk at a time without touching the map (`read_block` / `read_rows`: a run of rows / some
rows of a stored matrix, read from its file rather than through the map), `texts_of` reads the texts of some rows
back from the source, and `neighbour_search` / `matrix_search` search the matrix (an approximate faiss index kept
beside it from `ann.EXACT_BELOW` vectors on, else exact search). The index build, corpus search, mining and similar
pairs share them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...data.corpus_stream import open_corpus
from ...storage import write_atomic
from ..corpus import IDS, MATRIX, SHARD_GLOB, _load_manifest, _write_manifest, read_corpus_shards

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]  # (queries, k) -> (scores, rows), best first


def corpus_matrix(folder: str | os.PathLike) -> tuple[list[Any], np.ndarray]:
    """(ids, `(rows, dim)` float32 memmap) of a finished `encode_corpus` folder. The shards are copied once, shard by
    shard, into `folder/vectors.npy` (their ids into `vectors.ids.npy`); later calls open those files, which are made
    again when a shard is newer. The copy is written with plain file writes, not through a memory map, so the pages
    it writes never count in this process' resident memory."""
    folder = Path(folder)
    matrix_path, ids_path = folder / MATRIX, folder / IDS
    manifest = (
        json.loads((folder / "corpus.json").read_text(encoding="utf-8")) if (folder / "corpus.json").exists() else {}
    )
    if not manifest.get("done"):
        read_corpus_shards(folder)  # raises, naming what is missing or unfinished
    rows, dim = manifest["num_rows"], manifest["settings"]["dim"]
    made = [p.stat().st_mtime for p in (matrix_path, ids_path) if p.exists()]
    if len(made) == 2 and all(s.stat().st_mtime <= min(made) for s in folder.glob("shard-*.parquet")):
        stacked_ids = np.load(ids_path, allow_pickle=False)
        matrix = np.load(matrix_path, mmap_mode="r")
        if len(stacked_ids) == len(matrix) == rows:
            return stacked_ids.tolist(), matrix
    ids: list[Any] = []

    def write_matrix(temporary: Path) -> None:
        with open(temporary, "wb") as file:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False}
            np.lib.format.write_array_header_2_0(file, {**header, "shape": (rows, dim)})
            for shard_ids, vectors in read_corpus_shards(folder):
                file.write(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
                ids.extend(shard_ids)
        if len(ids) != rows:
            raise ValueError(f"corrupt corpus embeddings: {os.fspath(folder)} has {len(ids)} rows, expected {rows}")

    def write_ids(temporary: Path) -> None:
        with open(temporary, "wb") as file:
            np.save(file, np.asarray(ids), allow_pickle=False)  # int64 or unicode: no pickle either way

    write_atomic(matrix_path, write_matrix)
    write_atomic(ids_path, write_ids)
    return ids, np.load(matrix_path, mmap_mode="r")


def keep_one_copy(folder: str | os.PathLike) -> None:
    """Stack the shards of a finished `encode_corpus` folder (`corpus_matrix`), then delete them: the folder keeps
    one copy of its vectors. Its manifest says `"stacked": true`, and `read_corpus_shards` reads the stacked matrix
    shard by shard. A kill at any point leaves a readable folder (the manifest is written before any shard goes)."""
    folder = Path(folder)
    corpus_matrix(folder)
    manifest = _load_manifest(folder)
    if not manifest.get("stacked"):
        _write_manifest(folder, {**manifest, "stacked": True})
    for shard in folder.glob(SHARD_GLOB):
        shard.unlink()


def vector_chunks(matrix: np.ndarray, rows: int | None = None) -> Iterator[np.ndarray]:
    """`rows` rows (default: 16 MiB of them) at a time of a `corpus_matrix` memmap, read with plain file reads (a copy
    per chunk, freed after use) instead of touching the map: a pass over a large corpus leaves the resident memory
    where it was. Small chunks keep the passes' temporaries small too (unit-length copies, finiteness checks)."""
    rows = rows or max(1024, (16 << 20) // max(1, matrix.shape[1] * matrix.itemsize))
    if not isinstance(matrix, np.memmap) or matrix.filename is None:
        yield from (np.asarray(matrix[start : start + rows]) for start in range(0, len(matrix), rows))
        return
    width = matrix.shape[1] * matrix.itemsize
    with open(matrix.filename, "rb") as file:
        for start in range(0, len(matrix), rows):
            count = min(rows, len(matrix) - start)
            file.seek(matrix.offset + start * width)
            yield np.frombuffer(file.read(count * width), dtype=matrix.dtype).reshape(count, matrix.shape[1])


def texts_of(source: Any, rows: set[int], text_column: str, id_column: str | None) -> dict[int, str]:
    """The texts of the given row positions, from a second pass over the source (never the whole corpus in memory)."""
    found: dict[int, str] = {}
    for row, (_, text) in enumerate(open_corpus(source, text_column, id_column)):
        if row in rows:
            found[row] = text
    return found


def neighbour_search(
    vectors: np.ndarray,
    embeddings_dir: str | os.PathLike,
    similarity: str,
    approximate: bool | None,
    *,
    calibration: np.ndarray | None = None,
) -> Search | None:
    """The search for the neighbour graph: None (exact, chunk by chunk) for a small corpus, else an approximate faiss
    index over `vectors`, built once into `embeddings_dir/ann` (recall@10 measured and recorded at build, on the
    `calibration` query vectors when given, else on held-out corpus rows) and reused.
    `approximate`: None decides by size (`ann.EXACT_BELOW` vectors, and faiss installed), True / False force it."""
    from .ann import EXACT_BELOW, load_ann_index

    if approximate is None:
        try:
            import faiss  # noqa: F401
        except ImportError:
            return None
        approximate = len(vectors) >= EXACT_BELOW
    if not approximate:
        return None
    from .ann_build import build_ann_index

    folder = Path(embeddings_dir) / "ann"
    index = None
    if (folder / "ann.json").exists() and calibration is None:
        index = load_ann_index(folder)
        matrix = Path(embeddings_dir) / MATRIX
        if len(index) != len(vectors) or matrix.stat().st_mtime > (folder / "ann.json").stat().st_mtime:
            index = None
    if index is None:
        recall_queries = 1000 if calibration is None else calibration
        index = build_ann_index(
            lambda: vector_chunks(vectors), folder, similarity=similarity, count=len(vectors),
            recall_queries=recall_queries, overwrite=True,
        )  # fmt: skip
    return lambda queries, k: index.search(queries, k)


def matrix_search(vectors: Any, folder: Path, similarity: str, approximate: bool | None) -> Search:
    """`search(queries, k) -> (scores, rows)` over the corpus matrix: `neighbour_search`'s approximate index (at
    `ann.EXACT_BELOW` vectors and above, or as `approximate` says), else `exact_search`. A similarity faiss does not
    serve (manhattan) is searched exactly unless `approximate=True` asks otherwise (an error)."""
    from ..exact import exact_search
    from .parts import FAISS_METRICS

    if approximate is None and similarity not in FAISS_METRICS:
        approximate = False
    found = neighbour_search(vectors, folder, similarity, approximate)
    if found is not None:
        return found
    return lambda queries, k: exact_search(queries, vectors, top_k=k, similarity=similarity)


def read_block(codes: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows `start:stop` of `codes`: read from its file when it is a memory-mapped one (not mapped: see `read_rows`),
    else sliced."""
    name = getattr(codes, "filename", None)
    if not (isinstance(codes, np.memmap) and name and codes.flags.c_contiguous):
        return np.asarray(codes[start:stop])
    width = codes.shape[1] * codes.dtype.itemsize
    with open(name, "rb") as file:
        file.seek(codes.offset + start * width)
        data = file.read((stop - start) * width)
    return np.frombuffer(data, dtype=codes.dtype).reshape(stop - start, codes.shape[1])


def read_rows(vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The float32 rows `rows` (sorted) of `vectors`. A memory-mapped C-ordered float32 file is read with one
    `os.pread` a row, not through its mapping: a page fault would map the cached pages around each row too (the
    kernel's fault-around), and a few hundred scattered rows a query would soon hold the whole file in this process's
    memory; read like this they stay in the page cache, shared, never this process's."""
    name = getattr(vectors, "filename", None)
    if not (isinstance(vectors, np.memmap) and name and vectors.dtype == np.float32 and vectors.flags.c_contiguous):
        return np.asarray(vectors[rows], dtype=np.float32)
    width = vectors.shape[1] * 4
    out = np.empty((len(rows), vectors.shape[1]), np.float32)
    target = out.view(np.uint8).reshape(len(rows), width)
    descriptor = os.open(name, os.O_RDONLY)
    try:
        for position, row in enumerate(rows.tolist()):
            target[position] = np.frombuffer(os.pread(descriptor, width, vectors.offset + row * width), np.uint8)
    finally:
        os.close(descriptor)
    return out


__all__ = [
    "Search",
    "corpus_matrix",
    "keep_one_copy",
    "matrix_search",
    "neighbour_search",
    "read_block",
    "read_rows",
    "texts_of",
    "vector_chunks",
]
