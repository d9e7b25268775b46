"""What `SiameseTrainer` and `CrossEncoderTrainer` share around the Trainer's own: arguments that keep the text
columns and copy batches without blocking, the tokenizer's pad token in the model config, the Trainer started without
loss rescaling (and its layers compiled, with shape buckets where asked), and a training step that never waits for the
device (`HostFreeStepMixin`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainingArguments

from ..modeling.attention_kernels import attention_dropout_off, training_attention
from ..modeling.compilation import GRAPH_MODES, compile_layers, take_compile_option
from ..modeling.packing import attention_implementation, packed_route
from ..modeling.shape_buckets import ShapeBuckets
from .collator import _tokenizer_limit

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
    loss by label or token counts: the losses average over their batch themselves. `torch_compile=True` is taken
    from the Trainer (which would compile the whole model) and kept for `prepare_step`, which compiles the encoder's
    layers instead (modeling/compilation.py)."""
    trainer.layer_compile = take_compile_option(args)
    trainer.graph_steps = False
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


def prepare_step(trainer: Any, model: torch.nn.Module, packer: torch.nn.Module | None) -> None:
    """Set up the training step, once the Trainer has its device. `packer`: the module whose batches run packed (the
    bi-encoder's encoder, the cross-encoder's base model), or None where the model trains padded.

    - The packed route's attention (`packed_attention`).
    - CUDA graphs (`uses_cuda_graphs`): packed batches rounded up to shape buckets (`packer.shape_buckets`, texts of
      at most the collator's token limit) and the encoder's layers compiled with static shapes, one graph a bucket,
      in `torch_compile_mode` "reduce-overhead" (the default) so that each is recorded once and replayed.
    - Else, with `torch_compile=True`, the layers compiled with dynamic shapes.
    """
    if packer is not None:
        packed_attention(trainer, packer)
    settings = trainer.layer_compile
    trainer.graph_steps = uses_cuda_graphs(trainer.args, settings, packer)
    if trainer.graph_steps:
        packer.shape_buckets = ShapeBuckets(text_tokens=text_token_limit(trainer.data_collator))
        backend, mode = (settings or {}).get("backend"), (settings or {}).get("mode") or "reduce-overhead"
        count = compile_layers(packer, backend=backend, mode=mode, dynamic=False)
        logger.info(
            "%s: the step's %d encoder layers replay CUDA graphs (static shapes, one graph a shape bucket of at most "
            "%d-token texts; mode %r). cuda_graphs=False turns this off.",
            type(trainer).__name__,
            count,
            packer.shape_buckets.text_tokens,
            mode,
        )
    elif settings is not None:
        count = compile_layers(getattr(model, "encoder", model), **settings)
        logger.info("torch_compile: %d encoder layers compiled with dynamic shapes (%s).", count, settings)


def uses_cuda_graphs(args: Any, compile_settings: dict[str, Any] | None, packer: torch.nn.Module | None) -> bool:
    """Whether the step replays CUDA graphs: `args.cuda_graphs` when set (True needs a model that trains packed);
    else a CUDA-graph `torch_compile_mode` ("reduce-overhead", "max-autotune") with `torch_compile=True`; else, by
    default, where it measured fastest: packed bf16/fp16 training on the varlen kernel, one process on one CUDA GPU,
    `torch_compile` not set, no gradient checkpointing, where Triton is installed (1.5-1.9x the uncompiled step for
    BERT-base on an H200, benchmarks/RESULTS.md)."""
    wanted = getattr(args, "cuda_graphs", None)
    if packer is None:
        if wanted:
            raise ValueError(
                "cuda_graphs=True: this model trains padded (its encoder cannot run packed batches, or packing is "
                "off), and CUDA graphs need the packed batches' shape buckets; leave cuda_graphs unset or False"
            )
        return False
    if wanted is not None:
        return bool(wanted)
    if compile_settings is not None:
        return compile_settings.get("mode") in GRAPH_MODES
    device = getattr(args, "device", None)
    low_precision = bool(getattr(args, "bf16", False) or getattr(args, "fp16", False))
    one_process = getattr(args, "world_size", 1) == 1 and getattr(args, "n_gpu", 1) <= 1
    if getattr(args, "gradient_checkpointing", False):  # recomputation inside recorded graphs: not measured
        return False
    on_cuda = getattr(device, "type", None) == "cuda"
    if not (on_cuda and low_precision and one_process and packed_route(packer) == "varlen"):
        return False
    import importlib.util

    return importlib.util.find_spec("triton") is not None  # inductor's GPU kernels: without it, the plain step


def packed_attention(trainer: Any, encoder: torch.nn.Module) -> None:
    """Set up `encoder` (which trains packed) for its packed route: on CUDA in bf16/fp16 an SDPA encoder takes the
    varlen kernel (`training_attention`), and attention dropout goes to 0 where the route's kernel has none (a warning
    says so; hidden dropout stays). `prepare_step` calls this once, after the Trainer has its device."""
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


def text_token_limit(collator: Any) -> int:
    """The most tokens the collator lets a text (or a cross-encoder's pair) have: its `token_limit()`, else its
    `max_length`, else its tokenizer's `model_max_length` (512 where that is unknown)."""
    limit = getattr(collator, "token_limit", None)
    if callable(limit):
        return int(limit())
    length = getattr(collator, "max_length", None)
    if isinstance(length, int) and length > 0:
        return length
    return _tokenizer_limit(getattr(collator, "tokenizer", None))


class HostFreeStepMixin:
    """The Trainer's step without its one read-back: `TrainingArguments(logging_nan_inf_filter=True)` (the default)
    replaces a NaN or inf step loss by the mean loss since the last log, and the Trainer decides that with
    `torch.isnan(loss)` on the host every step. Here the same replacement is a `torch.where` on the device."""

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None):
        if getattr(self, "graph_steps", False):  # CUDA graphs: a new step may overwrite the last step's outputs
            torch.compiler.cudagraph_mark_step_begin()
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not getattr(self.args, "on_device_nan_inf_filter", False) or not isinstance(loss, torch.Tensor):
            return loss
        logged = getattr(self, "_tr_loss", None)
        if logged is None:
            return torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0)
        steps = 1 + self.state.global_step - getattr(self, "_globalstep_last_logged", 0)
        return torch.where(torch.isfinite(loss), loss, (logged / steps).to(loss.dtype))

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The Trainer's evaluation; where the layers are compiled for shape buckets, run eagerly: evaluation batches
        (padded, of every size) would each compile a graph of their own."""
        if not getattr(self, "graph_steps", False) or not hasattr(torch.compiler, "set_stance"):
            return super().evaluate(*args, **kwargs)
        with torch.compiler.set_stance("force_eager"):
            return super().evaluate(*args, **kwargs)
