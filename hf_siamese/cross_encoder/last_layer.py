"""Scoring without the last layer's unread work: a cross-encoder's head reads one state per pair (the first token's),
so in the encoder's last layer only that token's query, attention output and feed-forward are needed; every token
still gives its key and value. For MiniLM-L6 that leaves out about a seventh of the arithmetic, exactly (the same
states, to float rounding: tested against the full forward).

`first_states(encoder, inputs, first)` runs the encoder's embeddings and layers itself (no module is swapped, so
`predict`'s threads can share the model) and returns the first tokens' final states as `(pairs, 1, hidden)`, which the
model's pooler (BERT) or classifier (RoBERTa / ELECTRA) reads as `states[:, 0]`. Inference only, on BERT-style layers
(`attention.self.query/key/value`, `attention.output`, `intermediate`, `output`) with a 4-D mask the layers take as it
is (SDPA's boolean or eager's additive one); other layers and the GPU's varlen / flex rows run whole.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..modeling.compilation import encoder_layers
from ..modeling.packing import packed_route


def _bert_style(layer: torch.nn.Module) -> bool:
    attention = getattr(layer, "attention", None)
    own = getattr(attention, "self", None)
    return (
        all(hasattr(own, name) for name in ("query", "key", "value", "scaling", "num_attention_heads"))
        and hasattr(attention, "output")
        and hasattr(layer, "intermediate")
        and hasattr(layer, "output")
        and not getattr(layer, "is_decoder", False)
        and not getattr(layer, "chunk_size_feed_forward", 0)
    )


def can_skip(encoder: torch.nn.Module) -> bool:
    """Whether `encoder`'s last layer can run for the first tokens alone (see the module docstring)."""
    layers = encoder_layers(encoder)
    return (
        layers is not None
        and hasattr(encoder, "embeddings")
        and _bert_style(layers[-1])
        and packed_route(encoder) == "block_mask"
        and not encoder.training
        and not torch.is_grad_enabled()
    )


def first_states(encoder: torch.nn.Module, inputs: dict[str, Any], first: torch.Tensor) -> torch.Tensor:
    """`(pairs, 1, hidden)`: the encoder's final states at the flat positions `first` of its `(rows, width)` input,
    the last layer computed for those tokens alone. `inputs`: `input_ids`, `attention_mask` (4-D, as the layers take
    it, or None), `token_type_ids`, `position_ids` (the latter two optional)."""
    states = encoder.embeddings(
        input_ids=inputs["input_ids"],
        token_type_ids=inputs.get("token_type_ids"),
        position_ids=inputs.get("position_ids"),
    )
    mask = inputs.get("attention_mask")
    layers = encoder_layers(encoder)
    for layer in layers[:-1]:
        states = layer(states, mask)
        states = states[0] if isinstance(states, tuple) else states
    return _last_layer(layers[-1], states, mask, first)


def _last_layer(layer: torch.nn.Module, hidden_states: torch.Tensor, mask: Any, first: torch.Tensor) -> torch.Tensor:
    own = layer.attention.self
    rows_count, width, hidden = hidden_states.shape
    heads = own.num_attention_heads
    size = hidden // heads
    chosen = hidden_states.reshape(-1, hidden)[first]  # (pairs, hidden)
    row = torch.div(first, width, rounding_mode="floor")
    query = own.query(chosen).view(-1, heads, 1, size)
    key = own.key(hidden_states).view(rows_count, width, heads, size).transpose(1, 2)[row]
    value = own.value(hidden_states).view(rows_count, width, heads, size).transpose(1, 2)[row]
    if isinstance(mask, torch.Tensor):
        at = first - row * width  # each chosen token's place in its row
        mask = mask.expand(rows_count, -1, width, width)[row, :, at][:, :, None, :]  # (pairs, 1 or heads, 1, width)
    attended = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=own.scaling)
    attended = layer.attention.output(attended.transpose(1, 2).reshape(-1, 1, hidden), chosen[:, None])
    return layer.output(layer.intermediate(attended), attended)
