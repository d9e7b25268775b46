"""Compact vectors: an index's vectors kept at a lower precision for the search, and the best candidates rescored with
the float32 vectors, which stay memory-mapped on disk (only the candidates' rows are read).

Precisions (`PRECISIONS`; bytes a document of `dim` dimensions in `bytes_per_document`):

    float32  the vectors as `model.encode` returns them, searched exactly or through the approximate index (default)
    float16  half the bytes; scored in float32 a chunk at a time
    int8     one byte a dimension: each dimension's range calibrated on the corpus (its 0.01% and 99.99% quantiles
             over up to 100,000 evenly spaced rows), 255 levels across it; scored as the float query against the
             dequantized rows (`q . (center + code x step)`; faiss' scalar-quantizer kernel where faiss is installed)
    binary   one bit a dimension (the sign: a value above 0), rows padded to whole 64-bit words; the query's bits are
             taken the same way and scored by Hamming distance through the CPU's popcount (faiss' kernel when faiss
             is installed, numpy's `bitwise_count` otherwise), as `1 - 2 x distance / dim` (the cosine of the two +-1
             vectors)

Cosine indexes quantize unit-length rows (so the compact score approximates the cosine); compact precisions serve the
"cosine" and "dot" similarities. The search reads `rescore x max(top_k, 100)` candidates by the compact vectors and
scores them again with the float32 vectors and the float query (`rescore=0`: the compact scores are the result): the
same candidates for every `top_k` up to 100, so a larger `top_k` never reorders the best hits. The default `rescore`
of each precision (`RESCORE`) was chosen on SciFact's train claims (benchmarks/RESULTS.md, "Compact vectors").

On disk, beside the float32 vectors (embeddings/vectors.npy):

    compact/  compact.json (precision, dim, count, rescore, bytes a document, how the ranges were set), codes.npy
              (count x bytes a document: float16, int8 or uint8 words of bits), and for int8 centers.npy / steps.npy;
              with `approximate=True` (int8, binary) ivf.faiss, an IVF over the codes that gives the candidates
              instead of the exact scan, its nprobe chosen by measured recall (`compact_ivf.py`)
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...storage import write_atomic
from ..exact import TIE_MARGIN, best_first, merge_top_k, unit_rows
from .compact_ivf import (
    IVF_FILE,
    build_compact_ivf,
    check_approximate_precision,
    describe_ivf,
    ivf_candidates,
    load_ivf,
)
from .matrix import read_block, read_rows
from .parts import faiss_available

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "float16", "int8", "binary")
RESCORE = {"float16": 0, "int8": 1, "binary": 4}
RESCORE_FLOOR = 100  # candidates are read for at least this many hits (hybrid.FUSION_DEPTH): top_k never reorders
COMPACT_DIR = "compact"
SIMILARITIES = ("cosine", "dot")
CALIBRATION_ROWS = 100_000
QUANTILES = (0.0001, 0.9999)
_CHUNK = 65_536


def check_precision(precision: Any) -> str:
    """`precision` if it is one of `PRECISIONS`, else a `ValueError` naming it and them."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; expected one of {', '.join(PRECISIONS)}")
    return precision


def check_rescore(rescore: Any) -> int:
    """`rescore` as an int >= 0 (0: no rescoring), else a `ValueError` naming it."""
    if isinstance(rescore, bool) or not isinstance(rescore, (int, np.integer)) or rescore < 0:
        raise ValueError(
            f"rescore={rescore!r}; expected an int >= 0: the candidates read by the compact vectors, as a multiple of "
            f"max(top_k, {RESCORE_FLOOR}), scored again with the float32 vectors (0: no rescoring)"
        )
    return int(rescore)


def check_compact_similarity(precision: str, similarity: str) -> None:
    """A `ValueError` where compact vectors at `precision` cannot serve `similarity` (they serve `SIMILARITIES`)."""
    if precision != "float32" and similarity not in SIMILARITIES:
        raise ValueError(
            f"precision={precision!r} serves the {' and '.join(SIMILARITIES)} similarities; the model uses "
            f"{similarity!r}: keep precision='float32'"
        )


