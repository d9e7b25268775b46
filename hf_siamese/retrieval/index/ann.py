"""An approximate nearest-neighbour (ANN) index for corpora too large for exact search: built from vectors that arrive
in chunks (e.g. embedding shards on disk), opened memory-mapped, searched with faiss (optional: `pip install
'hf-siamese[index]'`).

An index folder holds:

    ann.json          format and version, faiss factory, similarity and metric, count and dim, the nprobe chosen, the
                      recall@10 measured at it, which queries measured it and the nprobe -> recall curve, training
                      size, seed, parts, build seconds
    index.faiss       the faiss index; for an IVF index only its trained, empty shell (the coarse quantizer)
    part-00000.faiss  IVF only: the inverted lists (codes and row numbers) of a run of rows, each with an empty
    ...               quantizer; searched together as one index (faiss `HStackInvertedLists`)
    ids.npy           only when the chunks came with ids: the id (int64 or str) of each row

`build_ann_index` (in `ann_build.py`) reads the chunks in two passes and never holds them all: (1) count the rows and
draw a uniformly random sample (reservoir sampling; `datasets`' faiss integration trains on the first `train_size`
rows, which for shards written in some order, by source or topic, is a biased sample), (2) train on the sample, then
add the chunks into parts of a bounded size, each written to disk and freed before the next, and, in the same pass,
find the exact neighbours of the recall queries (the user's calibration queries, else held-out sample rows); then
recall@10 is measured for nprobe = 1, 2, 3, 4, 6, 8, ... and the smallest reaching the target is kept. While building,
memory is the training sample plus one part (`PART_BYTES` of codes): never the whole index. A non-IVF factory (e.g.
"HNSW32") cannot be split into parts and is built whole in memory.

`load_ann_index` memory-maps the faiss files, so opening reads almost nothing; pages come in as searches touch them. In
faiss 1.15.1 `IO_FLAG_MMAP_IFC` maps every index type tried (Flat, SQ8, IVF lists, HNSW graphs); the older
`IO_FLAG_MMAP` maps only IVF inverted lists (as `OnDiskInvertedLists`) and silently reads other types into memory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..exact import best_first, unit_rows
from .parts import check_top_k

logger = logging.getLogger(__name__)

FORMAT_NAME, FORMAT_VERSION = "hf-siamese-ann-index", 2
READABLE_VERSIONS = (1, 2)  # version 1: no parts, the whole index in index.faiss
INFO_FILE, INDEX_FILE, IDS_FILE = "ann.json", "index.faiss", "ids.npy"
PART_BYTES = 64 << 20  # codes per part while building: what the add pass holds in memory
EXACT_BELOW = 100_000
RECALL_AT = 10
# recall@10 the build's nprobe must reach. Chosen on SciFact's TRAIN claims as calibration queries against a forced
# IVF64 index (benchmarks/RESULTS.md, "bench_corpus_scifact"): nprobe losing at most 0.3 nDCG@10 against exact search
# needed 0.999 there (0.993 lost 0.42, 0.959 lost 2.5); a lower target (0.95) trades that for speed.
RECALL_TARGET = 0.999
TRAIN_PER_CENTROID = 39  # faiss' own minimum (it warns below 39 per centroid), within the wiki's 30 to 256
LARGEST_SMALL_IVF = 4096  # choose_factory's k at 1M: the first pass's sample is sized for it when no factory is given
INSTALL_HINT = "pip install 'hf-siamese[index]' (faiss-cpu)"
Chunk = Any  # an (n, dim) array, or an (ids, array) tuple


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name}={value!r}: expected an int >= {low}")


def import_faiss() -> Any:
    """The faiss module, or an `ImportError` naming how to install it (`INSTALL_HINT`)."""
    try:
        import faiss
    except ImportError as err:
        raise ImportError(f"the ANN index needs faiss: {INSTALL_HINT}") from err
    return faiss


# ------------------------------------------------------------------------------------------------ factory


def choose_factory(num_vectors: int, dim: int, compress: str | None = None) -> str:
    """A faiss index factory string for `num_vectors` vectors of `dim` floats, after the faiss wiki's "Guidelines to
    choose an index" (github.com/facebookresearch/faiss/wiki/Guidelines-to-choose-an-index):

    - below `EXACT_BELOW` (100k): "Flat", exact search (the wiki's choice when exact results are wanted and the set is
      small; an IVF's training and probing do not pay off here);
    - up to 1M: "IVF{k}", k the power of two at or above 4 * sqrt(N), inside the wiki's 4*sqrt(N) to 16*sqrt(N)
      (100k -> IVF2048, 1M -> IVF4096);
    - up to 10M "IVF65536_HNSW32", up to 100M "IVF262144_HNSW32", beyond "IVF1048576_HNSW32" (the wiki's rows for
      1M-10M, 10M-100M and 100M-1B: an HNSW graph finds the nearest of that many centroids), with k lowered to the
      power of two that leaves the wiki's minimum of 30 training vectors per centroid (1.5M -> IVF32768_HNSW32).

    The vectors are stored "Flat" (exact, 4 * dim bytes each) unless `compress` is "sq8" (the wiki's "SQ8": one byte
    per dimension, 1/4 of the memory, slightly approximate scores) or "pq" ("PQ{dim/4}x8": dim / 4 bytes, 1/16, clearly
    approximate scores: search with `rerank`); "pq" needs dim divisible by 4.
    """
    _check_int("num_vectors", num_vectors, 1)
    _check_int("dim", dim, 1)
    if compress not in (None, "sq8", "pq"):
        raise ValueError(f"compress={compress!r}: expected None, 'sq8' or 'pq'")
    if compress == "pq" and dim % 4:
        raise ValueError(f"compress='pq' splits vectors into dim/4 parts of 4 floats; dim={dim} is not divisible by 4")
    codec = {None: "Flat", "sq8": "SQ8", "pq": f"PQ{dim // 4}x8"}[compress]
    if num_vectors < EXACT_BELOW:
        return codec
    if num_vectors <= 1_000_000:
        return f"IVF{1 << math.ceil(math.log2(4 * math.sqrt(num_vectors)))},{codec}"
    top = 65536 if num_vectors <= 10_000_000 else 262144 if num_vectors <= 100_000_000 else 1048576
    return f"IVF{min(top, 1 << int(math.log2(num_vectors // 30)))}_HNSW32,{codec}"


def part_name(number: int) -> str:
    return f"part-{number:05d}.faiss"


def ivf_lists(factory: str) -> int | None:
    """The number of inverted lists of a faiss `factory` string ("IVF4096,Flat" -> 4096), None for no IVF."""
    found = re.search(r"IVF(\d+)", factory)
    return int(found.group(1)) if found else None


# ------------------------------------------------------------------------------------------------ load + search


def _extract_ivf(faiss: Any, index: Any) -> Any:
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:  # not an IVF index
        return None


def _search_params(faiss: Any, index: Any, nprobe: int | None, ef_search: int | None) -> tuple[Any, ...]:
    """(faiss search parameters or None, objects they point to, kept alive while searching). Parameters per call
    rather than index attributes, so concurrent searches with different nprobe do not interfere."""
    if isinstance(index, faiss.IndexIVF):
        inner = None
        if ef_search and isinstance(faiss.downcast_index(index.quantizer), faiss.IndexHNSW):
            inner = faiss.SearchParametersHNSW(efSearch=ef_search)
        params = faiss.SearchParametersIVF(nprobe=nprobe or index.nprobe)
        if inner is not None:
            params.quantizer_params = inner
        return params, inner
    if isinstance(index, faiss.IndexHNSW) and ef_search:
        return (faiss.SearchParametersHNSW(efSearch=ef_search),)
    if nprobe and _extract_ivf(faiss, index) is not None:  # an IVF under a transform (e.g. "OPQ16,IVF..."): in place
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe)
    return (None,)


def _read_info(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((path / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("format") == FORMAT_NAME else None


def _read_faiss(faiss: Any, file: Path, mmap: bool) -> tuple[Any, str]:
    """(index, "mmap" or "memory"): memory-mapped where this faiss can, else read (with a log message)."""
    if mmap and hasattr(faiss, "IO_FLAG_MMAP_IFC"):  # faiss >= 1.11: maps Flat, SQ, PQ, IVF and HNSW data
        try:
            return faiss.read_index(str(file), faiss.IO_FLAG_MMAP_IFC), "mmap"
        except RuntimeError as err:
            logger.info("%s: IO_FLAG_MMAP_IFC failed (%s); trying IO_FLAG_MMAP", file, str(err).strip()[-120:])
    if mmap:
        index = faiss.read_index(str(file), faiss.IO_FLAG_MMAP)
        if _extract_ivf(faiss, index) is not None:  # the inverted lists, i.e. the vectors, stay on disk
            return index, "mmap"
        logger.info("%s: faiss %s cannot memory-map a %s; read into memory", file, faiss.__version__, type(index))
        return index, "memory"
    return faiss.read_index(str(file)), "memory"


class AnnIndex:
    """A loaded ANN index folder (see the module docstring); make one with `build_ann_index` or `load_ann_index`."""

    def __init__(
        self, path: Path, info: dict[str, Any], index: Any, ids: np.ndarray | None, io: str, parts: tuple = ()
    ) -> None:
        self.path, self.info, self.index, self.ids, self.io = path, info, index, ids, io
        self.dim, self.similarity, self.nprobe = info["dim"], info["similarity"], info["nprobe"]
        self._parts = parts  # the part indexes and the stacked lists: alive while `index` reads them
        self._direct_map = not parts

    def __len__(self) -> int:
        return self.info["count"]

    def __repr__(self) -> str:
        return (
            f"AnnIndex({os.fspath(self.path)!r}, count={len(self)}, dim={self.dim}, factory={self.info['factory']!r}, "
            f"nprobe={self.nprobe}, io={self.io!r})"
        )

    def search(
        self,
        queries: Any,
        top_k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        rerank: int | None = None,
        rerank_vectors: Callable[[np.ndarray], Any] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids), each (n, min(top_k, count)), best first, for query vectors (n, dim) or one (dim,) vector.

        Scores are the similarity (cosine, dot, or -euclidean distance: larger is better); a slot with no hit (IVF
        lists holding fewer than top_k vectors) has score -inf and id -1 (or "" for str ids).

        Args:
            nprobe: IVF lists to search (default: the one chosen at build, see `info["recall"]`; other index
                types ignore it).
            ef_search: HNSW search depth, of an HNSW index or of an IVF's HNSW coarse quantizer.
            rerank: re-score the best `rerank` (>= top_k) candidates exactly and return the top_k of those: what
                makes compressed indexes (",SQ8", ",PQ") accurate. The candidates' vectors come from
                `rerank_vectors(positions) -> (len(positions), dim) array` (positions = row numbers in the order
                the chunks were added; e.g. `lambda rows: embeddings[rows]` on a memmap), else from the index's
                `reconstruct`: exact for Flat and IVF,Flat, approximate for SQ8 / PQ (only the code is stored).
        """
        faiss = import_faiss()
        top_k = check_top_k(top_k)
        for name, value, low in (
            ("nprobe", nprobe, 1),
            ("ef_search", ef_search, 1),
            ("rerank (>= top_k)", rerank, top_k),
        ):
            if value is not None:
                _check_int(name, value, low)
        if rerank_vectors is not None and rerank is None:
            raise ValueError("rerank_vectors is used only with rerank=K (the number of candidates to re-score)")
        vectors = np.asarray(queries, dtype=np.float32)
        vectors = vectors[None] if vectors.ndim == 1 else vectors
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(
                f"queries have dim {vectors.shape[-1]} (shape {vectors.shape}); this index has dim {self.dim}"
            )
        if not np.isfinite(vectors).all():
            raise ValueError("queries hold NaN or inf values; expected finite vectors")
        vectors = np.ascontiguousarray(unit_rows(vectors) if self.similarity == "cosine" else vectors)
        k = min(top_k, len(self))
        params = _search_params(faiss, self.index, nprobe or self.nprobe, ef_search)
        scores, positions = self.index.search(vectors, min(rerank or k, len(self)), params=params[0])
        if self.info["metric"] == "l2":  # faiss gives squared distances; the similarity is -distance
            scores = -np.sqrt(np.maximum(scores, 0.0))
        scores = np.where(positions >= 0, scores, -np.inf).astype(np.float32)
        if rerank is not None:
            scores, positions = self._rerank(vectors, positions, rerank_vectors)
        return scores[:, :k], self._ids_of(positions[:, :k])

    def _rerank(self, queries: np.ndarray, positions: np.ndarray, source: Callable | None) -> tuple[Any, Any]:
        valid = positions >= 0
        rows = positions[valid]
        if source is None:
            if not self._direct_map:  # 8 bytes a vector, made on first use (a built index gets one at build)
                faiss = import_faiss()
                _extract_ivf(faiss, self.index).make_direct_map()
                self._direct_map = True
            try:
                found = self.index.reconstruct_batch(rows)
            except RuntimeError as err:
                raise ValueError(
                    f"this {self.info['factory']} index cannot reconstruct vectors ({err}); pass rerank_vectors"
                ) from None
        else:
            found = np.asarray(source(rows), dtype=np.float32)
            if found.shape != (len(rows), self.dim):
                raise ValueError(
                    f"rerank_vectors gave shape {found.shape} for {len(rows)} rows; expected ({len(rows)}, {self.dim})"
                )
        candidates = np.zeros((*positions.shape, self.dim), np.float32)
        candidates[valid] = unit_rows(found) if self.similarity == "cosine" else found
        if self.similarity == "euclidean":
            scores = -np.linalg.norm(candidates - queries[:, None], axis=2)
        else:
            scores = np.einsum("qkd,qd->qk", candidates, queries)
        scores = np.where(valid, scores, -np.inf).astype(np.float32)
        return best_first(scores, positions)  # exact search's order: equal scores by the lower row, no hit last

    def _ids_of(self, positions: np.ndarray) -> np.ndarray:
        if self.ids is None:
            return positions
        found = np.asarray(self.ids[np.maximum(positions, 0)])
        return np.where(positions >= 0, found, "" if found.dtype.kind == "U" else -1)


def load_ann_index(path: str | os.PathLike, *, mmap: bool = True) -> AnnIndex:
    """Open an index folder written by `build_ann_index`; `mmap` maps the faiss file and the ids instead of reading
    them (see the module docstring for which index types faiss can map; the others are read, with a log message)."""
    faiss = import_faiss()
    path = Path(path)
    where = os.fspath(path)
    if not path.is_dir():
        raise FileNotFoundError(2, f"ANN index not found: {where!r}", where)
    info = _read_info(path)
    if info is None:
        raise ValueError(f"{where!r} is not an ANN index (no {INFO_FILE} of format {FORMAT_NAME!r}); build one first")
    if info.get("format_version") not in READABLE_VERSIONS:
        raise ValueError(
            f"ANN index {where!r} has format version {info.get('format_version')!r}; this reads {READABLE_VERSIONS}"
        )
    parts: tuple = ()
    try:
        index, io = _read_faiss(faiss, path / INDEX_FILE, mmap)
        if info.get("parts"):
            parts = _stack_parts(faiss, index, [path / part_name(n) for n in range(info["parts"])], mmap)
        ids = np.load(path / IDS_FILE, mmap_mode="r" if mmap else None) if info["ids"] != "positions" else None
    except (OSError, RuntimeError, ValueError) as err:
        raise ValueError(f"corrupt ANN index {where!r}: {type(err).__name__}: {str(err).strip()[-200:]}") from None
    if (index.ntotal, index.d) != (info["count"], info["dim"]) or (ids is not None and len(ids) != info["count"]):
        found = f"{index.ntotal} x {index.d}" + ("" if ids is None else f" ({len(ids)} ids)")
        raise ValueError(
            f"corrupt ANN index {where!r}: {INFO_FILE} says {info['count']} x {info['dim']}, found {found}"
        )
    return AnnIndex(path, info, index, ids, io, parts)


def _stack_parts(faiss: Any, index: Any, files: list[Path], mmap: bool) -> tuple:
    """Search the parts' inverted lists as those of `index` (list l = list l of every part, in order); returns what
    must stay alive while `index` is used."""
    loaded = [_read_faiss(faiss, file, mmap)[0] for file in files]
    lists = faiss.InvertedListsPtrVector()
    for part in loaded:
        lists.push_back(_extract_ivf(faiss, part).invlists)
    stacked = faiss.HStackInvertedLists(lists.size(), lists.data())
    ivf = _extract_ivf(faiss, index)
    ivf.replace_invlists(stacked, False)
    ivf.ntotal = index.ntotal = sum(part.ntotal for part in loaded)
    return (loaded, lists, stacked)
