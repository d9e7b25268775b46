"""Evaluation for `CrossEncoderTrainer`, as `SiameseEvaluationMixin` does it for the bi-encoder trainer: the loss
where the eval rows fit it, plus

* reranking sets (`RerankingDataset`): `{prefix}_ndcg@10`, `{prefix}_mrr@10` of the reranked first-stage candidates,
  `{prefix}_first_stage_ndcg@10`, ... and `{prefix}_ndcg@10_delta` (negative: the reranker lowers the first stage);
* labelled pairs: `{prefix}_spearman` / `{prefix}_pearson` for a one-output model with graded scores,
  `{prefix}_accuracy` for a classifier (class ids) or a one-output model with 0/1 labels;
* any evaluator given as an eval set (`hf_siamese.evaluation`, or one of your own): its numbers.

Every number comes from `CrossEncoder.predict` on the model being trained (the scoring path a user deploys), with
the collator's tokenizer and `max_length`: the evaluators (`hf_siamese.evaluation`) are called with
`scorer()`. `load_best_model_at_end=True` keeps the checkpoint best by the evaluator's primary metric (`ndcg@10` on a
reranking set) unless `metric_for_best_model` names another.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..evaluation.pairs import PairClassificationEvaluator, PairScoreEvaluator
from ..evaluation.reranking import RerankingEvaluator
from ..evaluation.reranking_set import RerankingDataset
from ..training.trainer_evaluation import WholeSetEvaluationMixin
from .collator import CrossEncoderCollator
from .losses import PAIRS


class CrossEncoderEvaluationMixin(WholeSetEvaluationMixin):
    """Evaluation methods of `CrossEncoderTrainer` (which provides `data_collator`, `activation` and the Trainer's
    state).

    `evaluate` on a reranking set (`RerankingDataset`) gives `{prefix}_ndcg@10`, `{prefix}_mrr@10`,
    `{prefix}_first_stage_ndcg@10`, `{prefix}_first_stage_mrr@10`, `{prefix}_ndcg@10_delta`, ... (in [0, 1]);
    positives the first stage missed are not injected: the realistic two-stage number. On other sets the Trainer's
    loop (`{prefix}_loss`) adds `pair_metrics` of the eval rows.
    """

    whole_sets = RerankingDataset

    def evaluator_for(self, dataset: RerankingDataset) -> RerankingEvaluator:
        """The `RerankingEvaluator` of a reranking set, at the eval batch size (a progress bar on the main process:
        a dev pass is long)."""
        shown = not self.args.disable_tqdm and self.is_world_process_zero()
        return RerankingEvaluator(dataset, batch_size=self.args.eval_batch_size, show_progress_bar=shown)

    def evaluation_model(self) -> Any:
        """The cross-encoder evaluators score with `predict`: the `scorer` of the model being trained."""
        return self.scorer()

    def scorer(self) -> Any:
        """A `CrossEncoder` over the (unwrapped) model being trained, with the collator's tokenizer and max_length."""
        from .model import CrossEncoder

        collator = self.data_collator
        tokenizer = getattr(collator, "tokenizer", None) or self.processing_class
        model = self.accelerator.unwrap_model(self.model)
        return CrossEncoder(
            model, tokenizer, max_length=getattr(collator, "max_length", None), activation=self.activation
        )

    def reranking_metrics(self, dataset: RerankingDataset) -> dict[str, float]:
        """`evaluate_reranking` of the model being trained (every process computes the same numbers)."""
        return self.run_evaluator(self.evaluator_for(dataset))

    def rows_evaluator(self, dataset: Any) -> PairScoreEvaluator | PairClassificationEvaluator | None:
        """On labelled pair rows (query, document, label): `PairScoreEvaluator` (`spearman`, `pearson`) for a
        one-output model with graded labels (more than two values), `PairClassificationEvaluator` (`accuracy`) for a
        classifier or 0/1 labels; None for other rows."""
        collator = self.data_collator
        if not isinstance(collator, CrossEncoderCollator) or not hasattr(dataset, "column_names"):
            return None
        if not hasattr(dataset, "__len__") or len(dataset) < 2:  # a stream, or too few rows for a metric
            return None
        layout = collator.layout(list(dataset.column_names), dataset[0])
        if layout.shape != PAIRS or layout.label is None:
            return None
        rows = collator.read_rows(dataset.to_list() if hasattr(dataset, "to_list") else list(dataset))
        if rows.labels is None:
            return None
        labels = rows.labels.numpy()
        pairs = list(zip(rows.queries, rows.documents, strict=True))
        model = self.scorer()
        size = self.args.eval_batch_size
        if model.num_labels > 1 or set(np.unique(labels).tolist()) <= {0.0, 1.0}:
            threshold = 0.5 if model.activation == "sigmoid" else 0.0  # a logit of 0 is a probability of 0.5
            ids = labels.astype(np.int64).tolist()
            return PairClassificationEvaluator(pairs, ids, threshold=threshold, batch_size=size)
        if np.unique(labels).size < 2:
            return None
        return PairScoreEvaluator(pairs, labels.tolist(), batch_size=size)

    def pair_metrics(self, dataset: Any) -> dict[str, float]:
        """On labelled pair rows: the numbers of `rows_evaluator` (`spearman` and `pearson`, or `accuracy`); `{}` for
        other rows."""
        return self.row_metrics(dataset)


__all__ = ["CrossEncoderEvaluationMixin"]
