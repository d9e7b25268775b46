"""Evaluation for `CrossEncoderTrainer`, as `SiameseEvaluationMixin` does it for the bi-encoder trainer: the loss
where the eval rows fit it, plus

* reranking sets (`RerankingDataset`): `{prefix}_ndcg@10`, `{prefix}_mrr@10` of the reranked first-stage candidates,
  `{prefix}_first_stage_ndcg@10`, ... and `{prefix}_ndcg@10_delta` (negative: the reranker lowers the first stage);
* labelled pairs: `{prefix}_spearman` / `{prefix}_pearson` for a one-output model with graded scores,
  `{prefix}_accuracy` for a classifier (class ids) or a one-output model with 0/1 labels.

Every number comes from `CrossEncoder.predict` on the model being trained (the scoring path a user deploys), with
the collator's tokenizer and `max_length`. `load_best_model_at_end=True, metric_for_best_model="ndcg@10"` keeps the
checkpoint that reranks best.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..training.trainer_evaluation import WholeSetEvaluationMixin
from .collator import CrossEncoderCollator
from .evaluation import RerankingDataset, evaluate_classification, evaluate_scores
from .fusion_weights import evaluate_reranking
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

    def whole_set_metrics(self, dataset: RerankingDataset) -> dict[str, float]:
        return self.reranking_metrics(dataset)

    def row_metrics(self, dataset: Any) -> dict[str, float]:
        return self.pair_metrics(dataset)

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
        shown = not self.args.disable_tqdm and self.is_world_process_zero()  # a dev pass is long: say where it is
        return evaluate_reranking(self.scorer(), dataset, batch_size=self.args.eval_batch_size, show_progress_bar=shown)

    def pair_metrics(self, dataset: Any) -> dict[str, float]:
        """On labelled pair rows (query, document, label): `spearman` and `pearson` for a one-output model with graded
        labels (more than two values), `accuracy` for a classifier or 0/1 labels; `{}` for other rows."""
        collator = self.data_collator
        if not isinstance(collator, CrossEncoderCollator) or not hasattr(dataset, "column_names"):
            return {}
        if not hasattr(dataset, "__len__") or len(dataset) < 2:  # a stream, or too few rows for a metric
            return {}
        layout = collator.layout(list(dataset.column_names), dataset[0])
        if layout.shape != PAIRS or layout.label is None:
            return {}
        rows = collator.read_rows(dataset.to_list() if hasattr(dataset, "to_list") else list(dataset))
        if rows.labels is None:
            return {}
        labels = rows.labels.numpy()
        pairs = list(zip(rows.queries, rows.documents, strict=True))
        model = self.scorer()
        size = self.args.eval_batch_size
        if model.num_labels > 1 or set(np.unique(labels).tolist()) <= {0.0, 1.0}:
            threshold = 0.5 if model.activation == "sigmoid" else 0.0  # a logit of 0 is a probability of 0.5
            ids = labels.astype(np.int64).tolist()
            return evaluate_classification(model, pairs, ids, threshold=threshold, batch_size=size)
        if np.unique(labels).size < 2:
            return {}
        return evaluate_scores(model, pairs, labels.tolist(), batch_size=size)


__all__ = ["CrossEncoderEvaluationMixin"]
