"""The data of a reranking evaluation (`RerankingDataset`: queries, corpus, graded judgements and each query's
first-stage candidates, best first), built from a retrieval set and a bi-encoder's first stage (dense, or hybrid with
BM25) by `RerankingDataset.from_first_stage`. `reranking.RerankingEvaluator` reranks the candidates with a
cross-encoder; `CrossEncoderTrainer` evaluates on such a set given as an eval set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..data.beir import RetrievalDataset

RERANK_K_VALUES = (10,)  # nDCG@10 / MRR@10: the BEIR headline numbers
DEFAULT_RERANK_TOP = 100  # first-stage candidates per query


@dataclass
class RerankingDataset:
    """Queries, the corpus, graded judgements and each query's first-stage candidates, best first.

    Attributes:
        queries: query id -> text.
        corpus: document id -> text (at least every candidate).
        qrels: query id -> {document id: relevance}; relevance > 0 is relevant. Only queries with a relevant
            document count (as in `retrieval_metrics`).
        candidates: query id -> document ids in the first stage's order (a bi-encoder's top N, BM25's, ...).
        name: a label for messages.
        first_stage_scores: query id -> the first stage's score of each candidate (same order); needed to fuse the
            two stages' scores (`first_stage_weight` > 0). `from_first_stage` fills it.
        stage_scores: over a hybrid first stage, query id -> {"dense": [...], "lexical": [...]}: each stage's own
            score of each candidate (None where that stage did not find it), for three-score fusion.
        k_values: the cut-offs reported (default 10).

    Build one from a retrieval set and a bi-encoder with `RerankingDataset.from_first_stage`.
    """

    queries: dict[str, str]
    corpus: dict[str, str]
    qrels: dict[str, dict[str, int]]
    candidates: dict[str, list[str]]
    name: str = "reranking"
    k_values: Sequence[int] = RERANK_K_VALUES
    metadata: dict[str, Any] = field(default_factory=dict)
    first_stage_scores: dict[str, list[float]] = field(default_factory=dict)
    stage_scores: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"RerankingDataset {self.name!r}"
        judged = self.judged_queries()
        if not judged:
            raise ValueError(f"{where}: no query has a relevant document (qrels relevance > 0); nothing to evaluate.")
        for query in judged:
            if query not in self.queries:
                raise ValueError(f"{where}: qrels name query {query!r}, which is not in queries.")
            if not isinstance(self.queries[query], str):
                raise ValueError(f"{where}: query {query!r} holds {self.queries[query]!r}; expected a string.")
            found = self.candidates.get(query)
            if found is None or isinstance(found, str) or len(found) == 0:
                raise ValueError(
                    f"{where}: query {query!r} has no first-stage candidates ({found!r}); every judged query needs "
                    "at least one."
                )
            unknown = [doc for doc in found if doc not in self.corpus]
            if unknown:
                raise ValueError(
                    f"{where}: candidates of query {query!r} name documents not in the corpus: {unknown[:3]}"
                )
            if len(set(found)) != len(found):
                raise ValueError(f"{where}: candidates of query {query!r} hold a document twice.")
            scores = self.first_stage_scores.get(query)
            if scores is not None and len(scores) != len(found):
                raise ValueError(
                    f"{where}: query {query!r} has {len(scores)} first-stage scores for {len(found)} candidates."
                )
            for stage, values in self.stage_scores.get(query, {}).items():
                if len(values) != len(found):
                    raise ValueError(
                        f"{where}: query {query!r} has {len(values)} {stage} scores for {len(found)} candidates."
                    )
        bad = next(((doc, text) for doc, text in self.corpus.items() if not isinstance(text, str)), None)
        if bad is not None:
            raise ValueError(f"{where}: document {bad[0]!r} holds {bad[1]!r}; expected a string.")
        if not self.k_values or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.k_values):
            raise ValueError(f"{where}: k_values={list(self.k_values)!r} must be positive ints.")

    def __len__(self) -> int:
        return len(self.judged_queries())

    def judged_queries(self) -> list[str]:
        """The ids of the queries evaluated (those with a relevant document), in qrels order."""
        from ..metrics import judged_queries

        return judged_queries(self.qrels)

    @classmethod
    def from_first_stage(
        cls,
        dataset: RetrievalDataset,
        bi_encoder: Any,
        top_k: int = DEFAULT_RERANK_TOP,
        *,
        tokenizer: Any = None,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        k_values: Sequence[int] = RERANK_K_VALUES,
        first_stage: str = "dense",
        fusion: str | None = None,
        dense_weight: float | None = None,
        lexical_settings: Any = None,
    ) -> RerankingDataset:
        """The candidates of a first stage over a retrieval set (`hf_siamese.data.read_beir`), per judged query:
        "dense", a bi-encoder's (`SiameseBertModel`) exact top `top_k` documents, with the query / document prompts
        `evaluate_retrieval` uses; "hybrid", the union of its top `top_k` and BM25's (`lexical_settings`), fused by
        `fusion` / `dense_weight` (`retrieval.hybrid.fuse`), each candidate with both stages' own scores."""
        from ..retrieval.fusion.hybrid import check_first_stage

        if check_first_stage(first_stage, fusion, dense_weight, lexical_settings) not in ("dense", "hybrid"):
            raise ValueError(f"first_stage={first_stage!r}: reranking candidates come from 'dense' or 'hybrid'")
        found, stages = _first_stage(
            bi_encoder, dataset, top_k, tokenizer, batch_size, show_progress_bar,
            (fusion, dense_weight, lexical_settings) if first_stage == "hybrid" else None,
        )  # fmt: skip
        return cls(
            queries=dict(dataset.queries),
            corpus=dict(dataset.corpus),
            qrels={q: dict(judged) for q, judged in dataset.qrels.items()},
            candidates={q: ids for q, (ids, _) in found.items()},
            name=dataset.name,
            k_values=k_values,
            metadata={"first_stage_top_k": top_k, "first_stage": first_stage},
            first_stage_scores={q: scores for q, (_, scores) in found.items()},
            stage_scores=stages,
        )


