"""The IR metrics of a model on a retrieval set (`RetrievalEvaluator`, what `SiameseTrainer` reports for such an eval
set and `hf-siamese eval` prints for a BEIR folder; `evaluate_retrieval` calls it).

The sets themselves are read by `hf_siamese.data.beir`; the metric definitions and the exact chunked search live in
the `evaluate` module `hf_siamese.metrics.RETRIEVAL`; hard-negative mining is in `hf_siamese.retrieval.mining`, the
persistent vector index in `hf_siamese.retrieval.vector_index`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.beir import RetrievalDataset
from ..metrics.evaluator import Evaluator, prefixed_metrics
from .exact import exact_search
from .fingerprint import corpus_fingerprint
from .hybrid import check_first_stage, choose_dense_weight, fuse, reciprocal_rank_fusion, stage_scores
from .lexical import LexicalSettings, build_lexical_index
from .rerank import RERANK_TOP, check_rerank, rerank_hits
from .sparse_search import check_sparse_first_stage, is_sparse_model, sparse_run

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


class RetrievalEvaluator(Evaluator):
    """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k (at `dataset.k_values`) of a first stage on a retrieval set: an
    evaluator (`hf_siamese.metrics.Evaluator`), `RetrievalEvaluator(dataset, ...)(model) -> dict`. Its primary
    metric is nDCG@10 (or at the largest k without 10) of the final stage: `rerank_ndcg@10` with a reranker.

    `index`: an index of the set's corpus (`load_index(folder or engine location)`, built from the same documents:
    'hf-siamese index BEIR_DIR -o ...'); the first stage then runs through it, as users search it (only the queries
    are embedded, with the model checked against the index; BM25 is the index's, so `lexical_settings` is refused),
    and the quality through an engine is measured the same way as through the folder.

    `first_stage`: "dense" ranks the whole corpus by the model's similarity (exact search, in chunks); "lexical" by
    BM25 (`lexical.py`, `lexical_settings`; `model` may be None); "hybrid" fuses the two (`hybrid.fuse`: `fusion`,
    `dense_weight`; a setting of another stage is refused: `hybrid.check_first_stage`) and also reports each stage
    alone under the same names prefixed `dense_` and `lexical_`. Lexical and hybrid rank each stage's best
    `max(k, rerank_top)` documents. Under several processes (`process_index`, `num_processes`) each embeds a shard
    of the corpus and of the queries, and every process gets the numbers of one.

    With `rerank` (a cross-encoder, or any object with `.predict(pairs)`: see `rerank.rerank_hits`), two stages: the
    first stage's `rerank_top` best documents per query (hybrid: the union of both stages' `rerank_top`; all of the
    corpus if it is smaller, with a warning) are re-scored on (query text, document text) pairs, without prompts,
    `batch_size` pairs at a time. The result then holds the first stage's metrics as without `rerank` and, side by
    side, the two stages' under the same names prefixed `rerank_` (`rerank_ndcg@10`, ...), plus `rerank_top` (the
    depth reranked). A relevant document the first stage did not retrieve is NOT added to the candidates, so the
    reranked numbers are what a deployed two-stage search scores (not a reranker's ceiling on ideal candidates).
    Below the candidates (a k larger than they are) the reranked ranking goes on in the first stage's order. Under
    several processes each reranks every query (the same numbers). `first_stage_weight` fuses the reranker's and the
    first stage's scores as `rerank.rerank_hits` does (default: the reranker's own weight); over a hybrid first stage
    the candidates carry each stage's own score, and `stage_weights` (default: the reranker's own) fuse three scores
    (`rerank.fuse_stages`). Over a hybrid first stage the three orders (the reranker's, the dense and the lexical
    lists) fused by reciprocal ranks are reported too, prefixed `rerank_rrf3_`: the setting-free three-score order.

    A learned-sparse `model` (`SparseSiameseModel`) is its own first stage (`sparse_search`: the corpus and the judged
    queries encoded, ranked exactly by their term weights' dot products), with the same metric names and `rerank`;
    `first_stage` other than the default and `index` are refused for it. Under several processes each one encodes
    the whole set.
    """

    def __init__(
        self,
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
        first_stage: str = "dense",
        fusion: str | None = None,
        dense_weight: float | None = None,
        lexical_settings: LexicalSettings | None = None,
        index: Any = None,
        stage_weights: dict[str, float] | None = None,
        name: str = "",
    ) -> None:
        check_first_stage(first_stage, fusion, dense_weight, lexical_settings)
        if index is not None and lexical_settings is not None:
            raise ValueError("lexical_settings: the index's lexical part was built with its own settings; give none")
        self.dataset, self.tokenizer, self.batch_size, self.percent = dataset, tokenizer, batch_size, percent
        self.process_index, self.num_processes, self.show_progress_bar = process_index, num_processes, show_progress_bar
        self.rerank, self.rerank_top, self.first_stage_weight = rerank, rerank_top, first_stage_weight
        self.first_stage, self.fusion, self.dense_weight = first_stage, fusion, dense_weight
        self.lexical_settings, self.index, self.stage_weights, self.name = lexical_settings, index, stage_weights, name
        self.k_values = sorted(set(dataset.k_values))
        k = 10 if 10 in self.k_values else self.k_values[-1]
        self.primary_metric = f"{'rerank_' if rerank is not None else ''}ndcg@{k}"

    def __len__(self) -> int:
        return len(self.dataset)

    def __call__(self, model: Any) -> dict[str, float]:
        """The metrics of `model` (a bi-encoder; None for a lexical first stage) on the set (see the class)."""
        from ..metrics import judged_queries

        dataset, first_stage = self.dataset, self.first_stage
        if model is None and first_stage != "lexical":
            raise ValueError(f"the {first_stage} first stage embeds the texts: give a model, or first_stage='lexical'")
        if is_sparse_model(model):
            return self._sparse_metrics(model)
        depth = None if self.rerank is None else check_rerank(self.rerank, self.rerank_top, 1, len(dataset.corpus))
        embedded = None
        if first_stage != "lexical" and self.index is None:
            embedded = embed_retrieval_set(
                model, dataset, tokenizer=self.tokenizer, batch_size=self.batch_size, process_index=self.process_index,
                num_processes=self.num_processes, show_progress_bar=self.show_progress_bar,
            )  # fmt: skip
            if depth is None and first_stage == "dense":
                return self._exact_metrics(model, embedded)
        judged = judged_queries(dataset.qrels)
        reach = min(max(self.k_values[-1], depth or 0), len(dataset.corpus))
        runs, corpus_ids = self._runs(model, embedded, judged, reach)
        metrics = self._metrics(ranked_ids(runs[first_stage][1], judged, corpus_ids))
        if first_stage == "hybrid":
            for stage in ("dense", "lexical"):
                alone = self._metrics(ranked_ids(runs[stage][1], judged, corpus_ids))
                metrics.update(prefixed_metrics(alone, stage, skip=("num_queries",)))
        if depth is not None:
            metrics.update(self._rerank_metrics(runs, corpus_ids, judged, depth))
        return metrics

    def _sparse_metrics(self, model: Any) -> dict[str, float]:
        """A sparse model's first stage (exact, `sparse_search`), and with `rerank` the two stages."""
        from ..metrics import judged_queries

        dataset = self.dataset
        check_sparse_first_stage(self.first_stage, self.index)
        depth = None if self.rerank is None else check_rerank(self.rerank, self.rerank_top, 1, len(dataset.corpus))
        judged, corpus_ids = judged_queries(dataset.qrels), list(dataset.corpus)
        reach = min(max(self.k_values[-1], depth or 0), len(corpus_ids))
        run = sparse_run(
            model, dataset, judged, reach, tokenizer=self.tokenizer, batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar,
        )  # fmt: skip
        metrics = self._metrics(ranked_ids(run[1], judged, corpus_ids))
        if depth is not None:
            metrics.update(self._rerank_metrics({"sparse": run}, corpus_ids, judged, depth, "sparse"))
        return metrics

    def _metrics(self, rankings: dict[str, list[str]]) -> dict[str, float]:
        from ..metrics import retrieval_metrics

        return retrieval_metrics(rankings, self.dataset.qrels, self.k_values, percent=self.percent)

    def _exact_metrics(self, model: Any, embedded: tuple[list[str], np.ndarray, list[str], np.ndarray]) -> dict:
        """The dense first stage alone: exact search of the embedded set, in chunks."""
        from .exact import retrieval_metrics_from_embeddings

        query_ids, queries, corpus_ids, corpus = embedded
        return retrieval_metrics_from_embeddings(
            queries, corpus, query_ids, corpus_ids, self.dataset.qrels, k_values=self.k_values,
            similarity=model.config.similarity, percent=self.percent,
        )  # fmt: skip

    def _runs(
        self, model: Any, embedded: Any, judged: list[str], reach: int
    ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], Any]:
        """Each stage's (scores, corpus rows) of the judged queries, `reach` deep, and the id of each row."""
        dataset, first_stage = self.dataset, self.first_stage
        runs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        corpus_ids: Any = list(dataset.corpus)
        if self.index is not None:
            args = (model, dataset, judged, reach, first_stage, self.tokenizer, self.batch_size)
            runs, corpus_ids = _index_runs(self.index, *args)
        else:
            if first_stage != "lexical":
                query_ids, queries, _, corpus = embedded
                row = {query_id: i for i, query_id in enumerate(query_ids)}
                runs["dense"] = exact_search(queries[[row[q] for q in judged]], corpus, reach, model.config.similarity)
            if first_stage != "dense":
                runs["lexical"] = lexical_run(dataset, judged, reach, self.lexical_settings)
        if first_stage == "hybrid":
            runs["hybrid"] = fuse(runs["dense"], runs["lexical"], self.fusion, self.dense_weight)
        return runs, corpus_ids

    def _rerank_metrics(
        self, runs: dict, corpus_ids: Any, judged: list[str], depth: int, first_stage: str | None = None
    ) -> dict[str, float]:
        """The two stages' metrics (`rerank_...`, `rerank_top`; over hybrid also `rerank_rrf3_...`) over the run of
        `first_stage` (default: the evaluator's)."""
        dataset, first_stage = self.dataset, first_stage or self.first_stage
        hits = _candidates(runs, first_stage, depth, corpus_ids, dataset, self.fusion, self.dense_weight)
        reranked = rerank_hits(
            self.rerank, [dataset.queries[q] for q in judged], hits, batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar, first_stage_weight=self.first_stage_weight,
            stage_weights=self.stage_weights, corpus=corpus_fingerprint(dataset.corpus),
        )  # fmt: skip
        first = ranked_ids(runs[first_stage][1], judged, corpus_ids)
        second = {q: _then([hit["id"] for hit in found], first[q]) for q, found in zip(judged, reranked, strict=True)}
        metrics = prefixed_metrics(self._metrics(second), "rerank", skip=("num_queries",))
        metrics["rerank_top"] = depth
        if first_stage == "hybrid":  # three scores, setting-free: RRF of the reranker's, dense and lexical orders
            dense, lexical = (ranked_ids(runs[s][1][:, :depth], judged, corpus_ids) for s in ("dense", "lexical"))
            third = {}
            for q, found in zip(judged, reranked, strict=True):
                by_reranker = sorted(found, key=lambda hit: -hit.get("reranker_score", hit["score"]))
                fused = reciprocal_rank_fusion([[hit["id"] for hit in by_reranker], dense[q], lexical[q]])
                third[q] = _then(fused, first[q])
            metrics.update(prefixed_metrics(self._metrics(third), "rerank_rrf3", skip=("num_queries",)))
        return metrics


