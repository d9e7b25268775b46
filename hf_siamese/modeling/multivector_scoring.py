"""MaxSim, the late-interaction score of a multi-vector (ColBERT-style) model, on padded batches of token vectors.

For a query with vectors q_1..q_n and a document with vectors d_1..d_m:

    MaxSim(q, d) = sum_i max_j q_i . d_j        (MeanMaxSim: divided by n)

over the kept vectors only (a mask says which); a document with no kept vector contributes 0 per query vector.
Part of the multi-vector model's remote-code set: imports only public libraries.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# Largest (queries x documents x query tokens x document tokens) block scored at once.
BLOCK_ELEMENTS = 1 << 25


def pad_vectors(vectors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of `(n_tokens_i, dim)` tensors -> `(n, max n_tokens, dim)` zero-padded and its `(n, max n_tokens)` bool
    mask of real rows."""
    if len(vectors) == 0:
        raise ValueError("pad_vectors: no vectors given (an empty list)")
    if any(v.dim() != 2 for v in vectors):
        raise ValueError(f"pad_vectors: each item must be (n_tokens, dim); got {[tuple(v.shape) for v in vectors]}")
    length = max(int(v.shape[0]) for v in vectors)
    first = vectors[0]
    padded = first.new_zeros((len(vectors), length, first.shape[1]))
    mask = torch.zeros(len(vectors), length, dtype=torch.bool, device=first.device)
    for row, v in enumerate(vectors):
        padded[row, : v.shape[0]] = v.to(padded.device, padded.dtype)
        mask[row, : v.shape[0]] = True
    return padded, mask


def as_padded(
    vectors: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors in any of the forms `encode` gives -> `(n, tokens, dim)` and a bool mask: a list of
    `(n_tokens_i, dim)` tensors, a padded `(n, tokens, dim)` tensor (with `mask`, or every row kept), or one
    `(n_tokens, dim)` text."""
    if isinstance(vectors, list | tuple):
        if mask is not None:
            raise ValueError("a list of per-text vectors carries its own lengths; give no mask with it")
        return pad_vectors(list(vectors))
    if vectors.dim() == 2:
        vectors = vectors[None]
        mask = mask[None] if mask is not None and mask.dim() == 1 else mask
    if vectors.dim() != 3:
        raise ValueError(f"token vectors must be (tokens, dim) or (n, tokens, dim); got {tuple(vectors.shape)}")
    if mask is None:
        mask = torch.ones(vectors.shape[:2], dtype=torch.bool, device=vectors.device)
    if tuple(mask.shape) != tuple(vectors.shape[:2]):
        raise ValueError(f"mask {tuple(mask.shape)} does not match the vectors {tuple(vectors.shape)}")
    return vectors, mask.to(vectors.device).bool()


def _best_per_query_token(similarities: torch.Tensor, doc_mask: torch.Tensor) -> torch.Tensor:
    """`(..., q_tokens, d_tokens)` dot products -> `(..., q_tokens)` best over the kept document tokens (0 where
    the document keeps none). `doc_mask` broadcasts as `(..., 1, d_tokens)`."""
    filled = similarities.masked_fill(~doc_mask, float("-inf"))
    best = filled.amax(dim=-1)
    return torch.where(torch.isinf(best), torch.zeros_like(best), best)


def maxsim(
    query_vectors: torch.Tensor | Sequence[torch.Tensor],
    query_mask: torch.Tensor | None,
    doc_vectors: torch.Tensor | Sequence[torch.Tensor],
    doc_mask: torch.Tensor | None,
    *,
    length_normalize: bool = False,
) -> torch.Tensor:
    """MaxSim of every query with every document: `(nq, q_tokens, dim)` and `(nd, d_tokens, dim)` padded vectors
    with their bool masks of kept tokens (None: all kept), or the other forms `as_padded` reads -> `(nq, nd)` float32
    scores. `length_normalize`: divided by each query's number of kept tokens (MeanMaxSim). Documents are scored in
    blocks that bound the memory."""
    queries, q_mask = as_padded(query_vectors, query_mask)
    docs, d_mask = as_padded(doc_vectors, doc_mask)
    queries, docs = queries.float(), docs.to(queries.device).float()
    d_mask = d_mask.to(queries.device)
    per_doc = max(1, queries.shape[0] * queries.shape[1] * docs.shape[1])
    block = max(1, BLOCK_ELEMENTS // per_doc)
    scores = []
    for start in range(0, docs.shape[0], block):
        part, part_mask = docs[start : start + block], d_mask[start : start + block]
        similarities = torch.einsum("qid,pjd->qpij", queries, part)  # (nq, block, q_tokens, d_tokens)
        best = _best_per_query_token(similarities, part_mask[None, :, None, :])
        scores.append((best * q_mask[:, None, :].to(best.dtype)).sum(dim=-1))
    result = torch.cat(scores, dim=1)
    if length_normalize:
        result = result / q_mask.sum(dim=-1, keepdim=True).clamp(min=1).to(result.dtype)
    return result


def maxsim_pairwise(
    query_vectors: torch.Tensor | Sequence[torch.Tensor],
    query_mask: torch.Tensor | None,
    doc_vectors: torch.Tensor | Sequence[torch.Tensor],
    doc_mask: torch.Tensor | None,
    *,
    length_normalize: bool = False,
) -> torch.Tensor:
    """MaxSim of matched pairs: query i with document i -> `(n,)` float32 scores (shapes as `maxsim`)."""
    queries, q_mask = as_padded(query_vectors, query_mask)
    docs, d_mask = as_padded(doc_vectors, doc_mask)
    if queries.shape[0] != docs.shape[0]:
        raise ValueError(f"maxsim_pairwise: {queries.shape[0]} queries but {docs.shape[0]} documents")
    similarities = torch.einsum("nid,njd->nij", queries.float(), docs.to(queries.device).float())
    best = _best_per_query_token(similarities, d_mask.to(queries.device)[:, None, :])
    result = (best * q_mask.to(best.dtype)).sum(dim=-1)
    if length_normalize:
        result = result / q_mask.sum(dim=-1).clamp(min=1).to(result.dtype)
    return result


__all__ = ["as_padded", "maxsim", "maxsim_pairwise", "pad_vectors"]
