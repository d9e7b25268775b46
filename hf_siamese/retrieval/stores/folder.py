"""The vector index (`VectorIndex`): opening and searching an index folder that `index_build.build_index` wrote (its
layout: index_build.py): the vectors exactly or through the approximate index, the lexical part, and the first
stages dense, lexical and hybrid."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..exact import exact_search, unit_length_rows
from ..fusion.hybrid import SPARSE_PART
from ..index.compact import COMPACT_DIR, CompactPart, check_rescore
from ..index.lexical import LEXICAL_DIR, LexicalIndex
from ..index.matrix import corpus_matrix
from ..index.parts import faiss_available
from ..index.sparse_part import SPARSE_DIR, SparsePart
from .base import SearchIndex

logger = logging.getLogger(__name__)

FORMAT_NAME = "hf-siamese-vector-index"
FORMAT_VERSION = 2
INDEX_FILE, TEXTS_FILE, EMBEDDINGS_DIR = "index.json", "texts.arrow", "embeddings"


def _open_failure(path: Path) -> str:
    """Why `path` is not an index folder of this version, in one line that says what to do."""
    where = os.fspath(path)
    if not path.exists():
        return f"vector index not found: {where!r}; build one with build_index() or 'hf-siamese index'"
    if not (path / INDEX_FILE).is_file():
        if (path / "corpus.json").is_file():
            return (
                f"{where!r} holds corpus embeddings (encode_corpus / 'hf-siamese embed': vectors and ids, not the "
                f"texts), not an index; 'hf-siamese search --corpus FILE --embeddings-dir {where}' searches them with "
                "the texts of FILE, 'hf-siamese index FILE -o DIR' makes an index"
            )
        if (path / "ann.json").is_file():
            return f"{where!r} is an ANN index (vectors only), opened by hf_siamese.retrieval.index.ann.load_ann_index"
        return f"{where!r} is not a vector index (no {INDEX_FILE}); build one with build_index() or 'hf-siamese index'"
    return ""


class VectorIndex(SearchIndex):
    """A loaded index folder (see the module docstring); make one with `build_index` or `VectorIndex.load`. Searched
    through `store.SearchIndex` (the same search as an engine's)."""

    def __init__(self, path: Path, info: dict[str, Any], corpus: Any, vectors: np.ndarray, ann: Any) -> None:
        self.path, self.info, self.corpus, self.ann = path, info, corpus, ann
        self.location = os.fspath(path)
        self.dim, self.settings, self.model_name = info["dim"], info["settings"], info["model"]["name_or_path"]
        self.similarity = info["settings"]["similarity"]
        self.embeddings = vectors  # (count, dim) float32, memory-mapped
        self._unit: bool | None = None  # whether its rows have unit length (cosine through faiss' flat kernel)
        self._lexical: LexicalIndex | None = None
        self._sparse: SparsePart | None = None
        self.compact = CompactPart.load(path / COMPACT_DIR) if info.get("compact") else None
        ivf = self.compact is not None and self.compact.approximate is not None  # an IVF over the compact codes
        self.backend = "approximate" if ann is not None or ivf else "exact"
        self._rescore: int | None = None

    @property
    def precision(self) -> str:
        """How the vectors are searched: "float32", or the compact part's precision (`compact.py`)."""
        return "float32" if self.compact is None else self.compact.precision

    @property
    def rescore(self) -> int | None:
        """How many candidates the compact vectors give for rescoring with the float32 ones, as a multiple of
        max(top_k, 100) (0: none; `compact.py`); the recorded setting until set. None for a float32 index."""
        if self.compact is None:
            return None
        return self.compact.rescore if self._rescore is None else self._rescore

    @rescore.setter
    def rescore(self, value: int | None) -> None:
        if value is not None and self.compact is None:
            raise ValueError(
                f"rescore={value!r}: the index {os.fspath(self.path)!r} searches its float32 vectors; rescoring "
                "applies to an index built with precision float16, int8 or binary (--precision)"
            )
        self._rescore = None if value is None else check_rescore(value)

    @classmethod
    def load(cls, path: str | os.PathLike) -> VectorIndex:
        """Open an index folder: texts and vectors memory-mapped, the approximate index (if any) too; without faiss
        an approximate index is searched exactly (a warning)."""
        path = Path(path)
        where = os.fspath(path)
        problem = _open_failure(path)
        if problem:
            raise FileNotFoundError(2, problem, where)
        try:
            info = json.loads((path / INDEX_FILE).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise ValueError(f"corrupt vector index {where!r}: {INDEX_FILE} is not valid JSON ({err})") from None
        found = info.get("format") if isinstance(info, dict) else type(info).__name__
        if found != FORMAT_NAME:
            raise ValueError(f"{where!r}: {INDEX_FILE} has format {found!r}, expected {FORMAT_NAME!r}")
        if info.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"vector index {where!r} has format version {info.get('format_version')!r} (an older hf-siamese); "
                f"this one reads version {FORMAT_VERSION}: rebuild it with 'hf-siamese index CORPUS -o {where} "
                "--overwrite' (or build_index(..., overwrite=True))"
            )
        approximate = info.get("backend") == "approximate"
        wanted = [path / TEXTS_FILE, path / EMBEDDINGS_DIR / "corpus.json"]
        wanted += [path / EMBEDDINGS_DIR / "ann" / "ann.json"] if approximate else []
        missing = [os.fspath(p.relative_to(path)) for p in wanted if not p.is_file()]
        missing += [key for key in ("model", "settings", "count", "dim", "backend") if key not in info]
        if missing:
            raise ValueError(f"corrupt vector index {where!r}: {', '.join(missing)} missing; rebuild the index")
        try:
            corpus = datasets.Dataset.from_file(str(path / TEXTS_FILE))
            _, vectors = corpus_matrix(path / EMBEDDINGS_DIR)
        except Exception as err:
            raise ValueError(f"corrupt vector index {where!r}: {type(err).__name__}: {err}") from None
        expected = (info["count"], info["dim"])
        if len(corpus) != info["count"] or vectors.shape != expected or corpus.column_names != ["id", "text"]:
            raise ValueError(
                f"corrupt vector index {where!r}: {INDEX_FILE} says {expected[0]} x {expected[1]}, the texts have "
                f"{len(corpus)} rows ({corpus.column_names}), the embeddings are {vectors.shape}"
            )
        ann = None
        if approximate and faiss_available():
            from ..index.ann import load_ann_index

            ann = load_ann_index(path / EMBEDDINGS_DIR / "ann")
        elif approximate:
            logger.warning("faiss is not installed: searching %s exactly (pip install 'hf-siamese[index]')", where)
        return cls(path, info, corpus, vectors, ann)

    def __repr__(self) -> str:
        return (
            f"VectorIndex({os.fspath(self.path)!r}, count={len(self)}, dim={self.dim}, "
            f"similarity={self.similarity!r}, backend={self.backend!r}, precision={self.precision!r})"
        )

    @property
    def has_lexical(self) -> bool:
        """Whether this index has its lexical (BM25) part."""
        return bool(self.info.get("lexical")) and (self.path / LEXICAL_DIR).is_dir()

    @property
    def lexical(self) -> LexicalIndex:
        """The lexical part, opened on first use; a `ValueError` naming the command that adds it where there is none."""
        if self._lexical is None:
            if not self.has_lexical:
                raise ValueError(self.missing_lexical_part())
            self._lexical = LexicalIndex.load(self.path / LEXICAL_DIR)
        return self._lexical

    @property
    def has_sparse(self) -> bool:
        """Whether this index has its learned-sparse part (`sparse_part.py`)."""
        return bool(self.info.get("sparse")) and (self.path / SPARSE_DIR).is_dir()

    @property
    def sparse(self) -> SparsePart:
        """The learned-sparse part (`sparse_part.SparsePart`), opened on first use."""
        if self._sparse is None:
            if not self.has_sparse:
                raise ValueError(f"the index {os.fspath(self.path)!r} has no sparse part: add it with {SPARSE_PART}")
            self._sparse = SparsePart.load(self.path / SPARSE_DIR)
        return self._sparse

    def sparse_rows(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.sparse.search(list(queries), k)

    def missing_lexical_part(self) -> str:
        where = os.fspath(self.path)
        return (
            f"the index {where!r} has no lexical part, which lexical and hybrid search need: add it with "
            f"'hf-siamese index --add-lexical {where}' (or add_lexical(); the vectors are kept, nothing is re-encoded)"
        )

    def lexical_rows(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.lexical.search(list(queries), k)

    def dense_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row indices), each (n, k), best first; ties -> lower row first (as exact search)."""
        if self.compact is not None:
            return self.compact.search(queries, k, self.embeddings, self.rescore)
        if self.ann is not None:
            return self.ann.search(queries, k)
        if self._unit is None:  # once per opened index: one pass over the vectors
            self._unit = unit_length_rows(self.embeddings)
        return exact_search(queries, self.embeddings, k, similarity=self.similarity, unit_corpus=self._unit)

    def save_info(self, info: dict[str, Any]) -> None:
        """`write_info` under the index's lock (one change of an index at a time)."""
        from ...storage import exclusive_output

        with exclusive_output(self.path, "a change of this index"):
            self.write_info(info)

    def write_info(self, info: dict[str, Any]) -> None:
        """index.json replaced whole, and the folder's README.md card with it; the caller holds the lock."""
        from ...storage import write_text_atomic
        from ..index.pipeline import folder_card

        write_text_atomic(self.path / INDEX_FILE, json.dumps(info, indent=2) + "\n")
        write_text_atomic(self.path / "README.md", folder_card(self.path, info))
        self.info = info

    def rows_of(self, rows: list[int]) -> dict[int, tuple[Any, str]]:
        found = self.corpus[rows]
        return {i: (doc_id, text) for i, doc_id, text in zip(rows, found["id"], found["text"], strict=True)}


__all__ = ["EMBEDDINGS_DIR", "FORMAT_NAME", "FORMAT_VERSION", "INDEX_FILE", "TEXTS_FILE", "VectorIndex"]