def evaluate_retrieval(model: Any, dataset: RetrievalDataset, **settings: Any) -> dict[str, float]:
    """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k (at `dataset.k_values`) of a first stage on a retrieval set:
    `RetrievalEvaluator(dataset, **settings)(model)`, where the settings (`tokenizer`, `batch_size`, `percent`,
    `first_stage`, `rerank`, `index`, ...) are described."""
    return RetrievalEvaluator(dataset, **settings)(model)


def ranked_ids(rows: np.ndarray, query_ids: Sequence[str], corpus_ids: Any) -> dict[str, list[str]]:
    """query id -> the document ids of its found corpus rows (`rows`, one row of corpus positions per query, -1 for
    none), best first."""
    return {q: [corpus_ids[j] for j in found if j >= 0] for q, found in zip(query_ids, rows.tolist(), strict=True)}


def _then(ranked: list[str], rest: list[str]) -> list[str]:
    """`ranked`, then the documents of `rest` it does not hold, in their order."""
    seen = set(ranked)
    return ranked + [doc for doc in rest if doc not in seen]


def _candidates(
    runs: dict, first_stage: str, depth: int, corpus_ids: Any, dataset: RetrievalDataset, fusion: Any, weight: Any
) -> list[list[dict[str, Any]]]:
    """The first stage's best `depth` hits of each judged query (hybrid: the union of both stages' best `depth`, each
    hit with each stage's own score), as `rerank_hits` takes them."""
    found_scores, found = runs[first_stage]
    if first_stage == "hybrid":
        tops = (tuple(a[:, :depth] for a in runs[s]) for s in ("dense", "lexical"))
        found_scores, found = fuse(*tops, fusion, weight)
    else:
        found_scores, found = found_scores[:, :depth], found[:, :depth]
    candidates = [
        [
            {"id": corpus_ids[j], "text": dataset.corpus[corpus_ids[j]], "rank": rank, "score": float(score)}
            for rank, (j, score) in enumerate(((j, s) for j, s in zip(rows, scores, strict=True) if j >= 0), 1)
        ]
        for rows, scores in zip(found.tolist(), found_scores.tolist(), strict=True)
    ]
    if first_stage == "hybrid":  # each stage's own score, for a three-score order
        at_depth = {s: (runs[s][0][:, :depth], runs[s][1][:, :depth]) for s in ("dense", "lexical")}
        for hits, own in zip(candidates, stage_scores(found, at_depth), strict=True):
            for hit, scores in zip(hits, own, strict=True):
                hit.update(scores)
    return candidates


