"""Evaluation for `SiameseTrainer`: the loss where the eval rows fit it, STS correlations on scored pairs, IR metrics on
retrieval sets (`hf_siamese.data.RetrievalDataset`), and any evaluator given as an eval set
(`hf_siamese.evaluation.Evaluator`). A mixin, so `trainer.py` stays readable in one sitting; the evaluators it runs
are `hf_siamese.evaluation`'s."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers.trainer_utils import EvalLoopOutput, speed_metrics

from ..data.beir import RetrievalDataset
from ..evaluation.evaluator import ShardedSimilarityEvaluator, evaluator_primary_key, is_evaluator, prefixed_metrics
from ..evaluation.retrieval import RetrievalEvaluator
from ..retrieval.ranking.maxsim import is_multivector_model
from .collator import SiamesePairCollator

logger = logging.getLogger(__name__)


class WholeSetEvaluationMixin:
    """`evaluate` and `evaluation_loop` of a trainer that runs evaluators (`hf_siamese.evaluation.Evaluator`:
    `evaluator(model) -> dict[str, float]` with a `primary_metric`). Shared by `SiameseTrainer` and
    `CrossEncoderTrainer`.

    An eval set that is an evaluator, or of a type of `whole_sets` (made one by `evaluator_for`), is scored whole by
    it instead of by the Trainer's loop: `{prefix}_{name_}{metric}` for each of its numbers. On other sets the loop
    gives `{prefix}_loss`, plus the numbers of `rows_evaluator(dataset)` when the rows fit one. The evaluators get
    `evaluation_model()` (the unwrapped model; a cross-encoder scorer for `CrossEncoderTrainer`), and the model's
    training mode is restored afterwards.

    Best checkpoint: `TrainingArguments(metric_for_best_model=...)` names the number; left at its default ("loss",
    set by `load_best_model_at_end=True`), which an evaluator does not report, the primary metric of the first
    evaluator of the trainer's own eval sets is taken (with its `greater_is_better`), e.g. `ndcg@10` or
    `dev_spearman_cosine` for an eval set named "dev".
    """

    whole_sets: type | tuple[type, ...] = ()

    def evaluator_for(self, dataset: Any) -> Any:
        """The evaluator of an eval set of a type of `whole_sets`."""
        raise NotImplementedError

    def rows_evaluator(self, dataset: Any) -> Any:
        """An evaluator of the eval rows the Trainer's loop reads (beside the loss), or None when none fits them."""
        return None

    def evaluation_model(self) -> Any:
        """What the evaluators are called with: the model being trained, unwrapped."""
        return self.accelerator.unwrap_model(self.model)

    def run_evaluator(self, evaluator: Any) -> dict[str, float]:
        """`evaluator(self.evaluation_model())`, the model's training mode restored afterwards."""
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        try:
            return evaluator(self.evaluation_model())
        finally:
            model.train(was_training)

    def whole_set_metrics(self, dataset: Any) -> dict[str, float]:
        """The numbers of an evaluator, or of the evaluator of a `whole_sets` set (unprefixed)."""
        return self.run_evaluator(dataset if is_evaluator(dataset) else self.evaluator_for(dataset))

    def row_metrics(self, dataset: Any) -> dict[str, float]:
        """The numbers of `rows_evaluator(dataset)`; `{}` where no evaluator fits the rows."""
        evaluator = self.rows_evaluator(dataset)
        return {} if evaluator is None else self.run_evaluator(evaluator)

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """The Trainer's evaluation, or for an evaluator or a set of type `whole_sets`: `{prefix}_{name_}{metric}` of
        the evaluator's numbers, with the speed metrics, logged and passed to the callbacks as the Trainer's would
        be."""
        own = eval_dataset is None or isinstance(eval_dataset, str)  # the trainer's own eval set(s)
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if isinstance(dataset, str) and isinstance(self.eval_dataset, dict):
            dataset = self.eval_dataset[dataset]  # Trainer passes the name of each set of a dict
        if not (is_evaluator(dataset) or isinstance(dataset, self.whole_sets)):
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        evaluator = dataset if is_evaluator(dataset) else self.evaluator_for(dataset)
        self._memory_tracker.start()
        start = time.time()
        name = getattr(evaluator, "name", "") or ""
        metrics = prefixed_metrics(self.run_evaluator(evaluator), metric_key_prefix, name)
        size = len(evaluator) if hasattr(evaluator, "__len__") else None
        metrics.update(speed_metrics(metric_key_prefix, start, num_samples=size))
        if own:
            self._best_by_primary_metric(metric_key_prefix, evaluator)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def _best_by_primary_metric(self, metric_key_prefix: str, evaluator: Any) -> None:
        """Choose checkpoints by the evaluator's primary metric where `metric_for_best_model` is the default "loss"
        (which an evaluator does not report)."""
        if self.args.metric_for_best_model not in ("loss", "eval_loss"):
            return
        key = f"{metric_key_prefix}_{evaluator_primary_key(evaluator)}".removeprefix("eval_")
        self.args.metric_for_best_model = key
        self.args.greater_is_better = bool(getattr(evaluator, "greater_is_better", True))
        logger.info("metric_for_best_model: the evaluator's primary metric %r (it reports no loss)", key)

    def evaluation_loop(
        self,
        dataloader: DataLoader,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        """The Trainer's loop (it gives `{prefix}_loss`), plus `{prefix}_{name}` of `row_metrics` of the eval rows."""
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        dataset = getattr(dataloader, "dataset", None)
        metrics = self.row_metrics(dataset) if dataset is not None else {}
        output.metrics.update(prefixed_metrics(metrics, metric_key_prefix))
        return output


class SiameseEvaluationMixin(WholeSetEvaluationMixin):
    """Evaluation methods of `SiameseTrainer` (which provides `loss`, `data_collator` and the Trainer's state).

    `evaluate` on a retrieval set (`hf_siamese.data.RetrievalDataset`, e.g. `read_beir(folder)`) gives
    `{prefix}_ndcg@10`, `{prefix}_mrr@10`, `{prefix}_recall@100`, ... (in [0, 1], like the STS correlations), each
    query ranked against the whole corpus; under several processes each embeds a shard of the corpus, and all report
    the numbers one process would. On scored pairs the Trainer's loop (`{prefix}_loss`) adds `{prefix}_spearman_cosine`,
    `{prefix}_pearson_cosine`, the same for dot / euclidean / manhattan, and `{prefix}_mse_cosine` /
    `{prefix}_mae_cosine` (cosine against gold rescaled to [0, 1]).
    """

    whole_sets = RetrievalDataset

    def evaluator_for(self, dataset: RetrievalDataset) -> RetrievalEvaluator:
        """The `RetrievalEvaluator` of a retrieval set: the collator's tokenizer, the eval batch size, this process's
        shard of the corpus."""
        return RetrievalEvaluator(
            dataset,
            tokenizer=self.data_collator.tokenizer if isinstance(self.data_collator, SiamesePairCollator) else None,
            batch_size=self.args.eval_batch_size,
            process_index=self.accelerator.process_index,
            num_processes=self.accelerator.num_processes,
        )

    def rows_evaluator(self, dataset: Any) -> ShardedSimilarityEvaluator | None:
        """The STS evaluator of scored pairs (two text columns and float gold scores), each text with its column's
        prompt as in training; None for other layouts."""
        if not isinstance(self.data_collator, SiamesePairCollator) or not hasattr(dataset, "column_names"):
            return None
        if is_multivector_model(self.accelerator.unwrap_model(self.model)):  # no sentence embedding to correlate
            return None
        layout = self.data_collator.layout(dataset.column_names)
        if layout.label is None or len(layout.texts) != 2:
            return None
        gold = np.asarray(dataset[layout.label])
        if gold.dtype.kind != "f" or len(gold) < 2:
            return None
        first, second = layout.texts
        return ShardedSimilarityEvaluator(
            dataset[first],
            dataset[second],
            gold,
            score_range=self.loss.score_range or (float(gold.min()), float(gold.max())),
            # "" too: the model's default prompt would not match training
            prompts=(self.data_collator.prompt_for(first), self.data_collator.prompt_for(second)),
            tokenizer=self.data_collator.tokenizer,
            batch_size=self.args.eval_batch_size,
            max_length=self.data_collator.max_length,
            process_index=self.accelerator.process_index,
            num_processes=self.accelerator.num_processes,
        )

    def prediction_step(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        inputs = self._prepare_inputs(inputs)
        if not self._loss_fits(inputs):
            # e.g. a softmax (NLI) run evaluated on scored STS pairs: the STS metrics apply, the loss does not.
            return None, None, None
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def _loss_fits(self, inputs: dict[str, torch.Tensor]) -> bool:
        """Whether the batch has the labels `self.loss` reads (float scores, class ids, or none needed)."""
        labels = inputs.get("labels")
        kind = self.loss.label_kind
        if kind is None:
            return True
        if labels is None:
            return False
        return labels.is_floating_point() == (kind == "score")

    def retrieval_metrics(self, dataset: RetrievalDataset) -> dict[str, float]:
        """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k of the model on a retrieval set (`evaluator_for`); under
        several processes each embeds a shard of the corpus and every process gets the numbers of one process."""
        return self.run_evaluator(self.evaluator_for(dataset))

    def sts_metrics(self, dataset: Any) -> dict[str, float]:
        """STS correlations of the model's embeddings on a dataset of scored pairs (`rows_evaluator`); `{}` for other
        layouts."""
        return self.row_metrics(dataset)
