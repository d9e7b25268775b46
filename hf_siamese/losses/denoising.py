"""TSDAE (Wang, Reimers & Gurevych 2021): a denoising auto-encoder whose bottleneck is the sentence embedding.

Each step deletes `deletion_ratio` of every text's words (drawn anew at every step, so every epoch sees other
noise), embeds the damaged text with the bi-encoder, and a decoder rebuilds the original text token by token,
attending (cross-attention) only to that one embedding. The decoder is a causal-LM copy of the encoder's architecture
whose embeddings, self-attention and feed-forward weights ARE the encoder's (tied: the same parameters); only its
cross-attention and LM-head transform are its own. It lives in the loss, so the trained model saved by the trainer is
the encoder alone.

Words are told apart by the tokenizer's vocabulary: a WordPiece token starting with `##`, or a BPE / SentencePiece
token without its word-start mark (`Ġ`, `▁`), continues the word before it. At least one word is always kept.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from .base import SiameseLoss

_WORD_START_MARKS = ("Ġ", "▁")


def _continuation_table(tokenizer: Any) -> torch.Tensor:
    """bool `(vocab,)`: True where a token continues the word before it."""
    vocab = tokenizer.get_vocab()
    table = torch.zeros(max(vocab.values()) + 1, dtype=torch.bool)
    marked = any(token.startswith(_WORD_START_MARKS) for token in vocab)
    for token, index in vocab.items():
        table[index] = token.startswith("##") if not marked else not token.startswith(_WORD_START_MARKS)
    for index in tokenizer.all_special_ids:
        table[index] = False
    return table


def tied_decoder(encoder: nn.Module) -> nn.Module:
    """A causal LM with cross-attention built from `encoder`'s config, its shared weights tied to the encoder's."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(encoder.config)
    config.is_decoder, config.add_cross_attention = True, True
    try:
        decoder = AutoModelForCausalLM.from_config(config)
    except ValueError:
        raise ValueError(
            f"TSDAE needs a decoder for model type {config.model_type!r}, and transformers has no causal-LM class "
            "with cross-attention for it; BERT, RoBERTa, XLM-RoBERTa and ELECTRA encoders work"
        ) from None
    base = decoder.base_model
    if not any("crossattention" in name for name, _ in base.named_parameters()):
        raise ValueError(f"TSDAE: the {config.model_type!r} causal LM of transformers has no cross-attention")
    shared = dict(encoder.named_parameters())
    for name, parameter in list(base.named_parameters()):
        twin = shared.get(name)
        if twin is not None and twin.shape == parameter.shape and "crossattention" not in name:
            owner, _, leaf = name.rpartition(".")
            setattr(base.get_submodule(owner), leaf, twin)
    output_embeddings = decoder.get_output_embeddings()
    if output_embeddings is not None:  # the LM head reads the (shared) word embeddings
        output_embeddings.weight = base.get_input_embeddings().weight
    return decoder


class DenoisingAutoEncoderLoss(SiameseLoss):
    """TSDAE on rows of one text (`sentence` / `text`); see the module docstring.

    Args:
        model: the `SiameseBertModel` being trained (its encoder gives the decoder's architecture and tied weights).
        tokenizer: its tokenizer (the word boundaries of the deletion noise).
        deletion_ratio: the share of each text's words deleted (0.6, the paper's).
    """

    label_kind = None
    num_texts = None

    def __init__(self, model: Any, tokenizer: Any, deletion_ratio: float = 0.6) -> None:
        super().__init__()
        if (
            isinstance(deletion_ratio, bool)
            or not isinstance(deletion_ratio, int | float)
            or not 0 <= deletion_ratio < 1
        ):
            raise ValueError(f"deletion_ratio={deletion_ratio!r}: expected a share of the words in [0, 1)")
        encoder = getattr(model, "encoder", None)
        if not isinstance(encoder, nn.Module):
            raise ValueError(f"DenoisingAutoEncoderLoss: model is {type(model).__name__}; expected a SiameseBertModel")
        self.deletion_ratio = float(deletion_ratio)
        self.decoder = tied_decoder(encoder)
        self.register_buffer("continues_word", _continuation_table(tokenizer), persistent=False)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def noisy(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(input_ids, attention_mask)` with `deletion_ratio` of each row's words deleted (special tokens kept, one
        word at least), left-aligned and padded to the longest row."""
        continues = self.continues_word.to(input_ids.device)[input_ids.clamp(max=len(self.continues_word) - 1)]
        real = attention_mask.bool()
        special = torch.zeros_like(real)
        special[:, 0] = True  # [CLS] / <s>
        special |= real & ~torch.cat([real[:, 1:], torch.zeros_like(real[:, :1])], dim=1)  # the last real token
        starts = real & ~special & ~continues
        word_index = torch.cumsum(starts.long(), dim=1) - 1  # which word a token belongs to
        rows = []
        for row in range(input_ids.shape[0]):
            count = int(starts[row].sum())
            keep = torch.ones(0, dtype=torch.bool)
            if count:
                keep_count = max(1, count - round(count * self.deletion_ratio))
                keep = torch.zeros(count, dtype=torch.bool)
                keep[torch.randperm(count)[:keep_count]] = True
            kept_tokens = special[row] | (
                real[row] & ~special[row] & keep.to(input_ids.device)[word_index[row].clamp(min=0)]
            )
            rows.append(input_ids[row][kept_tokens])
        length = max(len(ids) for ids in rows)
        ids = input_ids.new_full((len(rows), length), self.pad_token_id)
        mask = torch.zeros((len(rows), length), dtype=attention_mask.dtype, device=attention_mask.device)
        for row, kept in enumerate(rows):
            ids[row, : len(kept)] = kept
            mask[row, : len(kept)] = 1
        return ids, mask

    def compute(
        self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        if input_ids.dim() == 3:
            if input_ids.shape[1] != 1:
                raise ValueError(f"DenoisingAutoEncoderLoss needs rows of one text; the batch has {input_ids.shape[1]}")
            input_ids, attention_mask = input_ids[:, 0], attention_mask[:, 0]
        noisy_ids, noisy_mask = self.noisy(input_ids, attention_mask)
        output = model(input_ids=noisy_ids, attention_mask=noisy_mask)
        embedding = output.sentence_embedding
        self.decoder.to(embedding.device)
        targets = input_ids.masked_fill(attention_mask == 0, -100)
        decoded = self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            encoder_hidden_states=embedding[:, None, :],
            encoder_attention_mask=torch.ones(
                embedding.shape[0], 1, dtype=attention_mask.dtype, device=embedding.device
            ),
            labels=targets,
        )
        return decoded.loss, output

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover - compute() runs
        raise RuntimeError("DenoisingAutoEncoderLoss runs the model itself: call compute(model, inputs, labels)")


__all__ = ["DenoisingAutoEncoderLoss", "tied_decoder"]
