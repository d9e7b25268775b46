"""Attention kernels of the packed routes that need more than transformers gives: PyTorch's FlashAttention varlen
kernel registered as a transformers attention implementation ("varlen_attn", no flash-attn wheel needed), and the
attention dropout those kernels lack.

`torch.nn.attention.varlen.varlen_attn` (torch 2.10+) runs on CUDA in bfloat16 / float16 only: a packed batch on
another device or in float32 is refused with the fix before the kernel runs. Importing this module registers it where
torch has it (`register_varlen_attention`); `SiameseBertModel.from_encoder(..., attn_implementation="varlen_attn")` then
packs every training batch into one row without padding (packing.py's varlen route), and every padded call (encode,
unpacked models) runs SDPA with the usual mask.
"""

from __future__ import annotations

from typing import Any

import torch

from .packing import VARLEN_ATTENTION, can_pack, packed_route

# torch's own kernel, as imported here: it runs on CUDA only; a stand-in put in its place (as the CPU tests do) may
# run anywhere.
try:
    from torch.nn.attention.varlen import varlen_attn as _torch_varlen_attn
except ImportError:
    _torch_varlen_attn = None
_KERNEL_DTYPES = (torch.float16, torch.bfloat16)


def varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The transformers attention function of `attn_implementation="varlen_attn"`: on a packed row (the varlen route
    passes `cu_seq_lens_q/k`, `max_length_q/k`), `torch.nn.attention.varlen.varlen_attn`; on a padded batch (encode,
    or a model that does not pack), SDPA with the mask transformers built. The kernel has no dropout: attention dropout
    is skipped on packed rows (`SiameseTrainer` sets it to 0 for this route, with a note)."""
    if "cu_seq_lens_q" not in kwargs:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    from torch.nn.attention.varlen import varlen_attn

    # Checked before the kernel, whose own errors ("Could not run 'aten::_flash_attention_forward' with arguments from
    # the 'CPU' backend") say nothing of the fix; the device first, so that the CPU is never told to use bf16 alone.
    if query.device.type != "cuda" and (varlen_attn is _torch_varlen_attn or query.dtype not in _KERNEL_DTYPES):
        raise ValueError(
            f"attn_implementation='{VARLEN_ATTENTION}' runs FlashAttention's varlen kernel, which needs a CUDA GPU "
            f"(and bf16=True or fp16=True); this batch is on {query.device.type}: there, use "
            "attn_implementation='sdpa' (the default: packed batches then run SDPA with a block-diagonal mask), or run "
            "on a CUDA GPU"
        )
    if query.dtype not in _KERNEL_DTYPES:
        raise ValueError(
            f"attn_implementation='{VARLEN_ATTENTION}' runs FlashAttention's varlen kernel, on a CUDA GPU in bfloat16 "
            f"or float16 only; the attention got {query.dtype}: train with bf16=True (or fp16=True), or use "
            "attn_implementation='sdpa'"
        )
    batch, heads, total, dim = query.shape
    q, k, v = (t.transpose(1, 2).reshape(batch * total, heads, dim) for t in (query, key, value))
    output = varlen_attn(
        q,
        k,
        v,
        kwargs["cu_seq_lens_q"],
        kwargs["cu_seq_lens_k"],
        kwargs["max_length_q"],  # a Python int (or, compiled, a symbolic one: int() would fix it and recompile)
        kwargs["max_length_k"],
        scale=scaling,
    )
    return output.view(batch, total, heads, dim), None


def register_varlen_attention() -> bool:
    """Register `varlen_attention` (and SDPA's mask for its padded calls) with transformers as "varlen_attn", where
    torch has the kernel; returns whether it did."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import sdpa_mask
    except ImportError:
        return False
    AttentionInterface.register(VARLEN_ATTENTION, varlen_attention)
    AttentionMaskInterface.register(VARLEN_ATTENTION, sdpa_mask)
    return True


def varlen_available() -> bool:
    """Whether this torch has the varlen kernel (and it is registered)."""
    from transformers import AttentionInterface

    return VARLEN_ATTENTION in AttentionInterface._global_mapping


def training_attention(encoder: Any, device_type: str, low_precision: bool) -> str | None:
    """The attention implementation packed training should switch `encoder` to, or None to keep its own: on CUDA in
    bf16/fp16, an SDPA encoder that packs takes "varlen_attn" (measured on an H200, BERT-base MNR on NLI triplets at
    batch 128: 2060 rows/s against 726-831 with SDPA's block mask, and sentence-transformers' 782). float32, the
    CPU, and any implementation chosen explicitly (eager, flash, flex) stay as they are."""
    if device_type != "cuda" or not low_precision or not varlen_available():
        return None
    if getattr(encoder.config, "_attn_implementation", None) != "sdpa" or not can_pack(encoder):
        return None
    return VARLEN_ATTENTION


def attention_dropout_off(encoder: Any) -> bool:
    """Set the attention-probability dropout of `encoder` to 0 where its packed route's kernel has none (varlen_attn,
    flex attention: transformers refuses flex with dropout); returns whether anything changed. Hidden-state dropout
    stays."""
    if packed_route(encoder) not in ("varlen", "flex") or not can_pack(encoder):
        return False
    changed = False
    for name, module in encoder.named_modules():
        if name.endswith("attention.self") and isinstance(getattr(module, "dropout", None), torch.nn.Dropout):
            changed |= module.dropout.p > 0
            module.dropout.p = 0.0
    if getattr(encoder.config, "attention_probs_dropout_prob", 0):
        encoder.config.attention_probs_dropout_prob = 0.0
        changed = True
    return changed


register_varlen_attention()
