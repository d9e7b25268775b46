"""Reranking a first stage's candidates with a cross-encoder (`evaluate_reranking`, and the evaluator that calls it,
`RerankingEvaluator`, what `CrossEncoderTrainer` runs on a `reranking_set.RerankingDataset`): the metrics of the
reranked lists and of the first stage side by side. Every (query, candidate) pair is scored in one `predict` call
(`candidate_scores`); the orders (`reranked_orders`: two scores, three over hybrid candidates, or the first stage's
where the weights leave the reranker no share) are ranked from those scores, so `cross_encoder.fusion_weights` tries
many weights from one scoring.

Works with any object that has `predict(pairs, batch_size=, show_progress_bar=)`; the fusion rules are
`hf_siamese.retrieval.fusion.rerank`'s, the metric definitions `hf_siamese.metrics`'.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .evaluator import Evaluator
from .pairs import score_pairs
from .reranking_set import RerankingDataset


def candidate_scores(
    model: Any, dataset: RerankingDataset, batch_size: int, show_progress_bar: bool, **predict_kwargs: Any
) -> np.ndarray:
    """The model's score of every (query, candidate) pair of the judged queries, in candidate order, one call."""
    if not isinstance(dataset, RerankingDataset):
        raise ValueError(
            f"evaluate_reranking needs a RerankingDataset (build one with RerankingDataset.from_first_stage), got "
            f"{type(dataset).__name__}"
        )
    if getattr(model, "num_labels", 1) != 1:
        raise ValueError(f"reranking needs a one-output cross-encoder; this one has {model.num_labels} outputs")
    judged = dataset.judged_queries()
    pairs = [(dataset.queries[q], dataset.corpus[doc]) for q in judged for doc in dataset.candidates[q]]
    scores = score_pairs(model, pairs, batch_size, show_progress_bar, **predict_kwargs)
    if scores.ndim != 1:
        raise ValueError(f"the cross-encoder gave scores of shape {scores.shape}; reranking needs one score per pair")
    return scores


def reranked_orders(
    dataset: RerankingDataset, scores: np.ndarray, weight: float, stage_weights: dict[str, float] | None = None
) -> dict[str, list[str]]:
    """query id -> its candidates in the final order: three scores with `stage_weights`, else two with `weight`; the
    first stage's order where the weights leave the reranker no share."""
    from ..retrieval.fusion.rerank import STAGES, fuse_scores, fuse_stages, reranker_has_no_share

    judged = dataset.judged_queries()
    first_stage_order = reranker_has_no_share(weight, stage_weights)
    if weight > 0 and stage_weights is None:
        missing = [q for q in judged if q not in dataset.first_stage_scores]
        if missing:
            raise ValueError(
                f"RerankingDataset {dataset.name!r}: first_stage_weight={weight} fuses the first stage's scores, but "
                f"query {missing[0]!r} has none (build the set with RerankingDataset.from_first_stage, or pass "
                "first_stage_weight=0)"
            )
    orders, start = {}, 0
    for query in judged:
        candidates = dataset.candidates[query]
        mine = scores[start : start + len(candidates)]
        start += len(candidates)
        if first_stage_order:  # never worse: the first stage's order itself
            orders[query] = list(candidates)
            continue
        if stage_weights is not None:
            mine = fuse_stages(mine, {s: dataset.stage_scores[query][s] for s in STAGES}, stage_weights)
        elif weight > 0:
            mine = fuse_scores(mine, dataset.first_stage_scores[query], weight)
        orders[query] = [candidates[i] for i in np.argsort(-mine, kind="stable").tolist()]
    return orders


def reranked_metrics(
    dataset: RerankingDataset, scores: np.ndarray, weight: float, stage_weights: dict[str, float] | None = None
) -> dict[str, float]:
    """`evaluate_reranking`'s metrics of the final order (see there)."""
    from ..metrics import retrieval_metrics

    reranked = reranked_orders(dataset, scores, weight, stage_weights)
    ks = sorted(set(dataset.k_values))
    before = first_stage_metrics(dataset)
    after = retrieval_metrics(reranked, dataset.qrels, ks)
    metrics: dict[str, float] = {}
    for name in ("ndcg", "mrr"):
        for k in ks:
            key = f"{name}@{k}"
            metrics[key] = after[key]
            metrics[f"first_stage_{key}"] = before[key]
            metrics[f"{key}_delta"] = after[key] - before[key]
    relevant = found = 0
    for query in dataset.judged_queries():
        positives = {doc for doc, value in dataset.qrels[query].items() if value > 0}
        relevant += len(positives)
        found += len(positives.intersection(dataset.candidates[query]))
    metrics["candidate_recall"] = found / relevant
    metrics["num_queries"] = len(dataset.judged_queries())
    return metrics


