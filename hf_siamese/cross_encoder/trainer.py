"""CrossEncoderTrainer: `transformers.Trainer` over (query, document) pair logits with the cross-encoder losses.

A Trainer subclass of its own, not `SiameseTrainer` extended: the bi-encoder's losses take sentence embeddings from a
`SiameseBertModel`, a cross-encoder's take the logits of a `...ForSequenceClassification` over pairs; they share the
data plumbing (column detection, label rules, streams), which is imported, not copied.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import Trainer, TrainingArguments

from ..evaluation.evaluator import is_evaluator
from ..evaluation.reranking_set import RerankingDataset
from ..training.arguments import NOT_GIVEN, as_training_arguments
from ..training.streaming import first_rows, is_stream
from ..training.throughput import ThroughputLogMixin
from ..training.trainer_setup import HostFreeStepMixin, copy_pad_token, prepare_step, start_trainer, text_column_args
from .arguments import CrossEncoderTrainingArguments
from .collator import CrossEncoderCollator
from .forward import base_model, packs, pair_logits
from .losses import LOSSES, PAIRS, CrossEncoderLoss, CrossEntropyLoss, default_loss, get_loss
from .tokenization import PAIR_TOKENS, tokenize_pair_rows
from .trainer_evaluation import CrossEncoderEvaluationMixin

logger = logging.getLogger(__name__)

# Rows checked before training (all of a map-style dataset, read in chunks of this many; the first ones of a stream).
CHECK_CHUNK_ROWS = 1000
# Attributes holding the classification head on top of the encoder (BERT/RoBERTa `classifier`, DistilBERT
# `pre_classifier` + `classifier`, ModernBERT `head` + `classifier`, decoder models `score`).
HEAD_ATTRIBUTES = ("pre_classifier", "head", "classifier", "score")


class CrossEncoderTrainer(ThroughputLogMixin, HostFreeStepMixin, CrossEncoderEvaluationMixin, Trainer):
    """Fine-tune a cross-encoder (a transformers `...ForSequenceClassification`) with a `cross_encoder.losses` loss.

    Args:
        model: the `...ForSequenceClassification` to train, or a `CrossEncoder` (its `model` is trained; its
            tokenizer and `max_length` are the defaults of the collator).
        args: `CrossEncoderTrainingArguments`: the Trainer's settings plus `head_learning_rate` (the classification
            head's, `HEAD_ATTRIBUTES`; a freshly initialized head often wants a higher one than the encoder; None:
            `learning_rate`, like the rest) and `pretokenize` (tokenize a map-style `datasets.Dataset` train set's
            pairs once before training, cached by its fingerprint, so a step only pads token ids; False tokenizes
            every batch in the loader, as a stream or a collator subclass with its own `__call__` always does). A
            plain `TrainingArguments` is copied into one with those at their defaults. `remove_unused_columns` is
            turned off (the collator needs the text columns).
        loss: a `CrossEncoderLoss` or a name (`bce`, `mnr`, `lambda`, `plistmle`, `margin_mse`, `mse`, `ce`). Default
            from the train data: pairs with float labels in [0, 1] (or 0/1) -> `BinaryCrossEntropyLoss`, with other
            floats -> `MSELoss`, with class labels and `num_labels > 1` -> `CrossEntropyLoss`; tuples (query, positive,
            negatives) and lists (query, documents, scores) -> `PListMLELoss`.
        data_collator: defaults to `CrossEncoderCollator(processing_class)` (`label2id` from the model config).
        eval_dataset: labelled pair rows (the loss, plus `spearman` / `pearson` for graded scores and `accuracy`
            for classes or 0/1 labels), a `RerankingDataset` (reranking `ndcg@10`, `mrr@10`, the first stage's
            `first_stage_ndcg@10`, ... and `ndcg@10_delta`; no loss), or a dict of them (names in the metric keys).
            With `load_best_model_at_end=True, metric_for_best_model="ndcg@10"` the best reranking checkpoint is kept.

    Other arguments are the Trainer's. Deprecated (removed in the next release): `head_learning_rate` and
    `pretokenize` as arguments; set them on `CrossEncoderTrainingArguments`. Given here, they are set on `args` with a
    `FutureWarning`.

    Every row of a map-style `train_dataset` is checked before training (texts, labels, and labels the loss cannot
    take, such as BCE labels outside [0, 1] or class ids past `num_labels`), so an error names the dataset row; a
    stream's first rows are checked, later ones as batches are built.
    """

    def __init__(
        self,
        model: Any = None,
        args: TrainingArguments | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        loss: str | CrossEncoderLoss | None = None,
        head_learning_rate: float | None = NOT_GIVEN,
        pretokenize: bool | None = NOT_GIVEN,
        **kwargs: Any,
    ) -> None:
        max_length, activation = None, None
        if (
            model is not None
            and not isinstance(model, torch.nn.Module)
            and isinstance(getattr(model, "model", None), torch.nn.Module)
        ):
            processing_class = processing_class or getattr(model, "tokenizer", None)
            max_length = getattr(model, "max_length", None)
            activation = getattr(model, "activation", None)
            model = model.model
        if not isinstance(model, torch.nn.Module) or not hasattr(getattr(model, "config", None), "num_labels"):
            raise TypeError(
                f"CrossEncoderTrainer needs a transformers ...ForSequenceClassification (or a CrossEncoder), got "
                f"{type(model).__name__}; a bi-encoder trains with SiameseTrainer."
            )
        deprecated = {"head_learning_rate": head_learning_rate, "pretokenize": pretokenize}
        args = as_training_arguments(
            args, CrossEncoderTrainingArguments, "cross-encoder-output", deprecated, "CrossEncoderTrainer"
        )
        args = text_column_args(args, "cross-encoder-output")
        if processing_class is None:
            processing_class = getattr(data_collator, "tokenizer", None)
        if data_collator is None:
            if processing_class is None:
                raise ValueError("CrossEncoderTrainer needs a tokenizer: pass processing_class= or data_collator=.")
            data_collator = CrossEncoderCollator(processing_class, max_length=max_length)
        num_labels = int(model.config.num_labels)
        if isinstance(data_collator, CrossEncoderCollator) and data_collator.label2id is None and num_labels > 1:
            data_collator.label2id = dict(model.config.label2id)
        copy_pad_token(model.config, processing_class)
        self._tokenized: tuple[Any, Any] | None = None
        self.activation = activation  # the scoring activation of the in-trainer evaluation (None: the model's default)
        self.loss = self._resolve_loss(loss, train_dataset, data_collator, num_labels)
        if isinstance(data_collator, CrossEncoderCollator) and train_dataset is not None:
            rows = first_rows(train_dataset, CHECK_CHUNK_ROWS) if is_stream(train_dataset) else train_dataset
            check_rows(rows, data_collator, self.loss, num_labels, "train_dataset")
            self.loss._rows_checked = not is_stream(train_dataset)
        eval_sets = eval_dataset if isinstance(eval_dataset, dict) else {"eval_dataset": eval_dataset}
        for name, dataset in eval_sets.items():
            checkable = dataset is not None and not is_stream(dataset) and not isinstance(dataset, RerankingDataset)
            checkable = checkable and not is_evaluator(dataset)
            if isinstance(data_collator, CrossEncoderCollator) and checkable:
                check_rows(dataset, data_collator, self.loss, num_labels, name)
        start_trainer(
            self, super().__init__, model, args, data_collator, train_dataset, eval_dataset, processing_class, kwargs
        )
        # Pairs train packed where exact (forward.py); set False to train padded. DataParallel splits a batch after
        # the layout is made, so it trains padded.
        self.packing = packs(model) and self.args.n_gpu <= 1
        prepare_step(self, model, base_model(model) if self.packing else None)

    @staticmethod
    def _resolve_loss(
        loss: str | CrossEncoderLoss | None, train_dataset: Any, collator: Any, num_labels: int
    ) -> CrossEncoderLoss:
        if loss is not None:
            return get_loss(loss)
        rows = first_rows(train_dataset, 1) if is_stream(train_dataset) else None
        if not rows and train_dataset is not None and len(train_dataset):
            rows = [train_dataset[0]]
        if not rows or not isinstance(collator, CrossEncoderCollator):
            raise ValueError(f"CrossEncoderTrainer: pass loss= (a CrossEncoderLoss or one of {_names()}).")
        read = collator.read_rows(rows, ["train_dataset row 0"])
        layout = collator.layout(list(rows[0]), rows[0])
        shape = layout.shape
        values = None
        if shape == PAIRS and num_labels == 1:
            # Every label of a map-style dataset (one Arrow column), the first row's of a stream.
            column = getattr(train_dataset, "column_names", None)
            values = list(train_dataset[layout.label]) if column and layout.label in column else read.labels.tolist()
        chosen = get_loss(default_loss(shape, num_labels, values))
        logger.info("CrossEncoderTrainer: no loss given; using %r for %s rows.", chosen, shape)
        return chosen

    # ------------------------------------------------------------------------------------------------ training

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Score the batch's pairs (packed where exact, forward.py; `self.packing`) and apply `self.loss` to the logits
        `(num_pairs, num_labels)` with the collator's `labels`, `group_size` and `documents_mask`.
        `num_items_in_batch` is unused: every loss averages itself."""
        logits = pair_logits(model, inputs, packing=self.packing)
        loss = self.loss(
            logits, inputs.get("labels"), group_size=inputs.get("group_size"), mask=inputs.get("documents_mask")
        )
        return (loss, logits) if return_outputs else loss

    def training_rows(self) -> Any:
        """What the train loader reads: the train set with its pairs tokenized once (`tokenize_pair_rows`) when it is
        a map-style `datasets.Dataset` read by a `CrossEncoderCollator` (not a subclass with its own `__call__`) and
        `pretokenize` is on, else the set itself."""
        import datasets

        dataset, collator = self.train_dataset, self.data_collator
        if not (self.args.pretokenize and type(collator).__call__ is CrossEncoderCollator.__call__):
            return dataset
        if not isinstance(dataset, datasets.Dataset) or PAIR_TOKENS in dataset.column_names:
            return dataset
        if self._tokenized is None or self._tokenized[0] is not dataset:
            with self.args.main_process_first(desc="tokenizing the train pairs"):
                self._tokenized = (dataset, tokenize_pair_rows(collator, dataset))
        return self._tokenized[1]

    def get_train_dataloader(self) -> Any:
        """The Trainer's train loader over `training_rows()`."""
        original = self.train_dataset
        self.train_dataset = self.training_rows()
        try:
            return super().get_train_dataloader()
        finally:
            self.train_dataset = original

    def prediction_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], prediction_loss_only: bool, ignore_keys: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """Evaluation step: `(loss, logits (num_pairs, num_labels), labels)`; the batch's shape keys (`group_size`,
        `documents_mask`) go to the loss, not to the model, as in training."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss, logits = self.compute_loss(model, inputs, return_outputs=True)
        if prediction_loss_only:
            return loss.detach(), None, None
        return loss.detach(), logits.detach(), inputs.get("labels")

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        """The Trainer's optimizer, with the head's parameters in groups of their own at `head_learning_rate`."""
        optimizer = super().create_optimizer(model)
        head_learning_rate = self.args.head_learning_rate
        if head_learning_rate is None or self.optimizer_cls_and_kwargs is not None:
            return optimizer
        head = head_parameters(self.accelerator.unwrap_model(self.model))
        if not head:
            logger.warning(
                "CrossEncoderTrainer: head_learning_rate is set but the model has none of %s.", HEAD_ATTRIBUTES
            )
            return optimizer
        new_groups = []
        for group in optimizer.param_groups:
            head_part = [p for p in group["params"] if id(p) in head]
            if head_part:
                group["params"] = [p for p in group["params"] if id(p) not in head]
                settings = {k: v for k, v in group.items() if k not in ("params", "initial_lr")}
                new_groups.append({**settings, "params": head_part, "lr": head_learning_rate})
        optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
        for group in new_groups:
            optimizer.add_param_group(group)
        return optimizer


def head_parameters(model: torch.nn.Module) -> set[int]:
    """Ids of the parameters of the model's classification head (`HEAD_ATTRIBUTES`)."""
    ids: set[int] = set()
    for name in HEAD_ATTRIBUTES:
        module = getattr(model, name, None)
        if isinstance(module, torch.nn.Module):
            ids.update(id(p) for p in module.parameters())
    return ids


