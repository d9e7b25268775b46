"""Exact search by a learned-sparse model (`SparseSiameseModel`: SPLADE, inference-free): the first stage of a
retrieval evaluation (`RetrievalEvaluator` with a sparse model), of `search --corpus` with one and of hard-negative
mining by one (`mining_sparse`); an index keeps its documents' weights as its sparse part (`sparse_part`).

The corpus is encoded with `task="document"` a batch at a time into one CSR matrix (scipy.sparse: only the active
terms are kept), the queries with `task="query"`; a query's score of a document is the dot product of their term
weights. Queries are scored a chunk at a time against the whole corpus (a block of at most `BLOCK_ELEMENTS` scores),
and each query keeps its best `top_k` by the rule of every exact search of the package (`exact.top_k`): larger score
first, equal scores (documents sharing no term with the query all score 0) by the lower corpus row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...modeling.kinds import kind_of_model
from ..fusion.rerank import RERANK_TOP, check_rerank, rerank_hits
from ..index.fingerprint import corpus_fingerprint
from .own import best_by_chunks, check_search, encoded_batches, encoded_run_texts

BLOCK_ELEMENTS = 1 << 24  # scores held at a time (64 MiB of float32): queries per chunk = this / corpus size


def is_sparse_model(model: Any) -> bool:
    """Whether `model` is a learned-sparse model (by its config, so the remote-code class of a saved one counts too:
    `modeling.kinds.kind_of_model`)."""
    return kind_of_model(model) == "sparse"


def to_csr(vectors: Any) -> Any:
    """A `(n, vocab)` torch tensor (sparse COO or dense) as a float32 `scipy.sparse.csr_matrix`."""
    import scipy.sparse

    if vectors.is_sparse:
        vectors = vectors.coalesce()
        rows, columns = vectors.indices().numpy()
        values = vectors.values().float().numpy()
        return scipy.sparse.csr_matrix((values, (rows, columns)), shape=tuple(vectors.shape), dtype=np.float32)
    return scipy.sparse.csr_matrix(vectors.float().numpy())


def encode_sparse(
    model: Any,
    texts: Iterable[str],
    *,
    task: str,
    tokenizer: Any = None,
    batch_size: int = 32,
    prompt: str | None = None,
    show_progress_bar: bool = False,
    total: int | None = None,
) -> Any:
    """The `(n, vocab)` CSR matrix of `texts` (any iterable: read a batch at a time) encoded by `model.encode` with
    `task` ("query" or "document"); only one batch is ever held densely. `prompt` None: the model's own for the
    task."""
    import scipy.sparse

    width = int(model.config.vocab_size_of_encoder)
    batches = encoded_batches(
        model, texts, task=task, kind="sparse", tokenizer=tokenizer, batch_size=batch_size, prompt=prompt,
        show_progress_bar=show_progress_bar, total=total,
    )  # fmt: skip
    blocks = [to_csr(vectors) for vectors in batches]
    if not blocks:
        return scipy.sparse.csr_matrix((0, width), dtype=np.float32)
    return scipy.sparse.vstack(blocks, format="csr", dtype=np.float32)


def sparse_search(queries: Any, corpus: Any, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """`(scores, rows)`, each `(n_queries, min(top_k, n_corpus))`: every query's best corpus rows by dot product of
    the `(n_queries, vocab)` and `(n_corpus, vocab)` sparse matrices (scipy.sparse or torch), best first, equal
    scores by the lower row. Scored a chunk of queries at a time: at most `BLOCK_ELEMENTS` scores (or one query's)
    are held at once."""
    import scipy.sparse

    queries, corpus = (m if scipy.sparse.issparse(m) else to_csr(m) for m in (queries, corpus))
    check_search(top_k, corpus.shape[0])
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"the queries' vectors are {queries.shape[1]} wide, the corpus's {corpus.shape[1]}: encode both with the "
            "same model"
        )
    queries = queries.tocsr().astype(np.float32)
    by_term = corpus.T.tocsr().astype(np.float32)  # (vocab, n_corpus): query rows times it give the scores
    n_queries, n_corpus, k = queries.shape[0], corpus.shape[0], min(int(top_k), corpus.shape[0])
    return best_by_chunks(
        n_queries, n_corpus, k, lambda start, stop: (queries[start:stop] @ by_term).toarray(), BLOCK_ELEMENTS
    )


def sparse_run(
    model: Any,
    dataset: Any,
    query_ids: Sequence[str],
    depth: int,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The sparse first stage's `(scores, corpus rows)` of the queries `query_ids` of a `RetrievalDataset`, `depth`
    deep (rows in the order of `dataset.corpus`). The set's own prompts when it has them, else the model's."""
    common = {"tokenizer": tokenizer, "batch_size": batch_size, "show_progress_bar": show_progress_bar}
    queries, corpus = encoded_run_texts(encode_sparse, model, dataset, query_ids, **common)
    return sparse_search(queries, corpus, depth)


def check_sparse_first_stage(first_stage: str, index: Any = None) -> None:
    """Refuse, naming it, a setting of a retrieval evaluation that a sparse model given as the model cannot take."""
    if first_stage != "dense":
        raise ValueError(
            f"first_stage={first_stage!r} applies to a dense model (BM25 alone, or fused with its vectors); a sparse "
            "model ranks by its own term weights: leave first_stage at its default"
        )
    if index is not None:
        raise ValueError(
            "index: a sparse model is searched through an index as the index's sparse part (index=..., "
            "first_stage='sparse' or 'hybrid', model=None or the index's dense model); evaluate this one on the set "
            "itself (index=None)"
        )


def query_prompt(model: Any, prompt_name: str | None) -> str | None:
    """The query prompt `prompt_name` names among the sparse model's prompts (None: the model's own "query" one)."""
    if prompt_name is None:
        return None
    prompts = getattr(model.config, "prompts", None) or {}
    if prompt_name not in prompts:
        raise ValueError(f"prompt_name={prompt_name!r}: the model has no such prompt; it has {sorted(prompts)}")
    return prompts[prompt_name]


def search_corpus_exact(
    model: Any,
    source: Any,
    queries: Sequence[str],
    top_k: int = 10,
    *,
    tokenizer: Any = None,
    text_column: str = "text",
    id_column: str | None = None,
    batch_size: int = 32,
    prompt_name: str | None = None,
    rerank: Any = None,
    rerank_top: int = RERANK_TOP,
    first_stage_weight: float | None = None,
    show_progress_bar: bool = False,
) -> list[list[dict[str, Any]]]:
    """The `top_k` hits of each query in a corpus (anything `open_corpus` reads, read twice: the texts of the hits
    are read back) ranked exactly by a model's own scores, a sparse model's dot products of term weights or a
    multi-vector model's MaxSim of token vectors, as `search_corpus` gives them (`rank`, `score`, `id`, `text`;
    reranked hits add `first_stage_rank` and `first_stage_score`). Ids: `id_column`'s, else the row positions."""
    from ...data.corpus_stream import open_corpus
    from ..index.matrix import texts_of
    from .maxsim import encode_multivector, is_multivector_model, maxsim_search

    multi = is_multivector_model(model)
    encode = encode_multivector if multi else encode_sparse

    ids: list[Any] = []

    def texts() -> Iterable[str]:
        for row, (doc_id, text) in enumerate(open_corpus(source, text_column, id_column)):
            ids.append(doc_id if id_column else row)
            yield text

    corpus = encode(
        model, texts(), task="document", tokenizer=tokenizer, batch_size=batch_size,
        show_progress_bar=show_progress_bar, total=len(source) if isinstance(source, list | tuple) else None,
    )  # fmt: skip
    if not ids:
        raise ValueError("the corpus is empty: there is nothing to search")
    if len(set(ids)) != len(ids):
        seen: set[Any] = set()
        duplicate = next(i for i in ids if i in seen or seen.add(i))
        raise ValueError(f"two rows of the corpus have the id {duplicate!r} ({id_column}); every id must be unique")
    vectors = encode(
        model, list(queries), task="query", tokenizer=tokenizer, batch_size=batch_size,
        prompt=query_prompt(model, prompt_name),
    )  # fmt: skip
    depth = top_k if rerank is None else check_rerank(rerank, rerank_top, top_k, len(ids))
    if multi:
        mean = getattr(model.config, "similarity", "maxsim") == "meanmaxsim"
        scores, rows = maxsim_search(vectors, corpus, depth, length_normalize=mean)
    else:
        scores, rows = sparse_search(vectors, corpus, depth)
    del corpus
    found = texts_of(source, set(rows.ravel().tolist()), text_column, id_column)
    results = [
        [
            {"rank": rank, "score": score, "id": ids[row], "text": found[row]}
            for rank, (score, row) in enumerate(zip(query_scores, query_rows, strict=True), start=1)
        ]
        for query_scores, query_rows in zip(scores.tolist(), rows.tolist(), strict=True)
    ]
    if rerank is None:
        return results
    return rerank_hits(
        rerank, queries, results, top_k, batch_size, show_progress_bar=show_progress_bar,
        first_stage_weight=first_stage_weight, corpus=corpus_fingerprint(ids),
    )  # fmt: skip


__all__ = [
    "check_sparse_first_stage",
    "encode_sparse",
    "is_sparse_model",
    "search_corpus_exact",
    "sparse_run",
    "sparse_search",
    "to_csr",
]
