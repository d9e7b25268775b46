"""What `SiameseTrainer` and `CrossEncoderTrainer` share around the Trainer's own: arguments that keep the text
columns and copy batches without blocking, the tokenizer's pad token in the model config, the Trainer started without
loss rescaling, and a training step that never waits for the device (`HostFreeStepMixin`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainingArguments

from ..modeling.attention_kernels import attention_dropout_off, training_attention
from ..modeling.compilation import compile_layers, take_compile_option
from ..modeling.packing import attention_implementation

logger = logging.getLogger(__name__)


def text_column_args(args: TrainingArguments | None, output_dir: str) -> TrainingArguments:
    """`args` (default: `TrainingArguments(output_dir=output_dir)`) with `remove_unused_columns` turned off (the
    collators need the raw text columns), batches copied to the device without blocking when they come from pinned
    memory (a blocking copy waits for the previous step's kernels), and the NaN/inf loss filter moved onto the device
    (`HostFreeStepMixin`; the Trainer's own reads every step's loss back)."""
    if args is None:
        args = TrainingArguments(output_dir=output_dir)
    if args.remove_unused_columns:
        args.remove_unused_columns = False
    config = getattr(args, "accelerator_config", None)
    if args.dataloader_pin_memory and config is not None and not config.non_blocking:
        config.non_blocking = True
    if args.logging_nan_inf_filter:
        args.logging_nan_inf_filter = False
        args.on_device_nan_inf_filter = True
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
    loss by label or token counts: the losses average over their batch themselves. `torch_compile=True` compiles the
    encoder's layers one by one with dynamic shapes (modeling/compilation.py), not the whole model."""
    compile_settings = take_compile_option(args)
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
    if compile_settings is not None:
        count = compile_layers(getattr(model, "encoder", model), **compile_settings)
        logger.info("torch_compile: %d encoder layers compiled with dynamic shapes (%s).", count, compile_settings)


def packed_attention(trainer: Any, encoder: torch.nn.Module) -> None:
    """Set up `encoder` (which trains packed) for its packed route: on CUDA in bf16/fp16 an SDPA encoder takes the
    varlen kernel (`training_attention`), and attention dropout goes to 0 where the route's kernel has none (a warning
    says so; hidden dropout stays). Both trainers call this once, after the Trainer has its device."""
    name = type(trainer).__name__
    low_precision = bool(trainer.args.bf16 or trainer.args.fp16)
    kernel = training_attention(encoder, trainer.args.device.type, low_precision)
    if kernel is not None:
        encoder.config._attn_implementation = kernel
        logger.info("%s: packed batches run attn_implementation=%r on CUDA.", name, kernel)
    if attention_dropout_off(encoder):
        logger.warning(
            "%s: attention dropout set to 0: the %s kernel of packed rows has none (hidden dropout stays).",
            name,
            attention_implementation(encoder),
        )


class HostFreeStepMixin:
    """The Trainer's step without its one read-back: `TrainingArguments(logging_nan_inf_filter=True)` (the default)
    replaces a NaN or inf step loss by the mean loss since the last log, and the Trainer decides that with
    `torch.isnan(loss)` on the host every step. Here the same replacement is a `torch.where` on the device."""

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not getattr(self.args, "on_device_nan_inf_filter", False) or not isinstance(loss, torch.Tensor):
            return loss
        logged = getattr(self, "_tr_loss", None)
        if logged is None:
            return torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0)
        steps = 1 + self.state.global_step - getattr(self, "_globalstep_last_logged", 0)
        return torch.where(torch.isfinite(loss), loss, (logged / steps).to(loss.dtype))
