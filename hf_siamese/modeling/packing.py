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

The route depends on the encoder's attention implementation (`packed_route`). SDPA and eager attention (the CPU's):
rows of `capacity` tokens and a 4-D block-diagonal mask (`pack_texts`). Flash attention and flex attention (GPU
kernels): all texts of the batch in ONE row with no padding at all (`pack_varlen`); flash attention gets the text
boundaries as `cu_seq_lens_q/k` and `max_length_q/k` (its varlen kernel, no mask), flex attention a document
`BlockMask` built once per batch. Both are computed on the host from the texts' lengths; given those lengths
(`text_lengths`), packing reads nothing back from the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .shape_buckets import ShapeBuckets

# model_type -> where position ids start: BERT counts from 0; RoBERTa-style models from padding_idx + 1.
PACKABLE_MODEL_TYPES: dict[str, str] = {
    "bert": "zero",
    "electra": "zero",
    "roberta": "after_padding",
    "xlm-roberta": "after_padding",
    "camembert": "after_padding",
}
# Attention implementations packed into rows with a 4-D block mask; flash and flex attention take the varlen route.
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")
FLEX_BLOCK_SIZE = 128  # flex attention's default sparse block size
# PyTorch's own FlashAttention varlen kernel (torch.nn.attention.varlen, torch 2.10+), registered with transformers
# under this name: `attn_implementation="varlen_attn"` needs no flash-attn wheel.
VARLEN_ATTENTION = "varlen_attn"


@dataclass
class PackedTexts:
    """Rows of packed texts and how to put their token states back.

    Attributes:
        input_ids, token_type_ids, position_ids: `(rows, capacity)` (`token_type_ids` may be `None`).
        attention_mask: `(rows, 1, capacity, capacity)`: True where query and key belong to the same text (padding at
            a row's end forms its own block, so no query row is fully masked). On the varlen route (one row, no
            padding): `None` for flash attention, a flex attention `BlockMask` for flex attention.
        gather: `(texts, longest)` flat index into `rows * capacity` of each text's tokens (padding repeats index 0
            of the text; it is masked out by `text_mask`).
        text_mask: `(texts, longest)` the unpacked attention mask, right-padded.
        attention_kwargs: further encoder arguments (flash attention's `cu_seq_lens_q/k`, `max_length_q/k`).
    """

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor | None
    position_ids: torch.Tensor
    attention_mask: Any
    gather: torch.Tensor
    text_mask: torch.Tensor
    attention_kwargs: dict[str, Any] = field(default_factory=dict)

    def encoder_inputs(self) -> dict[str, Any]:
        """The encoder's keyword arguments for these rows: ids, mask, positions, token types (where there are any)
        and the route's attention arguments."""
        inputs = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
            **self.attention_kwargs,
        }
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids
        return inputs

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
    return packed_route(encoder) is not None


