"""From a masked-language encoder's last layer to pooled term weights (SPLADE), and the vocabulary-wide max taken
without holding a `(batch, seq, vocab)` tensor.

Part of the sparse model's remote-code set (see `modeling/__init__.py`): it imports only torch.

A max-pooled SPLADE weight is w_j = act(max_i (h_i . E_j) + b_j) over a text's real tokens i, `act` never
decreasing and zero for x <= 0, so the head's decoder product is needed only for its max, and only where that max is
positive. `max_decoded` takes it one text at a time (a `(vocab, tokens)` block of logits, never `(batch, seq,
vocab)`), on a CPU with bfloat16 hardware first in bfloat16 and then again in float32 for the few hundred terms that
can be positive (`packed_max`), and keeps the winning token of each (text, term). Its backward touches only the
winners: the gradient of w_j reaches one token's hidden state and one row of E, and only for the terms the activation
lets through, where autograd through the full product spends twice the forward's (tokens x hidden x vocab)
multiply-adds on a gradient that is zero almost everywhere.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

SCREEN_ERROR = 1.0 / 64  # bounds |bfloat16 logit - float32 logit| in |h| |e| units (bfloat16 rounds by 2^-8, 3 times)
BLOCK_TOKENS = 512  # real tokens multiplied at once on a CPU: a (vocab, 512) block of logits
DENSE_SHARE = 8  # more than 1/8 of the terms past the screen: one float32 product beats gathering their rows
ACCELERATOR_BLOCK = 1 << 28  # logits held at once on an accelerator (1 GiB of float32)
GRADIENT_ROWS = 1 << 16  # winners whose gradient rows are made at once in max_decoded's backward


def activate(pooled: torch.Tensor, activation: str) -> torch.Tensor:
    """log1p(ReLU(x)), twice log1p for "log1p_log1p_relu"."""
    weights = torch.log1p(torch.relu(pooled))
    return torch.log1p(weights) if activation == "log1p_log1p_relu" else weights


def term_weights(logits: torch.Tensor, attention_mask: torch.Tensor, activation: str) -> torch.Tensor:
    """`(batch, seq, vocab)` logits -> term weights, zero at padding."""
    mask = attention_mask.unsqueeze(-1).to(logits.dtype)
    if torch.is_grad_enabled():
        return activate(logits * mask, activation)
    # Encoding: in place, so a batch holds one (batch, seq, vocab) tensor rather than four.
    weights = logits.mul_(mask).relu_().log1p_()
    return weights.log1p_() if activation == "log1p_log1p_relu" else weights


def max_pooled_weights(logits: torch.Tensor, attention_mask: torch.Tensor, activation: str) -> torch.Tensor:
    """`(batch, seq, vocab)` logits -> `(batch, vocab)` max-pooled term weights over the real tokens (the activation
    taken after the max: the same values, once a term rather than once a token and term)."""
    padding = (attention_mask == 0).unsqueeze(-1)
    if torch.is_grad_enabled():
        logits = logits.masked_fill(padding, torch.finfo(logits.dtype).min)
    else:
        logits = logits.masked_fill_(padding, torch.finfo(logits.dtype).min)
    return activate(logits.max(dim=1).values, activation)


def keep_largest(vectors: torch.Tensor, count: int | None) -> torch.Tensor:
    """`vectors` with all but each row's `count` largest weights set to zero (unchanged for None)."""
    if count is None or count >= vectors.shape[-1]:
        return vectors
    top = torch.topk(vectors, count, dim=-1)
    return torch.zeros_like(vectors).scatter(-1, top.indices, top.values)


def pooled_weights(
    logits: torch.Tensor, attention_mask: torch.Tensor, pooling: str, activation: str, max_active_dims: int | None
) -> torch.Tensor:
    """`(batch, seq, vocab)` MLM logits -> `(batch, vocab)` document vectors: term weights pooled over the real tokens
    by `pooling` ("max", else summed), then each row's `max_active_dims` largest kept."""
    if pooling == "max":
        pooled = max_pooled_weights(logits, attention_mask, activation)
    else:
        pooled = term_weights(logits, attention_mask, activation).sum(dim=1)
    return keep_largest(pooled, max_active_dims)


