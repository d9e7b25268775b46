"""The layers after the encoder: pooling token states into one vector per text (`pool_token_states`, the prompt left
out by `prompt_free_mask`), the Dense projection (`SiameseProjection`), the classifier head's pair features, and the
cut of a grouped batch to its filled columns. Part of the remote-code set (see `modeling/__init__.py`): public
libraries only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def prompt_free_mask(attention_mask: torch.Tensor, prompt_length: int | torch.Tensor | None) -> torch.Tensor:
    """`attention_mask` with the first `prompt_length` real tokens of each row (after any left padding) set to 0,
    so a prompt is left out of the pooling. `prompt_length` is an int, or a tensor holding one value per row."""
    if prompt_length is None:
        return attention_mask
    if isinstance(prompt_length, torch.Tensor):
        prompt_length = prompt_length.reshape(-1, 1).to(attention_mask.device)
    if not isinstance(prompt_length, torch.Tensor) and prompt_length <= 0:
        return attention_mask
    start = attention_mask.to(torch.int32).argmax(dim=1, keepdim=True)  # first real token: after left padding
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).unsqueeze(0)
    return attention_mask.masked_fill(positions < start + prompt_length, 0)


def pool_token_states(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    pooling: str,
    prompt_length: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn token states into one vector per text.

    Args:
        hidden_states: `(batch, seq_len, hidden)` token states of the encoder's last layer.
        attention_mask: `(batch, seq_len)`, 1 for real tokens, 0 for padding (left or right). Padding never reaches
            the result.
        pooling: one of `mean`, `cls`, `max`, `mean_sqrt_len`, `weightedmean`, `lasttoken`.
        prompt_length: leave out this many leading real tokens (a prompt) from the pooling.

    Returns:
        `(batch, hidden)` sentence vectors.
    """
    mask = prompt_free_mask(attention_mask, prompt_length)
    if pooling in ("cls", "lasttoken"):
        seq_len = mask.shape[1]
        if pooling == "cls":  # the first pooled token: position 0 unless the batch is left-padded
            index = mask.to(torch.int32).argmax(dim=1)
        else:  # the last pooled token, whichever side the padding is on
            index = seq_len - 1 - mask.to(torch.int32).flip(1).argmax(dim=1)
        picked = hidden_states[torch.arange(len(index), device=index.device), index]
        return picked if pooling == "cls" else picked * mask.any(dim=1, keepdim=True).to(picked.dtype)
    if pooling == "max":
        empty = mask.unsqueeze(-1) == 0
        return hidden_states.masked_fill(empty, torch.finfo(hidden_states.dtype).min).max(dim=1).values
    # Sums and counts in float32 whatever the states' dtype: in float16 the weightedmean weights (up to L(L+1)/2) pass
    # 65504 from 362 tokens, bfloat16 rounds positions above 256, and clamp(min=1e-9) is 0 in both (an empty row
    # would divide 0 by 0). The result comes back in the states' dtype.
    weights = mask.unsqueeze(-1).to(torch.float32)
    if pooling == "weightedmean":
        # Weight 1, 2, 3, ... from the first real token on (left padding shifts the count, as in SGPT).
        start = attention_mask.to(torch.int32).argmax(dim=1).view(-1, 1, 1)
        positions = torch.arange(1, mask.shape[1] + 1, device=mask.device, dtype=torch.float32).view(1, -1, 1)
        weights = weights * (positions - start)
    summed = (hidden_states.to(torch.float32) * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    if pooling in ("mean", "weightedmean"):
        return (summed / counts).to(hidden_states.dtype)
    if pooling == "mean_sqrt_len":
        return (summed / counts.sqrt()).to(hidden_states.dtype)
    raise ValueError(
        f"pooling={pooling!r} is not one of ['mean', 'cls', 'max', 'mean_sqrt_len', 'weightedmean', 'lasttoken']."
    )


class SiameseProjection(nn.Module):
    """A dense layer after pooling: `activation(linear(x))` (sentence-transformers' `Dense`)."""

    ACTIVATIONS = {
        "identity": nn.Identity,
        "tanh": nn.Tanh,
        "relu": nn.ReLU,
        "gelu": nn.GELU,
        "sigmoid": nn.Sigmoid,
        "silu": nn.SiLU,
    }

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "identity") -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = self.ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


def filled_columns(attention_mask: torch.Tensor) -> slice | torch.Tensor:
    """The sequence positions where at least one row of `attention_mask` `(batch, seq_len)` has a token: a slice when
    they are contiguous from 0 (right padding), else their indices (left padding). Cutting to them drops only
    padding shared by the whole batch."""
    keep = attention_mask.bool().any(dim=0)
    width = int(keep.sum())
    return slice(0, width) if bool(keep[:width].all()) else keep.nonzero().squeeze(-1)


def pair_features(u: torch.Tensor, v: torch.Tensor, features: Sequence[str]) -> torch.Tensor:
    """Concatenate the requested pair features of `u` and `v` (each `(batch, hidden)`) along the last axis."""
    parts = {"u": lambda: u, "v": lambda: v, "|u-v|": lambda: (u - v).abs(), "u*v": lambda: u * v}
    return torch.cat([parts[name]() for name in features], dim=-1)


__all__ = ["SiameseProjection", "filled_columns", "pair_features", "pool_token_states", "prompt_free_mask"]