def packed_route(encoder: Any) -> str | None:
    """How the encoder's attention implementation runs packed: "block_mask" (SDPA, eager: rows with a 4-D block
    mask), "varlen" (flash attention in its transformers flavours, e.g. "flash_attention_2", "flash_attention_3",
    "kernels-community/flash-attn2": one row, text boundaries as `cu_seq_lens`), "flex" (flex attention: one row, a
    document `BlockMask`), or None (not packed)."""
    implementation = attention_implementation(encoder)
    if implementation in ATTENTION_IMPLEMENTATIONS:
        return "block_mask"
    if implementation == "flex_attention":
        return "flex"
    if implementation == VARLEN_ATTENTION:
        return "varlen"
    if "flash" in implementation and not implementation.startswith("paged"):
        return "varlen"
    return None


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
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None = None,
    pad_token_id: int = 0,
    first_position: int = 0,
    capacity: int | None = None,
    lengths: Sequence[int] | None = None,
    buckets: ShapeBuckets | None = None,
) -> PackedTexts:
    """Pack the texts of a padded batch `(texts, seq_len)` into rows of `capacity` tokens (default and at least: the
    longest text's length. Longer rows were slower here: the attention work of a row grows with its length squared).

    `lengths`: each text's real tokens, known on the host (the collator's `text_lengths`), for a right-padded batch:
    then the whole layout is computed on the host and copied without blocking, and nothing is read back from the
    device. Without it the lengths and starts are read from `attention_mask` (right or left padding: the real tokens
    are where it is 1, and must be contiguous).

    `buckets`: rows of `buckets.text_tokens` tokens and their number rounded up (`ShapeBuckets.rows`, whole rows of
    padding), so that batches share few shapes (shape_buckets.py)."""
    seq_len = input_ids.shape[-1]
    if lengths is None:
        real = attention_mask.bool()
        lengths = real.sum(dim=1).tolist()
        first = real.int().argmax(dim=1).tolist()  # where each text starts: 0 when right-padded
    else:
        lengths, first = list(lengths), [0] * len(lengths)
    if buckets is not None:
        capacity = max(capacity or 0, buckets.text_tokens)
    capacity = max(max(lengths, default=0), capacity or 0, 1)
    row, column, rows = first_fit_rows(lengths, capacity)
    if buckets is not None:
        rows = buckets.rows(rows)
    count = torch.tensor(lengths, dtype=torch.long)
    starts = torch.tensor([r * capacity + c for r, c in zip(row, column, strict=True)], dtype=torch.long)
    total = sum(lengths)
    # Token k of the concatenated real tokens belongs to text t(k) and is its j-th token: it goes to starts[t] + j.
    owner = torch.repeat_interleave(torch.arange(len(lengths)), count, output_size=total)
    offset = torch.arange(total) - (torch.cumsum(count, dim=0) - count)[owner]
    destination = starts[owner] + offset
    source = _to(owner * seq_len + torch.tensor(first, dtype=torch.long)[owner] + offset, input_ids.device)
    target = _to(destination, input_ids.device)

    def scatter(values: torch.Tensor, fill: int) -> torch.Tensor:
        flat = torch.full((rows * capacity,), fill, dtype=values.dtype, device=values.device)
        return flat.scatter_(0, target, values.reshape(-1)[source]).view(rows, capacity)

    packed_ids = scatter(input_ids, pad_token_id)
    packed_types = scatter(token_type_ids, 0) if token_type_ids is not None else None
    positions = torch.zeros(rows * capacity, dtype=torch.long)
    positions[destination] = offset + first_position
    # Segment of every position: its text, or -1 for the padding at a row's end (a block of its own).
    segment = torch.full((rows * capacity,), -1, dtype=torch.long)
    segment[destination] = owner
    segment = _to(segment.view(rows, capacity), input_ids.device)
    mask = (segment[:, :, None] == segment[:, None, :]).unsqueeze(1)

    steps = torch.arange(max(lengths, default=0))
    text_mask = (steps[None, :] < count[:, None]).long()
    gather = starts[:, None] + steps[None, :] * text_mask
    device = input_ids.device
    return PackedTexts(
        packed_ids,
        packed_types,
        _to(positions.view(rows, capacity), device),
        mask,
        _to(gather, device),
        _to(text_mask, device),
    )


