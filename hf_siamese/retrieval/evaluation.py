"""The IR metrics of a model on a retrieval set (what `SiameseTrainer` reports for such an eval set).

The sets themselves are read by `hf_siamese.data.beir`; the metric definitions and the exact chunked search live in
the `evaluate` module `hf_siamese.metrics.RETRIEVAL`; hard-negative mining is in `hf_siamese.retrieval.mining`, the
persistent vector index in `hf_siamese.retrieval.vector_index`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.beir import RetrievalDataset

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


def embed_retrieval_set(
    model: Any,
    dataset: RetrievalDataset,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    process_index: int = 0,
    num_processes: int = 1,
    show_progress_bar: bool = False,
) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """`(query_ids, query_embeddings, corpus_ids, corpus_embeddings)` of a retrieval set.

    Under several processes each embeds a contiguous shard of the corpus and of the queries; the shards are gathered
    in rank order, so every process ends with the full arrays, exactly as one process would."""
    query_ids, corpus_ids = list(dataset.queries), list(dataset.corpus)
    sides = (
        (query_ids, dataset.queries, side_prompt(model, dataset.query_prompt, QUERY_PROMPT_NAMES)),
        (corpus_ids, dataset.corpus, side_prompt(model, dataset.corpus_prompt, CORPUS_PROMPT_NAMES)),
    )
    from ..modeling.distributed import encode_in_shards

    embedded = []
    for ids, texts, prompt in sides:

        def encode(shard: list[str], prompt: str = prompt) -> np.ndarray:
            return model.encode(
                shard,
                tokenizer=tokenizer,
                batch_size=batch_size,
                convert_to_numpy=True,
                prompt=prompt,
                show_progress_bar=show_progress_bar,
            )

        embedded.append(encode_in_shards([texts[i] for i in ids], encode, process_index, num_processes))
    return query_ids, embedded[0], corpus_ids, embedded[1]


def evaluate_retrieval(
    model: Any,
    dataset: RetrievalDataset,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    percent: bool = False,
    process_index: int = 0,
    num_processes: int = 1,
    show_progress_bar: bool = False,
) -> dict[str, float]:
    """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k (at `dataset.k_values`) of `model` on a retrieval set, ranking
    the whole corpus by the model's similarity (exact search, in chunks)."""
    from ..metrics import retrieval_metrics_from_embeddings

    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(
        model,
        dataset,
        tokenizer=tokenizer,
        batch_size=batch_size,
        process_index=process_index,
        num_processes=num_processes,
        show_progress_bar=show_progress_bar,
    )
    return retrieval_metrics_from_embeddings(
        queries,
        corpus,
        query_ids,
        corpus_ids,
        dataset.qrels,
        k_values=list(dataset.k_values),
        similarity=model.config.similarity,
        percent=percent,
    )


__all__ = ["CORPUS_PROMPT_NAMES", "QUERY_PROMPT_NAMES", "embed_retrieval_set", "evaluate_retrieval", "side_prompt"]