def fast_bfloat16(device: torch.device) -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AMX or AVX512-BF16)."""
    if device.type != "cpu":
        return False
    checks = (getattr(torch.cpu, "_is_amx_tile_supported", None), getattr(torch.cpu, "_is_avx512_bf16_supported", None))
    return any(check is not None and check() for check in checks)


def _rescored(
    values: torch.Tensor,
    winners: torch.Tensor,
    states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    norms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """One text's bfloat16 maxima + bias (`values`, `winners` among its `(tokens, hidden)` `states`) made float32's
    wherever float32's can be positive: a term whose bfloat16 max, raised by the bound on its rounding error, stays
    <= 0 is inactive whatever float32 would say and keeps its value; the others (a few hundred of a trained model's
    30,522) are multiplied again in float32, or the whole vocabulary when too many are (a random head: the third value
    says so)."""
    margin = norms * (SCREEN_ERROR * states.norm(dim=1).max())
    candidates = torch.nonzero(values + margin > 0, as_tuple=True)[0]
    if candidates.numel() * DENSE_SHARE > weight.shape[0]:
        exact, exact_winners = torch.matmul(weight, states.T).max(dim=1)
        return exact + bias, exact_winners, True
    if candidates.numel():
        exact, exact_winners = torch.matmul(weight[candidates], states.T).max(dim=1)
        values[candidates] = exact + bias[candidates]
        winners[candidates] = exact_winners
    return values, winners, False


def packed_max(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor, screen: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`max_decoded`'s forward on a CPU -> `(batch, vocab)` maxima + bias and their winning positions. The real tokens
    of consecutive texts are multiplied together, `BLOCK_TOKENS` at a time (no padding, no `(batch, seq, vocab)`
    tensor), and each text's max taken over its own columns; with `screen`, in bfloat16 first (`_rescored`)."""
    rows = mask != 0
    states = hidden[rows]  # (real tokens, hidden), text by text
    positions = torch.nonzero(rows, as_tuple=True)[1]
    offsets = [0, *torch.cumsum(rows.sum(dim=1), 0).tolist()]
    product = weight.to(torch.bfloat16) if screen else weight
    norms = weight.norm(dim=1) if screen else None
    values = hidden.new_full((hidden.shape[0], weight.shape[0]), torch.finfo(hidden.dtype).min)
    winners = torch.zeros(values.shape, dtype=torch.long, device=hidden.device)
    first = 0
    while first < hidden.shape[0]:
        last = first + 1  # texts first..last-1 multiplied together
        while last < hidden.shape[0] and offsets[last + 1] - offsets[first] <= BLOCK_TOKENS:
            last += 1
        block, crowded = states[offsets[first] : offsets[last]], False
        logits = torch.matmul(product, block.to(product.dtype).T) if block.numel() else None
        for text in range(first, last):
            start, stop = offsets[text] - offsets[first], offsets[text + 1] - offsets[first]
            if start == stop:  # no real token: no active term
                continue
            text_values, text_winners = logits[:, start:stop].max(dim=1)
            text_values = text_values.to(hidden.dtype) + bias
            if screen:
                text_values, text_winners, full = _rescored(
                    text_values, text_winners, block[start:stop], weight, bias, norms
                )
                crowded = crowded or full
            values[text], winners[text] = text_values, positions[offsets[text] + text_winners]
        first = last
        if crowded:  # most terms pass the screen (a random head): float32 alone for the texts left
            screen, product = False, weight
    return values, winners


