"""Evaluation of cross-encoders: reranking a first stage's candidates (nDCG@10, MRR@10 of the reranked lists and of
the first stage, side by side), STS correlations of a regression cross-encoder, accuracy of a classifier.

`CrossEncoderTrainer` reports these for its eval sets (`RerankingDataset`, or pair rows with labels). The pair
metrics are evaluators (`hf_siamese.metrics.Evaluator`: `PairScoreEvaluator`, `PairClassificationEvaluator`; the
reranking one is `evaluators.RerankingEvaluator`), and `evaluate_scores` / `evaluate_classification` call them; all
work on their own with any object that has `predict(pairs, batch_size=, show_progress_bar=)` (our
`CrossEncoder`, sentence-transformers' `CrossEncoder`, a test stub). The metric definitions are the ones of
`hf_siamese.metrics` (`retrieval_metrics`, `sts_correlations`), not written again here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.beir import RetrievalDataset
from ..metrics.evaluator import Evaluator

RERANK_K_VALUES = (10,)  # nDCG@10 / MRR@10: the BEIR headline numbers
DEFAULT_RERANK_TOP = 100  # first-stage candidates per query
FUSION_WEIGHTS = tuple(i / 10 for i in range(11))  # first_stage_weight values choose_first_stage_weight tries


@dataclass
class RerankingDataset:
    """Queries, the corpus, graded judgements and each query's first-stage candidates, best first.

    Attributes:
        queries: query id -> text.
        corpus: document id -> text (at least every candidate).
        qrels: query id -> {document id: relevance}; relevance > 0 is relevant. Only queries with a relevant
            document count (as in `retrieval_metrics`).
        candidates: query id -> document ids in the first stage's order (a bi-encoder's top N, BM25's, ...).
        name: a label for messages.
        first_stage_scores: query id -> the first stage's score of each candidate (same order); needed to fuse the
            two stages' scores (`first_stage_weight` > 0). `from_first_stage` fills it.
        stage_scores: over a hybrid first stage, query id -> {"dense": [...], "lexical": [...]}: each stage's own
            score of each candidate (None where that stage did not find it), for three-score fusion.
        k_values: the cut-offs reported (default 10).

    Build one from a retrieval set and a bi-encoder with `RerankingDataset.from_first_stage`.
    """

    queries: dict[str, str]
    corpus: dict[str, str]
    qrels: dict[str, dict[str, int]]
    candidates: dict[str, list[str]]
    name: str = "reranking"
    k_values: Sequence[int] = RERANK_K_VALUES
    metadata: dict[str, Any] = field(default_factory=dict)
    first_stage_scores: dict[str, list[float]] = field(default_factory=dict)
    stage_scores: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"RerankingDataset {self.name!r}"
        judged = self.judged_queries()
        if not judged:
            raise ValueError(f"{where}: no query has a relevant document (qrels relevance > 0); nothing to evaluate.")
        for query in judged:
            if query not in self.queries:
                raise ValueError(f"{where}: qrels name query {query!r}, which is not in queries.")
            if not isinstance(self.queries[query], str):
                raise ValueError(f"{where}: query {query!r} holds {self.queries[query]!r}; expected a string.")
            found = self.candidates.get(query)
            if found is None or isinstance(found, str) or len(found) == 0:
                raise ValueError(
                    f"{where}: query {query!r} has no first-stage candidates ({found!r}); every judged query needs "
                    "at least one."
                )
            unknown = [doc for doc in found if doc not in self.corpus]
            if unknown:
                raise ValueError(
                    f"{where}: candidates of query {query!r} name documents not in the corpus: {unknown[:3]}"
                )
            if len(set(found)) != len(found):
                raise ValueError(f"{where}: candidates of query {query!r} hold a document twice.")
            scores = self.first_stage_scores.get(query)
            if scores is not None and len(scores) != len(found):
                raise ValueError(
                    f"{where}: query {query!r} has {len(scores)} first-stage scores for {len(found)} candidates."
                )
            for stage, values in self.stage_scores.get(query, {}).items():
                if len(values) != len(found):
                    raise ValueError(
                        f"{where}: query {query!r} has {len(values)} {stage} scores for {len(found)} candidates."
                    )
        bad = next(((doc, text) for doc, text in self.corpus.items() if not isinstance(text, str)), None)
        if bad is not None:
            raise ValueError(f"{where}: document {bad[0]!r} holds {bad[1]!r}; expected a string.")
        if not self.k_values or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.k_values):
            raise ValueError(f"{where}: k_values={list(self.k_values)!r} must be positive ints.")

    def __len__(self) -> int:
        return len(self.judged_queries())

    def judged_queries(self) -> list[str]:
        """The ids of the queries evaluated (those with a relevant document), in qrels order."""
        from ..metrics import judged_queries

        return judged_queries(self.qrels)

    @classmethod
    def from_first_stage(
        cls,
        dataset: RetrievalDataset,
        bi_encoder: Any,
        top_k: int = DEFAULT_RERANK_TOP,
        *,
        tokenizer: Any = None,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        k_values: Sequence[int] = RERANK_K_VALUES,
        first_stage: str = "dense",
        fusion: str | None = None,
        dense_weight: float | None = None,
        lexical_settings: Any = None,
    ) -> RerankingDataset:
        """The candidates of a first stage over a retrieval set (`hf_siamese.data.read_beir`), per judged query:
        "dense", a bi-encoder's (`SiameseBertModel`) exact top `top_k` documents, with the query / document prompts
        `evaluate_retrieval` uses; "hybrid", the union of its top `top_k` and BM25's (`lexical_settings`), fused by
        `fusion` / `dense_weight` (`retrieval.hybrid.fuse`), each candidate with both stages' own scores."""
        from ..retrieval.fusion.hybrid import check_first_stage

        if check_first_stage(first_stage, fusion, dense_weight, lexical_settings) not in ("dense", "hybrid"):
            raise ValueError(f"first_stage={first_stage!r}: reranking candidates come from 'dense' or 'hybrid'")
        found, stages = _first_stage(
            bi_encoder, dataset, top_k, tokenizer, batch_size, show_progress_bar,
            (fusion, dense_weight, lexical_settings) if first_stage == "hybrid" else None,
        )  # fmt: skip
        return cls(
            queries=dict(dataset.queries),
            corpus=dict(dataset.corpus),
            qrels={q: dict(judged) for q, judged in dataset.qrels.items()},
            candidates={q: ids for q, (ids, _) in found.items()},
            name=dataset.name,
            k_values=k_values,
            metadata={"first_stage_top_k": top_k, "first_stage": first_stage},
            first_stage_scores={q: scores for q, (_, scores) in found.items()},
            stage_scores=stages,
        )