def first_stage_candidates(
    bi_encoder: Any,
    dataset: RetrievalDataset,
    top_k: int = DEFAULT_RERANK_TOP,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> dict[str, list[str]]:
    """query id -> the bi-encoder's `top_k` best document ids (exact search; all documents if the corpus is smaller)
    for every query of `dataset.qrels` with a relevant document."""
    found, _ = _first_stage(bi_encoder, dataset, top_k, tokenizer, batch_size, show_progress_bar)
    return {q: ids for q, (ids, _) in found.items()}


def _first_stage(
    bi_encoder: Any,
    dataset: RetrievalDataset,
    top_k: int,
    tokenizer: Any,
    batch_size: int,
    show_progress_bar: bool,
    hybrid: tuple[Any, Any, Any] | None = None,
) -> tuple[dict[str, tuple[list[str], list[float]]], dict[str, dict[str, list[float | None]]]]:
    """query id -> (candidate ids, first-stage scores), and (hybrid: `(fusion, dense_weight, lexical_settings)`)
    query id -> each stage's own scores of the candidates."""
    from ..metrics import judged_queries
    from ..retrieval.exact import exact_search
    from ..retrieval.fusion.hybrid import fuse, stage_scores
    from .retrieval import embed_retrieval_set
    from .retrieval_runs import lexical_run

    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k={top_k!r}: expected a positive int (first-stage candidates per query)")
    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(
        bi_encoder, dataset, tokenizer=tokenizer, batch_size=batch_size, show_progress_bar=show_progress_bar
    )
    judged = judged_queries(dataset.qrels)
    row = {query_id: i for i, query_id in enumerate(query_ids)}
    depth = min(top_k, len(corpus_ids))
    scores, found = exact_search(
        queries[[row[q] for q in judged]], corpus, depth, similarity=bi_encoder.config.similarity
    )
    stages: dict[str, dict[str, list[float | None]]] = {}
    if hybrid is not None:
        fusion, dense_weight, settings = hybrid
        runs = {"dense": (scores, found), "lexical": lexical_run(dataset, judged, depth, settings)}
        scores, found = fuse(runs["dense"], runs["lexical"], fusion, dense_weight)
        for q, own in zip(judged, stage_scores(found, runs), strict=True):
            stages[q] = {stage: [hit[f"{stage}_score"] for hit in own] for stage in runs}
    ranked = {
        q: ([corpus_ids[j] for j in rows if j >= 0], [v for j, v in zip(rows, values, strict=True) if j >= 0])
        for q, rows, values in zip(judged, found.tolist(), scores.tolist(), strict=True)
    }
    return ranked, stages


__all__ = ["DEFAULT_RERANK_TOP", "RERANK_K_VALUES", "RerankingDataset", "first_stage_candidates"]
