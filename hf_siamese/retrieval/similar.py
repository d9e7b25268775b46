"""Similar pairs and clusters of a whole corpus, from its k-nearest-neighbour graph: never an N x N matrix.

`similar_pairs` asks each vector for its `top_k` nearest neighbours (exact search chunk by chunk, or any search
function such as an approximate index's) and keeps the pairs at or above a similarity threshold, each pair once.
`cluster` groups the same graph into communities: greedily, from the vector with the most neighbours above the
threshold (as sentence-transformers' `community_detection` does on a full matrix), or as connected components.
`kmeans` is faiss' k-means, for a user who asks for k topics. `find_similar` / `find_clusters` do it for a whole
corpus end to end (`hf-siamese similar` / `cluster`): embed it with `encode_corpus` (resumable shards), stack the
shards once into a memory-mapped matrix (`corpus_matrix`), find the pairs / groups, and give them back with their ids
and texts (read again from the source, only for the rows in the result).

Memory: the pairs are kept as numpy arrays (16 bytes each), at most N x top_k of them; the vectors are read a chunk of
queries at a time, so `vectors` may be a `np.memmap`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..data.corpus_stream import resolve_corpus
from .corpus import encode_corpus
from .exact import exact_search
from .index.matrix import corpus_matrix, neighbour_search, texts_of

# The range a similarity's scores can take (distances are negated: a larger score is always more similar).
SCORE_RANGES = {
    "cosine": (-1.0, 1.0),
    "dot": (-np.inf, np.inf),
    "euclidean": (-np.inf, 0.0),
    "manhattan": (-np.inf, 0.0),
}
CLUSTER_METHODS = ("community", "components")

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def check_threshold(threshold: Any, top_k: Any, similarity: str) -> None:
    """ValueError unless `threshold` lies in the range of `similarity`'s scores and `top_k` is a positive int."""
    if similarity not in SCORE_RANGES:
        raise ValueError(f"similarity={similarity!r} is not one of {list(SCORE_RANGES)}.")
    low, high = SCORE_RANGES[similarity]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not low <= threshold <= high:
        raise ValueError(
            f"threshold={threshold!r} is outside the range of {similarity} scores [{low}, {high}] (distances are "
            "negated: a larger score is more similar)."
        )
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k={top_k!r} must be a positive int (neighbours asked per vector).")