def first_stage_candidates(
    bi_encoder: Any,
    dataset: RetrievalDataset,
    top_k: int = DEFAULT_RERANK_TOP,
    *,
    tokenizer: Any = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> dict[str, list[str]]:
    """query id -> the bi-encoder's `top_k` best document ids (exact search; all documents if the corpus is smaller)
    for every query of `dataset.qrels` with a relevant document."""
    found, _ = _first_stage(bi_encoder, dataset, top_k, tokenizer, batch_size, show_progress_bar)
    return {q: ids for q, (ids, _) in found.items()}


def _first_stage(
    bi_encoder: Any,
    dataset: RetrievalDataset,
    top_k: int,
    tokenizer: Any,
    batch_size: int,
    show_progress_bar: bool,
    hybrid: tuple[Any, Any, Any] | None = None,
) -> tuple[dict[str, tuple[list[str], list[float]]], dict[str, dict[str, list[float | None]]]]:
    """query id -> (candidate ids, first-stage scores), and (hybrid: `(fusion, dense_weight, lexical_settings)`)
    query id -> each stage's own scores of the candidates."""
    from ..metrics import judged_queries
    from ..retrieval.evaluation.evaluator import embed_retrieval_set, lexical_run
    from ..retrieval.exact import exact_search
    from ..retrieval.fusion.hybrid import fuse, stage_scores

    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k={top_k!r}: expected a positive int (first-stage candidates per query)")
    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(
        bi_encoder, dataset, tokenizer=tokenizer, batch_size=batch_size, show_progress_bar=show_progress_bar
    )
    judged = judged_queries(dataset.qrels)
    row = {query_id: i for i, query_id in enumerate(query_ids)}
    depth = min(top_k, len(corpus_ids))
    scores, found = exact_search(
        queries[[row[q] for q in judged]], corpus, depth, similarity=bi_encoder.config.similarity
    )
    stages: dict[str, dict[str, list[float | None]]] = {}
    if hybrid is not None:
        fusion, dense_weight, settings = hybrid
        runs = {"dense": (scores, found), "lexical": lexical_run(dataset, judged, depth, settings)}
        scores, found = fuse(runs["dense"], runs["lexical"], fusion, dense_weight)
        for q, own in zip(judged, stage_scores(found, runs), strict=True):
            stages[q] = {stage: [hit[f"{stage}_score"] for hit in own] for stage in runs}
    ranked = {
        q: ([corpus_ids[j] for j in rows if j >= 0], [v for j, v in zip(rows, values, strict=True) if j >= 0])
        for q, rows, values in zip(judged, found.tolist(), scores.tolist(), strict=True)
    }
    return ranked, stages


def _check_scorer(model: Any) -> None:
    if not callable(getattr(model, "predict", None)):
        raise ValueError(
            f"expected a cross-encoder (an object with .predict(pairs) -> scores), got {type(model).__name__}"
        )


def score_pairs(
    model: Any,
    pairs: Sequence[tuple[str, str]],
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> np.ndarray:
    """The model's scores of `pairs` in ONE `predict` call over the distinct pairs (a cross-encoder sorts its
    batches by length across all of them); float32 `(len(pairs),)` or `(len(pairs), num_labels)`."""
    _check_scorer(model)
    unique = list(dict.fromkeys((query, document) for query, document in pairs))
    if not unique:
        return np.zeros(0, dtype=np.float32)
    scores = np.asarray(
        model.predict(unique, batch_size=batch_size, show_progress_bar=show_progress_bar, **predict_kwargs),
        dtype=np.float32,
    )
    if len(scores) != len(unique):
        raise ValueError(f"the cross-encoder gave {len(scores)} scores for {len(unique)} pairs; expected one per pair")
    where = {pair: position for position, pair in enumerate(unique)}
    return scores[[where[pair] for pair in pairs]]


def _pairs_of(pairs: Any) -> list[tuple[str, str]]:
    rows = []
    for row, pair in enumerate(pairs):
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"pairs[{row}] is {pair!r:.80}: expected a (text, text) pair")
        if not all(isinstance(text, str) for text in pair):
            raise ValueError(f"pairs[{row}] is {pair!r:.80}: both texts must be strings")
        rows.append((pair[0], pair[1]))
    return rows


class _PairEvaluator(Evaluator):
    """What the pair evaluators share: checked (text, text) pairs, one expected value each, and the scoring."""

    expected_name, expected_unit = "labels", "entries"

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        expected: Sequence[Any],
        *,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        name: str = "",
        **predict_kwargs: Any,
    ) -> None:
        self.pairs = _pairs_of(pairs)
        if len(expected) != len(self.pairs):
            what = f"{self.expected_name} has {len(expected)} {self.expected_unit}"
            raise ValueError(f"{what} for {len(self.pairs)} pairs")
        self.batch_size, self.show_progress_bar = batch_size, show_progress_bar
        self.name, self.predict_kwargs = name, predict_kwargs

    def __len__(self) -> int:
        return len(self.pairs)

    def scores(self, model: Any) -> np.ndarray:
        """The model's score(s) of each pair, in one `predict` call."""
        return score_pairs(model, self.pairs, self.batch_size, self.show_progress_bar, **self.predict_kwargs)


