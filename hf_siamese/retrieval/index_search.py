"""Opening and searching an index folder that `vector_index.build_index` wrote (its layout: vector_index.py): the
vectors exactly or through the approximate index, the lexical part, and the first stages dense, lexical and hybrid."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from .corpus_groups import corpus_matrix
from .exact import exact_search, unit_length_rows
from .fingerprint import describe_mismatch, model_fingerprint, recorded_name
from .hybrid import check_first_stage, fuse, hits_of
from .index_parts import check_top_k, faiss_available
from .lexical import LEXICAL_DIR, LexicalIndex, require_lexical
from .rerank import RERANK_TOP, check_rerank, rerank_hits

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
            return f"{where!r} is an ANN index (vectors only), opened by hf_siamese.retrieval.ann.load_ann_index"
        return f"{where!r} is not a vector index (no {INDEX_FILE}); build one with build_index() or 'hf-siamese index'"
    return ""


class VectorIndex:
    """A loaded index folder (see the module docstring); make one with `build_index` or `VectorIndex.load`."""

    def __init__(self, path: Path, info: dict[str, Any], corpus: Any, vectors: np.ndarray, ann: Any) -> None:
        self.path, self.info, self.corpus, self.ann = path, info, corpus, ann
        self.backend = "approximate" if ann is not None else "exact"
        self.dim, self.settings, self.model_name = info["dim"], info["settings"], info["model"]["name_or_path"]
        self.similarity = info["settings"]["similarity"]
        self.embeddings = vectors  # (count, dim) float32, memory-mapped
        self._unit: bool | None = None  # whether its rows have unit length (cosine through faiss' flat kernel)
        self._lexical: LexicalIndex | None = None

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
            from .ann import load_ann_index

            ann = load_ann_index(path / EMBEDDINGS_DIR / "ann")
        elif approximate:
            logger.warning("faiss is not installed: searching %s exactly (pip install 'hf-siamese[index]')", where)
        return cls(path, info, corpus, vectors, ann)

    def __len__(self) -> int:
        return self.info["count"]

    def __repr__(self) -> str:
        return (
            f"VectorIndex({os.fspath(self.path)!r}, count={len(self)}, dim={self.dim}, "
            f"similarity={self.similarity!r}, backend={self.backend!r})"
        )

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

    @property
    def has_lexical(self) -> bool:
        """Whether this index has its lexical (BM25) part."""
        return bool(self.info.get("lexical")) and (self.path / LEXICAL_DIR).is_dir()

    @property
    def lexical(self) -> LexicalIndex:
        """The lexical part, opened on first use; a `ValueError` naming the command that adds it where there is none."""
        if self._lexical is None:
            if not self.has_lexical:
                where = os.fspath(self.path)
                raise ValueError(
                    f"the index {where!r} has no lexical part, which lexical and hybrid search need: add it with "
                    f"'hf-siamese index --add-lexical {where}' (or add_lexical(); the vectors are kept, nothing is "
                    "re-encoded)"
                )
            self._lexical = LexicalIndex.load(self.path / LEXICAL_DIR)
        return self._lexical

    def default_first_stage(self, fusion: str | None = None, dense_weight: float | None = None) -> str:
        """ "hybrid" where the index has its lexical part (or where a fusion setting is given, which only hybrid
        takes), else "dense". The index decides, not what is installed: where bm25s is missing, a hybrid search
        raises an ImportError naming the install (and `first_stage="dense"` searches the vectors alone), rather than
        returning other results than the same search elsewhere."""
        if self.has_lexical or fusion is not None or dense_weight is not None:
            return "hybrid"
        return "dense"

    def check_first_stage(
        self, first_stage: str | None, fusion: str | None = None, dense_weight: float | None = None
    ) -> str:
        """The first stage a search with these settings runs (`hybrid.check_first_stage`'s rule; None: the index's
        default), checked against this index before any work: lexical and hybrid need its lexical part (the error
        names the command that adds it) and bm25s installed (the error names the install)."""
        first_stage = check_first_stage(
            first_stage or self.default_first_stage(fusion, dense_weight), fusion, dense_weight
        )
        if first_stage != "dense" and self.has_lexical:
            try:
                require_lexical(bool(self.info["lexical"]["settings"].get("stemmer", True)))
            except ImportError as error:
                raise ImportError(
                    f"{error} (this index's default first stage is hybrid; first_stage='dense' (--first-stage dense) "
                    "searches its vectors alone)"
                ) from None
        if first_stage != "dense":
            self.lexical  # noqa: B018  (opened here: a ValueError naming --add-lexical where there is none)
        return first_stage

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
        rerank: Any = None,
        rerank_top: int = RERANK_TOP,
        first_stage_weight: float | None = None,
        first_stage: str | None = None,
        fusion: str | None = None,
        dense_weight: float | None = None,
    ) -> list[list[dict[str, Any]]]:
        """Return, per query, the `top_k` best hits `{"id", "text", "score", "rank"}`, best first.

        `first_stage`: "dense" (embed `queries` with `model`, checked against the index, and search the vectors;
        `prompt_name` / `prompt` as in `model.encode`), "lexical" (BM25 alone; `model` may be None) or "hybrid" (both,
        fused by `fusion`: "rrf" (None) or "zscore" with `dense_weight`; see `hybrid.py`). Default: "hybrid" where the
        index has its lexical part, else "dense" (`check_first_stage`: a setting that does not apply is refused).
        `queries`: a non-empty string or a list of them (an empty or non-string query is refused).

        With `rerank` (a cross-encoder, or any `.predict(pairs)`), the `rerank_top` (>= top_k; more than the index
        holds: all, with a warning) best hits of each stage (hybrid: the union of both stages' lists) are re-scored on
        (query, text) pairs in one call, `batch_size` pairs at a time, and the `top_k` best returned
        (`rerank.rerank_hits`): `"score"` / `"rank"` the two stages', `"reranker_score"` the reranker's,
        `"first_stage_score"` / `"first_stage_rank"` the first stage's. `first_stage_weight` (default: the reranker's
        own, saved by `train-reranker`; 0: the reranker alone) fuses the two scores (`rerank.fuse_scores`)."""
        top_k = check_top_k(top_k)
        queries = check_queries(queries)
        first_stage = self.check_first_stage(first_stage, fusion, dense_weight)
        depth = top_k if rerank is None else check_rerank(rerank, rerank_top, top_k, len(self))
        embeddings = None
        if first_stage != "lexical":
            if model is None:
                raise ValueError(
                    f"the {first_stage} first stage embeds the queries: give the model that built the index "
                    f"({self.model_name or 'unnamed'!r}), or first_stage='lexical' (BM25 alone, no model)"
                )
            self.check_model(model)
            embeddings = model.encode(
                queries, tokenizer=tokenizer, batch_size=batch_size, prompt_name=prompt_name, prompt=prompt
            )
        scores, rows = self.first_stage_rows(queries, embeddings, depth, first_stage, fusion, dense_weight)
        hits = hits_of(scores, rows, self._rows, scores.shape[1] if rerank is not None else top_k)
        if rerank is None:
            return hits
        return rerank_hits(rerank, queries, hits, top_k, batch_size, first_stage_weight=first_stage_weight)

    def first_stage_rows(
        self,
        queries: Sequence[str],
        query_embeddings: Any,
        depth: int,
        first_stage: str = "dense",
        fusion: str | None = None,
        dense_weight: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of each query's first stage, best first, -1 where none: `depth` from each stage; hybrid
        fuses the two lists into their union (up to 2 x depth)."""
        self.check_first_stage(first_stage, fusion, dense_weight)
        lexical = self.lexical.search(list(queries), depth) if first_stage != "dense" else None
        if first_stage == "lexical":
            return lexical
        dense = self._top_k(self._query_array(query_embeddings), min(depth, len(self)))
        if first_stage == "dense":
            return dense
        return fuse(dense, lexical, fusion, dense_weight)

    def search_embeddings(self, query_embeddings: Any, top_k: int = 10) -> list[list[dict[str, Any]]]:
        """Hits for precomputed query vectors `(n, dim)` (numpy or torch; one `(dim,)` vector is one query)."""
        top_k = check_top_k(top_k)
        queries = self._query_array(query_embeddings)
        if len(queries) == 0:
            return []
        scores, rows = self._top_k(queries, min(top_k, len(self)))
        return hits_of(scores, rows, self._rows, top_k)

    def _query_array(self, query_embeddings: Any) -> np.ndarray:
        if isinstance(query_embeddings, torch.Tensor):
            query_embeddings = query_embeddings.detach().float().cpu().numpy()
        queries = np.asarray(query_embeddings, dtype=np.float32)
        queries = queries[None] if queries.ndim == 1 else queries
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"query_embeddings have shape {queries.shape}; this index expects (n, {self.dim})")
        if not np.isfinite(queries).all():
            raise ValueError("query_embeddings hold NaN or inf values; expected finite vectors")
        return queries

    def _rows(self, rows: list[int]) -> dict[int, tuple[Any, str]]:
        found = self.corpus[rows]
        return {i: (doc_id, text) for i, doc_id, text in zip(rows, found["id"], found["text"], strict=True)}

    def _top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row indices), each (n, k), best first; ties -> lower row first (as exact search)."""
        if self.ann is not None:
            return self.ann.search(queries, k)
        if self._unit is None:  # once per opened index: one pass over the vectors
            self._unit = unit_length_rows(self.embeddings)
        return exact_search(queries, self.embeddings, k, similarity=self.similarity, unit_corpus=self._unit)


def check_queries(queries: Any) -> list[str]:
    """`queries` (one string or a sequence of them) as a list, each a non-empty string; a `ValueError` naming the
    first one that is not."""
    if isinstance(queries, str):
        queries = [queries]
    elif queries is None or not isinstance(queries, Sequence):
        raise ValueError(f"queries={queries!r:.80}; expected a string or a list of strings")
    queries = list(queries)
    for position, query in enumerate(queries):
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query {position} is {query!r:.80}; every query must be a non-empty string")
    return queries


def load_index(path: str | os.PathLike) -> VectorIndex:
    """Open an index folder written by `build_index` (same as `VectorIndex.load`)."""
    return VectorIndex.load(path)


__all__ = ["EMBEDDINGS_DIR", "FORMAT_NAME", "FORMAT_VERSION", "INDEX_FILE", "TEXTS_FILE", "VectorIndex", "load_index"]
