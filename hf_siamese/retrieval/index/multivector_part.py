"""The multi-vector part of an index folder: every document's token vectors by a `MultiVectorModel` (ColBERT late
interaction), stored once so that a search reranks its first stage's candidates by exact MaxSim without encoding a
document (`multivector_rerank.MultiVectorReranker`).

    multivector/   vectors.npy  (tokens, dim) float16, or int8 with scales.npy (tokens,) float32: one scale per token
                   (symmetric: max |x| / 127, so x ~ q * scale within scale / 2 per dimension)
                   offsets.npy  (count + 1,) int64: document i's vectors are rows offsets[i]:offsets[i + 1]
                   multivector.json: the model (name or path, fingerprint), count, dim, tokens, precision, scale
                   All memory-mapped (`np.load(mmap_mode="r")`), no pickle.

Bytes a token: 2 x dim at float16 (256 for dim 128), dim + 4 at int8 (132 for dim 128), plus 8 a document (offsets).

Written shard by shard (`shard_size` documents) into a staging folder: each shard's vectors, scales and offsets are
appended to their files, flushed, and only then counted in `progress.json` (written whole or not at all, with what
the part is made of: model fingerprint, precision, corpus). A stopped write resumes after its last counted shard
(bytes past it are cut off); one of another model, precision or corpus starts afresh. The arrays are `.npy` files
from the start: a fixed-size header, rewritten with the final shape at the end. The finished folder is swapped into
place whole with the index (`build_index(..., multivector_model=)`) or on its own (`index_additions.add_multivector`),
so an index has the whole part or none.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...storage import read_json_object, write_text_atomic
from .fingerprint import check_part_model
from .parts import resolve_dtype, resolve_part_model
from .sparse_part import sparse_fingerprint

MULTIVECTOR_DIR, MULTIVECTOR_FILE, PROGRESS_FILE = "multivector", "multivector.json", "progress.json"
PRECISIONS = ("float16", "int8")
ADD_PART = "build_index(..., multivector_model=...) or add_multivector() ('hf-siamese index --multi-vector-model MV' "
ADD_PART += "/ '--add-multi-vector IDX --multi-vector-model MV')"
_HEADER_BYTES = 128  # every array's .npy header: room for any shape, so the final one is written in place
_VECTOR_DTYPES = {"float16": np.float16, "int8": np.int8}


def bytes_per_token(dim: int, precision: str) -> int:
    """Bytes one stored token vector takes: 2 x dim (float16), dim + 4 (int8 and its float32 scale)."""
    return 2 * dim if check_precision(precision) == "float16" else dim + 4


def check_precision(precision: Any) -> str:
    """`precision` if it is one of `PRECISIONS`, else a `ValueError` naming it and those accepted."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"multi-vector precision {precision!r}: accepted: {', '.join(PRECISIONS)} (float16: 2 bytes a dimension; "
            "int8: 1, with one float32 scale a token)"
        )
    return str(precision)


def multivector_fingerprint(model: Any) -> str:
    """The multi-vector model's fingerprint: its config and evenly strided samples of its weights
    (`sparse_part.sparse_fingerprint`, the same digest)."""
    return sparse_fingerprint(model)


def resolve_multivector_model(model: Any, tokenizer: Any = None, device: str | None = None) -> tuple[Any, Any, str]:
    """(model, tokenizer, recorded name) of `model`: a loaded multi-vector model or the folder / Hub id of one (a
    hf-siamese multi-vector folder or a sentence-transformers MultiVectorEncoder folder): `parts.resolve_part_model`."""
    return resolve_part_model(model, tokenizer, device, "multi-vector", "multivector_model")


