"""What `SiameseTrainer` reads its rows with, set up and checked before training: the collator (the default one
made for the model's kind, or the given one completed from the model's config and the arguments' prompts) and the
train and eval sets checked against it."""

from __future__ import annotations

from typing import Any

from ..data.beir import RetrievalDataset
from ..evaluation.evaluator import is_evaluator
from .arguments import SiameseTrainingArguments
from .collator import SiamesePairCollator, check_dataset
from .multivector_collator import MultiVectorCollator
from .streaming import first_rows, is_stream
from .trainer_data import model_kind
from .trainer_setup import copy_pad_token

# Rows of a streamed train_dataset checked before training (later rows are checked as batches are built).
STREAM_CHECK_ROWS = 1000


def collator_for(
    model: Any, args: SiameseTrainingArguments, data_collator: Any, processing_class: Any
) -> tuple[Any, Any]:
    """The tokenizer and the collator a trainer of `model` uses: the default `SiamesePairCollator` made, or the
    given one completed from the model's config (lowercasing, max length, labels) and `args.prompts`."""
    if processing_class is None:
        processing_class = getattr(data_collator, "tokenizer", None) or model.tokenizer
    if model.tokenizer is None and processing_class is not None:
        # save_pretrained (checkpoints, save_model) puts it with the encoder for sentence-transformers.
        model.tokenizer = processing_class
    if data_collator is None:
        if processing_class is None:
            raise ValueError("SiameseTrainer needs a tokenizer: pass processing_class= or data_collator=.")
        if model_kind(model) == "multi-vector":  # queries tokenized as queries, documents as documents
            data_collator = MultiVectorCollator(processing_class, model.config)
        else:
            data_collator = SiamesePairCollator(processing_class)
    if args.prompts is not None:
        if not isinstance(data_collator, SiamesePairCollator):
            raise ValueError("SiameseTrainer(prompts=...) needs a SiamesePairCollator; give the prompts to yours.")
        if data_collator.prompts is not None and data_collator.prompts != args.prompts:
            raise ValueError(
                f"SiameseTrainer(prompts={args.prompts!r}) conflicts with the collator's prompts "
                f"{data_collator.prompts!r}; give them in one place."
            )
        data_collator.prompts = args.prompts
    if isinstance(data_collator, SiamesePairCollator):
        if data_collator.lowercase is None:
            data_collator.lowercase = model.config.do_lower_case
        if data_collator.max_length is None:
            data_collator.max_length = model.config.effective_max_seq_length
        if data_collator.label2id is None and model.config.classifier_head:
            data_collator.label2id = dict(model.config.label2id)
    copy_pad_token(model.config, processing_class)
    return processing_class, data_collator


def check_data(
    args: SiameseTrainingArguments, train_dataset: Any, eval_dataset: Any, collator: Any, score_range: Any
) -> None:
    """Refuse, before training, a stream without `max_steps`, a streamed evaluation set, and rows the collator
    cannot read (a stream's first `STREAM_CHECK_ROWS` rows; the rest as batches are built)."""
    if is_stream(train_dataset) and args.max_steps <= 0:
        raise ValueError(
            f"SiameseTrainer: train_dataset is a stream ({type(train_dataset).__name__}, no length), so the "
            "number of steps is unknown: set TrainingArguments(max_steps=N)."
        )
    eval_sets = eval_dataset if isinstance(eval_dataset, dict) else {"eval_dataset": eval_dataset}
    for name, dataset in eval_sets.items():
        if not isinstance(dataset, RetrievalDataset) and is_stream(dataset):  # a RetrievalDataset is checked when built
            raise ValueError(
                f"SiameseTrainer: {name} is a stream ({type(dataset).__name__}); evaluation reads its set whole "
                "and more than once: give a map-style dataset, e.g. Dataset.from_list(list(stream.take(n)))."
            )
    if not isinstance(collator, SiamesePairCollator):
        return
    if is_stream(train_dataset):
        check_dataset(first_rows(train_dataset, STREAM_CHECK_ROWS), collator, score_range, "train_dataset")
    elif train_dataset is not None:
        check_dataset(train_dataset, collator, score_range, name="train_dataset")
    for name, dataset in eval_sets.items():
        if dataset is not None and not isinstance(dataset, RetrievalDataset) and not is_evaluator(dataset):
            check_dataset(dataset, collator, None, name=name)


__all__ = ["STREAM_CHECK_ROWS", "check_data", "collator_for"]