class PairScoreEvaluator(_PairEvaluator):
    """STS metrics of a regression cross-encoder (one output): `spearman` and `pearson` (in [-1, 1]) between its
    scores of `pairs` (after its activation) and the `gold` scores, by `hf_siamese.metrics.sts_correlations`. An
    evaluator: `PairScoreEvaluator(pairs, gold)(cross_encoder)`; primary metric `spearman`. `predict_kwargs` (and
    `batch_size`, `show_progress_bar`, `name`) as for `PairClassificationEvaluator`."""

    primary_metric = "spearman"
    expected_name, expected_unit = "gold", "scores"

    def __init__(self, pairs: Sequence[tuple[str, str]], gold: Sequence[float], **settings: Any) -> None:
        super().__init__(pairs, gold, **settings)
        self.gold = gold

    def __call__(self, model: Any) -> dict[str, float]:
        """`{"spearman", "pearson"}` of `model` (anything with `predict(pairs, batch_size=, show_progress_bar=)`)."""
        from ..metrics import sts_correlations

        scores = self.scores(model)
        if scores.ndim != 1:
            raise ValueError(f"STS needs a one-output cross-encoder; its scores have shape {scores.shape}")
        return sts_correlations(scores, np.asarray(self.gold, dtype=np.float64))


class PairClassificationEvaluator(_PairEvaluator):
    """`accuracy` of a classifier cross-encoder on labelled pairs: the arg-max output of a several-output model
    against class ids (or names, through `label2id`); for a one-output model, a score above `threshold` (after its
    activation: 0.5 for sigmoid) against 0/1 labels. An evaluator:
    `PairClassificationEvaluator(pairs, labels)(cross_encoder)`; primary metric `accuracy`. `batch_size` and
    `show_progress_bar` and other `predict_kwargs` go to the model's `predict`; `name` is the logging prefix."""

    primary_metric = "accuracy"

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        labels: Sequence[int | str],
        *,
        label2id: Mapping[str, int] | None = None,
        threshold: float = 0.5,
        **settings: Any,
    ) -> None:
        super().__init__(pairs, labels, **settings)
        self.labels = [_class_id(row, label, label2id) for row, label in enumerate(labels)]
        self.threshold = threshold

    def __call__(self, model: Any) -> dict[str, float]:
        """`{"accuracy"}` of `model` (anything with `predict(pairs, batch_size=, show_progress_bar=)`)."""
        scores = self.scores(model)
        predicted = (scores > self.threshold).astype(np.int64) if scores.ndim == 1 else scores.argmax(axis=1)
        width = 2 if scores.ndim == 1 else scores.shape[1]
        bad = next(((row, label) for row, label in enumerate(self.labels) if not 0 <= label < width), None)
        if bad is not None:
            raise ValueError(f"labels[{bad[0]}] = {bad[1]} is outside the model's {width} classes")
        return {"accuracy": float(np.mean(predicted == np.asarray(self.labels)))}


