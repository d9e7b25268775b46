"""The cross-encoder's evaluators (`hf_siamese.metrics.Evaluator`: `evaluator(cross_encoder) -> dict[str, float]`
with a `primary_metric`), what `CrossEncoderTrainer` runs on its eval sets:

* `RerankingEvaluator`: reranking a first stage's candidates (`fusion_weights.evaluate_reranking`); primary `ndcg@10`;
* `PairScoreEvaluator`: Spearman / Pearson of a one-output model's scores against graded labels; primary `spearman`;
* `PairClassificationEvaluator`: accuracy of a classifier (or of 0/1 labels); primary `accuracy`.

Each works with any object that has `predict(pairs, batch_size=, show_progress_bar=)`.
"""

from __future__ import annotations

from typing import Any

from ..metrics.evaluator import Evaluator
from .evaluation import PairClassificationEvaluator, PairScoreEvaluator, RerankingDataset
from .fusion_weights import evaluate_reranking


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


__all__ = ["PairClassificationEvaluator", "PairScoreEvaluator", "RerankingEvaluator"]
