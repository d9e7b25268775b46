"""A persistent vector index: embed a corpus once with `build_index`, then search it as often as needed.

An index folder holds:

    index.json               format and version, the model (name, fingerprint, embedding config), the settings the
                             corpus was embedded with, count, dim and backend
    corpus/                  a `datasets.Dataset` (`save_to_disk`) with columns `id` and `text`; row i <-> vector i
    embeddings.safetensors   tensor "embeddings", (count, dim) float32 (unit vectors when the similarity is cosine)
    faiss.index              backend "faiss" only: the index `datasets` builds and saves (`save_faiss_index`)

With faiss installed (`pip install 'hf-siamese[index]'`) the vectors go into a faiss index (inner product for cosine and
dot, L2 for euclidean); manhattan, `use_faiss=False`, or no faiss mean exact search (`hf_siamese.metrics.exact_search`).
An index whose faiss file cannot be read here (faiss missing) falls back to exact search on the stored vectors.
Searching checks the model against the recorded fingerprint, so queries are never embedded by a model other than the
one that embedded the corpus.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from .fingerprint import describe_mismatch, model_fingerprint, recorded_name
from .index_parts import (
    FAISS_METRICS,
    check_ids,
    check_texts,
    check_top_k,
    faiss_available,
    move_into_place,
    resolve_dtype,
    unit_rows,
)

logger = logging.getLogger(__name__)

FORMAT_NAME = "hf-siamese-vector-index"
FORMAT_VERSION = 1
INDEX_FILE, CORPUS_DIR, EMBEDDINGS_FILE, FAISS_FILE = "index.json", "corpus", "embeddings.safetensors", "faiss.index"


def choose_backend(use_faiss: bool | None, similarity: str) -> str:
    if use_faiss is False:
        return "exact"
    if similarity not in FAISS_METRICS:
        if use_faiss:
            raise ValueError(
                f"use_faiss=True: the {similarity!r} similarity has no faiss index here; "
                f"faiss serves {', '.join(FAISS_METRICS)} (use_faiss=None searches {similarity} exactly)"
            )
        return "exact"
    if not faiss_available():
        if use_faiss:
            raise ImportError("use_faiss=True needs faiss: pip install 'hf-siamese[index]' (faiss-cpu)")
        return "exact"
    return "faiss"


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse to build into a file or a non-empty folder unless `overwrite`, naming what is there."""
    if output.exists() and not overwrite and (output.is_file() or any(output.iterdir())):
        what = "an existing index" if _is_index(output) else "not empty and not an index"
        raise ValueError(f"output_dir {os.fspath(output)!r} is {what}; pass overwrite=True (--overwrite) to replace it")


def index_record(
    model: Any,
    fingerprint: dict[str, Any],
    document_prompt: str,
    dtype_name: str,
    shape: tuple[int, ...],
    ids: Sequence[Any],
    backend: str,
) -> dict[str, Any]:
    """The `index.json` of an index of `shape` (rows, dim) vectors with `ids`, made by `model` (every builder writes
    this one record; `faiss` and backend-specific keys are added by the caller)."""
    config = model.config
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "model": {"name_or_path": recorded_name(config.name_or_path), **fingerprint},
        "settings": {
            "pooling": config.pooling,
            "normalize": config.normalize,
            "similarity": config.similarity,
            "max_seq_length": config.effective_max_seq_length,
            "truncate_dim": config.truncate_dim,
            "document_prompt": document_prompt,
            "dtype": dtype_name,
        },
        "count": int(shape[0]),
        "dim": int(shape[1]),
        "id_type": type(ids[0]).__name__,
        "backend": backend,
        "faiss": None,
    }


def _is_index(path: Path) -> bool:
    try:
        return json.loads((path / INDEX_FILE).read_text(encoding="utf-8")).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError):
        return False


def _what_else(path: Path) -> str:
    """What a folder without index.json holds, when it is another hf-siamese folder that cannot be searched here."""
    if (path / "corpus.json").is_file():
        return (
            ": it holds corpus embeddings (encode_corpus / 'hf-siamese embed': vectors and ids, not the texts); "
            f"'hf-siamese search --corpus FILE --corpus-dir {os.fspath(path)}' searches them with the texts of FILE"
        )
    if (path / "ann.json").is_file():
        return ": it is an ANN index (vectors only), opened by hf_siamese.retrieval.ann.load_ann_index"
    return ""


