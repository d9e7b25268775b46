"""Evaluation for `SiameseTrainer`: the loss where the eval rows fit it, STS correlations on scored pairs, IR metrics on
retrieval sets (`hf_siamese.data.RetrievalDataset`). A mixin, so `trainer.py` stays readable in one sitting."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers.trainer_utils import EvalLoopOutput, speed_metrics

from ..data.beir import RetrievalDataset
from ..modeling.distributed import encode_in_shards
from ..modeling.modeling_siamese import SiameseBertModel
from ..retrieval.evaluation import evaluate_retrieval
from .collator import SiamesePairCollator


class WholeSetEvaluationMixin:
    """`evaluate` and `evaluation_loop` of a trainer that scores some eval sets whole instead of running the Trainer's
    loop on them (those of type `whole_sets`, by `whole_set_metrics`), and adds metrics of the eval rows
    (`row_metrics`) to the loop's `{prefix}_loss`. Shared by `SiameseTrainer` and `CrossEncoderTrainer`."""

    whole_sets: type | tuple[type, ...] = ()

    def whole_set_metrics(self, dataset: Any) -> dict[str, float]:
        raise NotImplementedError

    def row_metrics(self, dataset: Any) -> dict[str, float]:
        return {}

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """The Trainer's evaluation, or for a set of type `whole_sets`: `{prefix}_{name}` of `whole_set_metrics`,
        with the speed metrics, logged and passed to the callbacks as the Trainer's would be."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if isinstance(dataset, str) and isinstance(self.eval_dataset, dict):
            dataset = self.eval_dataset[dataset]  # Trainer passes the name of each set of a dict
        if not isinstance(dataset, self.whole_sets):
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        self._memory_tracker.start()
        start = time.time()
        metrics = {f"{metric_key_prefix}_{name}": value for name, value in self.whole_set_metrics(dataset).items()}
        metrics.update(speed_metrics(metric_key_prefix, start, num_samples=len(dataset)))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

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
        output.metrics.update({f"{metric_key_prefix}_{k}": v for k, v in metrics.items()})
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

    def whole_set_metrics(self, dataset: RetrievalDataset) -> dict[str, float]:
        return self.retrieval_metrics(dataset)

    def row_metrics(self, dataset: Any) -> dict[str, float]:
        return self.sts_metrics(dataset)

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
        """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k of the model on a retrieval set; under several processes each
        embeds a shard of the corpus and every process gets the numbers of one process."""
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        try:
            return evaluate_retrieval(
                model,
                dataset,
                tokenizer=self.data_collator.tokenizer if isinstance(self.data_collator, SiamesePairCollator) else None,
                batch_size=self.args.eval_batch_size,
                process_index=self.accelerator.process_index,
                num_processes=self.accelerator.num_processes,
            )
        finally:
            model.train(was_training)

    def sts_metrics(self, dataset: Any) -> dict[str, float]:
        """STS correlations of the model's embeddings on a dataset of scored pairs; `{}` for other layouts.

        Under several processes each encodes a contiguous shard of the unique texts and the shards are gathered in
        rank order, so every process computes the metric once on the full set, exactly as one process would.
        """
        if not isinstance(self.data_collator, SiamesePairCollator) or not hasattr(dataset, "column_names"):
            return {}
        layout = self.data_collator.layout(dataset.column_names)
        if layout.label is None or len(layout.texts) != 2:
            return {}
        gold = np.asarray(dataset[layout.label])
        if gold.dtype.kind != "f" or len(gold) < 2:
            return {}
        from ..metrics import sts_metrics_from_embeddings

        # Each text with its column's prompt, as in training; each (prompt, text) encoded once.
        first, second = ([(self.data_collator.prompt_for(c), text) for text in dataset[c]] for c in layout.texts)
        unique = list(dict.fromkeys(first + second))
        model = self.accelerator.unwrap_model(self.model)
        embeddings = encode_in_shards(
            unique,
            lambda items: self._encode_prompted(model, items),
            self.accelerator.process_index,
            self.accelerator.num_processes,
        )
        position = {text: i for i, text in enumerate(unique)}
        score_range = self.loss.score_range or (float(gold.min()), float(gold.max()))
        return sts_metrics_from_embeddings(
            embeddings[[position[t] for t in first]],
            embeddings[[position[t] for t in second]],
            gold,
            score_range=score_range,
        )

    def _encode_prompted(self, model: SiameseBertModel, items: list[tuple[str, str]]) -> np.ndarray:
        """Embeddings `(len(items), dim)` of `(prompt, text)` items, one `encode` call per distinct prompt."""
        embeddings = np.zeros((len(items), model.config.embedding_size), dtype=np.float32)
        for prompt in dict.fromkeys(prompt for prompt, _ in items):
            index = [i for i, (p, _) in enumerate(items) if p == prompt]
            embeddings[index] = model.encode(
                [items[i][1] for i in index],
                tokenizer=self.data_collator.tokenizer,
                batch_size=self.args.eval_batch_size,
                max_length=self.data_collator.max_length,
                convert_to_numpy=True,
                prompt=prompt,  # "" too: the model's default prompt would not match training
            )
        return embeddings
