"""The learned-sparse part of an index (`sparse_part.py`) in a Milvus collection: a second SPARSE_FLOAT_VECTOR field,
`learned_sparse`, beside the BM25 one (`lexical`), with an inverted index and the inner product metric.

A document's vector is its row of the folder's CSR matrix (term id = the sparse model's vocabulary id, weight as
stored: float32, so the engine's inner product is the folder's dot product); a document with no term holds one weight
at `NO_TERM_KEY`, which no query holds (as the lexical field does: Milvus refuses an empty sparse vector). The
collection's record keeps the folder's sparse record (`"sparse"`: the model's name and fingerprint, the vocabulary
width), so a search loads the recorded sparse model and refuses another one, as the folder does
(`sparse_part.SparseQueryEncoder`).

The engine returns the documents that share a term with the query, best first; the folder's exact search ranks every
document, those sharing none scoring 0 (equal scores by the lower row). `with_zero_rows` completes the engine's list
by that rule, so the sparse first stage, and the hybrid that fuses it, give the folder's documents and scores.
Milvus holds finite, non-negative weights only: a part with another weight is refused at the export, a query with
one at the search, each naming the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...index.sparse_part import SparseQueryEncoder

SPARSE_FIELD = "learned_sparse"
NO_TERM_KEY = 0xFFFFFFFE  # the one dimension of a document with no term (as `milvus.NO_TERM_KEY`)
ADD_SPARSE = "'hf-siamese index CORPUS -o LOCATION --sparse-model SPARSE_DIR --overwrite'"


def export_record(index: Any, sparse: bool | None) -> dict[str, Any] | None:
    """The folder's sparse record to write into the collection (None: no learned-sparse field), checked before any
    work: `sparse` None exports the part where the folder has one, True requires it, False leaves it out; weights
    Milvus cannot hold (negative, NaN or infinite) are refused, naming them."""
    if sparse is not None and not isinstance(sparse, bool):
        raise ValueError(
            f"sparse={sparse!r}; accepted: True, False or None (the folder's sparse part where it has one)"
        )
    if sparse is False or (sparse is None and not index.has_sparse):
        return None
    if not index.has_sparse:
        raise ValueError(
            f"sparse=True: the folder index {index.location!r} has no sparse part to export; add it with "
            "'hf-siamese index --add-sparse IDX --sparse-model SPARSE_DIR', or give sparse=None / False"
        )
    part = index.sparse
    values = np.asarray(part.matrix.data)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        position = int(np.argmax(bad))
        row = int(np.searchsorted(np.asarray(part.matrix.indptr), position, side="right")) - 1
        raise ValueError(
            f"the sparse part of {index.location!r} (sparse model {part.model_name or '(unnamed)'!r}) gives document "
            f"row {row} the weight {float(values[position])!r} for term {int(part.matrix.indices[position])}; Milvus "
            "holds finite, non-negative weights only (SPLADE's log1p(ReLU) weights are): export without it "
            "(sparse=False), or search the folder index"
        )
    return dict(part.record)


def document_vectors(matrix: Any) -> list[dict[int, float]]:
    """Each row of a CSR `matrix` (documents' weights) as a sparse vector {term id: weight}, zero weights left out; a
    row with no weight is `{NO_TERM_KEY: 1.0}` (Milvus refuses an empty vector; no query holds that key)."""
    matrix = matrix.tocsr()
    indptr, indices, data = (np.asarray(part) for part in (matrix.indptr, matrix.indices, matrix.data))
    vectors = []
    for row in range(matrix.shape[0]):
        begin, end = int(indptr[row]), int(indptr[row + 1])
        vector = {int(t): float(w) for t, w in zip(indices[begin:end], data[begin:end], strict=True) if w != 0}
        vectors.append(vector or {NO_TERM_KEY: 1.0})
    return vectors


def query_vectors(matrix: Any, model_name: str) -> list[dict[int, float]]:
    """Each query row of a CSR `matrix` as a sparse vector ({}: a query with no term, which the engine is not asked);
    a weight Milvus cannot hold is refused, naming the query, the term and the value."""
    matrix = matrix.tocsr()
    vectors = []
    for row in range(matrix.shape[0]):
        begin, end = int(matrix.indptr[row]), int(matrix.indptr[row + 1])
        vector: dict[int, float] = {}
        for term, weight in zip(matrix.indices[begin:end].tolist(), matrix.data[begin:end].tolist(), strict=True):
            if not np.isfinite(weight) or weight < 0:
                raise ValueError(
                    f"the sparse model {model_name or '(unnamed)'!r} gives query {row} the weight {weight!r} for term "
                    f"{term}; Milvus searches finite, non-negative weights only: search the folder index, whose exact "
                    "search takes any weight"
                )
            if weight != 0:
                vector[int(term)] = float(weight)
        vectors.append(vector)
    return vectors


def with_zero_rows(scores: np.ndarray, rows: np.ndarray, k: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The engine's hits of each query (`(n, k)`, -1 padded: the documents sharing a term) completed as the folder's
    exact search ranks the whole corpus: every other document scores 0, so the lowest rows not found fill the list,
    merged by (larger score, lower row); `(n, min(k, count))`."""
    width = min(k, count)
    out_scores = np.zeros((len(rows), width), dtype=np.float32)
    out_rows = np.full((len(rows), width), -1, dtype=np.int64)
    for q, (query_scores, query_rows) in enumerate(zip(scores, rows, strict=True)):
        found = [(float(s), int(r)) for s, r in zip(query_scores, query_rows, strict=True) if r >= 0]
        seen, fill, row = {r for _, r in found}, [], 0
        while len(fill) < width and row < count:
            if row not in seen:
                fill.append((0.0, row))
            row += 1
        merged = sorted(found + fill, key=lambda pair: (-pair[0], pair[1]))[:width]
        for j, (value, hit) in enumerate(merged):
            out_scores[q, j], out_rows[q, j] = value, hit
    return out_scores, out_rows


def query_encoder(record: dict[str, Any], location: str) -> SparseQueryEncoder:
    """The recorded sparse model of the collection at `location` (loaded on first use, checked by fingerprint)."""
    rebuild = f"rebuild the collection with {ADD_SPARSE.replace('LOCATION', location)}"
    return SparseQueryEncoder(record, location, rebuild)


def missing_field(location: str, has_lexical: bool) -> str:
    """Why the sparse first stage cannot search the collection at `location` (no learned-sparse field)."""
    accepted = "dense, lexical, hybrid" if has_lexical else "dense"
    return (
        f"first stage 'sparse': the collection {location!r} has no learned-sparse field ({SPARSE_FIELD!r}); accepted "
        f"here: {accepted}. Build it with its sparse part ({ADD_SPARSE.replace('LOCATION', location)}, or "
        "export_index of a folder index that has one)"
    )


def add_field(schema: Any, indexes: Any) -> None:
    """The `learned_sparse` field and its inverted index (inner product) added to a collection's schema."""
    from pymilvus import DataType

    schema.add_field(SPARSE_FIELD, DataType.SPARSE_FLOAT_VECTOR)
    indexes.add_index(SPARSE_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP")


__all__ = [
    "SPARSE_FIELD", "add_field", "document_vectors", "export_record", "missing_field", "query_encoder",
    "query_vectors", "with_zero_rows",
]  # fmt: skip