def _index_runs(
    index: Any, model: Any, dataset: RetrievalDataset, judged: list[str], reach: int, first_stage: str,
    tokenizer: Any, batch_size: int,
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[int, Any]]:  # fmt: skip
    """The dense and lexical runs of the judged queries through `index` (the stages `first_stage` needs), and the
    document id of every row they found, checked against the set's corpus."""
    if len(index) != len(dataset.corpus):
        raise ValueError(
            f"the index {index.location!r} holds {len(index)} documents, the set {dataset.name!r} "
            f"{len(dataset.corpus)}: index the set's own corpus ('hf-siamese index BEIR_DIR -o ...')"
        )
    texts = [dataset.queries[q] for q in judged]
    if index.check_first_stage(first_stage) != "dense" and "sparse" in index.stage_lists(first_stage):
        raise ValueError(  # the evaluation's runs are the dense and BM25 ones, not yet the sparse part's
            f"the index {index.location!r} has a sparse part, which an evaluation does not search yet: give "
            "first_stage='dense' or 'lexical' (--first-stage), or search it (search --index)"
        )
    runs = {}
    if first_stage != "lexical":
        index.check_model(model)
        prompt = side_prompt(model, dataset.query_prompt, QUERY_PROMPT_NAMES)
        vectors = model.encode(texts, tokenizer=tokenizer, batch_size=batch_size, convert_to_numpy=True, prompt=prompt)
        runs["dense"] = index.dense_rows(index.query_array(vectors), reach)
    if first_stage != "dense":
        runs["lexical"] = index.lexical_rows(texts, reach)
    found = sorted({int(r) for scores_rows in runs.values() for r in scores_rows[1].ravel() if r >= 0})
    ids = {row: str(doc_id) for row, (doc_id, _) in index.rows_of(found).items()}
    unknown = sorted(set(ids.values()) - set(dataset.corpus))
    if unknown:
        raise ValueError(
            f"the index {index.location!r} holds documents that are not in {dataset.name!r} (e.g. {unknown[:3]}): "
            "index the set's own corpus ('hf-siamese index BEIR_DIR -o ...')"
        )
    return runs, ids


