"""The steps of fine-tuning a bi-encoder around `SiameseTrainer` that the `train` command takes and a script can take
too: the model to train from an encoder, the before/after measurement on the eval set, the push to the Hub."""

from __future__ import annotations

import inspect
from typing import Any


def encoder_to_train(
    model_path: str,
    *,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    **head_kwargs: Any,
) -> tuple[Any, Any]:
    """(`SiameseBertModel`, tokenizer) to fine-tune from the encoder or bi-encoder at `model_path`: `pooling` and
    `normalize` as given, else the checkpoint's, else mean and normalized (`formats.loading.encoder_defaults`);
    `head_kwargs` (`label2id` / `num_labels`, `Objective.head_kwargs`) add a classifier head. The model's pad id is
    the tokenizer's where it has none (the Trainer would align them itself, with a warning that reads like a
    problem)."""
    from transformers import AutoTokenizer

    from ..formats.loading import encoder_defaults
    from ..modeling.modeling_siamese import SiameseBertModel

    model = SiameseBertModel.from_encoder(
        model_path, **encoder_defaults(model_path, pooling, normalize), max_seq_length=max_seq_length, **head_kwargs
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # The encoder has no generation config: only the pad id matters.
    text_config = model.config.get_text_config()
    if getattr(text_config, "pad_token_id", None) is None and tokenizer.pad_token_id is not None:
        text_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def measure(trainer: Any, eval_data: Any) -> dict[str, float] | None:
    """The trainer's model on `eval_data`: retrieval metrics on a `RetrievalDataset`, STS metrics on scored pairs;
    None without eval data."""
    from ..data.beir import RetrievalDataset

    if eval_data is None:
        return None
    if isinstance(eval_data, RetrievalDataset):
        return trainer.retrieval_metrics(eval_data)
    return trainer.sts_metrics(eval_data)


def push_trained(
    trainer: Any, repo_id: str, commit_message: str, card_facts: dict[str, Any], option: str = "push_to_hub"
) -> None:
    """Upload the trained model to the Hub repository `repo_id` with its model card (`card_facts`); `option` is what
    the caller calls the push in errors."""
    push = getattr(trainer, "push_to_hub", None)
    if push is None:
        raise ValueError(f"{option}: this version of SiameseTrainer cannot push to the Hub")
    kwargs: dict[str, Any] = {"commit_message": commit_message}
    if "repo_id" in inspect.signature(push).parameters:
        kwargs["repo_id"] = repo_id
    push(**kwargs, **card_facts)


__all__ = ["encoder_to_train", "measure", "push_trained"]
