"""Attention for short texts on the CPU at inference: the same result as `sdpa`, several times faster there.

Sentence batches are short (STSb: 14 tokens on average). For such lengths PyTorch's CPU attention kernels spend
most of their time in per-row overhead: softmax over a last dimension of ~14 elements runs row by row (measured
here, one thread, 64 texts x 12 heads: softmax over 14 contiguous elements 2.8 ms, the same numbers laid out with
the softmax dimension first 0.16 ms; the CPU flash kernel 4-6 ms per layer at 13-15 tokens against 1 ms for the
path below). So scores are computed key-major, `(keys, batch, heads, queries)`, and the softmax runs over the first
dimension, where it vectorises across every (text, head, query). Softmax in float32, as transformers' eager
attention does, then the probabilities in the value dtype for the second matmul.

It is registered with transformers as the attention implementation `SHORT_ATTENTION` and used only inside
`encode()` on the CPU (`short_attention(encoder)`); any call it does not cover (keys longer than `SHORT_LENGTH`,
another device, gradients, dropout, causal or grouped-query attention, extra arguments) goes to transformers' `sdpa`
function unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

SHORT_ATTENTION = "hf_siamese_short_cpu"
# Longest key length run key-major. Measured here (64 texts, 12 heads, one thread, ms per layer, key-major vs sdpa):
# bf16 9: 1.0 vs 3.1, 14: 1.3 vs 5.8, 19: 2.3 vs 4.6, 24: 3.2 vs 3.8, 28: 6.0 vs 5.5, 40: 10.3 vs 8.7.
SHORT_LENGTH = 24


def _covered(module: Any, query: torch.Tensor, key: torch.Tensor, dropout: float, kwargs: dict[str, Any]) -> bool:
    return (
        query.device.type == "cpu"
        and key.shape[2] <= SHORT_LENGTH
        and not dropout
        and not torch.is_grad_enabled()
        and not getattr(module, "is_causal", False)
        and getattr(module, "num_key_value_groups", 1) == 1
        and query.shape[1] == key.shape[1]
        and not any(value is not None and value is not False for value in kwargs.values())
    )


def short_attention_forward(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: `query/key/value` `(batch, heads, length, head_dim)`; `attention_mask`
    None, boolean (True = attend) or additive, broadcastable to `(batch, heads, queries, keys)`. Returns
    `((batch, queries, heads, head_dim), None)` as `sdpa_attention_forward` does."""
    if not _covered(module, query, key, dropout, kwargs):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    batch, heads, queries, head_dim = query.shape
    keys = key.shape[2]
    scale = scaling if scaling is not None else head_dim**-0.5
    # (batch, heads, keys, queries) laid out as (keys, batch, heads, queries), in float32: one copy.
    scores = torch.empty(keys, batch, heads, queries, dtype=torch.float32, device=query.device)
    scores.copy_(torch.matmul(key, query.transpose(-1, -2)).permute(2, 0, 1, 3))
    scores.mul_(scale)
    if attention_mask is not None:
        mask = attention_mask.expand(batch, -1, queries, keys).permute(3, 0, 1, 2)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, torch.finfo(torch.float32).min)
        else:
            scores.add_(mask)
    probabilities = scores.softmax(0).to(value.dtype).permute(1, 2, 3, 0)
    output = torch.matmul(probabilities, value)
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(SHORT_ATTENTION, short_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(SHORT_ATTENTION, sdpa_mask)


@contextmanager
def short_attention(encoder: Any) -> Iterator[None]:
    """Run `encoder` with `SHORT_ATTENTION` inside the block if it uses `sdpa` (other implementations are left
    alone); its setting is restored afterwards."""
    config = getattr(encoder, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        yield
        return
    config._attn_implementation = SHORT_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
