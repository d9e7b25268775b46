"""Encoding in a low-precision dtype: whether the CPU runs it in hardware (`native_low_precision`), the dtype
encode() then runs in (`cpu_dtype`), and a copy of the weights in that dtype kept while they stay unchanged
(`cached_low_precision_copy`), which `encode_runner` picks over autocast from a few batches on.

Shared by every model kind's `encode` (dense, multi-vector) and the cross-encoder's `predict`; in the dense and the
multi-vector remote-code sets, it imports only public libraries.
"""

from __future__ import annotations

import copy
import logging
import weakref
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)

# encode() on the CPU in bfloat16 runs a bfloat16 copy of the weights from this many batches on (a copy costs about
# as much as one batch of a small model).
LOW_PRECISION_COPY = 4


# model -> (fingerprint of its weights, dtype, its low-precision copy): kept for the next encode() call while the
# weights stay as they were.
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def native_low_precision(dtype: torch.dtype) -> bool:
    """Whether this CPU runs `dtype` matmuls in hardware (bfloat16: AVX512-BF16 or AMX; float16: AVX512-FP16 or
    AMX-FP16), as oneDNN reports it. Without them PyTorch emulates the dtype: bfloat16 encode measured 6x slower than
    float32 on an AVX2-only CPU. True where PyTorch cannot tell."""
    check = {
        torch.bfloat16: "_is_mkldnn_bf16_supported",
        torch.float16: "_is_mkldnn_fp16_supported",
    }.get(dtype)
    probe = getattr(torch.ops.mkldnn, check, None) if check else None
    try:
        return bool(probe()) if probe is not None else True
    except RuntimeError:
        return True


_WARNED_EMULATED: set[torch.dtype] = set()


def cpu_dtype(dtype: torch.dtype | None, device: torch.device) -> torch.dtype | None:
    """The dtype encode() runs in: `dtype`, except float32 for a low-precision dtype this CPU only emulates (encode
    returns float32 either way, so float32 there is both faster and more exact). Warns once per dtype."""
    if dtype in (None, torch.float32) or device.type != "cpu" or native_low_precision(dtype):
        return dtype
    if dtype not in _WARNED_EMULATED:
        _WARNED_EMULATED.add(dtype)
        logger.warning(
            "encode(dtype=%s): this CPU has no native %s matrix instructions, so PyTorch emulates them (several "
            "times slower than float32); encoding in float32 instead (embeddings are float32 either way).",
            dtype,
            str(dtype).removeprefix("torch."),
        )
    return torch.float32


def weights_fingerprint(model: Any) -> tuple:
    """Per weight tensor: its address, its version (bumped by in-place updates such as an optimizer step or
    load_state_dict) and its sum (which catches writes through `.data`, which skip the version). Measured on
    MiniLM: 22 ms, against 99 ms for a bfloat16 copy."""
    with torch.no_grad():
        return tuple(
            (t.data_ptr(), t._version, float(t.sum()) if t.is_floating_point() else int(t.sum()))
            for t in (*model.parameters(), *model.buffers())
        )


def cached_low_precision_copy(model: Any, dtype: torch.dtype) -> Any:
    """`low_precision_copy(model, dtype)`, made again only when a weight of `model` changed since the last one."""
    key = weights_fingerprint(model)
    cached = _COPIES.get(model)
    if cached is not None and cached[0] == key and cached[1] == dtype:
        return cached[2]
    _COPIES.pop(model, None)  # drop the stale copy before making the new one
    made = low_precision_copy(model, dtype)
    if made is not model:
        _COPIES[model] = (key, dtype, made)
    return made


def low_precision_copy(model: Any, dtype: torch.dtype) -> Any:
    """A copy of `model` with floating-point weights in `dtype` (its tokenizer shared, not copied), in eval mode;
    `model` itself if its weights already are in `dtype`."""
    if all(p.dtype == dtype for p in model.parameters() if p.is_floating_point()):
        return model
    # deepcopy takes the low-precision tensors from the memo instead of copying the float32 ones first.
    memo: dict[int, Any] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        cast = tensor.detach().to(dtype) if tensor.is_floating_point() else tensor.detach().clone()
        memo[id(tensor)] = nn.Parameter(cast, requires_grad=False) if isinstance(tensor, nn.Parameter) else cast
    tokenizer = getattr(model, "tokenizer", None)  # a transformers model has none
    if tokenizer is not None:
        memo[id(tokenizer)] = tokenizer  # not a module: shared, not copied
    return copy.deepcopy(model, memo).eval()


def encode_runner(model: Any, dtype: torch.dtype | None, batches: int, streamed: bool) -> tuple[Any, bool]:
    """`(the model that runs the batches, whether under autocast)` for an encode of `model` in `dtype`: with
    `LOW_PRECISION_COPY` batches or more (on the CPU: bfloat16 only), a copy of the weights in `dtype`, else `model`
    itself, autocast for a low-precision dtype."""
    use_autocast = dtype is not None and dtype != torch.float32
    if use_autocast and batches >= LOW_PRECISION_COPY and (streamed or dtype == torch.bfloat16):
        # A copy of the weights in `dtype` runs faster than autocast (no casts of weights and activations around
        # every op; measured 1.1-1.15x in bfloat16 on the CPU, 1.15-1.29x on an H100): made once (on the device,
        # half the weights' size), kept until a weight changes.
        runner = cached_low_precision_copy(model, dtype)
        return runner, runner is model
    return model, use_autocast