def bytes_per_document(precision: str, dim: int) -> int:
    """Bytes one document's vector takes at `precision` (binary: whole 64-bit words)."""
    return {"float32": 4 * dim, "float16": 2 * dim, "int8": dim, "binary": 8 * (-(-dim // 64))}[precision]


def describe_precision(index: Any) -> str:
    """ ", binary vectors (48 bytes a document), rescore 4" for an index of compact vectors; "" for float32 ones."""
    part = getattr(index, "compact", None)
    engine_index = (index.info.get("dense_index") or {}).get("type", "") if part is None else ""
    if engine_index.endswith(("_SQ8", "_SQ")):  # a Milvus collection's scalar-quantized index
        return f", int8 vectors (the engine's {engine_index} index, {index.dim} bytes a document)"
    if part is None:
        return ""
    described = f", {part.precision} vectors ({part.record['bytes_per_document']} bytes a document), rescore "
    return described + f"{index.rescore}{describe_ivf(part.approximate)}"


def _sample(vectors: np.ndarray, rows: int) -> np.ndarray:
    """Up to `rows` evenly spaced rows of `vectors` (a memmap: only those rows are read), as float32."""
    picked = np.unique(np.linspace(0, len(vectors) - 1, min(rows, len(vectors))).astype(np.int64))
    return np.asarray(vectors[picked], dtype=np.float32)


class Quantizer:
    """How vectors become codes at one precision and how a float query scores them (see the module docstring)."""

    def __init__(self, precision: str, dim: int, centers: np.ndarray | None = None, steps: np.ndarray | None = None):
        self.precision, self.dim = check_precision(precision), dim
        self.centers, self.steps = centers, steps

    @classmethod
    def fit(cls, vectors: np.ndarray, precision: str, unit: bool) -> Quantizer:
        """The quantizer of `vectors` (rows, dim) at `precision`; int8's ranges from up to `CALIBRATION_ROWS` rows
        (`unit`: of the rows scaled to unit length, as they are stored)."""
        dim = int(vectors.shape[1])
        if precision != "int8":
            return cls(precision, dim)
        sample = _sample(vectors, CALIBRATION_ROWS)
        sample = unit_rows(sample) if unit else sample
        low, high = np.quantile(sample, QUANTILES, axis=0).astype(np.float32)
        steps = (high - low) / 254.0
        return cls(precision, dim, ((low + high) / 2).astype(np.float32), np.where(steps > 0, steps, 1.0))

    def arrays(self) -> dict[str, np.ndarray]:
        """The calibration arrays to save beside the codes (int8: centers, steps)."""
        return {} if self.centers is None else {"centers": self.centers, "steps": self.steps}

    def encode(self, block: np.ndarray) -> np.ndarray:
        """The codes of a (rows, dim) float32 block."""
        if self.precision == "float16":
            return block.astype(np.float16)
        if self.precision == "int8":
            return np.clip(np.rint((block - self.centers) / self.steps), -127, 127).astype(np.int8)
        bits = np.packbits(block > 0, axis=1)
        padded = np.zeros((len(block), bytes_per_document("binary", self.dim)), np.uint8)
        padded[:, : bits.shape[1]] = bits
        return padded

    def scores(self, queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(queries, rows) float32 scores of float32 `queries` against a block of `codes` (numpy: no faiss)."""
        if self.precision == "float16":
            return queries @ codes.astype(np.float32).T
        if self.precision == "int8":
            return (queries * self.steps) @ codes.astype(np.float32).T + (queries @ self.centers)[:, None]
        query_words = self.encode(queries).view(np.uint64)
        words = np.ascontiguousarray(codes).view(np.uint64)
        out = np.empty((len(queries), len(codes)), np.float32)
        for i, word in enumerate(query_words):
            out[i] = np.bitwise_count(words ^ word).sum(axis=1, dtype=np.int32)
        return 1.0 - 2.0 * out / self.dim


class CompactPart:
    """The compact vectors of an index (`write_compact_part` made them), searched with rescoring by `search`."""

    def __init__(self, folder: Path, record: dict[str, Any], codes: np.ndarray, quantizer: Quantizer) -> None:
        self.folder, self.record, self.codes, self.quantizer = folder, record, codes, quantizer
        self.precision, self.similarity = record["precision"], record["similarity"]
        self.rescore = int(record["rescore"])
        self._scalar_index: Any = None  # int8 through faiss: its scalar quantizer holding our codes, made on first use
        self.approximate: dict[str, Any] | None = record.get("approximate")  # the IVF over the codes, if built
        self.nprobe: int | None = None  # the IVF's lists probed (None: the recorded nprobe)
        self._ivf: Any = None  # opened on first use
        self._warned = False  # that faiss is missing, so the IVF is not used

    @classmethod
    def load(cls, folder: str | os.PathLike) -> CompactPart:
        """Open the part in `folder`: the codes memory-mapped; a `ValueError` naming what is wrong."""
        folder = Path(folder)
        try:
            record = json.loads((folder / "compact.json").read_text(encoding="utf-8"))
            codes = np.load(folder / "codes.npy", mmap_mode="r", allow_pickle=False)
            names = ("centers", "steps") if record["precision"] == "int8" else ()
            arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in names}
            expected = (record["count"], record["bytes_per_document"] // (2 if record["precision"] == "float16" else 1))
            if record.get("approximate") and not (folder / IVF_FILE).is_file():
                raise ValueError(f"{IVF_FILE} missing")
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"corrupt compact vectors in {os.fspath(folder)!r} ({err}); rebuild the index") from None
        if codes.shape != expected:
            where = os.fspath(folder)
            raise ValueError(f"corrupt compact vectors in {where!r}: codes {codes.shape}, expected {expected}")
        return cls(folder, record, codes, Quantizer(record["precision"], record["dim"], **arrays))

    def _probes(self, nprobe: Any) -> int | None:
        """The IVF lists to probe (`nprobe`, else `self.nprobe`, else the recorded one), or None for the exact scan:
        no IVF, every list (the same rows, faster), or no faiss (a warning)."""
        if nprobe is not None and (isinstance(nprobe, bool) or not isinstance(nprobe, (int, np.integer)) or nprobe < 1):
            raise ValueError(f"nprobe={nprobe!r}: expected an int >= 1 (the IVF lists over the codes to probe)")
        if self.approximate is None:
            if nprobe is not None:
                raise ValueError(f"nprobe={nprobe!r}: these compact vectors have no IVF (built without --approximate)")
            return None
        probes = int(nprobe or self.nprobe or self.approximate["nprobe"])
        if probes >= self.approximate["lists"]:
            return None
        if not faiss_available():
            if not self._warned:
                logger.warning("faiss is not installed: the compact codes are searched exactly, not through their IVF")
                self._warned = True
            return None
        return probes

    def candidates(self, queries: np.ndarray, depth: int, probes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the `depth` best rows of each query by the codes alone, best first, no rescoring: through
        the IVF at `probes` lists, else all of them. `queries`: contiguous float32 rows, unit rows for cosine (as
        `search` passes them)."""
        if probes is not None:
            if self._ivf is None:
                self._ivf = load_ivf(self.folder, self.precision)
            return best_first(*ivf_candidates(self, self._ivf, queries, depth, probes))
        faiss = importlib.import_module("faiss") if self.precision != "float16" and faiss_available() else None
        if faiss is not None and self.precision == "binary":
            distances, rows = faiss.knn_hamming(self.quantizer.encode(queries), np.ascontiguousarray(self.codes), depth)
            return best_first((1.0 - 2.0 * distances / self.quantizer.dim).astype(np.float32), rows.astype(np.int64))
        if faiss is not None:
            scores, rows = self._int8_index(faiss).search(queries, depth)
            return best_first(scores, rows.astype(np.int64))
        best = np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
        for start in range(0, len(self.codes), _CHUNK):
            block = self.quantizer.scores(queries, np.asarray(self.codes[start : start + _CHUNK]))
            best = merge_top_k(*best, block, start, min(depth, start + block.shape[1]))
        return best_first(*best)

    def _int8_index(self, faiss: Any) -> Any:
        """faiss' flat scalar-quantizer index holding the int8 codes (its SIMD kernel scores the float query against
        the dequantized rows, as `Quantizer.scores` does): code c of center m, step s is faiss' uint8 c + 127 of
        minimum m - 127.5 s and range 255 s. The codes are read from the file a chunk at a time, not through the
        mapping, so they are held once."""
        if self._scalar_index is None:
            dim, steps, centers = self.quantizer.dim, self.quantizer.steps, self.quantizer.centers
            index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            trained = np.concatenate([centers - 127.5 * steps, 255.0 * steps]).astype(np.float32)
            faiss.copy_array_to_vector(trained, index.sq.trained)
            index.is_trained = True
            for start in range(0, len(self.codes), _CHUNK):
                block = read_block(self.codes, start, min(start + _CHUNK, len(self.codes)))
                index.add_sa_codes((block.astype(np.int16) + 127).astype(np.uint8))
            self._scalar_index = index
        return self._scalar_index

    def search(
        self, queries: np.ndarray, k: int, vectors: np.ndarray, rescore: int | None = None, nprobe: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (n, k), best first, of float32 `queries` against the index: `rescore` x max(k, 100)
        candidates by the codes (through their IVF where built, at `nprobe` lists; None: the recorded nprobe),
        scored again with the rows of the float32 `vectors` (None: the recorded setting; 0: the compact scores)."""
        rescore = self.rescore if rescore is None else check_rescore(rescore)
        probes = self._probes(nprobe)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        queries = unit_rows(queries) if self.similarity == "cosine" else queries
        count = len(self.codes)
        if not rescore:
            return self.candidates(queries, min(k, count), probes)
        depth = min(count, rescore * max(k, RESCORE_FLOOR) + TIE_MARGIN)
        _, rows = self.candidates(queries, depth, probes)
        return rescore_rows(queries, rows, vectors, self.similarity, min(k, count))


def rescore_rows(
    queries: np.ndarray, rows: np.ndarray, vectors: np.ndarray, similarity: str, k: int, query_chunk: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """The `k` best of each query's candidate `rows` (n, depth) by the float32 `vectors` (a memmap: only the
    candidates' rows are read, `read_rows`), best first, equal scores by the lower row. `queries` are unit rows for
    cosine."""
    scores = np.empty(rows.shape, np.float32)
    for start in range(0, len(rows), query_chunk):
        part = rows[start : start + query_chunk]
        wanted = np.unique(part[part >= 0])
        if not len(wanted):  # an IVF's probed lists held no row for these queries
            scores[start : start + query_chunk] = -np.inf
            continue
        found = read_rows(vectors, wanted)
        found = unit_rows(found) if similarity == "cosine" else found
        every = queries[start : start + query_chunk] @ found.T  # (chunk, wanted): small, one matrix product
        scores[start : start + query_chunk] = np.take_along_axis(every, np.searchsorted(wanted, part), axis=1)
    scores[rows < 0] = -np.inf
    return best_first(scores, rows, k)


def write_compact_part(
    folder: Path, vectors: np.ndarray, precision: str, similarity: str, rescore: int | None, *,
    approximate: bool = False, calibration: np.ndarray | None = None,
) -> dict:  # fmt: skip
    """Write `vectors` (a (count, dim) float32 memmap, read a chunk at a time) at `precision` into `folder`; returns
    its record (compact.json, written last). `approximate`: also the IVF over the codes (int8, binary;
    `compact_ivf.py`), its nprobe measured on `calibration` query vectors where given. A `ValueError` for float32, a
    similarity the compact search does not serve or an IVF for float16."""
    if check_precision(precision) == "float32":
        raise ValueError("precision='float32' keeps the vectors as they are: no compact part to write")
    check_compact_similarity(precision, similarity)
    if approximate:
        check_approximate_precision(precision)
    rescore = RESCORE[precision] if rescore is None else check_rescore(rescore)
    count, dim = (int(n) for n in vectors.shape)
    quantizer = Quantizer.fit(vectors, precision, unit=similarity == "cosine")
    folder.mkdir(parents=True, exist_ok=True)
    per_row = bytes_per_document(precision, dim)
    dtype = {"float16": np.float16, "int8": np.int8, "binary": np.uint8}[precision]

    def write_codes(temporary: Path) -> None:
        with open(temporary, "wb") as file:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
            columns = per_row // np.dtype(dtype).itemsize
            np.lib.format.write_array_header_2_0(file, {**header, "shape": (count, columns)})
            for start in range(0, count, _CHUNK):
                block = np.asarray(vectors[start : start + _CHUNK], dtype=np.float32)
                block = unit_rows(block) if similarity == "cosine" else block
                file.write(np.ascontiguousarray(quantizer.encode(block)).tobytes())

    write_atomic(folder / "codes.npy", write_codes)
    for name, array in quantizer.arrays().items():
        np.save(folder / f"{name}.npy", array, allow_pickle=False)
    record = {
        "precision": precision,
        "similarity": similarity,
        "count": count,
        "dim": dim,
        "rescore": rescore,
        "bytes_per_document": per_row,
        "ranges": f"quantiles {QUANTILES} of {min(count, CALIBRATION_ROWS)} rows" if precision == "int8" else None,
    }
    if approximate:
        codes = np.load(folder / "codes.npy", mmap_mode="r", allow_pickle=False)
        part = CompactPart(folder, record, codes, quantizer)
        record["approximate"] = build_compact_ivf(part, vectors, calibration=calibration)
        del part, codes
    (folder / "compact.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


__all__ = [
    "COMPACT_DIR",
    "PRECISIONS",
    "RESCORE",
    "CompactPart",
    "Quantizer",
    "bytes_per_document",
    "check_compact_similarity",
    "describe_precision",
    "check_precision",
    "check_rescore",
    "rescore_rows",
    "write_compact_part",
]
