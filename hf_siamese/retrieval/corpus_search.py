"""Search a corpus that has no index (`hf-siamese search --corpus` is one call of `search_corpus`): the corpus is
embedded into shards by `encode_corpus` (kept and reused in `embeddings_dir`, else a temporary folder), its vectors are
searched memory-mapped (`exact.exact_search`, or the approximate index kept beside them), the hits' texts are read back
from the source, and a reranker re-scores them. A sparse or multi-vector model ranks the corpus exactly by its own
scores instead (term weights, MaxSim), with nothing kept. Mining embeds its corpus in a `work_folder` too."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..storage import temporary_folder
from .corpus import encode_corpus
from .fusion.rerank import RERANK_TOP, check_rerank, rerank_hits
from .index.fingerprint import corpus_fingerprint
from .index.matrix import corpus_matrix, matrix_search, texts_of
from .ranking.maxsim import is_multivector_model
from .ranking.sparse import is_sparse_model


@contextmanager
def work_folder(embeddings_dir: str | os.PathLike | None) -> Iterator[Path]:
    """`embeddings_dir` (kept: a later run reuses its shards), else a temporary folder removed afterwards."""
    if embeddings_dir is not None:
        yield Path(embeddings_dir)
        return
    with temporary_folder("corpus") as temporary:
        yield temporary / "corpus"


def search_corpus(
    model: Any,
    source: Any,
    queries: Sequence[str],
    top_k: int = 10,
    *,
    tokenizer: Any = None,
    text_column: str = "text",
    id_column: str | None = None,
    embeddings_dir: str | os.PathLike | None = None,
    approximate: bool | None = None,
    batch_size: int = 32,
    prompt_name: str | None = None,
    rerank: Any = None,
    rerank_top: int = RERANK_TOP,
    show_progress_bar: bool = False,
    first_stage_weight: float | None = None,
    **encode_options: Any,
) -> list[list[dict[str, Any]]]:
    """The `top_k` hits of each query in a corpus without an index, as `VectorIndex.search` gives them (`rank`,
    `score`, `id`, `text`; reranked hits add `first_stage_rank` and `first_stage_score`).

    `source` is anything `open_corpus` reads twice (a list, a file or glob, a dataset). An approximate index pays off
    only when it is kept for later searches: with `approximate=None` it is built (by size) only when `embeddings_dir`
    is given. `rerank` (a cross-encoder) re-scores the first `rerank_top` hits, fused with their scores by
    `first_stage_weight` (default: the reranker's own; `rerank.rerank_hits`). `encode_options` go to
    `encode_corpus` (`shard_size`, `dtype`). A learned-sparse model (`SparseSiameseModel`) ranks exactly by its term
    weights and a multi-vector model (`MultiVectorModel`) by MaxSim (`search_corpus_exact`), with
    nothing kept: `embeddings_dir`, `approximate` and the `encode_options` are refused for them."""
    if is_sparse_model(model) or is_multivector_model(model):
        given = {"embeddings_dir": embeddings_dir, "approximate": approximate or None, **encode_options}
        refused = [name for name, value in given.items() if value is not None]
        if refused:
            raise ValueError(f"{', '.join(refused)}: this model's corpus is not embedded into shards; give none")
        return search_corpus_exact(
            model, source, queries, top_k, tokenizer=tokenizer, text_column=text_column, id_column=id_column,
            batch_size=batch_size, prompt_name=prompt_name, rerank=rerank, rerank_top=rerank_top,
            first_stage_weight=first_stage_weight, show_progress_bar=show_progress_bar,
        )  # fmt: skip
    if approximate is None and embeddings_dir is None:
        approximate = False
    with work_folder(embeddings_dir) as folder:
        encode_corpus(
            model, source, folder, tokenizer=tokenizer, text_column=text_column, id_column=id_column,
            batch_size=batch_size, show_progress_bar=show_progress_bar, **encode_options,
        )  # fmt: skip
        ids, vectors = corpus_matrix(folder)
        search = matrix_search(vectors, folder, model.config.similarity, approximate)
        query_vectors = model.encode(
            list(queries), tokenizer=tokenizer, batch_size=batch_size, prompt_name=prompt_name, convert_to_numpy=True
        )
        depth = top_k if rerank is None else check_rerank(rerank, rerank_top, top_k, len(vectors))
        scores, rows = search(query_vectors, min(depth, len(vectors)))
        del vectors, search
    texts = texts_of(source, {row for row in rows.ravel().tolist() if row >= 0}, text_column, id_column)
    return _hits(scores, rows, ids, texts, queries, top_k, batch_size, rerank, first_stage_weight, show_progress_bar)


def _hits(
    scores: Any, rows: Any, ids: Sequence[Any], texts: dict[int, str], queries: Sequence[str], top_k: int,
    batch_size: int, rerank: Any, first_stage_weight: float | None, show_progress_bar: bool,
) -> list[list[dict[str, Any]]]:  # fmt: skip
    """Each query's hits (`rank`, `score`, `id`, `text`; row -1: no hit) of a corpus search's (scores, rows), and with
    `rerank` its `top_k` best re-scored (`rerank.rerank_hits`, over this corpus: `ids`)."""
    results = []
    for found_scores, found_rows in zip(scores.tolist(), rows.tolist(), strict=True):
        hits = [(score, row) for score, row in zip(found_scores, found_rows, strict=True) if row >= 0]
        results.append(
            [
                {"rank": rank, "score": score, "id": ids[row], "text": texts[row]}
                for rank, (score, row) in enumerate(hits, 1)
            ]
        )
    if rerank is None:
        return results
    return rerank_hits(
        rerank, queries, results, top_k, batch_size, show_progress_bar=show_progress_bar,
        first_stage_weight=first_stage_weight, corpus=corpus_fingerprint(ids),
    )  # fmt: skip


def _query_prompt(model: Any, prompt_name: str | None) -> str | None:
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
    from ..data.corpus_stream import open_corpus
    from .ranking.maxsim import encode_multivector, maxsim_search
    from .ranking.sparse import encode_sparse, sparse_search

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
        prompt=_query_prompt(model, prompt_name),
    )  # fmt: skip
    depth = top_k if rerank is None else check_rerank(rerank, rerank_top, top_k, len(ids))
    if multi:
        mean = getattr(model.config, "similarity", "maxsim") == "meanmaxsim"
        scores, rows = maxsim_search(vectors, corpus, depth, length_normalize=mean)
    else:
        scores, rows = sparse_search(vectors, corpus, depth)
    del corpus
    found = texts_of(source, set(rows.ravel().tolist()), text_column, id_column)
    return _hits(scores, rows, ids, found, queries, top_k, batch_size, rerank, first_stage_weight, show_progress_bar)


__all__ = ["search_corpus", "search_corpus_exact", "work_folder"]
