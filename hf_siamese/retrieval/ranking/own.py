"""What the exact searches by a model's own scores share (a learned-sparse model's dot products, sparse_search.py; a
multi-vector model's MaxSim, maxsim_search.py): telling the model kind, encoding a stream of texts a batch at a time,
the checks of a search's arguments, keeping each query's best rows a chunk of queries at a time, and a retrieval
set's first stage (the corpus and the queries encoded with the set's prompts, then searched).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..exact import top_k as best_columns


def encoded_batches(
    model: Any,
    texts: Iterable[str],
    *,
    task: str,
    kind: str,
    tokenizer: Any = None,
    batch_size: int = 32,
    prompt: str | None = None,
    show_progress_bar: bool = False,
    total: int | None = None,
) -> Iterator[Any]:
    """`model.encode` of `texts` (any iterable: read a batch at a time) with `task`, one result a batch, with a
    progress bar named after `kind` ("sparse", "multi-vector"). `prompt` None: the model's own for the task."""
    from tqdm.auto import tqdm

    stream = iter(texts)
    what = "queries" if task == "query" else "corpus"
    with tqdm(total=total, desc=f"Encoding {what} ({kind})", unit="text", disable=not show_progress_bar) as bar:
        while batch := list(itertools.islice(stream, batch_size)):
            yield model.encode(batch, tokenizer, task=task, batch_size=batch_size, prompt=prompt)
            bar.update(len(batch))


def check_search(top_k: Any, n_corpus: int) -> None:
    """Refuse a `top_k` that is not a positive int, and an empty corpus."""
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ValueError(f"top_k={top_k!r}: expected a positive int")
    if n_corpus == 0:
        raise ValueError("the corpus is empty (0 documents); it needs at least one document")


def best_by_chunks(
    n_queries: int, n_corpus: int, k: int, scores_of: Callable[[int, int], np.ndarray], block_elements: int
) -> tuple[np.ndarray, np.ndarray]:
    """`(scores, rows)`, each `(n_queries, k)`: each query's best `k` corpus rows (`exact.top_k`'s rule), from
    `scores_of(start, stop)`, the `(stop - start, n_corpus)` scores of a chunk of queries, at most `block_elements`
    scores (or one query's) a chunk."""
    scores, rows = np.zeros((n_queries, k), np.float32), np.zeros((n_queries, k), np.int64)
    step = max(1, block_elements // n_corpus)
    for start in range(0, n_queries, step):
        block = scores_of(start, min(start + step, n_queries))
        scores[start : start + step], rows[start : start + step] = best_columns(block, k)
    return scores, rows


def encoded_run_texts(
    encode: Callable[..., Any], model: Any, dataset: Any, query_ids: Sequence[str], **common: Any
) -> tuple[Any, Any]:
    """(queries, corpus) of a `RetrievalDataset` encoded by `encode(model, texts, task=..., prompt=..., total=...,
    **common)`: the corpus (in the order of `dataset.corpus`) as documents, the queries `query_ids` as queries, with
    the set's own prompts when it has them, else the model's."""
    corpus = encode(
        model, dataset.corpus.values(), task="document", prompt=dataset.corpus_prompt, total=len(dataset.corpus),
        **common,
    )  # fmt: skip
    texts = [dataset.queries[q] for q in query_ids]
    queries = encode(model, texts, task="query", prompt=dataset.query_prompt, total=len(texts), **common)
    return queries, corpus


__all__ = ["best_by_chunks", "check_search", "encoded_batches", "encoded_run_texts"]