def first_stage_metrics(dataset: RerankingDataset) -> dict[str, float]:
    """nDCG@k and MRR@k (k in `dataset.k_values`) of the judged queries' candidates in first-stage order: what
    reranking is measured against, computed without scoring a pair."""
    from ..metrics import retrieval_metrics

    first = {query: list(dataset.candidates[query]) for query in dataset.judged_queries()}
    return retrieval_metrics(first, dataset.qrels, sorted(set(dataset.k_values)))


def evaluate_reranking(
    model: Any,
    dataset: RerankingDataset,
    *,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    first_stage_weight: float | None = None,
    stage_weights: dict[str, float] | None = None,
    **predict_kwargs: Any,
) -> dict[str, float]:
    """Rerank each query's first-stage candidates with the cross-encoder; the metrics of the reranked lists and of
    the first stage side by side. Over hybrid candidates (`dataset.stage_scores`) `stage_weights` (default: the
    model's own) fuse three scores, as `rerank_hits` does.

    Every (query, candidate) pair goes to one `predict` call; a query's candidates are re-sorted by score (equal
    scores keep the first-stage order), fused with the first stage's scores when `first_stage_weight` (default: the
    model's own, 0 when it has none) is above 0, as `hf_siamese.retrieval.fusion.rerank.rerank_hits` does. A relevant
    document the first stage did NOT retrieve is NOT added to the candidates: the reranked numbers are what the
    deployed two-stage search scores (the realistic number), not the reranker's score on ideal candidates, so the
    reranker is judged against the first stage it will sit on.

    Returns (values in [0, 1], k in `dataset.k_values`, default 10):
        `ndcg@k`, `mrr@k`: the reranked lists; `first_stage_ndcg@k`, `first_stage_mrr@k`: the candidates in
        first-stage order; `ndcg@k_delta`, `mrr@k_delta`: reranked minus first stage (negative: the reranker
        LOWERS the first stage); `candidate_recall`: the share of relevant documents among the candidates (the
        ceiling of both); `num_queries`.
    """
    from ..retrieval.fusion.rerank import first_stage_weight_of, stage_weights_of

    weight = first_stage_weight_of(model, first_stage_weight)
    # As in rerank_hits: a first-stage weight given without stage weights asks for the two-score order.
    hybrid = getattr(dataset, "stage_scores", None) and (first_stage_weight is None or stage_weights is not None)
    stages = stage_weights_of(model, stage_weights) if hybrid else None
    scores = candidate_scores(model, dataset, batch_size, show_progress_bar, **predict_kwargs)
    return reranked_metrics(dataset, scores, weight, stages)


class RerankingEvaluator(Evaluator):
    """Rerank each judged query's first-stage candidates of a `RerankingDataset` with the cross-encoder:
    `evaluate_reranking`'s metrics (`ndcg@k`, `mrr@k` of the reranked lists, `first_stage_ndcg@k`, ..., `ndcg@k_delta`,
    `candidate_recall`, `num_queries`). The primary metric is `ndcg@10` (or at the largest k without 10).

    `first_stage_weight` / `stage_weights` (default: the model's own) fuse the reranker's score with the first
    stage's, as `evaluate_reranking` and search do; `predict_kwargs` go to the model's `predict`.
    """

    def __init__(
        self,
        dataset: RerankingDataset,
        *,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        first_stage_weight: float | None = None,
        stage_weights: dict[str, float] | None = None,
        name: str = "",
        **predict_kwargs: Any,
    ) -> None:
        if not isinstance(dataset, RerankingDataset):
            raise ValueError(
                f"RerankingEvaluator needs a RerankingDataset (build one with RerankingDataset.from_first_stage), got "
                f"{type(dataset).__name__}"
            )
        self.dataset, self.batch_size, self.show_progress_bar = dataset, batch_size, show_progress_bar
        self.first_stage_weight, self.stage_weights = first_stage_weight, stage_weights
        self.name, self.predict_kwargs = name, predict_kwargs
        ks = sorted(set(dataset.k_values))
        self.primary_metric = f"ndcg@{10 if 10 in ks else ks[-1]}"

    def __len__(self) -> int:
        return len(self.dataset)

    def __call__(self, model: Any) -> dict[str, float]:
        """The reranking metrics of `model` (a one-output cross-encoder) on the set, values in [0, 1]."""
        return evaluate_reranking(
            model, self.dataset, batch_size=self.batch_size, show_progress_bar=self.show_progress_bar,
            first_stage_weight=self.first_stage_weight, stage_weights=self.stage_weights, **self.predict_kwargs,
        )  # fmt: skip


__all__ = [
    "RerankingEvaluator",
    "candidate_scores",
    "evaluate_reranking",
    "first_stage_metrics",
    "reranked_metrics",
    "reranked_orders",
]
