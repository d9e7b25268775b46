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
from .rerank import RERANK_TOP, check_rerank, rerank_hits

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
    rerank: Any = None,
    rerank_top: int = RERANK_TOP,
    first_stage_weight: float | None = None,
) -> dict[str, float]:
    """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k (at `dataset.k_values`) of `model` on a retrieval set, ranking
    the whole corpus by the model's similarity (exact search, in chunks).

    With `rerank` (a cross-encoder, or any object with `.predict(pairs)`: see `rerank.rerank_hits`), two stages: the
    model's `rerank_top` best documents per query (all of the corpus if it is smaller, with a warning) are re-scored
    on (query text, document text) pairs, without prompts, `batch_size` pairs at a time. The result then holds the
    first stage's metrics as without `rerank` and, side by side, the two stages' under the same names prefixed
    `rerank_` (`rerank_ndcg@10`, ...), plus `rerank_top` (the depth reranked). A relevant document the first stage did
    not retrieve is NOT added to the candidates, so the reranked numbers are what a deployed two-stage search scores
    (not a reranker's ceiling on ideal candidates). Below `rerank_top` (a k larger than it) the reranked ranking
    goes on in the first stage's order. Under several processes each reranks every query (the same numbers).
    `first_stage_weight` fuses the reranker's and the first stage's scores as `rerank.rerank_hits` does (default:
    the reranker's own weight)."""
    from ..metrics import exact_search, retrieval_metrics, retrieval_metrics_from_embeddings

    depth = None if rerank is None else check_rerank(rerank, rerank_top, 1, len(dataset.corpus))
    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(
        model,
        dataset,
        tokenizer=tokenizer,
        batch_size=batch_size,
        process_index=process_index,
        num_processes=num_processes,
        show_progress_bar=show_progress_bar,
    )
    ks = sorted(set(dataset.k_values))
    if depth is None:
        return retrieval_metrics_from_embeddings(
            queries,
            corpus,
            query_ids,
            corpus_ids,
            dataset.qrels,
            k_values=ks,
            similarity=model.config.similarity,
            percent=percent,
        )
    judged = [q for q, relevance in dataset.qrels.items() if any(value > 0 for value in relevance.values())]
    row = {query_id: i for i, query_id in enumerate(query_ids)}
    found_scores, found = exact_search(
        queries[[row[q] for q in judged]], corpus, max(depth, ks[-1]), similarity=model.config.similarity
    )
    rankings = {q: [corpus_ids[j] for j in rows] for q, rows in zip(judged, found.tolist(), strict=True)}
    candidates = [
        [
            {"id": doc, "text": dataset.corpus[doc], "rank": rank, "score": float(score)}
            for rank, (doc, score) in enumerate(zip(rankings[q][:depth], scores[:depth], strict=True), 1)
        ]
        for q, scores in zip(judged, found_scores.tolist(), strict=True)
    ]
    reranked = rerank_hits(
        rerank, [dataset.queries[q] for q in judged], candidates, batch_size=batch_size,
        show_progress_bar=show_progress_bar, first_stage_weight=first_stage_weight,
    )  # fmt: skip
    second = {q: [hit["id"] for hit in hits] + rankings[q][depth:] for q, hits in zip(judged, reranked, strict=True)}
    metrics = retrieval_metrics(rankings, dataset.qrels, ks, percent=percent)
    two_stage = retrieval_metrics(second, dataset.qrels, ks, percent=percent)
    metrics.update({f"rerank_{name}": value for name, value in two_stage.items() if name != "num_queries"})
    metrics["rerank_top"] = depth
    return metrics


__all__ = ["CORPUS_PROMPT_NAMES", "QUERY_PROMPT_NAMES", "embed_retrieval_set", "evaluate_retrieval", "side_prompt"]
