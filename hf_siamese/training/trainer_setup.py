"""The `__init__` steps `SiameseTrainer` and `CrossEncoderTrainer` share around the Trainer's own: arguments that keep
the text columns, the tokenizer's pad token in the model config, and the Trainer started without loss rescaling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainingArguments


def text_column_args(args: TrainingArguments | None, output_dir: str) -> TrainingArguments:
    """`args` (default: `TrainingArguments(output_dir=output_dir)`) with `remove_unused_columns` turned off: the
    collators need the raw text columns."""
    if args is None:
        args = TrainingArguments(output_dir=output_dir)
    if args.remove_unused_columns:
        args.remove_unused_columns = False
    return args


def copy_pad_token(config: Any, processing_class: Any) -> None:
    """Give `config` the tokenizer's `pad_token_id` where it has none."""
    pad_token_id = getattr(processing_class, "pad_token_id", None)
    if getattr(config, "pad_token_id", None) is None and pad_token_id is not None:
        # Trainer compares the tokenizer's special tokens with the model config's and warns when they differ.
        config.pad_token_id = pad_token_id


def start_trainer(
    trainer: Any,
    init: Callable[..., None],
    model: Any,
    args: TrainingArguments,
    data_collator: Any,
    train_dataset: Any,
    eval_dataset: Any,
    processing_class: Any,
    kwargs: dict[str, Any],
) -> None:
    """Run `init` (the trainer's `super().__init__`) with these arguments, then keep the Trainer from rescaling the
    loss by label or token counts: the losses average over their batch themselves."""
    init(
        model=model,
        args=args,
        data_collator=data_collator,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=processing_class,
        **kwargs,
    )
    trainer.model_accepts_loss_kwargs = False
