"""The IR metrics of a model on a retrieval set (`RetrievalEvaluator`, what `SiameseTrainer` reports for such an eval
set and `hf-siamese eval` prints for a BEIR folder; `evaluate_retrieval` calls it).

The first-stage runs it scores come from `retrieval_runs`, the prompt of each side from `hf_siamese.retrieval.prompts`.
The sets themselves are read by `hf_siamese.data.beir`; the metric definitions and the exact chunked search live in
the `evaluate` module `hf_siamese.metrics.RETRIEVAL`; hard-negative mining is in
`hf_siamese.retrieval.mining.negatives`, the persistent vector index in `hf_siamese.retrieval.stores.folder`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data.beir import RetrievalDataset
from ..retrieval.exact import exact_search
from ..retrieval.fusion.hybrid import (
    check_first_stage,
    choose_dense_weight,
    fuse_runs,
    reciprocal_rank_fusion,
    stage_lists,
)
from ..retrieval.fusion.multivector_rerank import check_reranker_index
from ..retrieval.fusion.rerank import RERANK_TOP, check_rerank, rerank_hits
from ..retrieval.index.fingerprint import corpus_fingerprint
from ..retrieval.index.lexical import LexicalSettings
from ..retrieval.prompts import CORPUS_PROMPT_NAMES, QUERY_PROMPT_NAMES, side_prompt
from ..retrieval.ranking.maxsim import is_multivector_model, maxsim_run
from ..retrieval.ranking.sparse import check_sparse_first_stage, is_sparse_model, sparse_run
from .evaluator import Evaluator, prefixed_metrics
from .retrieval_runs import candidates, index_runs, lexical_run, ranked_ids, then_rest


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
    evaluator (`evaluator.Evaluator`), `RetrievalEvaluator(dataset, ...)(model) -> dict`. Its primary
    metric is nDCG@10 (or at the largest k without 10) of the final stage: `rerank_ndcg@10` with a reranker.

    `index`: an index of the set's corpus (`load_index(folder or engine location)`, built from the same documents:
    'hf-siamese index BEIR_DIR -o ...'); the first stage then runs through it, as users search it (only the queries
    are embedded, with the model checked against the index; BM25 is the index's, so `lexical_settings` is refused),
    and the quality through an engine is measured the same way as through the folder. An index with a learned-sparse
    part (`sparse_part.py`) adds the first stage "sparse" (its list alone, the queries encoded by its recorded sparse
    model: `model` may be None) and its hybrid fuses every list it holds (`hybrid.stage_lists`: dense, BM25 where
    present, sparse), each reported alone too (`sparse_ndcg@10`, ...): the same ranking as `index.search`.

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
    lists) fused by reciprocal ranks are reported too, prefixed `rerank_rrf3_`: the setting-free three-score order
    (over an index's hybrid of n lists, `rerank_rrf{n + 1}_`: the reranker's order and each list's). A
    `multivector_rerank.MultiVectorReranker` reranks by MaxSim of the token vectors `index` stores (it needs `index`,
    with its multi-vector part): the same candidates and order as `index.search(..., rerank=)`.

    A learned-sparse `model` (`SparseSiameseModel`) is its own first stage (`sparse_search`: the corpus and the judged
    queries encoded, ranked exactly by their term weights' dot products), with the same metric names and `rerank`;
    `first_stage` other than the default and `index` are refused for it (an index keeps a sparse model as its sparse
    part: `first_stage="sparse"` through it). Under several processes each one encodes
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
        sparse_part = bool(getattr(index, "has_sparse", False))  # "sparse": an index's part (checked by the index)
        check_first_stage(first_stage, fusion, dense_weight, lexical_settings, sparse_part=sparse_part)
        if index is not None and lexical_settings is not None:
            raise ValueError("lexical_settings: the index's lexical part was built with its own settings; give none")
        check_reranker_index(rerank, index)  # MaxSim of stored token vectors: the index's multi-vector part
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
        if model is None and first_stage not in ("lexical", "sparse"):
            raise ValueError(f"the {first_stage} first stage embeds the texts: give a model, or first_stage='lexical'")
        if is_sparse_model(model) or is_multivector_model(model):
            return self._own_ranking_metrics(model)
        depth = None if self.rerank is None else check_rerank(self.rerank, self.rerank_top, 1, len(dataset.corpus))
        embedded = None
        if first_stage not in ("lexical", "sparse") and self.index is None:
            embedded = embed_retrieval_set(
                model, dataset, tokenizer=self.tokenizer, batch_size=self.batch_size, process_index=self.process_index,
                num_processes=self.num_processes, show_progress_bar=self.show_progress_bar,
            )  # fmt: skip
            if depth is None and first_stage == "dense":
                return self._exact_metrics(model, embedded)
        judged = judged_queries(dataset.qrels)
        reach = min(max(self.k_values[-1], depth or 0), len(dataset.corpus))
        runs, corpus_ids, lists = self._runs(model, embedded, judged, reach)
        metrics = self._metrics(ranked_ids(runs[first_stage][1], judged, corpus_ids))
        if first_stage == "hybrid":
            for stage in lists:
                alone = self._metrics(ranked_ids(runs[stage][1], judged, corpus_ids))
                metrics.update(prefixed_metrics(alone, stage, skip=("num_queries",)))
        if depth is not None:
            metrics.update(self._rerank_metrics(runs, corpus_ids, judged, depth, lists=lists))
        return metrics

    def _own_ranking_metrics(self, model: Any) -> dict[str, float]:
        """A sparse model's first stage (exact, `sparse_search`) or a multi-vector model's (exact MaxSim,
        `maxsim_search`), and with `rerank` the two stages."""
        from ..metrics import judged_queries

        dataset = self.dataset
        name, run_of = ("sparse", sparse_run) if is_sparse_model(model) else ("maxsim", maxsim_run)
        if name == "sparse":
            check_sparse_first_stage(self.first_stage, self.index)
        elif self.first_stage != "dense" or self.index is not None:
            raise ValueError(
                f"a multi-vector model ranks the set by its own exact MaxSim: got first_stage={self.first_stage!r}, "
                f"index={self.index!r} (accepted: the default first stage, index=None; an index reranks by MaxSim "
                "with rerank=MultiVectorReranker)"
            )
        depth = None if self.rerank is None else check_rerank(self.rerank, self.rerank_top, 1, len(dataset.corpus))
        judged, corpus_ids = judged_queries(dataset.qrels), list(dataset.corpus)
        reach = min(max(self.k_values[-1], depth or 0), len(corpus_ids))
        run = run_of(
            model, dataset, judged, reach, tokenizer=self.tokenizer, batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar,
        )  # fmt: skip
        metrics = self._metrics(ranked_ids(run[1], judged, corpus_ids))
        if depth is not None:
            metrics.update(self._rerank_metrics({name: run}, corpus_ids, judged, depth, name, (name,)))
        return metrics

    def _metrics(self, rankings: dict[str, list[str]]) -> dict[str, float]:
        from ..metrics import retrieval_metrics

        return retrieval_metrics(rankings, self.dataset.qrels, self.k_values, percent=self.percent)

    def _exact_metrics(self, model: Any, embedded: tuple[list[str], np.ndarray, list[str], np.ndarray]) -> dict:
        """The dense first stage alone: exact search of the embedded set, in chunks."""
        from ..retrieval.exact import retrieval_metrics_from_embeddings

        query_ids, queries, corpus_ids, corpus = embedded
        return retrieval_metrics_from_embeddings(
            queries, corpus, query_ids, corpus_ids, self.dataset.qrels, k_values=self.k_values,
            similarity=model.config.similarity, percent=self.percent,
        )  # fmt: skip

    def _runs(
        self, model: Any, embedded: Any, judged: list[str], reach: int
    ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], Any, tuple[str, ...]]:
        """Each list's (scores, corpus rows) of the judged queries, `reach` deep, and "hybrid"'s (`hybrid.fuse_runs`
        of its lists, as a search fuses them); the id of each row; the lists the first stage reads."""
        dataset, first_stage = self.dataset, self.first_stage
        runs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        corpus_ids: Any = list(dataset.corpus)
        if self.index is not None:
            runs, corpus_ids = index_runs(
                self.index, model, dataset, judged, reach, first_stage, self.fusion, self.tokenizer, self.batch_size
            )
            lists = tuple(runs)
        else:
            lists = stage_lists(first_stage, lexical=True, sparse=False)
            if "dense" in lists:
                query_ids, queries, _, corpus = embedded
                row = {query_id: i for i, query_id in enumerate(query_ids)}
                runs["dense"] = exact_search(queries[[row[q] for q in judged]], corpus, reach, model.config.similarity)
            if "lexical" in lists:
                runs["lexical"] = lexical_run(dataset, judged, reach, self.lexical_settings)
        if first_stage == "hybrid":
            runs["hybrid"] = fuse_runs({name: runs[name] for name in lists}, self.fusion, self.dense_weight)
        return runs, corpus_ids, lists

    def _rerank_metrics(
        self, runs: dict, corpus_ids: Any, judged: list[str], depth: int, first_stage: str | None = None,
        lists: tuple[str, ...] = ("dense", "lexical"),
    ) -> dict[str, float]:  # fmt: skip
        """The two stages' metrics (`rerank_...`, `rerank_top`; over hybrid also `rerank_rrf{n + 1}_...`, n the
        fused `lists`) over the run of `first_stage` (default: the evaluator's)."""
        dataset, first_stage = self.dataset, first_stage or self.first_stage
        hits = candidates(runs, lists, first_stage, depth, corpus_ids, dataset, self.fusion, self.dense_weight)
        reranker = self.rerank
        if hasattr(reranker, "bound_to"):  # through the index (checked): its rows are the ones `corpus_ids` names
            row_of = {doc_id: row for row, doc_id in corpus_ids.items()}
            rows = {hit["text"]: row_of[hit["id"]] for found in hits for hit in found}
            reranker = reranker.bound_to(self.index, rows)
        reranked = rerank_hits(
            reranker, [dataset.queries[q] for q in judged], hits, batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar, first_stage_weight=self.first_stage_weight,
            stage_weights=self.stage_weights, corpus=corpus_fingerprint(dataset.corpus),
        )  # fmt: skip
        first = ranked_ids(runs[first_stage][1], judged, corpus_ids)
        second = {
            q: then_rest([hit["id"] for hit in found], first[q]) for q, found in zip(judged, reranked, strict=True)
        }
        metrics = prefixed_metrics(self._metrics(second), "rerank", skip=("num_queries",))
        metrics["rerank_top"] = depth
        if first_stage == "hybrid":  # setting-free: RRF of the reranker's order and each list's (dense, lexical: 3)
            orders = [ranked_ids(runs[s][1][:, :depth], judged, corpus_ids) for s in lists]
            fused_orders = {}
            for q, found in zip(judged, reranked, strict=True):
                by_reranker = sorted(found, key=lambda hit: -hit.get("reranker_score", hit["score"]))
                fused = reciprocal_rank_fusion([[hit["id"] for hit in by_reranker], *(order[q] for order in orders)])
                fused_orders[q] = then_rest(fused, first[q])
            name = f"rerank_rrf{len(lists) + 1}"
            metrics.update(prefixed_metrics(self._metrics(fused_orders), name, skip=("num_queries",)))
        return metrics


def evaluate_retrieval(model: Any, dataset: RetrievalDataset, **settings: Any) -> dict[str, float]:
    """nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k (at `dataset.k_values`) of a first stage on a retrieval set:
    `RetrievalEvaluator(dataset, **settings)(model)`, where the settings (`tokenizer`, `batch_size`, `percent`,
    `first_stage`, `rerank`, `index`, ...) are described."""
    return RetrievalEvaluator(dataset, **settings)(model)


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
    index: Any = None,
) -> tuple[float, dict[float, float]]:
    """The z-score fusion weight of the dense list (0, 0.1, ..., 1) that scores best by `metric` on this set's judged
    queries, and each weight's score (x100). Give it held-out queries (a train or dev split), never the test split
    its result is reported on.

    Without `index` the two lists are `model`'s exact search of the set and BM25's (`lexical_settings`). With
    `index` (an index of the set's corpus, `load_index`) they are the two its hybrid reads, run as its search runs
    them: dense + BM25, or dense + learned sparse for an index with a sparse part and no lexical one (three lists
    are fused by reciprocal ranks only: refused, naming why)."""
    from ..metrics import judged_queries, retrieval_metrics

    if is_sparse_model(model):
        raise ValueError(
            "choosing the hybrid weight weighs a dense model's list against a second list; this model is sparse (an "
            "index with a sparse part fuses its list with the dense one: give index=)"
        )
    judged = judged_queries(dataset.qrels)
    if not judged:
        raise ValueError("choosing the hybrid weight needs queries with relevance judgements; this split has none")
    reach = min(depth, len(dataset.corpus))
    if index is not None:
        if lexical_settings is not None:
            raise ValueError("lexical_settings: the index's lexical part was built with its own settings; give none")
        runs, corpus_ids = index_runs(index, model, dataset, judged, reach, "hybrid", "zscore", tokenizer, batch_size)
        first, second = runs.values()
    else:
        query_ids, queries, corpus_ids, corpus = embed_retrieval_set(
            model, dataset, tokenizer=tokenizer, batch_size=batch_size, show_progress_bar=show_progress_bar
        )
        row = {query_id: i for i, query_id in enumerate(query_ids)}
        first = exact_search(queries[[row[q] for q in judged]], corpus, reach, model.config.similarity)
        second = lexical_run(dataset, judged, reach, lexical_settings)
    k = int(metric.split("@")[1])

    def quality(rows: np.ndarray) -> float:
        return retrieval_metrics(ranked_ids(rows, judged, corpus_ids), dataset.qrels, [k], percent=True)[metric]

    return choose_dense_weight(first, second, quality)


__all__ = [
    "RetrievalEvaluator",
    "choose_hybrid_weight",
    "embed_retrieval_set",
    "evaluate_retrieval",
    "lexical_run",
    "ranked_ids",
]
