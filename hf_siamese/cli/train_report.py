"""What `hf-siamese train` prints and states in the model card: the headline metric, the loss, the load snippet."""

from __future__ import annotations

import argparse
from typing import Any


def headline(metrics: dict[str, float]) -> tuple[str, float]:
    """The number the before/after summary shows: STS Spearman (cosine) or, on a retrieval set, nDCG@10; x100."""
    if "spearman_cosine" in metrics:
        return "Spearman (cosine)", 100 * metrics["spearman_cosine"]
    key = "ndcg@10" if "ndcg@10" in metrics else next(k for k in metrics if k.startswith("ndcg@"))
    return key.replace("ndcg", "nDCG"), 100 * metrics[key]


def card_facts(args: argparse.Namespace, demo: bool) -> dict[str, str]:
    """Model-card facts under Trainer's keyword names: where the weights and the training data came from."""
    facts = {}
    # The default weights are a local copy of this Hub model; naming it links the card to its base.
    facts["finetuned_from"] = args.model or "sentence-transformers/all-MiniLM-L6-v2"
    if not demo:
        facts["dataset"] = args.train
    return facts


def describe_loss(loss: Any) -> str:
    name = getattr(loss, "summary", None) or type(loss).__name__  # a CombinedLoss names its parts
    if getattr(loss, "score_range", None):
        low, high = loss.score_range
        return f"{name} (scores {low:g}..{high:g})"
    return name


def load_snippet(location: str) -> str:
    return (
        "    import hf_siamese  # registers the model class; without it pass trust_remote_code=True below\n"
        "    from transformers import AutoModel\n"
        f"    model = AutoModel.from_pretrained({location!r})\n"
        '    embeddings = model.encode(["A man plays a guitar.", "Someone makes music."])\n'
        "    print(model.similarity(embeddings, embeddings))"
    )


NO_EVAL_HINT = " (give --eval scored pairs to choose the epoch and the interpolation on them: --recipe best)"


__all__ = ["NO_EVAL_HINT", "card_facts", "describe_loss", "headline", "load_snippet"]
