"""Similar pairs and clusters of a whole corpus, end to end: embed it with `encode_corpus` (resumable shards), stack
the shards once into a memory-mapped matrix, find the pairs / groups on the k-nearest-neighbour graph (`similar`), and
give them back with their ids and texts (the texts read again from the source, only for the rows in the result).

`hf-siamese similar` and `hf-siamese cluster` are this module on the command line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..data.corpus_stream import open_corpus, resolve_corpus
from ..storage import write_atomic
from .corpus import IDS, MATRIX, SHARD_GLOB, _load_manifest, _write_manifest, encode_corpus, read_corpus_shards
from .similar import check_threshold, cluster, kmeans, similar_pairs


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


def _texts_of(source: Any, rows: set[int], text_column: str, id_column: str | None) -> dict[int, str]:
    """The texts of the given row positions, from a second pass over the source (never the whole corpus in memory)."""
    found: dict[int, str] = {}
    for row, (_, text) in enumerate(open_corpus(source, text_column, id_column)):
        if row in rows:
            found[row] = text
    return found


def _embed(model: Any, source: Any, embeddings_dir: str | os.PathLike, **encode: Any) -> tuple[list[Any], np.ndarray]:
    encode_corpus(model, source, embeddings_dir, **encode)
    return corpus_matrix(embeddings_dir)


def neighbour_search(
    vectors: np.ndarray,
    embeddings_dir: str | os.PathLike,
    similarity: str,
    approximate: bool | None,
    *,
    calibration: np.ndarray | None = None,
) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None:
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


def find_similar(
    model: Any,
    source: Any,
    embeddings_dir: str | os.PathLike,
    *,
    threshold: float,
    top_k: int = 10,
    text_column: str = "text",
    id_column: str | None = None,
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None,
    approximate: bool | None = None,
    **encode: Any,
) -> list[dict[str, Any]]:
    """Every pair of texts of `source` scoring at least `threshold` (the model's similarity) among each text's `top_k`
    neighbours: rows `{id_1, id_2, score, text_1, text_2}`, best first.

    `source` is any `open_corpus` source (a Hub dataset id is opened once). It is embedded into `embeddings_dir` with
    `encode_corpus` (resumed if it was started; `encode` takes its keywords: tokenizer, batch_size, dtype, prompt_name,
    ..., and shard_size, default the folder's recorded one, else 10,000). The neighbours come from exact search below
    `ann.EXACT_BELOW` texts and from an approximate faiss index above (`approximate` forces either; see
    `neighbour_search`)."""
    similarity = model.config.similarity
    check_threshold(threshold, top_k, similarity)  # before the (long) embedding, not after
    source = resolve_corpus(source)
    ids, vectors = _embed(model, source, embeddings_dir, text_column=text_column, id_column=id_column, **encode)
    search = search or neighbour_search(vectors, embeddings_dir, similarity, approximate)
    pairs = similar_pairs(vectors, threshold=threshold, top_k=top_k, similarity=similarity, search=search)
    texts = _texts_of(source, {row for a, b, _ in pairs for row in (a, b)}, text_column, id_column)
    return [
        {"id_1": ids[a], "id_2": ids[b], "score": round(score, 6), "text_1": texts[a], "text_2": texts[b]}
        for a, b, score in pairs
    ]


def find_clusters(
    model: Any,
    source: Any,
    embeddings_dir: str | os.PathLike,
    *,
    threshold: float | None = None,
    k: int | None = None,
    top_k: int = 10,
    min_size: int = 2,
    method: str = "community",
    text_column: str = "text",
    id_column: str | None = None,
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None,
    seed: int = 0,
    approximate: bool | None = None,
    **encode: Any,
) -> list[dict[str, Any]]:
    """Groups of near-duplicates or topics of `source`: rows `{cluster, size, id, text}`, largest group first.

    With `threshold`: communities (or connected components, `method="components"`) of the pairs at or above it, as
    `similar.cluster`. With `k`: k-means into `k` groups (faiss), every text in one. Exactly one of the two. The
    corpus is read and embedded as in `find_similar`."""
    if (threshold is None) == (k is None):
        raise ValueError("give either threshold= (groups above a similarity) or k= (k-means into k groups), not both")
    similarity = model.config.similarity
    if threshold is not None:
        check_threshold(threshold, top_k, similarity)  # before the (long) embedding, not after
    source = resolve_corpus(source)
    ids, vectors = _embed(model, source, embeddings_dir, text_column=text_column, id_column=id_column, **encode)
    if k is not None:
        labels = kmeans(np.asarray(vectors), k, seed=seed, similarity=similarity)
        groups = [np.flatnonzero(labels == label).tolist() for label in range(k)]
        groups = sorted((g for g in groups if len(g) >= min_size), key=lambda g: (-len(g), g[0]))
    else:
        search = search or neighbour_search(vectors, embeddings_dir, similarity, approximate)
        groups = cluster(
            vectors, threshold=threshold, top_k=top_k, min_size=min_size, method=method, similarity=similarity,
            search=search,
        )  # fmt: skip
    texts = _texts_of(source, {row for group in groups for row in group}, text_column, id_column)
    return [
        {"cluster": number, "size": len(group), "id": ids[row], "text": texts[row]}
        for number, group in enumerate(groups)
        for row in group
    ]


__all__ = ["corpus_matrix", "find_clusters", "find_similar", "keep_one_copy"]