def choose_hybrid_weight(
    model: Any,
    dataset: RetrievalDataset,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    lexical_settings: LexicalSettings | None = None,
    depth: int = RERANK_TOP,
    metric: str = "ndcg@10",
    show_progress_bar: bool = False,
) -> tuple[float, dict[float, float]]:
    """The z-score fusion weight of the dense list (0, 0.1, ..., 1) that scores best by `metric` on this set's judged
    queries, and each weight's score (x100). Give it held-out queries (a train or dev split), never the test split
    its result is reported on."""
    from ..metrics import judged_queries, retrieval_metrics

    if is_sparse_model(model):
        raise ValueError("choosing the hybrid weight fuses a dense model's list with BM25's; this model is sparse")
    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(
        model, dataset, tokenizer=tokenizer, batch_size=batch_size, show_progress_bar=show_progress_bar
    )
    judged = judged_queries(dataset.qrels)
    if not judged:
        raise ValueError("choosing the hybrid weight needs queries with relevance judgements; this split has none")
    row = {query_id: i for i, query_id in enumerate(query_ids)}
    reach = min(depth, len(corpus_ids))
    dense = exact_search(queries[[row[q] for q in judged]], corpus, reach, model.config.similarity)
    lexical = lexical_run(dataset, judged, reach, lexical_settings)
    k = int(metric.split("@")[1])

    def quality(rows: np.ndarray) -> float:
        return retrieval_metrics(ranked_ids(rows, judged, corpus_ids), dataset.qrels, [k], percent=True)[metric]

    return choose_dense_weight(dense, lexical, quality)


def lexical_run(
    dataset: RetrievalDataset, query_ids: Sequence[str], depth: int, settings: LexicalSettings | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """BM25's (scores, corpus rows) of the queries `query_ids` over the set's corpus (its order), `depth` each: an
    index built in a temporary folder."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hf-siamese-lexical-") as folder:
        index = build_lexical_index(list(dataset.corpus.values()), folder, settings)
        found = index.search([dataset.queries[q] for q in query_ids], depth)
        del index
    return found


__all__ = [
    "CORPUS_PROMPT_NAMES",
    "QUERY_PROMPT_NAMES",
    "RetrievalEvaluator",
    "ranked_ids",
    "embed_retrieval_set",
    "choose_hybrid_weight",
    "evaluate_retrieval",
    "lexical_run",
    "side_prompt",
]
