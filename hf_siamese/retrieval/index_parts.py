"""The input checks and small parts the vector index and the corpus-scale index share: texts, ids, top_k and dtype
checks, whether faiss is installed, unit rows (moving a finished folder into place lives in `hf_siamese.storage`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

FAISS_METRICS = {"cosine": "inner_product", "dot": "inner_product", "euclidean": "l2"}  # manhattan: exact search
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_texts(corpus: Iterable[str]) -> list[str]:
    if isinstance(corpus, str) or not isinstance(corpus, Iterable):
        raise ValueError(f"corpus must be a list of strings, got {type(corpus).__name__}; wrap one text in a list")
    texts = list(corpus)
    if not texts:
        raise ValueError("corpus is empty: an index needs at least one text")
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"corpus[{position}] is {type(text).__name__} ({text!r:.60}); every text must be a str")
    return texts


def check_ids(ids: Iterable[Any] | None, count: int) -> list[Any]:
    if ids is None:
        return list(range(count))
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise ValueError(f"ids must be a list of str or int (one per text), got {type(ids).__name__}")
    ids = [i.item() if isinstance(i, np.generic) else i for i in ids]  # numpy ints and strs -> Python ones
    if len(ids) != count:
        raise ValueError(f"ids has {len(ids)} entries but corpus has {count} texts; give exactly one id per text")
    seen: dict[Any, int] = {}
    for position, value in enumerate(ids):
        if isinstance(value, bool) or not isinstance(value, int | str) or type(value) is not type(ids[0]):
            raise ValueError(
                f"ids[{position}] is {type(value).__name__} ({value!r:.60}); ids must be all str or all int"
            )
        if value in seen:
            raise ValueError(f"duplicate id {value!r} (ids[{seen[value]}] and ids[{position}]); ids must be unique")
        seen[value] = position
    return ids


def check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ValueError(f"top_k={top_k!r}: expected a positive int (the number of hits per query)")
    return int(top_k)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> tuple[str, torch.dtype | None]:
    """(name recorded in index.json, dtype for `encode`'s autocast): float16 runs in float32 on a CPU."""
    if dtype is None:
        return "float32", None
    name = dtype if isinstance(dtype, str) else next((n for n, d in DTYPES.items() if d == dtype), None)
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: expected one of {', '.join(DTYPES)} (or the torch dtype)")
    compute = DTYPES[name]
    return name, None if name == "float32" or (name == "float16" and device.type == "cpu") else compute


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


# Extra neighbours fetched beyond top_k so that ties at the cut are decided by row number, as `exact_search` does.
TIE_MARGIN = 8


def unit_length_rows(vectors: np.ndarray, chunk: int = 16_384) -> bool:
    """Whether every row of `vectors` (a memmap is read a chunk at a time) has unit length, within float32 rounding."""
    return all(
        np.allclose(
            np.linalg.norm(np.asarray(vectors[start : start + chunk], dtype=np.float32), axis=1), 1.0, atol=1e-4
        )
        for start in range(0, len(vectors), chunk)
    )


def flat_search(
    vectors: np.ndarray, queries: np.ndarray, k: int, similarity: str, unit_vectors: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact top-k by faiss' brute-force kernel (`faiss.knn`, reading `vectors`, e.g. a read-only memmap, in place):
    `(scores, rows)` best first, ties by lower row; None where it does not apply (no faiss, a similarity other than
    dot or cosine over unit-length `vectors`, or vectors it cannot read in place). Measured on a 20k x 384 index:
    faiss' kernel served 2.2x the queries/s of `exact_search` (benchmarks/RESULTS.md, "bench_index")."""
    if not (similarity == "dot" or (similarity == "cosine" and unit_vectors)) or not faiss_available():
        return None
    if vectors.dtype != np.float32 or not vectors.flags.c_contiguous or vectors.ndim != 2:
        return None
    import faiss

    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if similarity == "cosine":
        queries = np.ascontiguousarray(unit_rows(queries), dtype=np.float32)
    scores, rows = faiss.knn(queries, vectors, min(len(vectors), k + TIE_MARGIN), metric=faiss.METRIC_INNER_PRODUCT)
    order = np.lexsort((rows, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)
