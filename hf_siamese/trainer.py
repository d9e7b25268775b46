"""SiameseTrainer: `transformers.Trainer` with siamese losses, a no-duplicates sampler for ranking losses, and
STS evaluation. Everything else (checkpoints, resume, logging, accumulation, mixed precision, accelerate) is the
Trainer's own."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import EvalLoopOutput

from .collator import SiamesePairCollator, check_dataset, detect_layout
from .losses import MultipleNegativesRankingLoss, SiameseLoss, SoftmaxLoss, get_loss
from .modeling_siamese import SiameseBertModel
from .sampler import NoDuplicatesBatchSampler

logger = logging.getLogger(__name__)


class SiameseTrainer(Trainer):
    """Fine-tune a `SiameseBertModel` with a siamese loss.

    Args:
        model: the `SiameseBertModel` to train.
        args: ordinary `TrainingArguments`. `remove_unused_columns` is turned off: the collator needs the raw text
            columns.
        loss: a `hf_siamese.losses` object or a name: `"cosine"`, `"cosent"`, `"softmax"`, `"mnr"`. Defaults from
            the train data: ranking rows -> MNR, class labels -> softmax, float scores -> cosine.
        data_collator: defaults to `SiamesePairCollator(processing_class)`; its `max_length` and `label2id` default
            to the model's `max_seq_length` and `label2id`.
        head_learning_rate: learning rate of the softmax classifier head; defaults to 100x `args.learning_rate`
            (see `SoftmaxLoss` for why). Ignored when the model has no head.
        no_duplicates_sampler: for ranking losses, batch rows so that no text occurs twice in a batch (a repeated
            text would be a false negative). On by default for `MultipleNegativesRankingLoss`.
        Other arguments are the Trainer's.
    """

    def __init__(
        self,
        model: SiameseBertModel | None = None,
        args: TrainingArguments | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        loss: str | SiameseLoss | None = None,
        head_learning_rate: float | None = None,
        no_duplicates_sampler: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(model, SiameseBertModel):
            raise TypeError(
                f"SiameseTrainer needs a SiameseBertModel, got {type(model).__name__}; build one with "
                "SiameseBertModel.from_encoder(...)."
            )
        if args is None:
            args = TrainingArguments(output_dir="siamese-output")
        if args.remove_unused_columns:
            args.remove_unused_columns = False
        if processing_class is None:
            processing_class = getattr(data_collator, "tokenizer", None) or model.tokenizer
        if data_collator is None:
            if processing_class is None:
                raise ValueError("SiameseTrainer needs a tokenizer: pass processing_class= or data_collator=.")
            data_collator = SiamesePairCollator(processing_class)
        if isinstance(data_collator, SiamesePairCollator):
            if data_collator.max_length is None:
                data_collator.max_length = model.config.effective_max_seq_length
            if data_collator.label2id is None and model.config.classifier_head:
                data_collator.label2id = dict(model.config.label2id)

        self.loss = self._resolve_loss(loss, train_dataset, data_collator)
        if isinstance(self.loss, SoftmaxLoss) and not model.config.classifier_head:
            raise ValueError(
                "loss='softmax' needs a model with a classifier head: SiameseBertModel.from_encoder(..., "
                "label2id={'entailment': 0, 'neutral': 1, 'contradiction': 2})."
            )
        self.head_learning_rate = head_learning_rate
        if no_duplicates_sampler is None:
            no_duplicates_sampler = isinstance(self.loss, MultipleNegativesRankingLoss)
        self.no_duplicates_sampler = no_duplicates_sampler

        if isinstance(data_collator, SiamesePairCollator):
            score_range = self.loss.score_range
            if train_dataset is not None:
                check_dataset(train_dataset, data_collator, score_range, name="train_dataset")
            eval_sets = eval_dataset if isinstance(eval_dataset, dict) else {"eval_dataset": eval_dataset}
            for name, dataset in eval_sets.items():
                if dataset is not None:
                    check_dataset(dataset, data_collator, None, name=name)

        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        # Our losses average over the batch themselves; Trainer must not rescale by token counts.
        self.model_accepts_loss_kwargs = False

    @staticmethod
    def _resolve_loss(loss: str | SiameseLoss | None, train_dataset: Any, collator: Any) -> SiameseLoss:
        if loss is not None:
            return get_loss(loss)
        if train_dataset is None or not hasattr(train_dataset, "column_names"):
            raise ValueError("SiameseTrainer: pass loss= ('cosine', 'cosent', 'softmax', 'mnr' or a loss object).")
        layout = (
            collator.layout(train_dataset.column_names)
            if isinstance(collator, SiamesePairCollator)
            else detect_layout(train_dataset.column_names)
        )
        if layout.label is None:
            chosen = "mnr"
        else:
            value = train_dataset[0][layout.label]
            chosen = "cosine" if isinstance(value, float) else "softmax"
        logger.info("SiameseTrainer: no loss given; using %r for columns %s.", chosen, train_dataset.column_names)
        return get_loss(chosen)

    # ------------------------------------------------------------------------------------------------ training

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Run the model on the grouped batch and apply `self.loss`. `num_items_in_batch` is unused: every loss is
        a mean over its batch."""
        labels = inputs.get("labels")
        model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
        outputs = model(**model_inputs)
        loss = self.loss(outputs, labels)
        return (loss, outputs) if return_outputs else loss

    def prediction_step(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def evaluation_loop(
        self,
        dataloader: DataLoader,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        """The Trainer's loop (it gives `{prefix}_loss`), plus STS metrics when the eval rows are scored pairs:
        `{prefix}_spearman_cosine`, `{prefix}_pearson_cosine`, the same for dot / euclidean / manhattan, and
        `{prefix}_mse_cosine` / `{prefix}_mae_cosine` (cosine against gold rescaled to [0, 1])."""
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        dataset = getattr(dataloader, "dataset", None)
        metrics = self.sts_metrics(dataset) if dataset is not None else {}
        output.metrics.update({f"{metric_key_prefix}_{k}": v for k, v in metrics.items()})
        return output

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
        from .metrics import sts_metrics_from_embeddings

        first, second = list(dataset[layout.texts[0]]), list(dataset[layout.texts[1]])
        unique = list(dict.fromkeys(first + second))
        shards = np.array_split(np.arange(len(unique)), self.accelerator.num_processes)
        local = shards[self.accelerator.process_index]
        model = self.accelerator.unwrap_model(self.model)
        embeddings = model.encode(
            [unique[i] for i in local],
            tokenizer=self.data_collator.tokenizer,
            batch_size=self.args.eval_batch_size,
            max_length=self.data_collator.max_length,
            convert_to_numpy=True,
        )
        if self.accelerator.num_processes > 1:
            gathered: list[Any] = [None] * self.accelerator.num_processes
            torch.distributed.all_gather_object(gathered, embeddings)
            embeddings = np.concatenate(gathered)
        position = {text: i for i, text in enumerate(unique)}
        score_range = self.loss.score_range or (float(gold.min()), float(gold.max()))
        return sts_metrics_from_embeddings(
            embeddings[[position[t] for t in first]],
            embeddings[[position[t] for t in second]],
            gold,
            score_range=score_range,
        )

    def _get_train_sampler(self, train_dataset: Any = None) -> torch.utils.data.Sampler | None:
        """With `train_sampling_strategy="group_by_length"`, group rows of similar token length so batches carry
        little padding. Rows are raw text, so the lengths (longest text of each row) are computed here once."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if (
            self.args.train_sampling_strategy == "group_by_length"
            and isinstance(self.data_collator, SiamesePairCollator)
            and hasattr(dataset, "column_names")
            and self.args.length_column_name not in dataset.column_names
        ):
            return LengthGroupedSampler(
                self.args.train_batch_size * self.args.gradient_accumulation_steps,
                lengths=self.row_lengths(dataset),
            )
        return super()._get_train_sampler(train_dataset)

    def row_lengths(self, dataset: Any) -> list[int]:
        """Token count of the longest text of every row (truncated to the collator's `max_length`)."""
        layout = self.data_collator.layout(dataset.column_names)
        tokenizer = self.data_collator.tokenizer
        longest = [0] * len(dataset)
        for column in layout.texts:
            ids = tokenizer(list(dataset[column]), truncation=True, max_length=self.data_collator.max_length)
            longest = [max(a, len(b)) for a, b in zip(longest, ids["input_ids"], strict=True)]
        return longest

    def get_train_dataloader(self) -> DataLoader:
        if not self.no_duplicates_sampler:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("SiameseTrainer: training requires a train_dataset.")
        layout = self.data_collator.layout(self.train_dataset.column_names)
        columns = [list(self.train_dataset[c]) for c in layout.texts]
        sampler = NoDuplicatesBatchSampler(
            list(zip(*columns, strict=True)),
            batch_size=self._train_batch_size,
            drop_last=self.args.dataloader_drop_last,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
        )
        loader = DataLoader(
            self.train_dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return self.accelerator.prepare(loader)

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(model)
        unwrapped = self.accelerator.unwrap_model(self.model)
        head = getattr(unwrapped, "classifier", None)
        if head is None or self.optimizer_cls_and_kwargs is not None:
            return optimizer
        # Move the head's parameters into groups of their own with a higher learning rate.
        head_params = {id(p) for p in head.parameters()}
        head_lr = self.head_learning_rate or self.args.learning_rate * 100
        new_groups = []
        for group in optimizer.param_groups:
            head_part = [p for p in group["params"] if id(p) in head_params]
            group["params"] = [p for p in group["params"] if id(p) not in head_params]
            if head_part:
                settings = {k: v for k, v in group.items() if k not in ("params", "initial_lr")}
                new_groups.append({**settings, "params": head_part, "lr": head_lr})
        optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
        for group in new_groups:
            optimizer.add_param_group(group)
        return optimizer
