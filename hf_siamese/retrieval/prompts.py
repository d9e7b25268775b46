"""The prompt of each side of retrieval (the queries, the documents): the one given, else the model's own under one of
the usual names (E5/BGE-style checkpoints), else none. The retrieval evaluation, hard-negative mining and an index's
calibration queries embed with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Prompt names tried, in order, for each side when a model has prompts (E5/BGE-style checkpoints).
QUERY_PROMPT_NAMES = ("query",)
CORPUS_PROMPT_NAMES = ("document", "passage", "corpus")


def side_prompt(model: Any, explicit: str | None, names: Sequence[str]) -> str:
    """The prompt for one side of retrieval: `explicit` if given, else the model's first prompt among `names`,
    else none."""
    if explicit is not None:
        return explicit
    prompts = getattr(model.config, "prompts", None) or {}
    return next((prompts[n] for n in names if n in prompts), "")


__all__ = ["CORPUS_PROMPT_NAMES", "QUERY_PROMPT_NAMES", "side_prompt"]
