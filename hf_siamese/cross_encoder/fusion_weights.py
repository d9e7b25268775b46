"""Choosing how the reranker's score meets the first stage's on held-out queries (never the test split), from ONE
scoring of the candidates (`hf_siamese.evaluation.reranking`, where reranking a first stage's candidates is
measured: `evaluate_reranking`).

Three orders are measured:
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

from ..evaluation.reranking import candidate_scores, reranked_metrics, reranked_orders
from ..evaluation.reranking_set import RerankingDataset

FUSION_WEIGHTS = tuple(i / 10 for i in range(11))  # first_stage_weight values choose_first_stage_weight tries
GRID_STEP = 0.1  # the three-score weights' grid


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
    "FUSION_WEIGHTS",
    "choose_first_stage_weight",
    "choose_fusion",
    "rrf_of_three",
]