def _header(dtype: Any, shape: tuple[int, ...]) -> bytes:
    """A version 1.0 `.npy` header of exactly `_HEADER_BYTES` (padded with spaces, as numpy pads its own)."""
    text = repr({"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape})
    body = text.ljust(_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body.encode("latin1")


class _Arrays:
    """The part's three growing arrays in a staging folder: opened for appending, cut back to what `progress` counts
    (what a stopped write added after its last counted shard goes), headers rewritten with the shapes at the end."""

    def __init__(self, folder: Path, dim: int, precision: str, documents: int, tokens: int) -> None:
        self.folder, self.dim, self.precision = folder, dim, precision
        self.shapes = {"vectors": (tokens, dim), "offsets": (documents + 1,), "scales": (tokens,)}
        self.dtypes = {"vectors": _VECTOR_DTYPES[precision], "offsets": np.int64, "scales": np.float32}
        if precision != "int8":
            del self.shapes["scales"], self.dtypes["scales"]
        self.files = {}
        for name, dtype in self.dtypes.items():
            path = folder / f"{name}.npy"
            if not path.exists():
                path.write_bytes(_header(dtype, (0,) * len(self.shapes[name])))
                if name == "offsets":
                    with open(path, "ab") as handle:
                        handle.write(np.zeros(1, np.int64).tobytes())
            size = _HEADER_BYTES + int(np.prod(self.shapes[name])) * np.dtype(dtype).itemsize
            if path.stat().st_size < size:
                raise ValueError(f"{os.fspath(path)!r} is shorter than its recorded progress")
            os.truncate(path, size)
            self.files[name] = open(path, "ab")  # noqa: SIM115 - closed by close()
        self.end = tokens  # the last document's end offset

    def append(self, vectors: list[torch.Tensor]) -> None:
        lengths = np.array([len(v) for v in vectors], dtype=np.int64)
        flat = torch.cat(vectors).numpy() if vectors else np.zeros((0, self.dim), np.float32)
        if flat.shape[1:] != (self.dim,):
            raise ValueError(f"the multi-vector model gave {flat.shape[1:]}-wide vectors; this part holds {self.dim}")
        if self.precision == "int8":
            scale = np.abs(flat).max(axis=1) / 127.0 if len(flat) else np.zeros(0, np.float32)
            scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
            stored = np.clip(np.rint(flat / scale[:, None]), -127, 127).astype(np.int8)
            self.files["scales"].write(scale.tobytes())
        else:
            stored = flat.astype(np.float16)
        self.files["vectors"].write(np.ascontiguousarray(stored).tobytes())
        self.files["offsets"].write((self.end + np.cumsum(lengths)).astype(np.int64).tobytes())
        self.end += int(lengths.sum())
        for handle in self.files.values():
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()

    def finish(self, documents: int) -> None:
        """The final shapes written into the headers."""
        self.close()
        shapes = {"vectors": (self.end, self.dim), "offsets": (documents + 1,), "scales": (self.end,)}
        for name, dtype in self.dtypes.items():
            with open(self.folder / f"{name}.npy", "r+b") as handle:
                handle.write(_header(dtype, shapes[name]))


def write_multivector_part(
    folder: Path,
    corpus: Any,
    model: Any,
    tokenizer: Any,
    name: str,
    *,
    precision: str = "float16",
    corpus_key: str | None = None,
    batch_size: int = 32,
    shard_size: int = 10_000,
    dtype: str | torch.dtype | None = None,
) -> dict[str, Any]:
    """Encode the documents of `corpus` (a `datasets.Dataset` with a "text" column: the index's stored texts, row
    order) with `model` (`task="document"`) into the staging `folder` (see the module docstring), resuming what a
    stopped write of the same model, precision and corpus (`corpus_key`) left there; returns the record
    (multivector.json). Memory: one shard of vectors. `dtype`: the encoder's compute dtype ("bfloat16": 3x float32's
    documents/s on a CPU with AMX, `MultiVectorModel.encode(dtype=)`); the vectors are stored at `precision` either
    way."""
    precision = check_precision(precision)
    dtype_name, compute = resolve_dtype(dtype, next(model.parameters()).device)
    key = {
        "fingerprint": multivector_fingerprint(model), "precision": precision, "corpus": corpus_key,
        "count": len(corpus), "dim": int(model.config.embedding_dim), "dtype": dtype_name,
    }  # fmt: skip
    record = read_json_object(folder / MULTIVECTOR_FILE)
    if record is not None and record.get("key") == key and not (folder / PROGRESS_FILE).exists():
        return record  # finished by a run stopped before the swap
    progress = read_json_object(folder / PROGRESS_FILE)
    if progress is None or progress.get("key") != key or not (folder / "vectors.npy").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        progress = {"key": key, "documents": 0, "tokens": 0}
    folder.mkdir(parents=True, exist_ok=True)
    arrays = _Arrays(folder, key["dim"], precision, progress["documents"], progress["tokens"])
    try:
        for start in range(progress["documents"], len(corpus), shard_size):
            texts = list(corpus[start : start + shard_size]["text"])
            arrays.append(model.encode(texts, tokenizer, task="document", batch_size=batch_size, dtype=compute))
            progress = {"key": key, "documents": start + len(texts), "tokens": arrays.end}
            write_text_atomic(folder / PROGRESS_FILE, json.dumps(progress) + "\n")
    finally:
        arrays.close()
    arrays.finish(len(corpus))
    record = {
        "model": {"name_or_path": name, "fingerprint": key["fingerprint"]},
        "count": len(corpus),
        "dim": key["dim"],
        "tokens": arrays.end,
        "precision": precision,
        "dtype": dtype_name,
        "scale": "per-token" if precision == "int8" else None,
        "bytes_per_token": bytes_per_token(key["dim"], precision),
        "similarity": getattr(model.config, "similarity", "maxsim"),
        "key": key,
    }
    write_text_atomic(folder / MULTIVECTOR_FILE, json.dumps(record, indent=1) + "\n")
    (folder / PROGRESS_FILE).unlink()
    return record


class MultiVectorPart:
    """An index's multi-vector part, memory-mapped: `document(row)` gives a document's stored token vectors as
    float32 (int8: times their scales); `check_model(model)` refuses a model other than the recorded one."""

    def __init__(self, folder: Path, record: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.folder, self.record = folder, record
        self.vectors, self.offsets, self.scales = arrays["vectors"], arrays["offsets"], arrays.get("scales")

    @classmethod
    def load(cls, folder: str | os.PathLike) -> MultiVectorPart:
        folder = Path(folder)
        try:
            record = json.loads((folder / MULTIVECTOR_FILE).read_text(encoding="utf-8"))
            names = ("vectors", "offsets", "scales") if record["precision"] == "int8" else ("vectors", "offsets")
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in names}
            expected = {"vectors": (record["tokens"], record["dim"]), "offsets": (record["count"] + 1,)}
            expected["scales"] = (record["tokens"],)
            wrong = [name for name, array in arrays.items() if array.shape != expected[name]]
            if wrong or int(arrays["offsets"][-1]) != record["tokens"]:
                raise ValueError(f"{', '.join(wrong) or 'offsets'} do(es) not match {MULTIVECTOR_FILE}")
        except (OSError, ValueError, KeyError, TypeError, SyntaxError) as error:
            raise ValueError(
                f"corrupt multi-vector part {os.fspath(folder)!r}: {error}; rebuild it with 'hf-siamese index "
                f"--add-multi-vector {os.fspath(folder.parent)} --multi-vector-model MV --overwrite'"
            ) from None
        return cls(folder, record, arrays)

    def __len__(self) -> int:
        return int(self.record["count"])

    @property
    def model_name(self) -> str:
        return str(self.record["model"].get("name_or_path") or "")

    def document(self, row: int) -> torch.Tensor:
        """Document `row`'s stored token vectors, `(n_kept_tokens, dim)` float32."""
        if not 0 <= row < len(self):
            raise ValueError(f"row {row} is outside the multi-vector part's {len(self)} documents")
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        vectors = np.asarray(self.vectors[start:end], dtype=np.float32)
        if self.scales is not None:
            vectors = vectors * np.asarray(self.scales[start:end], dtype=np.float32)[:, None]
        return torch.from_numpy(vectors)

    def check_model(self, model: Any) -> None:
        """Raise `ValueError` unless `model` has the recorded fingerprint, naming both models."""
        index = os.fspath(self.folder.parent)
        remedy = (
            "rerank with the model that built it, or rebuild the part with 'hf-siamese index --add-multi-vector "
            f"{index} --multi-vector-model MV --overwrite'"
        )
        check_part_model(
            self.record, model, multivector_fingerprint, f"the multi-vector part of the index {index!r}", remedy
        )


__all__ = [
    "ADD_PART",
    "MULTIVECTOR_DIR",
    "PRECISIONS",
    "MultiVectorPart",
    "bytes_per_token",
    "check_precision",
    "multivector_fingerprint",
    "resolve_multivector_model",
    "write_multivector_part",
]
