"""The cross-encoder's training arguments, beside its trainer: `transformers.TrainingArguments` with the options
both trainers share (`training.arguments.HfSiameseTrainingArguments`), where users, `HfArgumentParser` and the saved
`training_args.bin` find them.

    args = CrossEncoderTrainingArguments(output_dir="out", head_learning_rate=1e-3)
    CrossEncoderTrainer(model, args, train_dataset=rows, loss="plistmle")
"""

from __future__ import annotations

from dataclasses import dataclass

from ..training.arguments import HfSiameseTrainingArguments


@dataclass
class CrossEncoderTrainingArguments(HfSiameseTrainingArguments):
    """`TrainingArguments` for `CrossEncoderTrainer`: the Trainer's settings plus `head_learning_rate` (default: the
    head trains at `learning_rate`) and `pretokenize` (see `HfSiameseTrainingArguments`)."""


__all__ = ["CrossEncoderTrainingArguments"]
