"""The runs of a retrieval evaluation (`retrieval.RetrievalEvaluator`): each first-stage list's (scores, corpus rows)
of the judged queries, over the set itself (BM25: `lexical_run`) or through an index (`index_runs`: every list the
index's first stage reads, `hybrid.stage_lists`: dense, BM25 and its learned-sparse part, as `search --index` reads
them), the candidates a reranker re-scores, and the ranked document ids the metrics take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.beir import RetrievalDataset
from ..retrieval.fusion.hybrid import fuse_runs, stage_scores
from ..retrieval.index.lexical import LexicalSettings, build_lexical_index
from ..retrieval.prompts import QUERY_PROMPT_NAMES, side_prompt
from ..storage import temporary_folder


def ranked_ids(rows: np.ndarray, query_ids: Sequence[str], corpus_ids: Any) -> dict[str, list[str]]:
    """query id -> the document ids of its found corpus rows (`rows`, one row of corpus positions per query, -1 for
    none), best first."""
    return {q: [corpus_ids[j] for j in found if j >= 0] for q, found in zip(query_ids, rows.tolist(), strict=True)}


def then_rest(ranked: list[str], rest: list[str]) -> list[str]:
    """`ranked`, then the documents of `rest` it does not hold, in their order."""
    seen = set(ranked)
    return ranked + [doc for doc in rest if doc not in seen]


def candidates(
    runs: dict, lists: Sequence[str], first_stage: str, depth: int, corpus_ids: Any, dataset: RetrievalDataset,
    fusion: Any, weight: Any,
) -> list[list[dict[str, Any]]]:  # fmt: skip
    """The first stage's best `depth` hits of each judged query (hybrid: the union of each list's best `depth`, fused
    as the search fuses them, `hybrid.fuse_runs`; each hit with each list's own score), as `rerank_hits` takes
    them. `lists`: the lists the hybrid reads (`hybrid.stage_lists`)."""
    found_scores, found = runs[first_stage]
    tops = {s: (runs[s][0][:, :depth], runs[s][1][:, :depth]) for s in lists}
    if first_stage == "hybrid":
        found_scores, found = fuse_runs(tops, fusion, weight)
    else:
        found_scores, found = found_scores[:, :depth], found[:, :depth]
    hits = [
        [
            {"id": corpus_ids[j], "text": dataset.corpus[corpus_ids[j]], "rank": rank, "score": float(score)}
            for rank, (j, score) in enumerate(((j, s) for j, s in zip(rows, scores, strict=True) if j >= 0), 1)
        ]
        for rows, scores in zip(found.tolist(), found_scores.tolist(), strict=True)
    ]
    if first_stage == "hybrid":  # each list's own score, for a three-score order
        for found_hits, own in zip(hits, stage_scores(found, tops), strict=True):
            for hit, scores in zip(found_hits, own, strict=True):
                hit.update(scores)
    return hits


def index_runs(
    index: Any, model: Any, dataset: RetrievalDataset, judged: list[str], reach: int, first_stage: str,
    fusion: str | None, tokenizer: Any, batch_size: int,
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[int, Any]]:  # fmt: skip
    """Each list's run of the judged queries through `index` (those `first_stage` reads there:
    `index.stage_lists`, run by `index.stage_runs` as its search runs them; the dense list's queries embedded by
    `model` with the set's query prompt, else the model's; the sparse list's by the index's recorded sparse model),
    `reach` deep, and the document id of every row they found, checked against the set's corpus."""
    if len(index) != len(dataset.corpus):
        raise ValueError(
            f"the index {index.location!r} holds {len(index)} documents, the set {dataset.name!r} "
            f"{len(dataset.corpus)}: index the set's own corpus ('hf-siamese index BEIR_DIR -o ...')"
        )
    texts = [dataset.queries[q] for q in judged]
    lists = index.stage_lists(index.check_first_stage(first_stage, fusion), fusion)
    vectors = None
    if "dense" in lists:
        if model is None:
            raise ValueError(
                f"the {first_stage} first stage embeds the queries: give the model that built the index "
                f"({index.model_name or 'unnamed'!r}), or first_stage='lexical' / 'sparse'"
            )
        index.check_model(model)
        prompt = side_prompt(model, dataset.query_prompt, QUERY_PROMPT_NAMES)
        vectors = model.encode(texts, tokenizer=tokenizer, batch_size=batch_size, convert_to_numpy=True, prompt=prompt)
    runs = index.stage_runs(texts, vectors, reach, first_stage, fusion)
    runs = {name: runs[name] for name in lists}  # in fusion order
    found = sorted({int(r) for scores_rows in runs.values() for r in scores_rows[1].ravel() if r >= 0})
    ids = {row: str(doc_id) for row, (doc_id, _) in index.rows_of(found).items()}
    unknown = sorted(set(ids.values()) - set(dataset.corpus))
    if unknown:
        raise ValueError(
            f"the index {index.location!r} holds documents that are not in {dataset.name!r} (e.g. {unknown[:3]}): "
            "index the set's own corpus ('hf-siamese index BEIR_DIR -o ...')"
        )
    return runs, ids


def lexical_run(
    dataset: RetrievalDataset, query_ids: Sequence[str], depth: int, settings: LexicalSettings | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """BM25's (scores, corpus rows) of the queries `query_ids` over the set's corpus (its order), `depth` each: an
    index built in a temporary folder."""
    with temporary_folder("lexical") as folder:
        index = build_lexical_index(list(dataset.corpus.values()), folder, settings)
        found = index.search([dataset.queries[q] for q in query_ids], depth)
        del index
    return found


__all__ = ["candidates", "index_runs", "lexical_run", "ranked_ids", "then_rest"]