def neighbour_pairs(
    vectors: Any,
    *,
    threshold: float,
    top_k: int = 10,
    similarity: str = "cosine",
    search: Search | None = None,
    chunk_size: int = 8192,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(first, second, score)` arrays of every pair of rows of `vectors` (first < second) that one of them has among
    its `top_k` neighbours with a score >= `threshold`, each pair once, best first.

    `search(queries, k) -> (scores, row indices)` defaults to exact search over `vectors`; an approximate index's
    search can stand in (`hf_siamese.retrieval.index.ann.AnnIndex.search`). Negative indices (faiss' "none") are
    skipped.
    """
    check_threshold(threshold, top_k, similarity)
    count = len(vectors)
    if count < 2:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0, dtype=np.float32)
    k = min(top_k + 1, count)  # every vector finds itself first
    firsts, seconds, scores = [], [], []
    for start in range(0, count, chunk_size):
        queries = np.asarray(vectors[start : start + chunk_size], dtype=np.float32)
        if search is None:
            found_scores, found = exact_search(queries, vectors, top_k=k, similarity=similarity)
        else:
            found_scores, found = search(queries, k)
        rows = np.arange(start, start + len(queries))[:, None].repeat(found.shape[1], axis=1)
        keep = (found >= 0) & (found != rows) & (found_scores >= threshold)
        a, b = rows[keep], found[keep].astype(np.int64)
        firsts.append(np.minimum(a, b))
        seconds.append(np.maximum(a, b))
        scores.append(found_scores[keep].astype(np.float32))
    first, second, score = np.concatenate(firsts), np.concatenate(seconds), np.concatenate(scores)
    # A pair found from both ends appears twice (equal scores up to rounding): keep the best of each.
    order = np.lexsort((-score, second, first))
    first, second, score = first[order], second[order], score[order]
    unique = np.ones(len(first), dtype=bool)
    unique[1:] = (first[1:] != first[:-1]) | (second[1:] != second[:-1])
    first, second, score = first[unique], second[unique], score[unique]
    best = np.lexsort((second, first, -score))
    return first[best], second[best], score[best]


def similar_pairs(
    vectors: Any,
    *,
    threshold: float,
    top_k: int = 10,
    similarity: str = "cosine",
    ids: Sequence[Any] | None = None,
    search: Search | None = None,
    chunk_size: int = 8192,
) -> list[tuple[Any, Any, float]]:
    """Every pair of `vectors` scoring at least `threshold` that the k-nearest-neighbour graph holds:
    `[(id_a, id_b, score), ...]`, best first, each pair once (ids default to row positions).

    A pair is found when one of its two vectors has the other among its `top_k` neighbours, so a vector with more
    than `top_k` neighbours above the threshold keeps only its `top_k` best: raise `top_k` for dense near-duplicate
    groups (the recall against exact all-pairs is measured in benchmarks/bench_similar.py).
    """
    if ids is not None and len(ids) != len(vectors):
        raise ValueError(f"ids has {len(ids)} entries for {len(vectors)} vectors; give one id per vector.")
    first, second, score = neighbour_pairs(
        vectors, threshold=threshold, top_k=top_k, similarity=similarity, search=search, chunk_size=chunk_size
    )
    name = (lambda i: ids[i]) if ids is not None else int
    return [
        (name(a), name(b), float(s)) for a, b, s in zip(first.tolist(), second.tolist(), score.tolist(), strict=True)
    ]


def cluster(
    vectors: Any,
    *,
    threshold: float,
    top_k: int = 10,
    min_size: int = 2,
    method: str = "community",
    similarity: str = "cosine",
    ids: Sequence[Any] | None = None,
    search: Search | None = None,
) -> list[list[Any]]:
    """Groups of near-duplicates or of one topic, largest first, from the pairs `similar_pairs` finds.

    `method="community"`: take the vector with the most neighbours above `threshold`, make it and those neighbours a
    group, remove them, repeat (sentence-transformers' `community_detection`, here on the k-nearest-neighbour graph,
    so a group holds at most `top_k + 1` members). `method="components"`: connected components of the graph (a chain
    a~b~c is one group even when a and c are far apart). Groups smaller than `min_size` are left out.
    """
    if method not in CLUSTER_METHODS:
        raise ValueError(f"method={method!r} is not one of {list(CLUSTER_METHODS)}.")
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 1:
        raise ValueError(f"min_size={min_size!r} must be a positive int.")
    if ids is not None and len(ids) != len(vectors):
        raise ValueError(f"ids has {len(ids)} entries for {len(vectors)} vectors; give one id per vector.")
    first, second, _ = neighbour_pairs(vectors, threshold=threshold, top_k=top_k, similarity=similarity, search=search)
    count = len(vectors)
    if method == "components":
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        graph = coo_matrix((np.ones(len(first)), (first, second)), shape=(count, count))
        _, labels = connected_components(graph, directed=False)
        groups = [np.flatnonzero(labels == label).tolist() for label in np.unique(labels)]
    else:
        groups = _communities(first, second, count)
    groups = sorted((g for g in groups if len(g) >= min_size), key=lambda g: (-len(g), g[0]))
    return [[ids[i] for i in g] if ids is not None else g for g in groups]


def _communities(first: np.ndarray, second: np.ndarray, count: int) -> list[list[int]]:
    neighbours: list[list[int]] = [[] for _ in range(count)]
    for a, b in zip(first.tolist(), second.tolist(), strict=True):
        neighbours[a].append(b)
        neighbours[b].append(a)
    taken = np.zeros(count, dtype=bool)
    groups = []
    # Most-connected first; ties by position, so the result does not depend on the search's order.
    for centre in sorted(range(count), key=lambda i: (-len(neighbours[i]), i)):
        if taken[centre]:
            continue
        members = [centre] + [n for n in neighbours[centre] if not taken[n]]
        taken[members] = True
        groups.append(sorted(members))
    return groups


def kmeans(
    vectors: Any, k: int, *, iterations: int = 25, restarts: int = 5, seed: int = 0, similarity: str = "cosine"
) -> np.ndarray:
    """faiss k-means: the cluster number (0..k-1) of every vector, the best of `restarts` runs (k-means stops in a
    local minimum). Cosine vectors are clustered on the unit sphere (spherical k-means)."""
    try:
        import faiss
    except ImportError:
        raise ImportError("kmeans needs faiss: pip install 'hf-siamese[index]'") from None
    data = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(data):
        raise ValueError(f"k={k!r} must be an int between 1 and the number of vectors ({len(data)}).")
    spherical = similarity == "cosine"
    if spherical:
        data = data / np.maximum(np.linalg.norm(data, axis=1, keepdims=True), 1e-12)
    model = faiss.Kmeans(
        data.shape[1], k, niter=iterations, nredo=restarts, seed=seed, spherical=spherical, verbose=False
    )
    model.train(data)
    _, labels = model.index.search(data, 1)
    return labels[:, 0].astype(np.int64)


# ---------------------------------------------------------------- a whole corpus, end to end


def find_similar(
    model: Any,
    source: Any,
    embeddings_dir: str | os.PathLike,
    *,
    threshold: float,
    top_k: int = 10,
    text_column: str = "text",
    id_column: str | None = None,
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None,
    approximate: bool | None = None,
    **encode: Any,
) -> list[dict[str, Any]]:
    """Every pair of texts of `source` scoring at least `threshold` (the model's similarity) among each text's `top_k`
    neighbours: rows `{id_1, id_2, score, text_1, text_2}`, best first.

    `source` is any `open_corpus` source (a Hub dataset id is opened once). It is embedded into `embeddings_dir` with
    `encode_corpus` (resumed if it was started; `encode` takes its keywords: tokenizer, batch_size, dtype, prompt_name,
    ..., and shard_size, default the folder's recorded one, else 10,000). The neighbours come from exact search below
    `ann.EXACT_BELOW` texts and from an approximate faiss index above (`approximate` forces either; see
    `neighbour_search`)."""
    similarity = model.config.similarity
    check_threshold(threshold, top_k, similarity)  # before the (long) embedding, not after
    source = resolve_corpus(source)
    ids, vectors = _embed(model, source, embeddings_dir, text_column=text_column, id_column=id_column, **encode)
    search = search or neighbour_search(vectors, embeddings_dir, similarity, approximate)
    pairs = similar_pairs(vectors, threshold=threshold, top_k=top_k, similarity=similarity, search=search)
    texts = texts_of(source, {row for a, b, _ in pairs for row in (a, b)}, text_column, id_column)
    return [
        {"id_1": ids[a], "id_2": ids[b], "score": round(score, 6), "text_1": texts[a], "text_2": texts[b]}
        for a, b, score in pairs
    ]


def find_clusters(
    model: Any,
    source: Any,
    embeddings_dir: str | os.PathLike,
    *,
    threshold: float | None = None,
    k: int | None = None,
    top_k: int = 10,
    min_size: int = 2,
    method: str = "community",
    text_column: str = "text",
    id_column: str | None = None,
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None,
    seed: int = 0,
    approximate: bool | None = None,
    **encode: Any,
) -> list[dict[str, Any]]:
    """Groups of near-duplicates or topics of `source`: rows `{cluster, size, id, text}`, largest group first.

    With `threshold`: communities (or connected components, `method="components"`) of the pairs at or above it, as
    `similar.cluster`. With `k`: k-means into `k` groups (faiss), every text in one. Exactly one of the two. The
    corpus is read and embedded as in `find_similar`."""
    if (threshold is None) == (k is None):
        raise ValueError("give either threshold= (groups above a similarity) or k= (k-means into k groups), not both")
    similarity = model.config.similarity
    if threshold is not None:
        check_threshold(threshold, top_k, similarity)  # before the (long) embedding, not after
    source = resolve_corpus(source)
    ids, vectors = _embed(model, source, embeddings_dir, text_column=text_column, id_column=id_column, **encode)
    if k is not None:
        labels = kmeans(np.asarray(vectors), k, seed=seed, similarity=similarity)
        groups = [np.flatnonzero(labels == label).tolist() for label in range(k)]
        groups = sorted((g for g in groups if len(g) >= min_size), key=lambda g: (-len(g), g[0]))
    else:
        search = search or neighbour_search(vectors, embeddings_dir, similarity, approximate)
        groups = cluster(
            vectors, threshold=threshold, top_k=top_k, min_size=min_size, method=method, similarity=similarity,
            search=search,
        )  # fmt: skip
    texts = texts_of(source, {row for group in groups for row in group}, text_column, id_column)
    return [
        {"cluster": number, "size": len(group), "id": ids[row], "text": texts[row]}
        for number, group in enumerate(groups)
        for row in group
    ]


def _embed(model: Any, source: Any, embeddings_dir: str | os.PathLike, **encode: Any) -> tuple[list[Any], np.ndarray]:
    encode_corpus(model, source, embeddings_dir, **encode)
    return corpus_matrix(embeddings_dir)


__all__ = [
    "CLUSTER_METHODS",
    "SCORE_RANGES",
    "check_threshold",
    "cluster",
    "find_clusters",
    "find_similar",
    "kmeans",
    "neighbour_pairs",
    "similar_pairs",
]
