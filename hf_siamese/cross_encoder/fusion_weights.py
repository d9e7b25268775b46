"""Reranking a first stage's candidates (`evaluate_reranking`), and choosing how the reranker's score meets the
first stage's on held-out queries (never the test split).

Three orders are measured from ONE scoring of the candidates:
- two scores: `(1 - w) z(reranker) + w z(first stage)` for w in 0, 0.1, ..., 1 (`choose_first_stage_weight`);
- three scores, over a hybrid first stage whose candidates carry each stage's own score: `(1 - a - b) z(reranker) +
  a z(dense) + b z(lexical)` for a, b in steps of 0.1 with a + b <= 1 (`choose_fusion`);
- the setting-free reciprocal-rank fusion of the reranker's, the dense and the lexical orders (`rrf_of_three`).

`choose_fusion` measures all three and keeps the three-score weights only where they beat the two-score order on
these queries (one default per model, from the numbers). Where the best weights give the reranker no share, search
keeps the first stage's order exactly (`rerank.rerank_hits`): never worse than the first stage on these queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .evaluation import FUSION_WEIGHTS, RerankingDataset, score_pairs

GRID_STEP = 0.1  # the three-score weights' grid


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


def choose_first_stage_weight(
    model: Any,
    dataset: RerankingDataset,
    weights: Sequence[float] = FUSION_WEIGHTS,
    *,
    metric: str = "ndcg@10",
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> tuple[float, dict[float, float]]:
    """The fusion weight (`rerank_hits`' `first_stage_weight`) that scores best on `dataset` (held-out queries, never
    the test set): the candidates are scored once and ranked at every weight of `weights`. Returns the chosen weight
    (the smallest among equals) and `metric` at each weight; a weight of 1 wins only when the reranker adds nothing
    to the first stage's order."""
    scores = candidate_scores(model, dataset, batch_size, show_progress_bar, **predict_kwargs)
    return _best_weight(dataset, scores, weights, metric)


def _best_weight(
    dataset: RerankingDataset, scores: np.ndarray, weights: Sequence[float], metric: str
) -> tuple[float, dict[float, float]]:
    from ..retrieval.fusion.rerank import check_first_stage_weight

    grid = [check_first_stage_weight(w) for w in weights]
    if not grid:
        raise ValueError("choose_first_stage_weight: weights is empty")
    table = {w: reranked_metrics(dataset, scores, w)[metric] for w in grid}
    best = max(table.values())
    return min(w for w, value in table.items() if value == best), table


def _stage_grid() -> list[dict[str, float]]:
    steps = round(1 / GRID_STEP)
    return [
        {"dense": round(a * GRID_STEP, 10), "lexical": round(b * GRID_STEP, 10)}
        for a in range(steps + 1)
        for b in range(steps + 1 - a)
    ]


def choose_fusion(
    model: Any,
    dataset: RerankingDataset,
    *,
    metric: str = "ndcg@10",
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> dict[str, Any]:
    """Measure the two-score, three-score and RRF-of-three orders on `dataset` (held-out queries) from one scoring,
    and choose. Returns `first_stage_weight` (the best two-score weight) and `two_scores` (its `metric`); over hybrid
    candidates also `stage_weights` (the best three-score weights, or None where they do not beat the two-score order:
    one default per model), `three_scores` (the best three-score `metric`), `rrf3`, `reranker_alone` and
    `first_stage` (the candidates' order); among equal scores the reranker's larger share wins, as in
    `choose_first_stage_weight`."""
    from ..metrics import retrieval_metrics

    scores = candidate_scores(model, dataset, batch_size, show_progress_bar, **predict_kwargs)
    weight, table = _best_weight(dataset, scores, FUSION_WEIGHTS, metric)
    chosen: dict[str, Any] = {
        "first_stage_weight": weight,
        "two_scores": table[weight],
        "reranker_alone": table[0.0],
        "first_stage": table[1.0],
        "stage_weights": None,
    }
    if not dataset.stage_scores:
        return chosen
    grid = _stage_grid()
    values = [reranked_metrics(dataset, scores, 0.0, weights)[metric] for weights in grid]
    best = max(values)
    three = next(weights for weights, value in zip(grid, values, strict=True) if value == best)
    chosen["three_scores"] = best
    if best > table[weight]:
        chosen["stage_weights"] = three
    else:
        chosen["best_three_weights"] = three
    k = int(metric.split("@")[1])
    chosen["rrf3"] = retrieval_metrics(rrf_of_three(dataset, scores), dataset.qrels, [k])[metric]
    return chosen


def rrf_of_three(dataset: RerankingDataset, scores: np.ndarray) -> dict[str, list[str]]:
    """query id -> the reciprocal-rank fusion of the reranker's order (`scores`), the dense and the lexical orders of
    its hybrid candidates (each stage's own scores; a stage ranks only the candidates it found)."""
    from ..retrieval.fusion.hybrid import reciprocal_rank_fusion

    fused = {}
    for query, order in reranked_orders(dataset, scores, 0.0).items():
        by_stage = []
        for stage in ("dense", "lexical"):
            values = dataset.stage_scores[query][stage]
            known = [(doc, v) for doc, v in zip(dataset.candidates[query], values, strict=True) if v is not None]
            by_stage.append([doc for doc, _ in sorted(known, key=lambda item: -item[1])])
        fused[query] = reciprocal_rank_fusion([order, *by_stage])
    return fused


__all__ = [
    "candidate_scores",
    "choose_first_stage_weight",
    "choose_fusion",
    "evaluate_reranking",
    "reranked_metrics",
    "reranked_orders",
    "rrf_of_three",
]
