"""Packed (padding-free) execution of an encoder: many texts share one row, none is padded.

A batch of texts padded to its longest text spends most of its work on padding when lengths vary (55% of the
tokens of a random STS Benchmark batch of 16 pairs are padding). Packing lays the texts end to end in rows of
`capacity` tokens (the longest text's length, so no text is cut), first-fit by decreasing length. Inside a row each
token attends only to the tokens of its own text (a block-diagonal attention mask) and counts its position from its
own text's start (`position_ids`), so every text is encoded exactly as it would be alone: only the padding work goes.
The encoder runs once for all texts of a batch (anchors, positives and negatives together), the token states are put
back in per-text order, and pooling then sees the usual `(texts, length, hidden)` states and attention mask.

This needs an encoder with absolute, learned position embeddings that takes `position_ids` and a 4-D attention
mask: BERT-family models (`PACKABLE_MODEL_TYPES`), with right padding. Other encoders (rotary or relative positions,
decoders) and left-padded batches (BERT counts their positions from the padding) run padded as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# model_type -> where position ids start: BERT counts from 0; RoBERTa-style models from padding_idx + 1.
PACKABLE_MODEL_TYPES: dict[str, str] = {
    "bert": "zero",
    "electra": "zero",
    "roberta": "after_padding",
    "xlm-roberta": "after_padding",
    "camembert": "after_padding",
}
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


@dataclass
class PackedTexts:
    """Rows of packed texts and how to put their token states back.

    Attributes:
        input_ids, token_type_ids, position_ids: `(rows, capacity)` (`token_type_ids` may be `None`).
        attention_mask: `(rows, 1, capacity, capacity)`: True where query and key belong to the same text (padding at
            a row's end forms its own block, so no query row is fully masked).
        gather: `(texts, longest)` flat index into `rows * capacity` of each text's tokens (padding repeats index 0
            of the text; it is masked out by `text_mask`).
        text_mask: `(texts, longest)` the unpacked attention mask, right-padded.
    """

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor | None
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    gather: torch.Tensor
    text_mask: torch.Tensor

    @property
    def padding_share(self) -> float:
        """Share of the packed rows' positions that are padding."""
        return 1.0 - float(self.text_mask.sum()) / self.input_ids.numel()


def can_pack(encoder: Any) -> bool:
    """Whether `encoder` is one packing is exact for (see the module docstring)."""
    config = getattr(encoder, "config", None)
    if config is None or getattr(config, "model_type", None) not in PACKABLE_MODEL_TYPES:
        return False
    if getattr(config, "is_decoder", False):
        return False
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        return False
    return attention_implementation(encoder) in ATTENTION_IMPLEMENTATIONS


def attention_implementation(encoder: Any) -> str:
    """The encoder's attention implementation; transformers runs eager attention when none is set."""
    return getattr(encoder.config, "_attn_implementation", None) or "eager"


def position_start(encoder: Any) -> int:
    """The first position id of a text for this encoder."""
    if PACKABLE_MODEL_TYPES[encoder.config.model_type] == "after_padding":
        return int(encoder.config.pad_token_id) + 1
    return 0


def first_fit_rows(lengths: list[int], capacity: int) -> tuple[list[int], list[int], int]:
    """First-fit decreasing: for each text (in input order) its row and its start column in that row, and the
    number of rows. Texts are placed longest first; each goes into the first row with room."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    used: list[int] = []
    row = [0] * len(lengths)
    column = [0] * len(lengths)
    for i in order:
        n = lengths[i]
        for r, filled in enumerate(used):
            if filled + n <= capacity:
                row[i], column[i] = r, filled
                used[r] = filled + n
                break
        else:
            row[i], column[i] = len(used), 0
            used.append(n)
    return row, column, max(len(used), 1)


def pack_texts(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    pad_token_id: int = 0,
    first_position: int = 0,
    capacity: int | None = None,
) -> PackedTexts:
    """Pack the texts of a padded batch `(texts, seq_len)` (right or left padding: the real tokens are where
    `attention_mask` is 1, and must be contiguous) into rows of `capacity` tokens (default and at least: the longest
    text's length. Longer rows were slower here: the attention work of a row grows with its length squared)."""
    real = attention_mask.bool()
    lengths_tensor = real.sum(dim=1)
    lengths = lengths_tensor.tolist()
    capacity = max(max(lengths, default=0), capacity or 0, 1)
    row, column, rows = first_fit_rows(lengths, capacity)
    device = input_ids.device
    starts = torch.tensor([r * capacity + c for r, c in zip(row, column, strict=True)], device=device)
    total = int(lengths_tensor.sum())
    # Token k of the concatenated real tokens belongs to text t(k) and is its j-th token: it goes to starts[t] + j.
    source_start = torch.cumsum(lengths_tensor, dim=0) - lengths_tensor
    owner = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths_tensor)
    offset = torch.arange(total, device=device) - source_start[owner]
    destination = starts[owner] + offset

    def scatter(values: torch.Tensor, fill: int) -> torch.Tensor:
        flat = torch.full((rows * capacity,), fill, dtype=values.dtype, device=device)
        flat[destination] = values[real]
        return flat.view(rows, capacity)

    packed_ids = scatter(input_ids, pad_token_id)
    packed_types = scatter(token_type_ids, 0) if token_type_ids is not None else None
    positions = torch.zeros(rows * capacity, dtype=torch.long, device=device)
    positions[destination] = offset + first_position
    # Segment of every position: its text, or -1 for the padding at a row's end (a block of its own).
    segment = torch.full((rows * capacity,), -1, dtype=torch.long, device=device)
    segment[destination] = owner
    segment = segment.view(rows, capacity)
    mask = (segment[:, :, None] == segment[:, None, :]).unsqueeze(1)

    longest = max(lengths, default=0)
    steps = torch.arange(longest, device=device)
    text_mask = (steps[None, :] < lengths_tensor[:, None]).long()
    gather = starts[:, None] + steps[None, :] * text_mask
    return PackedTexts(packed_ids, packed_types, positions.view(rows, capacity), mask, gather, text_mask)


def encoder_mask(mask: torch.Tensor, encoder: Any) -> torch.Tensor:
    """The block mask in the form the encoder's attention takes: boolean for SDPA, additive (0 / dtype min) for
    eager attention, which adds the mask to the scores."""
    if attention_implementation(encoder) == "sdpa":
        return mask
    dtype = next(encoder.parameters()).dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def unpack_states(states: torch.Tensor, packed: PackedTexts) -> torch.Tensor:
    """`(rows, capacity, hidden)` packed token states -> `(texts, longest, hidden)`, aligned with `packed.text_mask`."""
    flat = states.reshape(-1, states.shape[-1])
    return flat[packed.gather]