# ------------------------------------------------------------------------------------------------ build


def build_index(
    model: Any,
    corpus: Sequence[str],
    output_dir: str | os.PathLike,
    *,
    ids: Sequence[str | int] | None = None,
    tokenizer: Any = None,
    batch_size: int = 64,
    dtype: str | torch.dtype | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    show_progress_bar: bool = True,
    use_faiss: bool | None = None,
    faiss_factory: str | None = None,
    overwrite: bool = False,
) -> VectorIndex:
    """Embed `corpus` once with `model` and save a searchable index in `output_dir`; returns it loaded.

    Args:
        model: a `SiameseBertModel`; its `config.similarity` decides how the index is searched.
        corpus: the texts (`str`), in order.
        output_dir: the index folder. It is written in a temporary folder beside it and moved into place at the end,
            so a failed build leaves nothing behind. An existing non-empty folder (an index or not) is replaced only
            with `overwrite=True`.
        ids: one unique `str` or `int` per text (default: the positions 0..n-1); hits carry them.
        tokenizer, batch_size, prompt_name, prompt: as in `model.encode` (the prompt is recorded in index.json).
        dtype: `"bfloat16"` / `"float16"` (or the torch dtype) to embed under autocast; vectors are stored in float32.
        use_faiss: `None` uses faiss when it is installed and the similarity allows it, `True` requires it,
            `False` always searches exactly.
        faiss_factory: a faiss index factory string (e.g. `"HNSW32"`, implies `use_faiss=True`); default a flat
            (exact) faiss index.
    """
    texts = check_texts(corpus)
    ids = check_ids(ids, len(texts))
    similarity = model.config.similarity
    if faiss_factory is not None:
        if use_faiss is False:
            raise ValueError(f"faiss_factory={faiss_factory!r} asks for a faiss index, use_faiss=False for none")
        use_faiss = True
    backend = choose_backend(use_faiss, similarity)
    dtype_name, compute = resolve_dtype(dtype, model.device)
    output = Path(output_dir)
    check_output(output, overwrite)
    document_prompt = model.resolve_prompt(prompt_name, prompt)
    fingerprint = model_fingerprint(model)
    encode_args = {"tokenizer": tokenizer, "batch_size": batch_size, "dtype": compute, "prompt": document_prompt}
    embeddings = model.encode(texts, show_progress_bar=show_progress_bar, convert_to_numpy=True, **encode_args)
    if similarity == "cosine":
        embeddings = unit_rows(embeddings)
    info = index_record(model, fingerprint, document_prompt, dtype_name, embeddings.shape, ids, backend)
    if backend == "faiss":
        info["faiss"] = {"metric": FAISS_METRICS[similarity], "factory": faiss_factory or "Flat"}

    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(f".{output.name}.building-{uuid.uuid4().hex[:8]}")
    staging.mkdir()  # beside output (same file system: the final rename is atomic), with the usual permissions
    quiet = not show_progress_bar and not datasets.utils.are_progress_bars_disabled()
    if quiet:  # the "Saving the dataset" and faiss bars
        datasets.utils.disable_progress_bars()
    try:
        table = datasets.Dataset.from_dict({"id": ids, "text": texts})
        table.save_to_disk(str(staging / CORPUS_DIR))
        from safetensors.numpy import save_file

        save_file({"embeddings": np.ascontiguousarray(embeddings)}, str(staging / EMBEDDINGS_FILE))
        os.chmod(staging / EMBEDDINGS_FILE, staging.stat().st_mode & 0o666)  # safetensors writes it 0600
        if backend == "faiss":
            import faiss

            metric = faiss.METRIC_INNER_PRODUCT if info["faiss"]["metric"] == "inner_product" else faiss.METRIC_L2
            train_size = len(embeddings) if faiss_factory else None  # IVF-like factories need training
            table.add_faiss_index_from_external_arrays(
                embeddings, "embeddings", metric_type=metric, string_factory=faiss_factory, train_size=train_size
            )
            table.save_faiss_index("embeddings", str(staging / FAISS_FILE))
            table.drop_index("embeddings")
        (staging / INDEX_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        move_into_place(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if quiet:
            datasets.utils.enable_progress_bars()
    return VectorIndex.load(output)


# ------------------------------------------------------------------------------------------------ load + search


class VectorIndex:
    """A loaded index folder (see the module docstring); make one with `build_index` or `VectorIndex.load`."""

    def __init__(self, path: Path, info: dict[str, Any], corpus: datasets.Dataset, backend: str) -> None:
        self.path, self.info, self.corpus, self.backend = path, info, corpus, backend
        self.dim, self.settings, self.model_name = info["dim"], info["settings"], info["model"]["name_or_path"]
        self.similarity = info["settings"]["similarity"]
        self._embeddings: np.ndarray | None = None

    @classmethod
    def load(cls, path: str | os.PathLike) -> VectorIndex:
        """Open an index folder. A faiss index is used when faiss is importable, else exact search (a warning)."""
        path = Path(path)
        where = os.fspath(path)
        if not (path / INDEX_FILE).is_file():
            if path.is_dir():
                what = f"{where!r} is not a vector index (no {INDEX_FILE}){_what_else(path)}"
            else:
                what = f"vector index not found: {where!r}"
            hint = "build one with build_index() or 'hf-siamese index'"
            raise FileNotFoundError(2, f"{what}; {hint}", where)
        try:
            info = json.loads((path / INDEX_FILE).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise ValueError(f"corrupt vector index {where!r}: {INDEX_FILE} is not valid JSON ({err})") from None
        found = info.get("format") if isinstance(info, dict) else type(info).__name__
        if found != FORMAT_NAME:
            raise ValueError(f"{where!r}: {INDEX_FILE} has format {found!r}, expected {FORMAT_NAME!r}")
        if info.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"vector index {where!r} has format version {info.get('format_version')!r}; this hf-siamese reads "
                f"version {FORMAT_VERSION}: rebuild the index"
            )
        if info.get("backend") == "shards":  # corpus_index imports this module: it opens its own folders
            raise ValueError(
                f"{where!r} is a streamed index ('hf-siamese index --streamed', build_corpus_index): open it with "
                "hf_siamese.load_index (hf_siamese.retrieval.corpus_index.load_index)"
            )
        missing = [key for key in ("model", "settings", "count", "dim", "backend") if key not in info]
        files = (CORPUS_DIR, EMBEDDINGS_FILE) + ((FAISS_FILE,) if info.get("backend") == "faiss" else ())
        missing += [name for name in files if not (path / name).exists()]
        if missing:
            raise ValueError(f"corrupt vector index {where!r}: {', '.join(missing)} missing; rebuild the index")
        try:
            corpus = datasets.load_from_disk(str(path / CORPUS_DIR))
            from safetensors import safe_open

            with safe_open(str(path / EMBEDDINGS_FILE), framework="numpy") as file:
                shape = tuple(file.get_slice("embeddings").get_shape())
        except Exception as err:
            raise ValueError(f"corrupt vector index {where!r}: {type(err).__name__}: {err}") from None
        expected = (info["count"], info["dim"])
        if len(corpus) != info["count"] or shape != expected or corpus.column_names != ["id", "text"]:
            raise ValueError(
                f"corrupt vector index {where!r}: {INDEX_FILE} says {expected[0]} x {expected[1]}, the corpus has "
                f"{len(corpus)} rows ({corpus.column_names}), the embeddings are {shape}"
            )
        backend = info["backend"]
        if backend == "faiss" and not faiss_available():
            logger.warning("faiss is not installed: searching %s exactly (pip install 'hf-siamese[index]')", where)
            backend = "exact"
        if backend == "faiss":
            try:
                corpus.load_faiss_index("embeddings", str(path / FAISS_FILE))
            except Exception as err:  # faiss raises RuntimeError for an unreadable file
                raise ValueError(f"corrupt vector index {where!r}: {FAISS_FILE}: {err}") from None
        return cls(path, info, corpus, backend)

    def __len__(self) -> int:
        return self.info["count"]

    def __repr__(self) -> str:
        return (
            f"VectorIndex({os.fspath(self.path)!r}, count={len(self)}, dim={self.dim}, "
            f"similarity={self.similarity!r}, backend={self.backend!r})"
        )

    @property
    def embeddings(self) -> np.ndarray:
        """The stored (count, dim) float32 vectors, read on first use."""
        if self._embeddings is None:
            from safetensors.numpy import load_file

            self._embeddings = load_file(str(self.path / EMBEDDINGS_FILE))["embeddings"]
        return self._embeddings

    def check_model(self, model: Any) -> None:
        """Raise `ValueError` unless `model` has the fingerprint of the model that embedded the corpus."""
        recorded, current = self.info["model"], model_fingerprint(model)
        if current["fingerprint"] != recorded.get("fingerprint"):
            name = recorded_name(model.config.name_or_path) or "(an unnamed model)"
            raise ValueError(
                f"this index was built with model {recorded.get('name_or_path') or '(an unnamed model)'!r} "
                f"(fingerprint {str(recorded.get('fingerprint'))[:12]}), not {name!r} (fingerprint "
                f"{current['fingerprint'][:12]}): {describe_mismatch(recorded, current)}. Search with the model that "
                "built the index, or rebuild the index with this one."
            )

    def search(
        self,
        model: Any,
        queries: str | Sequence[str],
        top_k: int = 10,
        *,
        tokenizer: Any = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
    ) -> list[list[dict[str, Any]]]:
        """Embed `queries` with `model` (checked against the index) and return, per query, the `top_k` best hits
        `{"id", "text", "score", "rank"}`, best first. `prompt_name` / `prompt` as in `model.encode`."""
        top_k = check_top_k(top_k)
        self.check_model(model)
        queries = [queries] if isinstance(queries, str) else list(queries)
        embeddings = model.encode(
            queries, tokenizer=tokenizer, batch_size=batch_size, prompt_name=prompt_name, prompt=prompt
        )
        return self.search_embeddings(embeddings, top_k)

    def search_embeddings(self, query_embeddings: Any, top_k: int = 10) -> list[list[dict[str, Any]]]:
        """Hits for precomputed query vectors `(n, dim)` (numpy or torch; one `(dim,)` vector is one query)."""
        top_k = check_top_k(top_k)
        if isinstance(query_embeddings, torch.Tensor):
            query_embeddings = query_embeddings.detach().float().cpu().numpy()
        queries = np.asarray(query_embeddings, dtype=np.float32)
        queries = queries[None] if queries.ndim == 1 else queries
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"query_embeddings have shape {queries.shape}; this index expects (n, {self.dim})")
        if not np.isfinite(queries).all():
            raise ValueError("query_embeddings hold NaN or inf values; expected finite vectors")
        if len(queries) == 0:
            return []
        scores, indices = self._top_k(queries, min(top_k, len(self)))
        found = sorted({int(i) for i in indices.ravel() if i >= 0})
        rows = self.corpus[found] if found else {"id": [], "text": []}
        by_index = {i: (doc_id, text) for i, doc_id, text in zip(found, rows["id"], rows["text"], strict=True)}
        return [
            [
                {"id": by_index[i][0], "text": by_index[i][1], "score": float(s), "rank": rank}
                for rank, (s, i) in enumerate(((s, int(i)) for s, i in zip(row_s, row_i, strict=True) if i >= 0), 1)
            ]
            for row_s, row_i in zip(scores, indices, strict=True)
        ]

    def _top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, indices), each (n, k), best first; ties -> lower corpus index first (as exact search)."""
        if self.backend != "faiss":
            from ..metrics import exact_search

            return exact_search(queries, self.embeddings, k, similarity=self.similarity)
        if self.similarity == "cosine":
            queries = unit_rows(queries)
        scores, indices = self.corpus.search_batch("embeddings", np.ascontiguousarray(queries), k=k)
        scores, indices = np.asarray(scores, dtype=np.float32), np.asarray(indices, dtype=np.int64)
        if self.info["faiss"]["metric"] == "l2":  # faiss gives squared distances; the similarity is -distance
            scores = -np.sqrt(np.maximum(scores, 0.0))
        scores = np.where(indices >= 0, scores, -np.inf)
        order = np.lexsort((np.where(indices >= 0, indices, np.iinfo(np.int64).max), -scores), axis=1)
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(indices, order, axis=1)


def load_index(path: str | os.PathLike) -> VectorIndex:
    """Open an index folder written by `build_index` (same as `VectorIndex.load`)."""
    return VectorIndex.load(path)
