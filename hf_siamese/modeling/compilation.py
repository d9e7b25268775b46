"""`torch.compile` for training, one transformer layer at a time ("regional compilation").

`TrainingArguments(torch_compile=True)` makes the Trainer compile the whole model. Ours does host work between the
encoder's calls (packing lays out the batch from the texts' lengths on the host), which would break that graph in
many places, and every batch has other lengths, so a model compiled with static shapes recompiles nearly every step
until dynamo's recompile limit gives up. Here the trainers compile each of the encoder's layers instead, with dynamic
shapes: the layers are identical modules, so all of them share one compiled graph; the batch's size, row length and
the varlen route's longest text are symbolic, so new lengths reuse it (the number of compiles stays bounded, tested).

With shape buckets (shape_buckets.py: packed batches rounded up to few sizes) the layers compile with static shapes
instead, one graph a bucket, and `torch_compile_mode="reduce-overhead"` (or "max-autotune") records each bucket's
layer as a CUDA graph that later steps replay: the host launches one graph a layer instead of its dozens of kernels.
"""

from __future__ import annotations

from typing import Any

import torch


def encoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The stack of transformer layers inside `model` (BERT's `encoder.layer`, or the first `ModuleList` of
    `config.num_hidden_layers` modules of one class), or None where there is none."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) == 0:
            continue
        if count is not None and len(module) != count:
            continue
        if len({type(layer) for layer in module}) == 1:
            return module
    return None


# torch.compile modes that record CUDA graphs, which replay one shape: they need static shapes (shape buckets).
GRAPH_MODES = ("reduce-overhead", "max-autotune")
# Static shapes compile once a bucket: dynamo's default limit of 8 graphs a function would send the rest to eager.
STATIC_RECOMPILE_LIMIT = 64


def compile_layers(
    model: torch.nn.Module, backend: str | None = None, mode: str | None = None, dynamic: bool = True
) -> int:
    """Compile each transformer layer of `model` in place, with dynamic shapes (`torch.compile(dynamic=True)`) or,
    `dynamic=False`, static ones (for bucketed batches: one graph a bucket, dynamo's recompile limit raised to
    `STATIC_RECOMPILE_LIMIT`); returns how many layers were compiled. `backend` / `mode` are `torch.compile`'s
    (default: inductor, default mode).

    Raises:
        ValueError: `model` has no stack of layers to compile (names the model class).
    """
    layers = encoder_layers(model)
    if layers is None:
        raise ValueError(
            f"torch_compile=True: {type(model).__name__} has no stack of transformer layers to compile (a ModuleList "
            "of config.num_hidden_layers layers); train without torch_compile"
        )
    options: dict[str, Any] = {"dynamic": dynamic, "backend": backend or "inductor"}
    if not dynamic:
        import torch._dynamo.config as dynamo_config

        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, STATIC_RECOMPILE_LIMIT)
    if mode:
        options["mode"] = mode
    for layer in layers:
        layer.compile(**options)
    return len(layers)


def take_compile_option(args: Any) -> dict[str, Any] | None:
    """Turn the Trainer's whole-model `torch_compile` off in `args` and return the settings for `compile_layers`
    (None when `torch_compile` is off)."""
    if not getattr(args, "torch_compile", False):
        return None
    settings = {"backend": args.torch_compile_backend, "mode": args.torch_compile_mode}
    # accelerate compiles the whole model whenever a backend is set, so both go.
    args.torch_compile, args.torch_compile_backend, args.torch_compile_mode = False, None, None
    return settings
