"""Exact search by a multi-vector (ColBERT-style) model (`MultiVectorModel`): every query scored by MaxSim against
every document of the corpus. The first stage of a retrieval evaluation of such a model (`maxsim_run`, the shape of
`sparse_search.sparse_run`), and the before/after measurement of `hf-siamese train --kind multi-vector`.

The corpus is encoded with `task="document"` into one list of `(n_kept_tokens, dim)` tensors, the queries with
`task="query"` (the model's prompts, query length and expansion, as `encode` applies them). A chunk of queries is
scored against the corpus a block of documents at a time (`multivector_scoring.maxsim`, padded to the block's
longest document; at most `BLOCK_ELEMENTS` scores held per chunk), and each query keeps its best `top_k` by the rule of
every exact search of the package (`exact.top_k`): larger score first, equal scores by the lower corpus row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from ...modeling.kinds import kind_of_model
from ...modeling.multivector_scoring import maxsim, pad_vectors
from .own import best_by_chunks, check_search, encoded_batches, encoded_run_texts

BLOCK_ELEMENTS = 1 << 24  # scores held at a time per query chunk (64 MiB of float32)
DOCUMENTS_PER_BLOCK = 256  # documents padded together and scored at once


def is_multivector_model(model: Any) -> bool:
    """Whether `model` is a multi-vector model (by its config, so the remote-code class of a saved one counts too:
    `modeling.kinds.kind_of_model`)."""
    return kind_of_model(model) == "multi-vector"


def encode_multivector(
    model: Any,
    texts: Iterable[str],
    *,
    task: str,
    tokenizer: Any = None,
    batch_size: int = 32,
    prompt: str | None = None,
    show_progress_bar: bool = False,
    total: int | None = None,
) -> list[torch.Tensor]:
    """The `(n_kept_tokens, dim)` float32 CPU token vectors of each of `texts` (any iterable: read a batch at a time)
    by `model.encode` with `task` ("query" or "document"); `prompt` None: the model's own for the task."""
    batches = encoded_batches(
        model, texts, task=task, kind="multi-vector", tokenizer=tokenizer, batch_size=batch_size, prompt=prompt,
        show_progress_bar=show_progress_bar, total=total,
    )  # fmt: skip
    return [vectors for batch in batches for vectors in batch]


def maxsim_search(
    queries: Sequence[torch.Tensor],
    corpus: Sequence[torch.Tensor],
    top_k: int,
    *,
    length_normalize: bool = False,
    device: str | torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`(scores, rows)`, each `(n_queries, min(top_k, n_corpus))`: every query's best corpus rows by MaxSim (by
    MeanMaxSim with `length_normalize`) of the per-text `(n_tokens, dim)` token vectors of `queries` and `corpus`,
    best first, equal scores by the lower row. Scored on `device` (default: where the queries are) a chunk of queries
    at a time, at most `BLOCK_ELEMENTS` scores (or one query's) held at once."""
    check_search(top_k, len(corpus))
    if len(queries) == 0:
        return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.int64)
    widths = {int(v.shape[-1]) for v in queries} | {int(v.shape[-1]) for v in corpus}
    if len(widths) != 1:
        raise ValueError(
            f"the token vectors have widths {sorted(widths)}: encode the queries and the corpus with the same model"
        )
    device = torch.device(device) if device is not None else queries[0].device
    n_queries, n_corpus, k = len(queries), len(corpus), min(int(top_k), len(corpus))
    blocks = [
        pad_vectors(corpus[start : start + DOCUMENTS_PER_BLOCK]) for start in range(0, n_corpus, DOCUMENTS_PER_BLOCK)
    ]

    def scores_of(start: int, stop: int) -> np.ndarray:
        chunk, chunk_mask = pad_vectors(list(queries[start:stop]))
        chunk, chunk_mask = chunk.to(device), chunk_mask.to(device)
        parts = [
            maxsim(chunk, chunk_mask, vectors.to(device), mask.to(device), length_normalize=length_normalize).cpu()
            for vectors, mask in blocks
        ]
        return torch.cat(parts, dim=1).numpy()

    return best_by_chunks(n_queries, n_corpus, k, scores_of, BLOCK_ELEMENTS)


def maxsim_run(
    model: Any,
    dataset: Any,
    query_ids: Sequence[str],
    depth: int,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The multi-vector first stage's `(scores, corpus rows)` of the queries `query_ids` of a `RetrievalDataset`,
    `depth` deep (rows in the order of `dataset.corpus`), scored as the model scores (MaxSim, or MeanMaxSim where its
    config says so) on its device. The set's own prompts when it has them, else the model's."""
    common = {"tokenizer": tokenizer, "batch_size": batch_size, "show_progress_bar": show_progress_bar}
    queries, corpus = encoded_run_texts(encode_multivector, model, dataset, query_ids, **common)
    mean = getattr(model.config, "similarity", "maxsim") == "meanmaxsim"
    device = next(model.parameters()).device
    return maxsim_search(queries, corpus, depth, length_normalize=mean, device=device)


__all__ = [
    "encode_multivector",
    "is_multivector_model",
    "maxsim_run",
    "maxsim_search",
]