def _class_id(row: int, label: Any, label2id: Mapping[str, int] | None) -> int:
    if isinstance(label, str):
        if not label2id or label not in label2id:
            raise ValueError(f"labels[{row}] = {label!r} is not a known class name ({sorted(label2id or {})})")
        label = label2id[label]
    if isinstance(label, bool) or not float(label).is_integer():
        raise ValueError(f"labels[{row}] = {label!r}: expected a class id (an int) or a class name")
    return int(label)


def evaluate_scores(
    model: Any,
    pairs: Sequence[tuple[str, str]],
    gold: Sequence[float],
    *,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> dict[str, float]:
    """STS metrics of a regression cross-encoder: `PairScoreEvaluator(pairs, gold, ...)(model)`, `spearman` and
    `pearson` (in [-1, 1])."""
    evaluator = PairScoreEvaluator(
        pairs, gold, batch_size=batch_size, show_progress_bar=show_progress_bar, **predict_kwargs
    )
    return evaluator(model)


def evaluate_classification(
    model: Any,
    pairs: Sequence[tuple[str, str]],
    labels: Sequence[int | str],
    *,
    label2id: Mapping[str, int] | None = None,
    threshold: float = 0.5,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> dict[str, float]:
    """`accuracy` of a classifier cross-encoder on labelled pairs: `PairClassificationEvaluator(pairs, labels,
    ...)(model)` (see there)."""
    evaluator = PairClassificationEvaluator(
        pairs, labels, label2id=label2id, threshold=threshold, batch_size=batch_size,
        show_progress_bar=show_progress_bar, **predict_kwargs,
    )  # fmt: skip
    return evaluator(model)


__all__ = [
    "DEFAULT_RERANK_TOP",
    "RERANK_K_VALUES",
    "FUSION_WEIGHTS",
    "PairClassificationEvaluator",
    "PairScoreEvaluator",
    "RerankingDataset",
    "evaluate_classification",
    "evaluate_scores",
    "first_stage_candidates",
    "score_pairs",
]
