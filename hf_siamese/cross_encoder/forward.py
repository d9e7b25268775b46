"""The cross-encoder's forward pass over pairs, packed where packing is exact (the bi-encoder's route, packing.py).

A batch of (query, document) pairs padded to its longest pair spends work on padding; packed, the pairs lie end to end
in rows (SDPA / eager: rows of the longest pair's length with a block-diagonal mask) or in one row with no padding
at all (flash / flex attention on a GPU), each pair counting its positions from its own start. The head then reads
each pair's first state, where the model's own head reads `states[:, 0]`: a forward pre-hook on the module that
reads it (BERT's pooler, RoBERTa / ELECTRA's classifier) swaps its input for the pairs' first states for the length
of one call, so the model's own `forward` runs (a distributed wrapper's gradient synchronization included) and the
logits come out one row per pair, in batch order.

Encoders packing is not exact for (rotary or relative positions, other heads) run padded, as before.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from ..modeling.packing import can_pack, encoder_mask, pack_for_encoder, packed_route
from .collator import MODEL_INPUTS
from .last_layer import can_skip, first_states

# Heads that read the encoder's first state: BERT's pooler (in the base model) then a linear classifier; RoBERTa /
# ELECTRA's classifier module over the sequence (it takes `states[:, 0]` itself).
POOLER_HEADS = frozenset({"bert"})
SEQUENCE_HEADS = frozenset({"roberta", "xlm-roberta", "camembert", "electra"})


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside distributed (`.module`) and compiled (`._orig_mod`) wrappers."""
    while isinstance(getattr(model, "module", None), torch.nn.Module) or hasattr(model, "_orig_mod"):
        model = model.module if isinstance(getattr(model, "module", None), torch.nn.Module) else model._orig_mod
    return model


def base_model(model: torch.nn.Module) -> torch.nn.Module | None:
    """The encoder inside a `...ForSequenceClassification` (`model.bert`, `model.roberta`, ...), or None."""
    return getattr(model, getattr(model, "base_model_prefix", ""), None)


def first_state_reader(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module whose input holds the sequence and which reads its first state, or None where the head is of
    another kind (packing is then not used)."""
    model_type = getattr(model.config, "model_type", None)
    if model_type in POOLER_HEADS:
        return getattr(base_model(model), "pooler", None)
    if model_type in SEQUENCE_HEADS:
        return getattr(model, "classifier", None)
    return None


def packs(model: torch.nn.Module) -> bool:
    """Whether `model`'s pairs run packed: a packable encoder (packing.can_pack) under a head that reads the first
    state."""
    base = base_model(model)
    return base is not None and can_pack(base) and first_state_reader(model) is not None


@contextlib.contextmanager
def first_states_at(reader: torch.nn.Module, index: torch.Tensor) -> Iterator[None]:
    """While inside, `reader` sees `(pairs, 1, hidden)`: the packed states at the flat positions `index` (each pair's
    first token), in place of the packed rows. Only in the calling thread: `predict` scores batches in several
    threads through one model, each with its own hook."""
    owner = threading.get_ident()

    def gather(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if threading.get_ident() != owner:
            return None
        states = args[0]
        return (states.reshape(-1, states.shape[-1])[index][:, None], *args[1:])

    handle = reader.register_forward_pre_hook(gather)
    try:
        yield
    finally:
        handle.remove()


def packed_inputs(model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
    """The encoder inputs of `inputs`' pairs packed on the encoder's route, and the flat index of each pair's first
    token. `inputs["text_lengths"]` (host ints, the collator's) keeps packing from reading the mask back."""
    base = base_model(model)
    packed = pack_for_encoder(
        base,
        inputs["input_ids"],
        inputs["attention_mask"],
        inputs.get("token_type_ids"),
        text_lengths=inputs.get("text_lengths"),
    )
    return packed.encoder_inputs(), packed.gather[:, 0]


def pair_logits(model: torch.nn.Module, inputs: dict[str, Any], packing: bool = True, runner: Any = None) -> Any:
    """`(pairs, num_labels)` logits of the padded pair batch `inputs` (`input_ids`, `attention_mask`, ...;
    `text_lengths` optional), packed when `packing` and `packs(model)`.

    `model` may be wrapped (distributed, compiled): the wrapper is called, so its gradient synchronization runs.
    `runner`: a low-precision copy of `model` whose encoder runs the pairs while `model`'s float32 head scores them
    (`CrossEncoder.predict`), so that scores keep their order (bfloat16 logits tie). Returns the logits tensor."""
    called, model = model, unwrapped(model)  # a distributed wrapper is called; the model inside is inspected
    model_inputs = {key: inputs[key] for key in MODEL_INPUTS if key in inputs}
    mask = model_inputs.get("attention_mask")
    packed = packing and mask is not None and mask.dim() == 2 and packs(model)
    # Left-padded pairs stay padded: BERT counts their positions from the padding. Without the collator's lengths
    # this reads the mask's first column back once.
    packed = packed and (inputs.get("text_lengths") is not None or bool(mask[:, 0].all()))
    if packed:
        model_inputs, first = packed_inputs(runner if runner is not None else model, {**inputs, **model_inputs})
    elif mask is not None and mask.dim() == 2 and packed_route(base_model(model) or model) == "block_mask":
        # A 4-D mask goes to attention as it is; from a 2-D one transformers asks the device whether anything is
        # padded (a read-back every step).
        model_inputs["attention_mask"] = encoder_mask(mask[:, None, None, :].bool(), base_model(model) or model)
    source = runner if runner is not None else model
    if first_state_reader(model) is not None and can_skip(base_model(source)):  # scoring: see last_layer.py
        if not packed:
            width = model_inputs["input_ids"].shape[1]
            first = torch.arange(model_inputs["input_ids"].shape[0], device=model_inputs["input_ids"].device) * width
        states = first_states(base_model(source), model_inputs, first)
    elif runner is None or runner is model or first_state_reader(model) is None:
        with first_states_at(first_state_reader(model), first) if packed else contextlib.nullcontext():
            return (runner or called)(**model_inputs).logits
    else:
        states = base_model(runner)(**model_inputs).last_hidden_state
        states = states.reshape(-1, states.shape[-1])[first][:, None] if packed else states[:, :1]
    device = states.device.type
    with torch.autocast(device_type=device, enabled=False) if device in ("cpu", "cuda") else contextlib.nullcontext():
        if getattr(model.config, "model_type", None) in POOLER_HEADS:  # pooler, dropout (no-op in eval), classifier
            pooler = getattr(base_model(source), "pooler", None)
            pooled = pooler(states) if pooler is not None else states[:, 0]
            return model.classifier(model.dropout(pooled.float()))
        return model.classifier(states.float())