def blocked_max(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`max_decoded`'s forward on an accelerator: blocks of whole texts, padding masked, no host sync per text."""
    values = hidden.new_empty(hidden.shape[0], weight.shape[0])
    winners = torch.empty(values.shape, dtype=torch.long, device=hidden.device)
    step = max(1, ACCELERATOR_BLOCK // max(1, hidden.shape[1] * weight.shape[0]))
    padding = (mask == 0).unsqueeze(-1)
    for start in range(0, hidden.shape[0], step):
        logits = torch.matmul(hidden[start : start + step], weight.T)
        logits.masked_fill_(padding[start : start + step], torch.finfo(logits.dtype).min)
        values[start : start + step], winners[start : start + step] = logits.max(dim=1)
    return values.add_(bias), winners


class _MaxDecoded(torch.autograd.Function):
    """max over real tokens of hidden @ weight.T + bias, and each maximum's token; backward through the winners."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        decoder, shift = weight.to(hidden.dtype), bias.to(hidden.dtype)
        if hidden.device.type == "cpu":
            screen = hidden.dtype == torch.float32 and fast_bfloat16(hidden.device)
            values, winners = packed_max(hidden, decoder, shift, mask, screen)
        else:
            values, winners = blocked_max(hidden, decoder, shift, mask)
        ctx.save_for_backward(hidden, weight, winners)
        return values

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, winners = ctx.saved_tensors
        grad_hidden = hidden.new_zeros(hidden.shape) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(dim=0).to(weight.dtype) if ctx.needs_input_grad[2] else None
        texts, terms = torch.nonzero(grad, as_tuple=True)  # the activation lets few terms through
        for start in range(0, texts.numel(), GRADIENT_ROWS):
            text, term = texts[start : start + GRADIENT_ROWS], terms[start : start + GRADIENT_ROWS]
            token = winners[text, term]
            scale = grad[text, term].unsqueeze(-1)
            if grad_hidden is not None:
                rows = (scale * weight[term].to(scale.dtype)).to(hidden.dtype)
                grad_hidden.view(-1, hidden.shape[-1]).index_add_(0, text * hidden.shape[1] + token, rows)
            if grad_weight is not None:
                rows = (scale * hidden[text, token].to(scale.dtype)).to(weight.dtype)
                grad_weight.index_add_(0, term, rows)
        return grad_hidden, grad_weight, grad_bias, None


def max_decoded(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`(batch, seq, hidden)` states, a `(vocab, hidden)` decoder, its `(vocab,)` bias and a `(batch, seq)` mask ->
    `(batch, vocab)`: the max over each text's real tokens of `hidden @ weight.T + bias`, exact wherever it is
    positive (the only values the activation passes); elsewhere a value <= 0 (see `_rescored`)."""
    return _MaxDecoded.apply(hidden, weight, bias, mask)


def bert_head(encoder: nn.Module) -> tuple[nn.Module, nn.Module, nn.Linear] | None:
    """(body, transform, decoder) of a BERT-layout masked-language model (`encoder.cls.predictions`, a linear decoder;
    all-MiniLM-L6-v2 and the BERT family), or None for another layout (pooled from its full logits)."""
    head = getattr(getattr(encoder, "cls", None), "predictions", None)
    transform = getattr(head, "transform", None)
    decoder = getattr(head, "decoder", None)
    body = getattr(encoder, "base_model", None)
    if transform is None or not isinstance(decoder, nn.Linear) or body is None or body is encoder:
        return None
    return body, transform, decoder


def encoder_term_weights(
    encoder: nn.Module, inputs: dict[str, Any], pooling: str, activation: str, max_active_dims: int | None
) -> torch.Tensor:
    """`(batch, vocab)` term weights of `inputs` through the masked-language `encoder`, pooled by `pooling`, each
    row's `max_active_dims` largest kept. Max pooling through a BERT-layout head never makes the full logits
    (`max_decoded`); sum pooling or another layout pools them (`pooled_weights`)."""
    parts = bert_head(encoder) if pooling == "max" else None
    if parts is None:
        logits = encoder(**inputs, return_dict=True).logits
        return pooled_weights(logits, inputs["attention_mask"], pooling, activation, max_active_dims)
    body, transform, decoder = parts
    hidden = transform(body(**inputs, return_dict=True).last_hidden_state)
    bias = decoder.bias if decoder.bias is not None else hidden.new_zeros(decoder.weight.shape[0])
    maxima = max_decoded(hidden, decoder.weight, bias, inputs["attention_mask"])
    return keep_largest(activate(maxima, activation), max_active_dims)


__all__ = [
    "activate",
    "bert_head",
    "blocked_max",
    "encoder_term_weights",
    "fast_bfloat16",
    "keep_largest",
    "max_decoded",
    "max_pooled_weights",
    "packed_max",
    "pooled_weights",
    "term_weights",
]
