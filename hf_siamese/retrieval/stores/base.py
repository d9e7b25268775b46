"""The one seam between the commands and where an index lives: the folder (`vector_index.VectorIndex`, the embedded
default) and search engines (`milvus.MilvusIndex`, a server, a cluster or Milvus Lite) are both a `SearchIndex`.

What a store implements is small: how many documents it holds, what built it (`info`: the model's fingerprint, the
embedding settings, the lexical settings), the best `k` rows of each query by the vectors (`dense_rows`) and by BM25
(`lexical_rows`), and the (id, text) of rows (`rows_of`). Everything users must be able to trust whatever the store is
lives here, once: which settings apply to which first stage (`hybrid.check_first_stage`), the model check, the query
checks, the fusion of the two lists (`hybrid.fuse`, so equal scores are ordered by our rule), the hits and the
reranker's candidates (`rerank.rerank_hits`). A second engine is a new subclass, not a change to the commands.

`stores.load_index(location)` opens either kind from the one string users give `--index` (a folder,
`milvus://...` or `milvus-lite:...`); the registry in `stores/__init__.py` tells them apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..fusion.hybrid import FUSION_DEPTH, check_first_stage, fuse_runs, hits_of, stage_lists, stage_scores
from ..fusion.rerank import RERANK_TOP, check_rerank, rerank_hits
from ..index.fingerprint import describe_mismatch, model_fingerprint, recorded_name
from ..index.lexical import require_lexical
from ..index.parts import check_top_k


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


@dataclass(frozen=True)
class SearchPlan:
    """The settings a search of an index runs with (`SearchIndex.plan`): the reranker (None: none), the first stage
    and its fusion, the rerank depth (None: `rerank.RERANK_TOP`) and weights, the pipeline record they came from (None:
    the caller's), and the lists the first stage reads, in fusion order."""

    reranker: Any
    first_stage: str
    fusion: str | None
    dense_weight: float | None
    rerank_top: int | None
    first_stage_weight: float | None
    stage_weights: dict[str, float] | None
    recorded: dict[str, Any] | None
    lists: tuple[str, ...]


class SearchIndex(ABC):
    """An index of a corpus, wherever it lives (see the module docstring). Subclasses set `info` (the record of what
    built it: "model", "settings", "count", "dim", "lexical"), `dim`, `similarity`, `model_name`, `settings`."""

    info: dict[str, Any]
    dim: int
    similarity: str
    model_name: str | None
    settings: dict[str, Any]
    location: str

    def __len__(self) -> int:
        return int(self.info["count"])

    # -- what a store implements ---------------------------------------------------------------------------------

    @property
    @abstractmethod
    def has_lexical(self) -> bool:
        """Whether the store has its lexical (BM25) part."""

    @property
    def has_sparse(self) -> bool:
        """Whether the store has a learned-sparse part (`sparse_part.py`; an index folder's only, for now)."""
        return False

    def sparse_rows(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the learned-sparse part, as `dense_rows`."""
        raise ValueError(f"the index {self.location!r} has no sparse part")

    @property
    def has_multivector(self) -> bool:
        """Whether the store keeps its documents' token vectors (`multivector_part.py`: an index folder's `path`
        only; a search engine keeps none)."""
        from ..index.multivector_part import MULTIVECTOR_DIR

        path = getattr(self, "path", None)
        return path is not None and bool(self.info.get("multivector")) and (Path(path) / MULTIVECTOR_DIR).is_dir()

    @property
    def multivector(self) -> Any:
        """The multi-vector part (`multivector_part.MultiVectorPart`) that a MaxSim rerank reads, opened once."""
        from ..index.multivector_part import ADD_PART, MULTIVECTOR_DIR, MultiVectorPart

        if self.__dict__.get("_multivector") is None:
            if not self.has_multivector:
                raise ValueError(f"the index {self.location!r} has no multi-vector part: add it with {ADD_PART}")
            self.__dict__["_multivector"] = MultiVectorPart.load(Path(self.path) / MULTIVECTOR_DIR)  # type: ignore
        return self.__dict__["_multivector"]

    @abstractmethod
    def dense_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each `(n, k)`, best first, ties -> lower row, -1 where none: the vectors' search."""

    @abstractmethod
    def lexical_rows(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of BM25 (score > 0 only), as `dense_rows`."""

    @abstractmethod
    def rows_of(self, rows: list[int]) -> dict[int, tuple[Any, str]]:
        """Row -> (id, text) of the given rows."""

    @abstractmethod
    def missing_lexical_part(self) -> str:
        """Why the lexical and hybrid first stages cannot run (no lexical part), naming what adds it."""

    @abstractmethod
    def save_info(self, info: dict[str, Any]) -> None:
        """Replace the record of what the index holds (whole or not at all): `pipeline.attach_reranker` uses it."""

    # -- the pipeline kept in the index (pipeline.py) -------------------------------------------------------------

    @property
    def pipeline(self) -> dict[str, Any] | None:
        """The recorded reranker and settings of both stages (checked: `pipeline.checked_record`), or None."""
        from ..index.pipeline import checked_record

        return checked_record(self.info.get("pipeline"), self.location)

    def pipeline_settings(
        self, rerank: Any, first_stage: str | None, fusion: str | None, dense_weight: float | None
    ) -> tuple[Any, str | None, str | None, float | None]:
        """(reranker, first_stage, fusion, dense_weight) of a search: the recorded pipeline's where the caller gives
        no reranker (`rerank=False`: none) and no first-stage setting; the caller's otherwise."""
        if rerank is False:
            return None, first_stage, fusion, dense_weight
        record = self.pipeline
        if rerank is not None or record is None:
            return rerank, first_stage, fusion, dense_weight
        if self.__dict__.get("_pipeline_reranker") is None:
            from ..index.pipeline import load_recorded_reranker

            self.__dict__["_pipeline_reranker"] = load_recorded_reranker(record, self.location)
        if first_stage is None and fusion is None and dense_weight is None:
            first_stage, fusion, dense_weight = record["first_stage"], record.get("fusion"), record.get("dense_weight")
        return self.__dict__["_pipeline_reranker"], first_stage, fusion, dense_weight

    def plan(
        self,
        rerank: Any = None,
        first_stage: str | None = None,
        fusion: str | None = None,
        dense_weight: float | None = None,
        rerank_top: int | None = None,
        first_stage_weight: float | None = None,
        stage_weights: dict[str, float] | None = None,
    ) -> SearchPlan:
        """What a search of this index with these settings runs: the one setup of `search`, `hf-siamese search --index`
        and `hf-siamese eval --index`. The recorded pipeline's reranker, depth, weights and first stage where the
        caller gives no reranker (`rerank=False`: none) and no first-stage setting (`pipeline_settings`); the first
        stage checked against the index (`check_first_stage`) and the lists it reads."""
        recorded = self.pipeline if rerank is None else None
        rerank, first_stage, fusion, dense_weight = self.pipeline_settings(rerank, first_stage, fusion, dense_weight)
        first_stage = self.check_first_stage(first_stage, fusion, dense_weight)
        if recorded is not None:
            from ..index.pipeline import recorded_weights

            rerank_top = recorded["rerank_top"] if rerank_top is None else rerank_top
            if first_stage_weight is None and stage_weights is None:
                first_stage_weight, stage_weights = recorded_weights(recorded, first_stage)
        return SearchPlan(
            rerank, first_stage, fusion, dense_weight, rerank_top, first_stage_weight, stage_weights,
            recorded if rerank is not None else None, self.stage_lists(first_stage, fusion),
        )  # fmt: skip

    # -- the same for every store --------------------------------------------------------------------------------

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

    def default_first_stage(self, fusion: str | None = None, dense_weight: float | None = None) -> str:
        """ "hybrid" where the index has its lexical part (or where a fusion setting is given, which only hybrid
        takes), else "dense". The index decides, not what is installed: where bm25s is missing, a hybrid search
        raises an ImportError naming the install (and `first_stage="dense"` searches the vectors alone), rather than
        returning other results than the same search elsewhere."""
        if self.has_lexical or self.has_sparse or fusion is not None or dense_weight is not None:
            return "hybrid"
        return "dense"

    def needs_bm25s(self) -> bool:
        """Whether this store's lexical search runs bm25s here (the folder's does; an engine's BM25 runs there)."""
        return True

    def check_first_stage(
        self, first_stage: str | None, fusion: str | None = None, dense_weight: float | None = None
    ) -> str:
        """The first stage a search with these settings runs (`hybrid.check_first_stage`'s rule; None: the index's
        default), checked against this index before any work: lexical and hybrid need its lexical part (the error
        names what adds it) and, where BM25 runs here, bm25s installed (the error names the install)."""
        chosen = first_stage or self.default_first_stage(fusion, dense_weight)
        first_stage = check_first_stage(chosen, fusion, dense_weight, sparse_part=self.has_sparse)
        lists = self.stage_lists(first_stage, fusion)
        if first_stage in ("dense", "sparse"):
            return first_stage
        if not self.has_lexical and (first_stage == "lexical" or len(lists) == 1):
            raise ValueError(self.missing_lexical_part())
        if "lexical" in lists and self.needs_bm25s():
            try:
                require_lexical(bool(self.info["lexical"]["settings"].get("stemmer", True)))
            except ImportError as error:
                raise ImportError(
                    f"{error} (this index's default first stage is hybrid; first_stage='dense' (--first-stage dense) "
                    "searches its vectors alone)"
                ) from None
        return first_stage

    def stage_lists(self, first_stage: str, fusion: str | None = None) -> tuple[str, ...]:
        """The lists `first_stage` reads in this store, in fusion order (`hybrid.stage_lists`, the one rule)."""
        return stage_lists(first_stage, self.has_lexical, self.has_sparse, fusion)

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
        rerank_top: int | None = None,
        first_stage_weight: float | None = None,
        first_stage: str | None = None,
        fusion: str | None = None,
        dense_weight: float | None = None,
        stage_weights: dict[str, float] | None = None,
    ) -> list[list[dict[str, Any]]]:
        """Return, per query, the `top_k` best hits `{"id", "text", "score", "rank"}`, best first.

        `first_stage`: "dense" (embed `queries` with `model`, checked against the index, and search the vectors;
        `prompt_name` / `prompt` as in `model.encode`), "lexical" (BM25 alone; `model` may be None) or "hybrid" (both,
        fused by `fusion`: "rrf" (None) or "zscore" with `dense_weight`, each list read `FUSION_DEPTH` (100) deep
        whatever `top_k`, so the best hits are the same for every `top_k` up to 100; see `hybrid.py`). Default:
        "hybrid" where the index has its lexical part, else "dense" (`check_first_stage`: a setting that does not apply
        is refused).
        An index with a learned-sparse part (`sparse_part.py`) adds "sparse" (its list alone: the recorded sparse model
        encodes the queries, `model` may be None), and its hybrid fuses the dense, BM25 (where present) and sparse
        lists (`hybrid.stage_lists`; three lists: rrf only), and is its default.
        `queries`: a non-empty string or a list of them (an empty or non-string query is refused).

        With `rerank` (a cross-encoder, or any `.predict(pairs)`; a `multivector_rerank.MultiVectorReranker`:
        MaxSim of the query's token vectors against the ones the index stores, needs its multi-vector part), the
        `rerank_top` (>= top_k; more than the index holds: all, with a warning) best hits of each stage (hybrid:
        the union of both stages' lists) are re-scored on (query, text) pairs in one call, `batch_size` pairs at a
        time, and the `top_k` best returned
        (`rerank.rerank_hits`): `"score"` / `"rank"` the two stages', `"reranker_score"` the reranker's,
        `"first_stage_score"` / `"first_stage_rank"` the first stage's. `first_stage_weight` (default: the reranker's
        own, saved by `train-reranker`; 0: the reranker alone) fuses the two scores (`rerank.fuse_scores`); over a
        hybrid first stage the hits carry each stage's own score (`"dense_score"`, `"lexical_score"`) and a reranker
        with `stage_weights` (or `stage_weights` given) fuses the three (`rerank.fuse_stages`).

        An index that records a pipeline (`pipeline.attach_reranker`) reranks with it when `rerank` is None, at its
        depth and weight, and with its first stage where no first-stage setting is given; `rerank=False` searches
        the first stage alone."""
        top_k = check_top_k(top_k)
        queries = check_queries(queries)
        plan = self.plan(rerank, first_stage, fusion, dense_weight, rerank_top, first_stage_weight, stage_weights)
        rerank, first_stage, fusion, dense_weight = plan.reranker, plan.first_stage, plan.fusion, plan.dense_weight
        first_stage_weight, stage_weights = plan.first_stage_weight, plan.stage_weights
        rerank_top = RERANK_TOP if plan.rerank_top is None else plan.rerank_top
        if rerank is not None:
            depth = check_rerank(rerank, rerank_top, top_k, len(self))
            if hasattr(rerank, "check_index"):  # MaxSim of the stored token vectors: the part and its model
                rerank.check_index(self)
        else:  # hybrid: each list at one depth for every top_k (FUSION_DEPTH), so more hits never reorder the best
            depth = max(top_k, FUSION_DEPTH) if first_stage == "hybrid" else top_k
        embeddings = None
        lists = self.stage_lists(first_stage, fusion)
        if "dense" in lists:
            if model is None:
                raise ValueError(
                    f"the {first_stage} first stage embeds the queries: give the model that built the index "
                    f"({self.model_name or 'unnamed'!r}), or first_stage='lexical' (BM25 alone, no model)"
                )
            self.check_model(model)
            embeddings = model.encode(
                queries, tokenizer=tokenizer, batch_size=batch_size, prompt_name=prompt_name, prompt=prompt
            )
        runs = self.stage_runs(queries, embeddings, depth, first_stage, fusion)
        hybrid = len(runs) > 1
        scores, rows = fuse_runs({name: runs[name] for name in lists}, fusion, dense_weight)
        hits = hits_of(scores, rows, self.rows_of, scores.shape[1] if rerank is not None else top_k)
        if rerank is None:
            return hits
        if hybrid:  # each stage's own score goes with the hit: the reranker may fuse three scores
            for found, extra in zip(hits, stage_scores(rows, runs), strict=True):
                for hit, own in zip(found, extra, strict=True):
                    hit.update(own)
        if hasattr(rerank, "bound_to"):  # scores the candidates' stored vectors: told their rows
            from ..fusion.multivector_rerank import rows_by_text

            rerank = rerank.bound_to(self, rows_by_text(hits, rows))
        return rerank_hits(
            rerank, queries, hits, top_k, batch_size, first_stage_weight=first_stage_weight,
            stage_weights=stage_weights, corpus=self.info.get("corpus"),
        )  # fmt: skip

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
        fuses the two lists into their union (up to 2 x depth) by our rule, whatever the store."""
        self.check_first_stage(first_stage, fusion, dense_weight)
        runs = self.stage_runs(queries, query_embeddings, depth, first_stage, fusion)
        return fuse_runs({name: runs[name] for name in self.stage_lists(first_stage, fusion)}, fusion, dense_weight)

    def stage_runs(
        self, queries: Sequence[str], query_embeddings: Any, depth: int, first_stage: str, fusion: str | None = None
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each list's own (scores, rows) that `first_stage` reads (`stage_lists`: "dense", "lexical", "sparse", or
        for "hybrid" dense with BM25 and / or the sparse list, as the store has them), `depth` each, best first."""
        lists, runs = self.stage_lists(first_stage, fusion), {}
        if "lexical" in lists:
            runs["lexical"] = self.lexical_rows(list(queries), min(depth, len(self)))
        if "dense" in lists:
            runs["dense"] = self.dense_rows(self.query_array(query_embeddings), min(depth, len(self)))
        if "sparse" in lists:
            runs["sparse"] = self.sparse_rows(list(queries), min(depth, len(self)))
        return runs

    def search_embeddings(self, query_embeddings: Any, top_k: int = 10) -> list[list[dict[str, Any]]]:
        """Hits for precomputed query vectors `(n, dim)` (numpy or torch; one `(dim,)` vector is one query)."""
        top_k = check_top_k(top_k)
        queries = self.query_array(query_embeddings)
        if len(queries) == 0:
            return []
        scores, rows = self.dense_rows(queries, min(top_k, len(self)))
        return hits_of(scores, rows, self.rows_of, top_k)

    def query_array(self, query_embeddings: Any) -> np.ndarray:
        """Query vectors as a float32 `(n, dim)` array, checked (shape, finite values)."""
        if isinstance(query_embeddings, torch.Tensor):
            query_embeddings = query_embeddings.detach().float().cpu().numpy()
        queries = np.asarray(query_embeddings, dtype=np.float32)
        queries = queries[None] if queries.ndim == 1 else queries
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"query_embeddings have shape {queries.shape}; this index expects (n, {self.dim})")
        if not np.isfinite(queries).all():
            raise ValueError("query_embeddings hold NaN or inf values; expected finite vectors")
        return queries


__all__ = ["SearchIndex", "SearchPlan", "check_queries"]
