"""What a fine-tuning run (`fine_tune`, `hf-siamese train`) reports and states in the model card: the headline
metric, the loss, the closing summary, the load snippet."""

from __future__ import annotations

import os
from typing import Any


def headline(metrics: dict[str, float]) -> tuple[str, float]:
    """The number the before/after summary shows: STS Spearman (cosine) or, on a retrieval set, nDCG@10; x100."""
    if "spearman_cosine" in metrics:
        return "Spearman (cosine)", 100 * metrics["spearman_cosine"]
    key = "ndcg@10" if "ndcg@10" in metrics else next(k for k in metrics if k.startswith("ndcg@"))
    return key.replace("ndcg", "nDCG"), 100 * metrics[key]


def summary_lines(
    model_path: str,
    trained: str,
    scores: tuple[dict[str, float] | None, dict[str, float] | None],
    evaluation: tuple[Any, str | None],
    output_dir: str,
    pushed: str | None,
) -> list[str]:
    """The closing summary: the base model, what it was trained on (`trained`), the headline metric on the eval set
    before and after (`scores`), where the model went, and how to load it."""
    (before, after), (eval_data, eval_name) = scores, evaluation
    lines = ["", "=" * 80, f"Trained {model_path}", f"  on      {trained}"]
    if before and after:
        (label, old), (_, new) = headline(before), headline(after)
        unit = "queries" if not hasattr(eval_data, "column_names") else "pairs"
        lines.append(f"  eval    {eval_name}: {len(eval_data)} {unit}")
        lines.append(f"          {label} x100: before {old:.2f}  ->  after {new:.2f}  ({new - old:+.2f})")
    lines.append(f"  saved   {os.path.abspath(output_dir)}")
    if pushed:
        from huggingface_hub import constants

        lines.append(f"  pushed  {constants.ENDPOINT}/{pushed}")
    return [*lines, "Load it with:", load_snippet(pushed or output_dir), "=" * 80]


def card_facts(
    finetuned_from: str, dataset: str | None, after: dict[str, float] | None = None, final_weights: str | None = None
) -> dict[str, Any]:
    """Model-card facts under Trainer's keyword names: where the weights (`finetuned_from`) and the training data
    (`dataset`; None: not named) came from, the final weights' eval metrics (`after`) and how they were made
    (`final_weights`)."""
    facts: dict[str, Any] = {"finetuned_from": finetuned_from}
    if dataset is not None:
        facts["dataset"] = dataset
    if after:
        # The card states the final weights' scores (the trainer's log holds those of the epochs or the checkpoint).
        facts["eval_results"] = {f"eval_{key}": value for key, value in after.items()}
    if final_weights:
        facts["final_weights"] = final_weights
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


__all__ = ["NO_EVAL_HINT", "card_facts", "describe_loss", "headline", "load_snippet", "summary_lines"]