def encoder_mask(mask: torch.Tensor, encoder: Any) -> torch.Tensor:
    """The block mask in the form the encoder's attention takes: boolean for SDPA, additive (0 / dtype min) for
    eager attention, which adds the mask to the scores."""
    if attention_implementation(encoder) == "sdpa":
        return mask
    dtype = next(encoder.parameters()).dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def host_lengths(attention_mask: torch.Tensor, text_lengths: Any = None) -> list[int]:
    """Each text's number of real tokens, as Python ints: from `text_lengths` (a list or nested list the collator
    computed on the host, or a tensor) when given, else from `attention_mask` (one device-to-host copy when that is on
    an accelerator)."""
    if isinstance(text_lengths, (list, tuple)):
        flat: list[int] = []
        for item in text_lengths:
            flat.extend(item if isinstance(item, (list, tuple)) else [item])
        return [int(n) for n in flat]
    source = text_lengths if text_lengths is not None else attention_mask.sum(dim=-1)
    return [int(n) for n in torch.as_tensor(source).reshape(-1).tolist()]


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`, copied without blocking (from pinned memory on CUDA)."""
    if device.type == "cuda":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def document_block_mask(lengths: Sequence[int], device: torch.device, block_size: int = FLEX_BLOCK_SIZE) -> Any:
    """A flex attention `BlockMask` for texts of `lengths` laid end to end in one row: token q attends to token k
    when both belong to the same text. The block structure is computed on the host from the lengths, in
    O((total / block_size)^2) (not `create_block_mask`'s O(total^2) dense mask, on the device); the mask_mod compares
    document ids only inside blocks that two texts share."""
    from torch.nn.attention.flex_attention import BlockMask

    total = sum(lengths)
    document = torch.repeat_interleave(
        torch.arange(len(lengths)), torch.tensor(list(lengths), dtype=torch.long), output_size=total
    )
    starts = torch.arange(0, total, block_size)
    ends = torch.clamp(starts + block_size, max=total) - 1
    first, last = document[starts], document[ends]  # texts are contiguous: a block holds texts first..last
    touches = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])
    whole = (first == last) & (ends - starts + 1 == block_size)  # one text fills the whole block
    full = touches & whole[:, None] & whole[None, :] & (first[:, None] == first[None, :])
    partial = touches & ~full

    def ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = blocks.sum(dim=-1).to(torch.int32)
        indices = torch.argsort(blocks.to(torch.int32), dim=-1, descending=True, stable=True).to(torch.int32)
        return _to(counts[None, None], device), _to(indices[None, None], device)

    document_ids = _to(document, device)

    def same_document(batch: Any, head: Any, query: Any, key: Any) -> Any:
        return document_ids[query] == document_ids[key]

    return BlockMask.from_kv_blocks(
        *ordered(partial), *ordered(full), BLOCK_SIZE=block_size, mask_mod=same_document, seq_lengths=(total, total)
    )


def pack_varlen(
    input_ids: torch.Tensor,
    lengths: Sequence[int],
    token_type_ids: torch.Tensor | None = None,
    first_position: int = 0,
    route: str = "varlen",
    buckets: ShapeBuckets | None = None,
    pad_token_id: int = 0,
) -> PackedTexts:
    """All texts of a right-padded batch `(texts, seq_len)` end to end in ONE row of `sum(lengths)` tokens (no
    padding), for flash attention's varlen kernel (`route="varlen"`) or flex attention (`route="flex"`). Everything
    that depends on the lengths is computed on the host and copied without blocking: no value is read back from
    the device.

    `buckets` (varlen route): the row rounded up to `buckets.tokens(...)`, the padding in segments of its own at the
    end and the kernel's longest segment fixed at `buckets.text_tokens`: the same shapes for every batch of a bucket
    (shape_buckets.py)."""
    device = input_ids.device
    seq_len = input_ids.shape[-1]
    count = torch.tensor(list(lengths), dtype=torch.long)
    total, longest = sum(lengths), max(lengths, default=0)
    ends = torch.cumsum(count, dim=0)
    starts = ends - count
    owner = torch.repeat_interleave(torch.arange(len(lengths)), count, output_size=total)
    offset = torch.arange(total) - starts[owner]
    steps = torch.arange(longest)
    text_mask = (steps[None, :] < count[:, None]).long()
    gather = torch.clamp(starts[:, None] + steps[None, :] * text_mask, max=max(total - 1, 0))
    source = _to(owner * seq_len + offset, device)  # where each real token sits in the padded batch
    width, kernel_longest, segment_ends = total, longest, ends
    if buckets is not None and route == "varlen":
        width = buckets.tokens(total)
        pads = torch.tensor(buckets.pad_segments(width, total), dtype=torch.long)
        segment_ends = torch.cat([ends, total + torch.cumsum(pads, dim=0)])
        kernel_longest = max(longest, buckets.text_tokens)

    def take(values: torch.Tensor, fill: int) -> torch.Tensor:
        row = values.reshape(-1)[source]
        if width > total:
            row = torch.nn.functional.pad(row, (0, width - total), value=fill)
        return row.view(1, width)

    positions = torch.cat([offset + first_position, torch.full((width - total,), first_position, dtype=torch.long)])
    attention_kwargs: dict[str, Any] = {}
    if route == "flex":
        attention_mask = document_block_mask(lengths, device)
    else:
        attention_mask = None
        boundaries = _to(torch.nn.functional.pad(segment_ends, (1, 0)).to(torch.int32), device)
        attention_kwargs = {
            "cu_seq_lens_q": boundaries,
            "cu_seq_lens_k": boundaries,
            "max_length_q": kernel_longest,
            "max_length_k": kernel_longest,
        }
    return PackedTexts(
        take(input_ids, pad_token_id),
        take(token_type_ids, 0) if token_type_ids is not None else None,
        _to(positions, device).view(1, width),
        attention_mask,
        _to(gather, device),
        _to(text_mask, device),
        attention_kwargs,
    )


def pack_for_encoder(
    encoder: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    text_lengths: Any = None,
) -> PackedTexts:
    """Pack a right-padded batch `(texts, seq_len)` on the encoder's route (`packed_route`), its attention mask in the
    form the encoder's attention takes. `text_lengths`: each text's real token count, computed on the host (else
    read from `attention_mask`); the varlen and flex routes then read nothing back from the device. Where the encoder
    carries `shape_buckets` (a `ShapeBuckets`, set by the trainers for steps compiled with static shapes), the batch
    is rounded up to its bucket."""
    pad_token_id = getattr(encoder.config, "pad_token_id", None) or 0
    route = packed_route(encoder)
    lengths = host_lengths(attention_mask, text_lengths)
    buckets = getattr(encoder, "shape_buckets", None)
    if route == "block_mask":
        packed = pack_texts(
            input_ids,
            attention_mask,
            token_type_ids,
            pad_token_id,
            position_start(encoder),
            lengths=lengths,
            buckets=buckets,
        )
        return replace(packed, attention_mask=encoder_mask(packed.attention_mask, encoder))
    return pack_varlen(
        input_ids, lengths, token_type_ids, position_start(encoder), route or "varlen", buckets, pad_token_id
    )


def unpack_states(states: torch.Tensor, packed: PackedTexts) -> torch.Tensor:
    """`(rows, capacity, hidden)` packed token states -> `(texts, longest, hidden)`, aligned with `packed.text_mask`."""
    flat = states.reshape(-1, states.shape[-1])
    return flat[packed.gather]
