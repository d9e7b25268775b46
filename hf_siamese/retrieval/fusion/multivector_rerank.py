"""MaxSim as the second stage of a search: a multi-vector model's query token vectors (encoded at query time) against
the token vectors the index stores for each candidate (`multivector_part.py`: no document is encoded at query time).

`MultiVectorReranker` is a reranker like a cross-encoder (`predict(pairs) -> one score per (query, text) pair`), so
its score joins the fusion of the stages exactly as a cross-encoder's does (`rerank.rerank_hits`: alone by default,
it carries no saved weights; `first_stage_weight` fuses it with the first stage's score, `stage_weights` with each
hybrid list's, the setting-free RRF over hybrid in `eval`). It scores stored vectors, so it is bound to the index
searched and to the rows of the candidates (`bound_to`: `store.SearchIndex.search` and `RetrievalEvaluator` bind it);
it checks that the index has the part and that its model is the recorded one (`check_index`) before any work.
A hit's text names its row: rows with one text hold the same vectors, so any of them scores it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...modeling.kinds import kind_of_path


def is_multivector_model_path(path: str | os.PathLike | None) -> bool:
    """Whether `path` is a multi-vector model's folder (its config, or sentence-transformers' MultiVectorEncoder
    layout), or a Hub id of one already in the cache: the model-kind registry's answer (`modeling.kinds`)."""
    return kind_of_path(path) == "multi-vector"


def rows_by_text(hits: Sequence[Sequence[dict[str, Any]]], rows: np.ndarray) -> dict[str, int]:
    """Each candidate's text -> its index row: `hits` as `hybrid.hits_of` made them from `rows` (the found rows of
    each query, -1 for none, in the hits' order)."""
    found: dict[str, int] = {}
    for query_hits, query_rows in zip(hits, np.asarray(rows).tolist(), strict=True):
        for hit, row in zip(query_hits, (r for r in query_rows if r >= 0), strict=False):
            found.setdefault(hit["text"], int(row))
    return found


class MultiVectorReranker:
    """Reranks by exact MaxSim against an index's stored token vectors (see the module docstring). Make one from a
    loaded model (`MultiVectorReranker(model, tokenizer)`) or a folder / Hub id (`MultiVectorReranker.load`); pass
    it as `rerank=` to `index.search` or `evaluate_retrieval(..., index=)`."""

    kind = "multi-vector"
    first_stage_weight = 0.0  # no saved fusion weights: the MaxSim order alone unless a weight is given
    stage_weights = None
    fusion_corpus = None

    def __init__(self, model: Any, tokenizer: Any = None, name: str | None = None) -> None:
        from ..index.multivector_part import resolve_multivector_model

        self.model, self.tokenizer, recorded = resolve_multivector_model(model, tokenizer)
        self.name = recorded if name is None else name
        self._part: Any = None
        self._rows: dict[str, int] = {}

    @classmethod
    def load(cls, location: str | os.PathLike, device: str | None = None) -> MultiVectorReranker:
        """The reranker of the multi-vector model at `location` (a folder or Hub id), on `device`."""
        from ..index.fingerprint import recorded_name
        from ..index.multivector_part import resolve_multivector_model

        model, tokenizer, _ = resolve_multivector_model(os.fspath(location), device=device)
        return cls(model, tokenizer, recorded_name(os.fspath(location)))

    def __repr__(self) -> str:
        return f"MultiVectorReranker({self.name!r})"

    def check_index(self, index: Any) -> None:
        """Raise `ValueError` unless `index` has a multi-vector part built by this reranker's model."""
        if not getattr(index, "has_multivector", False):
            from ..index.multivector_part import ADD_PART

            location = getattr(index, "location", None) or "(an index of no location)"
            raise ValueError(
                f"a multi-vector rerank ({self.name or 'a multi-vector model'!r}) scores the token vectors the index "
                f"stores, and the index {location!r} has no multi-vector part: add it with {ADD_PART}, or rerank "
                "with a cross-encoder"
            )
        index.multivector.check_model(self.model)

    def bound_to(self, index: Any, rows: dict[str, int]) -> MultiVectorReranker:
        """A copy that scores the candidates of one search of `index`: `rows` maps each candidate's text to its row."""
        self.check_index(index)
        bound = object.__new__(MultiVectorReranker)
        bound.__dict__.update(self.__dict__)
        bound._part, bound._rows = index.multivector, dict(rows)
        return bound

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32, show_progress_bar: bool = False) -> Any:
        """MaxSim (or MeanMaxSim, as the model's config says) of each (query, candidate text) pair: the queries
        encoded now (`task="query"`), the candidates' vectors read from the index. float32, one per pair."""
        if self._part is None:
            raise ValueError(
                "a multi-vector reranker scores the token vectors an index stores: use it as rerank= of an index's "
                "search (index.search, evaluate_retrieval(..., index=)), not on bare pairs"
            )
        pairs = list(pairs)
        missing = next((text for _, text in pairs if text not in self._rows), None)
        if missing is not None:
            raise ValueError(f"the candidate text {missing!r:.60} is not one of this search's candidates")
        queries = list(dict.fromkeys(query for query, _ in pairs))
        encoded = self.model.encode(queries, self.tokenizer, task="query", batch_size=batch_size)
        by_query = dict(zip(queries, encoded, strict=True))
        scores = np.zeros(len(pairs), dtype=np.float32)
        groups: dict[str, list[int]] = {}
        for position, (query, _) in enumerate(pairs):
            groups.setdefault(query, []).append(position)
        for query, positions in groups.items():
            documents = [self._part.document(self._rows[pairs[p][1]]) for p in positions]
            with torch.no_grad():
                found = self.model.similarity([by_query[query]], documents)[0]
            scores[positions] = found.float().cpu().numpy()
        return scores


def bind_reranker(reranker: Any, index: Any, rows: dict[str, int]) -> Any:
    """`reranker` bound to the candidates' `rows` of `index` where it scores stored vectors (`bound_to`); any other
    reranker as it is."""
    return reranker.bound_to(index, rows) if hasattr(reranker, "bound_to") else reranker


def check_reranker_index(reranker: Any, index: Any) -> None:
    """Before any work: a reranker of stored vectors needs `index` (not None) with its part and recorded model."""
    if not hasattr(reranker, "check_index"):
        return
    if index is None:
        raise ValueError(
            f"a multi-vector rerank ({getattr(reranker, 'name', '') or 'a multi-vector model'!r}) scores the token "
            "vectors an index stores: give index= (eval --index DIR, an index built with --multi-vector-model), or "
            "rerank with a cross-encoder"
        )
    reranker.check_index(index)


__all__ = ["MultiVectorReranker", "bind_reranker", "check_reranker_index", "is_multivector_model_path", "rows_by_text"]
