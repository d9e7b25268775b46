"""Exact search by a learned-sparse model (`SparseSiameseModel`: SPLADE, inference-free): the first stage of a
retrieval evaluation (`RetrievalEvaluator` with a sparse model), of `search_corpus` with one and of hard-negative
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


def term_major(corpus: Any) -> Any:
    """`(n_corpus, vocab)` sparse vectors (scipy.sparse or torch) -> the `(vocab, n_corpus)` float32 CSR matrix that
    `sparse_search` multiplies queries by: made once for a corpus searched many times (`by_term=`)."""
    import scipy.sparse

    corpus = corpus if scipy.sparse.issparse(corpus) else to_csr(corpus)
    return corpus.T.tocsr().astype(np.float32)


def sparse_search(queries: Any, corpus: Any, top_k: int, *, by_term: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """`(scores, rows)`, each `(n_queries, min(top_k, n_corpus))`: every query's best corpus rows by dot product of
    the `(n_queries, vocab)` and `(n_corpus, vocab)` sparse matrices (scipy.sparse or torch), best first, equal
    scores by the lower row. Scored a chunk of queries at a time: at most `BLOCK_ELEMENTS` scores (or one query's)
    are held at once. `by_term`: `term_major(corpus)` made before, for a corpus searched again and again (else made
    here, a pass over the whole corpus)."""
    import scipy.sparse

    queries = queries if scipy.sparse.issparse(queries) else to_csr(queries)
    check_search(top_k, corpus.shape[0])
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"the queries' vectors are {queries.shape[1]} wide, the corpus's {corpus.shape[1]}: encode both with the "
            "same model"
        )
    queries = queries.tocsr().astype(np.float32)
    if by_term is None:
        by_term = term_major(corpus)
    elif by_term.shape != (corpus.shape[1], corpus.shape[0]):
        raise ValueError(
            f"by_term is {tuple(by_term.shape)}, not the corpus {tuple(corpus.shape)} transposed: "
            "give term_major(corpus)"
        )
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


__all__ = [
    "check_sparse_first_stage",
    "encode_sparse",
    "is_sparse_model",
    "sparse_run",
    "sparse_search",
    "term_major",
    "to_csr",
]