def check_rows(rows: Any, collator: CrossEncoderCollator, loss: CrossEncoderLoss, num_labels: int, name: str) -> None:
    """Check every row (a `datasets.Dataset` or a list of dicts) before training: the collator's text and label rules,
    the loss's data shape, its number of outputs and its label range. Errors name the dataset row."""
    if len(rows) == 0:
        raise ValueError(f"{name} is empty; it needs at least one row.")
    first = rows[0]
    shape = collator.layout(list(first), first).shape
    if shape not in loss.shapes:
        raise ValueError(
            f"{type(loss).__name__} reads {' or '.join(loss.shapes)} rows, but {name} has {shape} rows (columns "
            f"{list(first)}); see the loss table in the README."
        )
    if (loss.num_labels == "many") != (num_labels > 1):
        wanted = "num_labels > 1" if loss.num_labels == "many" else "num_labels=1"
        raise ValueError(f"{type(loss).__name__} needs a model with {wanted}; this one has num_labels={num_labels}.")
    for start in range(0, len(rows), CHECK_CHUNK_ROWS):
        chunk = rows[start : start + CHECK_CHUNK_ROWS]
        if isinstance(chunk, dict):  # a Dataset slice: columns -> rows
            chunk = [dict(zip(chunk, values, strict=True)) for values in zip(*chunk.values(), strict=True)]
        names = [f"{name} row {start + i}" for i in range(len(chunk))]
        read = collator.read_rows(chunk, names)
        if read.labels is None:
            continue
        for row in range(len(chunk)) if not _labels_fit(loss, read.labels, read.mask, num_labels) else ():
            labels, mask = read.labels[row : row + 1], None if read.mask is None else read.mask[row : row + 1]
            if not _labels_fit(loss, labels, mask, num_labels):
                try:
                    _labels_fit(loss, labels, mask, num_labels, raise_error=True)
                except ValueError as error:
                    raise ValueError(f"{names[row]}: {error}") from None


def _labels_fit(
    loss: CrossEncoderLoss, labels: torch.Tensor, mask: torch.Tensor | None, num_labels: int, raise_error: bool = False
) -> bool:
    try:
        if isinstance(loss, CrossEntropyLoss):
            loss.check_labels(labels, classes=num_labels)
        else:
            loss.check_labels(labels, mask)
    except ValueError:
        if raise_error:
            raise
        return False
    return True


def _names() -> list[str]:
    return sorted(LOSSES)


__all__ = ["CrossEncoderTrainer", "check_rows", "head_parameters"]
