"""An approximate index over an index's compact codes (`compact.py`, `build_index(..., precision="int8" or "binary",
approximate=True)`): a faiss IVF whose candidates the float32 vectors then rescore, as the exact compact search's.

    binary  `IndexBinaryIVF` (quantizer `IndexBinaryFlat`, Hamming) over the stored code rows, d = their padded bits
    int8    `IndexIVFScalarQuantizer` (QT_8bit, inner product, not by residual) holding the stored codes themselves
            (faiss' uint8 c + 127 with the calibrated ranges, as `CompactPart._int8_index` sets up the exact kernel),
            assigned to lists by the float rows (unit length for cosine) against an `IndexFlatIP` quantizer

Lists: `choose_factory`'s count (the power of two at or above 4 x sqrt(N) up to 1M, its IVF's beyond), at most N;
trained on a seeded uniform sample of up to 39 rows a list (faiss' minimum), all rows then added a chunk at a time.
nprobe: the smallest of 1, 2, 3, 4, 6, 8, 12, ... (`nprobe_ladder`) whose search, rescored as the search rescores
(`rescore` x max(10, 100) candidates), finds `RECALL_TARGET` (0.999) of the exact compact search's rescored top 10,
measured on the calibration queries, else on up to 1,000 held-out rows (their own row not counted). The end result is
what is compared, so the candidates' ranking by the codes may differ wherever the rescoring sorts it out.

On disk: compact/ivf.faiss (written whole or not at all: `write_ivf`), and compact.json's "approximate": lists,
nprobe, recall@10, queries, what they were, the nprobe -> recall curve, the training rows and the seed. It holds the
codes a second time (plus 8 bytes a row for the row number), beside codes.npy, which the exact search and the
measurement read. Probing every list is exact search, served by the exact kernel: the same rows, the same scores.
Memory while building: the training sample, one chunk of vectors and the index's codes (1/4 or 1/32 of float32; int8's
exact kernel holds them once more while measuring, as its exact search does); the file is memory-mapped for search.
The nprobe fits the recorded rescore: a lower `rescore` at search time loses recall.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from ...storage import write_atomic
from ..exact import unit_rows
from .ann import (
    EXACT_BELOW,
    RECALL_AT,
    RECALL_TARGET,
    TRAIN_PER_CENTROID,
    choose_factory,
    import_faiss,
    ivf_lists,
)
from .ann_build import nprobe_ladder
from .ann_chunks import drop_self
from .matrix import read_block, read_rows

logger = logging.getLogger(__name__)

IVF_FILE = "ivf.faiss"
IVF_PRECISIONS = ("int8", "binary")
RECALL_QUERIES = 1000
_CHUNK = 65_536


def check_approximate_precision(precision: str) -> None:
    """A `ValueError` where `approximate=True` meets a compact precision that has no IVF here (float16)."""
    if precision not in IVF_PRECISIONS:
        raise ValueError(
            f"approximate=True (--approximate) with precision={precision!r}: the approximate index over compact codes "
            f"serves precision {' and '.join(IVF_PRECISIONS)} ({precision} is searched exactly); give one of them, "
            "or no --approximate"
        )


def compact_lists(count: int, dim: int) -> int:
    """The IVF's lists for `count` rows: `choose_factory`'s (below `EXACT_BELOW`, where it chooses exact search, its
    rule for larger corpora: the power of two at or above 4 x sqrt(count)), at least 1 and at most `count`."""
    lists = ivf_lists(choose_factory(count, dim)) if count >= EXACT_BELOW else None
    lists = lists or 1 << math.ceil(math.log2(4 * math.sqrt(count)))
    return max(1, min(lists, count))


def describe_ivf(record: dict[str, Any] | None) -> str:
    """ ", IVF over the codes (64 lists, nprobe 8)" where the compact part has one, else ""."""
    return f", IVF over the codes ({record['lists']} lists, nprobe {record['nprobe']})" if record else ""


def write_ivf(index: Any, path: Path) -> None:
    """The faiss index written to `path` whole or not at all (a temporary file renamed into place)."""
    faiss = import_faiss()
    write = faiss.write_index_binary if isinstance(index, faiss.IndexBinary) else faiss.write_index
    write_atomic(path, lambda temporary: write(index, str(temporary)))


def load_ivf(folder: Path, precision: str) -> Any:
    """The IVF in `folder`, memory-mapped where this faiss can (read otherwise); a `ValueError` naming a bad file."""
    faiss = import_faiss()
    read = faiss.read_index_binary if precision == "binary" else faiss.read_index
    path = str(folder / IVF_FILE)
    try:
        try:
            index = read(path, getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP))
        except RuntimeError:
            index = read(path)
    except RuntimeError as err:
        raise ValueError(f"corrupt compact IVF {path!r} ({str(err).strip()[-160:]}); rebuild the index") from None
    return index  # binary: faiss' heap (its `use_heap=False` counting, faster, finds nothing in lists short of k rows)


def ivf_candidates(part: Any, index: Any, queries: np.ndarray, depth: int, nprobe: int) -> tuple[np.ndarray, Any]:
    """(scores, rows), best first as faiss gives them, of the `depth` best rows by the codes in the `nprobe` lists
    nearest each query (float32 `queries`, unit rows for cosine); a slot with no row: -1, score -inf."""
    faiss = import_faiss()
    params = faiss.SearchParametersIVF(nprobe=nprobe)
    if part.precision == "binary":
        distances, rows = index.search(part.quantizer.encode(queries), depth, params=params)
        scores = 1.0 - 2.0 * distances.astype(np.float32) / part.quantizer.dim
    else:
        scores, rows = index.search(queries, depth, params=params)
    return np.where(rows >= 0, scores, -np.inf).astype(np.float32), rows.astype(np.int64)


def _train(faiss: Any, part: Any, vectors: np.ndarray, picked: np.ndarray, lists: int, seed: int) -> Any:
    """The IVF of `lists` lists trained on the rows `picked` (sorted): binary on their codes, int8 on their float rows
    (the codes' ranges then set to the part's calibrated ones)."""
    if part.precision == "binary":
        bits = 8 * part.codes.shape[1]
        index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, lists)
        index.cp.seed = seed
        index.train(np.ascontiguousarray(part.codes[picked]))
        return index
    dim, quantizer = part.quantizer.dim, part.quantizer
    qtype, metric = faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
    index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, lists, qtype, metric, False)
    index.cp.seed = seed
    sample = read_rows(vectors, picked)
    index.train(np.ascontiguousarray(unit_rows(sample) if part.similarity == "cosine" else sample))
    trained = np.concatenate([quantizer.centers - 127.5 * quantizer.steps, 255.0 * quantizer.steps])
    faiss.copy_array_to_vector(trained.astype(np.float32), index.sq.trained)
    return index


def _add_rows(index: Any, part: Any, vectors: np.ndarray) -> None:
    """Every row added a chunk at a time, with its stored code (so the IVF scores exactly as the exact search)."""
    coarse = 0 if part.precision == "binary" else index.coarse_code_size()
    for start in range(0, len(part.codes), _CHUNK):
        stop = min(start + _CHUNK, len(part.codes))
        codes = read_block(part.codes, start, stop)
        if part.precision == "binary":
            index.add(np.ascontiguousarray(codes))
            continue
        block = np.asarray(vectors[start:stop], dtype=np.float32)
        block = np.ascontiguousarray(unit_rows(block) if part.similarity == "cosine" else block)
        encoded = index.sa_encode(block)  # the list number (first `coarse` bytes), then faiss' own code
        encoded[:, coarse:] = (codes.astype(np.int16) + 127).astype(np.uint8)
        index.add_sa_codes(encoded)


def build_compact_ivf(
    part: Any, vectors: np.ndarray, *, calibration: np.ndarray | None = None, seed: int = 0
) -> dict[str, Any]:
    """Build the IVF of the compact part `part` (its codes written, `compact.CompactPart`) from the float32 `vectors`
    (a memmap, read a chunk at a time), write it into the part's folder and choose its nprobe (module docstring);
    returns compact.json's "approximate" record. `calibration`: query vectors to measure on (else held-out rows)."""
    faiss = import_faiss()
    count = len(part.codes)
    lists = compact_lists(count, part.quantizer.dim)
    order = np.random.default_rng(seed).permutation(count)
    held = 0 if calibration is not None else min(RECALL_QUERIES, count // 2 if count > 1 else 0)
    train_rows = min(count, TRAIN_PER_CENTROID * lists)
    training = order[held : held + train_rows] if held + train_rows <= count else order[count - train_rows :]
    index = _train(faiss, part, vectors, np.sort(training), lists, seed)
    _add_rows(index, part, vectors)
    write_ivf(index, part.folder / IVF_FILE)
    del index
    part.approximate = {"lists": lists, "nprobe": lists}  # searched through the file just written while measuring
    if calibration is not None:
        queries, own = np.ascontiguousarray(calibration, dtype=np.float32), None
    else:
        own = np.sort(order[:held])
        queries = np.ascontiguousarray(vectors[own], dtype=np.float32)
    nprobe, recall, curve = _choose_nprobe(part, vectors, queries, own, lists)
    record = {
        "lists": lists,
        "nprobe": nprobe,
        "recall@10": recall,
        "queries": len(queries) if recall is not None else 0,
        "measured_on": "calibration queries" if calibration is not None else "held-out corpus rows",
        "curve": curve,
        "train_size": int(train_rows),
        "seed": seed,
    }
    logger.info("%s: IVF over the codes, %d lists, nprobe %d, recall@10 %s", part.folder, lists, nprobe, recall)
    return record


def _choose_nprobe(
    part: Any, vectors: np.ndarray, queries: np.ndarray, own: np.ndarray | None, lists: int
) -> tuple[int, float | None, dict[str, float]]:
    """(nprobe, recall@10 at it, {nprobe: recall}): the smallest of `nprobe_ladder(lists)` whose rescored top 10 holds
    `RECALL_TARGET` of the exact compact search's (every list, the last rung, is exact: recall 1)."""
    extra = 0 if own is None else 1
    k = min(RECALL_AT, len(part.codes) - extra)
    if k < 1 or not len(queries):
        return lists, None, {}
    exact = drop_self(part.search(queries, k + extra, vectors, nprobe=lists)[1], own, k)
    curve: dict[str, float] = {}
    for probes in nprobe_ladder(lists):
        found = drop_self(part.search(queries, k + extra, vectors, nprobe=probes)[1], own, k)
        recall = float((found[:, :, None] == exact[:, None, :]).any(2).mean())
        curve[str(probes)] = round(recall, 4)
        if recall >= RECALL_TARGET:
            return probes, round(recall, 4), curve
    return lists, 1.0, curve  # not reached: the ladder ends at every list, which is exact


__all__ = [
    "IVF_FILE",
    "IVF_PRECISIONS",
    "build_compact_ivf",
    "check_approximate_precision",
    "compact_lists",
    "describe_ivf",
    "ivf_candidates",
    "load_ivf",
    "write_ivf",
]
