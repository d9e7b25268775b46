"""What the sparse and multi-vector models' `encode` share: the tokenizer a model encodes with, its token limit (and
its config's: the encoder's positions), the checks of `encode`'s arguments and the longest-first batching, and
`encode_query` / `encode_document`; and their configs' check of an `encoder_config` dict.

This file is copied next to the weights with either kind's remote code, so it imports only public libraries.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn


def check_encoder_config(owner: str, encoder_config: Any) -> None:
    """Refuse an `encoder_config` dict without `model_type` (AutoConfig could not build it), naming `owner`."""
    if isinstance(encoder_config, dict) and "model_type" not in encoder_config:
        raise ValueError(
            f"{owner}: `encoder_config` is a dict without `model_type`; give the encoder's config "
            "(e.g. AutoConfig.from_pretrained(...)) or a dict with `model_type` such as 'bert'."
        )


def max_tokens(encoder_config: Any, max_seq_length: int | None) -> int:
    """Texts are cut to this many tokens: `max_seq_length`, at most the encoder's positions (less RoBERTa's offset),
    512 where neither says."""
    positions = getattr(encoder_config, "max_position_embeddings", 512) or 512
    if getattr(encoder_config, "model_type", None) in ("roberta", "xlm-roberta", "camembert"):
        positions -= 2
    return int(min(max_seq_length or positions, positions))


def tokenizer_limit(tokenizer: Any) -> int:
    """The tokenizer's `model_max_length`, 512 where it is unset or a placeholder (transformers' 1e30)."""
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 100_000 else 512


def token_limit(config: Any, tokenizer: Any, ceiling: int | None = None) -> int:
    """The most tokens a text keeps: the config's `max_seq_length`, else the tokenizer's (`tokenizer_limit`), and
    never more than `ceiling` (default: the config's encoder limit)."""
    return min(config.max_seq_length or tokenizer_limit(tokenizer), ceiling or config.effective_max_seq_length)


def checked_texts(texts: str | Sequence[str], task: str, tasks: Sequence[str], batch_size: Any) -> tuple[bool, list]:
    """`encode`'s arguments checked: (whether `texts` is one string, the texts as a list)."""
    if task not in tasks:
        raise ValueError(f"encode: task={task!r}; accepted: {', '.join(tasks)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"encode: batch_size={batch_size!r} must be a positive whole number")
    single = isinstance(texts, str)
    items = [texts] if single else list(texts)
    if not all(isinstance(text, str) for text in items):
        raise ValueError("encode: texts must be strings (one, or a list of them)")
    return single, items


def used_width(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    pad_token_id: int | None,
    lengths: Sequence[int] | None = None,
) -> int:
    """How many leading positions of right-padded `(..., seq_len)` texts any text uses (at least 1): the largest of
    `lengths` (real tokens counted on the host, by the collator: nothing read back from the device), else the last
    position attended or holding a token other than padding (a query's expansion tokens, attended or not)."""
    if lengths is not None:
        return max(1, max(lengths, default=1))
    used = (attention_mask.bool() | (input_ids != (pad_token_id or 0))).reshape(-1, input_ids.shape[-1]).any(dim=0)
    positions = used.nonzero()
    return int(positions[-1]) + 1 if len(positions) else 1


def longest_first(items: Sequence[str], batch_size: int) -> list[list[int]]:
    """Batches of indices into `items`, longest text first, so a batch holds texts of about one length (little
    padding); the caller puts the results back in the input order."""
    order = sorted(range(len(items)), key=lambda i: -len(items[i]))
    return [order[start : start + batch_size] for start in range(0, len(items), batch_size)]


def rows_in_input_order(rows: Sequence[torch.Tensor], batches: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """The `(len(batch), width)` results of `longest_first`'s `batches` (`rows`, one tensor per batch) as one
    `(n, width)` tensor in the input order; `(0, width)` where there are none."""
    if not rows:
        return torch.zeros(0, width)
    return torch.cat(list(rows))[torch.argsort(torch.tensor([i for chosen in batches for i in chosen]))]


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """`model` in eval mode for the block, then back in the mode it had."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


class TextEncoding:
    """Methods of a model with a `config` (`name_or_path`, `prompts`, `max_seq_length`, `effective_max_seq_length`),
    a `tokenizer` attribute and an `encode(texts, tokenizer, *, task=...)`."""

    def _resolve_tokenizer(self, tokenizer: Any) -> Any:
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        if tokenizer is None:
            name = getattr(self.config, "_name_or_path", None) or self.config.name_or_path
            if not name:
                raise ValueError("encode: pass tokenizer=... (this model was not loaded from a folder with one)")
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(name)
            self.tokenizer = tokenizer
        return tokenizer

    def _token_limit(self, tokenizer: Any) -> int:
        return token_limit(self.config, tokenizer)

    def _task_prompt(self, task: str, prompt: str | None) -> str:
        """`prompt`, else the config's prompt for `task` (none: "")."""
        return (self.config.prompts or {}).get(task, "") if prompt is None else prompt

    def encode_query(self, texts: str | Sequence[str], tokenizer: Any = None, **kwargs: Any) -> Any:
        """`encode(texts, task="query")`."""
        return self.encode(texts, tokenizer, task="query", **kwargs)

    def encode_document(self, texts: str | Sequence[str], tokenizer: Any = None, **kwargs: Any) -> Any:
        """`encode(texts, task="document")`."""
        return self.encode(texts, tokenizer, task="document", **kwargs)


__all__ = [
    "TextEncoding",
    "check_encoder_config",
    "checked_texts",
    "evaluating",
    "longest_first",
    "max_tokens",
    "rows_in_input_order",
    "token_limit",
]
