"""The learned-sparse part of an index folder: the documents' term weights by a `SparseSiameseModel` (SPLADE,
inference-free), searched alone (`first_stage="sparse"`) or fused with the vectors (and BM25) by the hybrid first stage
(`hybrid.stage_lists`).

    sparse/        indptr.npy (int64, count + 1), indices.npy (int32 term ids), data.npy (float32 weights): the CSR
                   matrix of the documents (row i <-> text i), memory-mapped, no pickle; sparse.json: the model
                   (name or path, fingerprint), count, vocabulary width, stored weights

Built from the same corpus pass as the vectors (`build_index(..., sparse_model=...)`: from the staged texts, inside the
staged build) or added later from the stored texts (`index_additions.add_sparse`, as `add_lexical`): written to
`.sparse.building` and swapped into place whole, so a stopped build leaves no half part. A search loads the recorded
sparse model, checks its fingerprint (another model at that path is refused, naming both) and ranks exactly as
`sparse_search.sparse_search` does (dot products; equal scores by the lower row).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..ranking.sparse import encode_sparse, sparse_search, term_major
from .fingerprint import check_part_model
from .parts import resolve_part_model

SPARSE_DIR, SPARSE_FILE = "sparse", "sparse.json"
_ARRAYS = {"indices": np.int32, "data": np.float32}
_VOLATILE = frozenset(
    "transformers_version architectures dtype torch_dtype auto_map name_or_path id2label label2id".split()
)
_WEIGHT_SAMPLES = 65_536


def _stable(config: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _stable(value) if isinstance(value, dict) else value
        for key, value in config.items()
        if not str(key).startswith("_") and key not in _VOLATILE
    }


def sparse_fingerprint(model: Any) -> str:
    """A digest of a sparse model's config (what decides its term weights) and of evenly strided samples of every
    parameter (name, shape, dtype, values): cheap whatever the model size, changed by any real change of weights."""
    config = json.dumps(_stable(model.config.to_dict()), sort_keys=True, default=str)
    digest = hashlib.sha256(config.encode())
    for name, parameter in sorted(model.named_parameters()):
        flat = parameter.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // _WEIGHT_SAMPLES)][:_WEIGHT_SAMPLES].contiguous().cpu()
        digest.update(f"{name}|{tuple(parameter.shape)}|{parameter.dtype}|".encode())
        digest.update(sample.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def resolve_sparse_model(sparse_model: Any, tokenizer: Any = None, device: str | None = None) -> tuple[Any, Any, str]:
    """(model, tokenizer, recorded name) of `sparse_model`: a loaded sparse model or the folder / Hub id of one (also
    sentence-transformers' SparseEncoder folder): `parts.resolve_part_model`."""
    return resolve_part_model(sparse_model, tokenizer, device, "sparse", "sparse_model")


def write_sparse_part(
    folder: Path, texts: Iterable[list[str]], model: Any, tokenizer: Any, name: str, batch_size: int = 32
) -> dict[str, Any]:
    """Encode the documents (`texts`: batches of them, in row order) into `folder` (see the module docstring); returns
    the record (sparse.json). Memory: one batch of vectors; the arrays are appended to on disk."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lengths: list[np.ndarray] = []
    width = int(model.config.vocab_size_of_encoder)
    with open(folder / "indices.part", "wb") as indices, open(folder / "data.part", "wb") as data:
        for batch in texts:
            matrix = encode_sparse(model, batch, task="document", tokenizer=tokenizer, batch_size=batch_size)
            matrix.sort_indices()
            matrix.indices.astype(np.int32).tofile(indices)
            matrix.data.astype(np.float32).tofile(data)
            lengths.append(np.diff(matrix.indptr).astype(np.int64))
    counts = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    np.save(folder / "indptr.npy", np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    for part, dtype in _ARRAYS.items():
        source = folder / f"{part}.part"
        with open(folder / f"{part}.npy", "wb") as handle, open(source, "rb") as values:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
            np.lib.format.write_array_header_2_0(handle, {**header, "shape": (int(counts.sum()),)})
            shutil.copyfileobj(values, handle, 1 << 24)
        source.unlink()
    record = {
        "model": {"name_or_path": name, "fingerprint": sparse_fingerprint(model)},
        "count": len(counts),
        "vocab": width,
        "weights": int(counts.sum()),
    }
    (folder / SPARSE_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def texts_in_batches(corpus: Any, batch: int) -> Iterable[list[str]]:
    """The "text" column of a `datasets.Dataset` (the stored texts of an index), `batch` rows at a time."""
    for start in range(0, len(corpus), batch):
        yield list(corpus[start : start + batch]["text"])


class SparseQueryEncoder:
    """The recorded sparse model of a learned-sparse part, wherever the documents' weights live (an index folder's
    CSR arrays, `SparsePart`; a Milvus collection's sparse field, `milvus_sparse`): loaded from its recorded path on
    first use, or given (`use_model`), and checked against the recorded fingerprint either way; `encode_queries` gives
    the queries' CSR matrix (`task="query"`: an inference-free model looks its query weights up)."""

    def __init__(self, record: dict[str, Any], where: str, rebuild: str) -> None:
        self.record, self.where, self.rebuild = record, where, rebuild
        self.model: Any = None
        self.tokenizer: Any = None

    def __len__(self) -> int:
        return int(self.record["count"])

    @property
    def model_name(self) -> str:
        return str(self.record["model"].get("name_or_path") or "")

    def use_model(self, model: Any, tokenizer: Any = None) -> None:
        """Search with `model` (and `tokenizer`): refused unless it has the recorded fingerprint."""
        remedy = f"search with the sparse model that built it, or {self.rebuild}"
        part = "the sparse part of this index"
        check_part_model(self.record, model, sparse_fingerprint, part, remedy, model_words="sparse model ")
        self.model, self.tokenizer = model, tokenizer

    def encode_queries(self, queries: list[str], batch_size: int = 32) -> Any:
        """The `(n, vocab)` CSR matrix of `queries` by the recorded sparse model (loaded and checked on first use)."""
        if self.model is None:
            if not self.model_name:
                raise ValueError(
                    f"the sparse part {self.where!r} records no model path (built from an unsaved model): give the "
                    "model (index.sparse.use_model(model, tokenizer))"
                )
            model, tokenizer, _ = resolve_sparse_model(self.model_name)
            self.use_model(model, tokenizer)
        return encode_sparse(self.model, queries, task="query", tokenizer=self.tokenizer, batch_size=batch_size)


class SparsePart(SparseQueryEncoder):
    """An index's sparse part, memory-mapped; `search(queries, k)` encodes the queries with the recorded sparse model
    (loaded on first use and checked against the recorded fingerprint) and ranks the rows exactly."""

    def __init__(self, folder: Path, record: dict[str, Any], matrix: Any) -> None:
        rebuild = "rebuild the part with 'hf-siamese index --add-sparse IDX --sparse-model SPARSE_DIR --overwrite'"
        super().__init__(record, os.fspath(folder), rebuild)
        self.folder, self.matrix, self.by_term = folder, matrix, None

    @classmethod
    def load(cls, folder: str | os.PathLike) -> SparsePart:
        import scipy.sparse

        folder = Path(folder)
        try:
            record = json.loads((folder / SPARSE_FILE).read_text(encoding="utf-8"))
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ("indptr", *_ARRAYS)}
            shape = (int(record["count"]), int(record["vocab"]))
            matrix = scipy.sparse.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=shape)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"corrupt sparse part {os.fspath(folder)!r}: {error}; rebuild it with 'hf-siamese index --add-sparse "
                f"{os.fspath(folder.parent)} --sparse-model SPARSE_DIR --overwrite'"
            ) from None
        return cls(folder, record, matrix)

    def search(self, queries: list[str], k: int, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each `(n, min(k, count))`, best first, equal scores by the lower row."""
        if self.by_term is None:  # made on the first search and kept: one pass over the part, not one a search
            self.by_term = term_major(self.matrix)
        return sparse_search(self.encode_queries(queries, batch_size), self.matrix, k, by_term=self.by_term)


__all__ = [
    "SPARSE_DIR",
    "SparsePart",
    "SparseQueryEncoder",
    "resolve_sparse_model",
    "sparse_fingerprint",
    "write_sparse_part",
]
