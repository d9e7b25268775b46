"""Retrieval (IR) metrics of rankings: nDCG@k, MRR@k, Recall@k, MAP@k and Precision@k. Metrics only: ranking a
corpus (exact search, indexes) is `hf_siamese.retrieval`'s job.

This file is both an `evaluate` metric script and a plain Python module. `evaluate.load` copies it into its
module cache and imports it from there, so it must stay self-contained: stdlib, numpy, datasets and evaluate only,
and no relative imports.

The metric definitions are trec_eval's (as used by BEIR and MTEB through pytrec_eval), written here from those
definitions:

* nDCG@k = DCG@k / IDCG@k, DCG@k = sum over ranks i <= k of rel_i / log2(i + 1), the gain being the graded
  relevance itself (trec_eval `ndcg_cut`); IDCG@k is the DCG@k of the query's judged relevances sorted
  descending.
* MRR@k = 1 / rank of the first document with relevance > 0 within the top k, else 0.
* Recall@k = |relevant in the top k| / |relevant|.
* Precision@k = |relevant in the top k| / k (k, not the length of the ranking: trec_eval `P_k`).
* MAP@k = (sum of Precision@i over the ranks i <= k that hold a relevant document) / |relevant| (trec_eval
  `map_cut`).

Each is averaged over the queries that have at least one relevant document (relevance > 0).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import evaluate
import numpy as np

DEFAULT_K_VALUES: tuple[int, ...] = (1, 3, 5, 10, 100)
METRIC_NAMES: tuple[str, ...] = ("ndcg", "mrr", "recall", "map", "precision")

_DESCRIPTION = """\
Information-retrieval evaluation with the BEIR / MTEB definitions (those of trec_eval): nDCG@k (linear gain:
the graded relevance), MRR@k, Recall@k, MAP@k (divided by the number of relevant documents) and Precision@k
(divided by k), for each k in `k_values`, averaged over the queries that have at least one relevant document.
`num_queries` says how many queries were evaluated.

Each example is one query: `predictions` are rankings, one list of document ids (strings, best first) per query.
To rank a corpus by embeddings first, use `hf_siamese.retrieval.exact_search` (or
`hf_siamese.retrieval.retrieval_metrics_from_embeddings`, which ranks and scores in one call).

`references` are the relevance judgements of each query, as `{doc_id: relevance}` dicts, or as lists of relevant
document ids with an optional parallel `relevance` argument (lists of ints; default 1 for each). Relevance 0
means judged not relevant. A query with no document of relevance > 0 is not evaluated. Metrics are in [0, 1]
by default; pass `percent=True` to get them x100.
"""

_CITATION = """\
@inproceedings{thakur2021beir,
    title = "{BEIR}: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval Models",
    author = "Thakur, Nandan and Reimers, Nils and R{\\"u}ckl{\\'e}, Andreas and Srivastava, Abhishek and
              Gurevych, Iryna",
    booktitle = "Thirty-fifth Conference on Neural Information Processing Systems Datasets and Benchmarks Track",
    year = "2021",
    url = "https://openreview.net/forum?id=wCu6T5xFjeJ",
}
@article{jarvelin2002cumulated,
    title = "Cumulated Gain-Based Evaluation of {IR} Techniques",
    author = "J{\\"a}rvelin, Kalervo and Kek{\\"a}l{\\"a}inen, Jaana",
    journal = "ACM Transactions on Information Systems",
    volume = "20",
    number = "4",
    pages = "422--446",
    year = "2002",
    doi = "10.1145/582415.582418",
}
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of list of str, one per query): ranked document ids, best first.
    references (one per query): the query's judgements, either a dict {doc_id: relevance} or a list of the
        ids of its relevant documents. An empty dict / list: the query has no relevant document and is skipped.
    relevance (list of list of int, optional): with list references, the relevance of each listed document
        (parallel lists); default 1 each. Not allowed with dict references.
    k_values (sequence of int): cut-offs, default (1, 3, 5, 10, 100); any k >= 1, larger than the corpus too.
    percent (bool): multiply the metrics by 100. Default False (values in [0, 1]).
Returns:
    {"ndcg@k", "mrr@k", "recall@k", "map@k", "precision@k" for each k, "num_queries"}: floats, and the number
    of queries evaluated (an int).
Examples:
    >>> metric = evaluate.load(RETRIEVAL)
    >>> metric.compute(predictions=[["d2", "d1"], ["d3"]], references=[{"d1": 2}, ["d3"]], k_values=[1, 2])
    {'ndcg@1': 0.5, 'ndcg@2': 0.815..., 'mrr@1': 0.5, 'mrr@2': 0.75, ..., 'num_queries': 2}
"""


# ---------------------------------------------------------------- argument checks


def check_k_values(k_values: Any) -> list[int]:
    if isinstance(k_values, (numbers.Integral, np.integer)) and not isinstance(k_values, bool):
        k_values = [k_values]
    try:
        values = list(k_values)
    except TypeError:
        raise ValueError(f"k_values must be a sequence of positive ints, got {k_values!r}") from None
    if not values:
        raise ValueError("k_values is empty; give at least one cut-off k >= 1")
    for k in values:
        if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)) or k <= 0:
            raise ValueError(f"k_values must hold positive ints (k >= 1), got {k!r} in {values!r}")
    return sorted({int(k) for k in values})


def _relevance_value(value: Any, query_id: Any, doc_id: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"relevance of document {doc_id!r} for query {query_id!r} must be an int >= 0, got {value!r}")
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"relevance of document {doc_id!r} for query {query_id!r} must be an int >= 0, got {value!r}")
    if value < 0:
        raise ValueError(
            f"negative relevance {value!r} for document {doc_id!r} of query {query_id!r}; relevance must be >= 0 "
            "(0 = judged not relevant)"
        )
    return int(value)


def check_qrels(qrels: Any) -> dict[Any, dict[Any, int]]:
    if not isinstance(qrels, Mapping):
        raise ValueError(f"qrels must be a mapping {{query_id: {{doc_id: relevance}}}}, got {type(qrels).__name__}")
    if not qrels:
        raise ValueError("qrels is empty; it needs the relevance judgements of at least one query")
    checked: dict[Any, dict[Any, int]] = {}
    for query_id, judged in qrels.items():
        if not isinstance(judged, Mapping):
            raise ValueError(
                f"qrels[{query_id!r}] must be a mapping {{doc_id: relevance}}, got {type(judged).__name__}"
            )
        checked[query_id] = {doc_id: _relevance_value(rel, query_id, doc_id) for doc_id, rel in judged.items()}
    return checked


def _check_ranking(ranking: Any, query_id: Any) -> list[Any]:
    if isinstance(ranking, (str, bytes)) or not isinstance(ranking, (Sequence, np.ndarray)):
        raise ValueError(
            f"the ranking of query {query_id!r} must be a sequence of document ids (best first), "
            f"got {type(ranking).__name__}"
        )
    docs = list(ranking)
    if len(set(docs)) != len(docs):
        seen: set[Any] = set()
        duplicate = next(d for d in docs if d in seen or seen.add(d))
        raise ValueError(
            f"the ranking of query {query_id!r} holds document {duplicate!r} more than once; each document may "
            "appear once per ranking"
        )
    return docs


# ---------------------------------------------------------------- metrics


def judged_queries(qrels: Mapping[Any, Mapping[Any, Any]]) -> list[Any]:
    """The ids of the queries that have a relevant document (relevance > 0), in `qrels` order: those evaluated."""
    return [query_id for query_id, judged in qrels.items() if any(rel > 0 for rel in judged.values())]


def _query_metrics(ranking: list[Any], judged: dict[Any, int], k_values: list[int]) -> dict[str, list[float]]:
    """The five metrics of one query (with at least one relevant document) at every k of `k_values`."""
    depth = min(k_values[-1], len(ranking))
    ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)
    n_relevant = len(ideal)
    # Running sums after rank i (index i, rank i + 1).
    dcg = hits = precision_sum = 0.0
    first_hit = 0
    running: list[tuple[float, float, float, int]] = []
    for i, doc in enumerate(ranking[:depth]):
        rel = judged.get(doc, 0)
        if rel > 0:
            hits += 1
            precision_sum += hits / (i + 1)
            first_hit = first_hit or i + 1
        dcg += rel / math.log2(i + 2)
        running.append((dcg, hits, precision_sum, first_hit))
    ideal_running, total = [], 0.0
    for i, rel in enumerate(ideal[: k_values[-1]]):
        total += rel / math.log2(i + 2)
        ideal_running.append(total)

    out: dict[str, list[float]] = {name: [] for name in METRIC_NAMES}
    for k in k_values:
        dcg_k, hits_k, precision_sum_k, first_k = running[min(k, depth) - 1] if depth else (0.0, 0.0, 0.0, 0)
        out["ndcg"].append(dcg_k / ideal_running[min(k, n_relevant) - 1])
        out["mrr"].append(1.0 / first_k if first_k else 0.0)
        out["recall"].append(hits_k / n_relevant)
        out["map"].append(precision_sum_k / n_relevant)
        out["precision"].append(hits_k / k)
    return out


def retrieval_metrics(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    percent: bool = False,
) -> dict[str, float]:
    """nDCG@k, MRR@k, Recall@k, MAP@k and Precision@k of rankings against graded relevance judgements.

    Args:
        rankings: query id -> document ids, best first (only the first max(k_values) are read). A query of `qrels`
            missing here counts with an empty ranking (every metric 0); queries not in `qrels` are ignored.
        qrels: query id -> {document id: relevance}, relevance an int >= 0 (0: judged not relevant). Documents
            not listed have relevance 0. Only queries with at least one relevance > 0 are evaluated.
        k_values: cut-offs (ints >= 1, any size: k beyond the ranking or the corpus is fine), default
            (1, 3, 5, 10, 100). Reported in increasing order, each once.
        percent: multiply the metrics by 100 (default False: values in [0, 1]).

    Returns:
        `ndcg@k` for each k, then `mrr@k`, `recall@k`, `map@k`, `precision@k` (floats, the means over the
        evaluated queries), then `num_queries` (int, how many queries were evaluated). The definitions are
        trec_eval's (see the module docstring): linear gain in nDCG, Precision@k divided by k, MAP@k divided by
        the number of relevant documents.

    Raises:
        ValueError: a k <= 0, empty qrels, a relevance that is negative or not an int, no query with a relevant
            document, a ranking that is not a sequence or that holds a document twice.
    """
    ks = check_k_values(k_values)
    judgements = check_qrels(qrels)
    if not isinstance(rankings, Mapping):
        raise ValueError(f"rankings must be a mapping {{query_id: [doc_id, ...]}}, got {type(rankings).__name__}")
    evaluated = judged_queries(judgements)
    if not evaluated:
        raise ValueError(
            f"no query in qrels has a relevant document (relevance > 0) among its {len(judgements)} queries; "
            "there is nothing to evaluate"
        )
    sums = {name: [0.0] * len(ks) for name in METRIC_NAMES}
    for query_id in evaluated:
        ranking = _check_ranking(rankings.get(query_id, ()), query_id)
        for name, values in _query_metrics(ranking, judgements[query_id], ks).items():
            totals = sums[name]
            for i, value in enumerate(values):
                totals[i] += value
    factor = (100.0 if percent else 1.0) / len(evaluated)
    results: dict[str, float] = {}
    for name in METRIC_NAMES:
        for k, total in zip(ks, sums[name], strict=True):
            results[f"{name}@{k}"] = float(total * factor)
    results["num_queries"] = len(evaluated)
    return results


# ---------------------------------------------------------------- the evaluate module


def _split_references(references: Any, relevance: Any) -> tuple[list[list[Any]], list[list[int]]]:
    """Per-query judgements as parallel (document ids, relevance) lists, from dicts or id lists (+ relevance)."""
    if isinstance(references, (str, bytes, Mapping)):
        raise ValueError(
            "references must be a list with one entry per query (a {doc_id: relevance} dict or a list of relevant "
            f"doc ids), got {type(references).__name__}"
        )
    references = list(references)
    if relevance is not None:
        relevance = list(relevance)
        if len(relevance) != len(references):
            raise ValueError(
                f"relevance and references must have the same length, got {len(relevance)} relevance lists and "
                f"{len(references)} references"
            )
    doc_lists: list[list[Any]] = []
    rel_lists: list[list[int]] = []
    for i, reference in enumerate(references):
        if isinstance(reference, Mapping):
            if relevance is not None:
                raise ValueError(
                    f"reference {i} is a {{doc_id: relevance}} dict: pass relevance only with lists of doc ids"
                )
            docs, rels = list(reference), list(reference.values())
        elif isinstance(reference, (str, bytes)) or not isinstance(reference, (Sequence, np.ndarray)):
            raise ValueError(
                f"reference {i} must be a {{doc_id: relevance}} dict or a list of doc ids, got {reference!r}"
            )
        else:
            docs = list(reference)
            rels = [1] * len(docs) if relevance is None else list(relevance[i])
            if len(rels) != len(docs):
                raise ValueError(
                    f"reference {i} lists {len(docs)} doc ids but its relevance list has {len(rels)} values"
                )
            if len(set(docs)) != len(docs):
                raise ValueError(f"reference {i} lists a doc id more than once: {docs!r}")
        for doc in docs:
            if not isinstance(doc, str):
                raise ValueError(f"reference {i}: document ids must be strings, got {doc!r}")
        doc_lists.append(docs)
        rel_lists.append([_relevance_value(rel, i, doc) for doc, rel in zip(docs, rels, strict=True)])
    return doc_lists, rel_lists


_EMBEDDINGS_MOVED = (
    "this metric takes rankings (lists of document ids, best first); to rank a corpus by embeddings, use "
    "hf_siamese.retrieval.exact_search, or hf_siamese.retrieval.retrieval_metrics_from_embeddings for both steps"
)


def _prepare_batch(predictions: Any, references: Any, relevance: Any) -> dict[str, Any]:
    """Turn one batch of user inputs into evaluate's three per-query columns."""
    if references is None:
        raise ValueError("references are missing: pass the relevance judgements of each query")
    if predictions is None:
        raise ValueError("predictions are missing: pass one ranking of doc ids per query")
    doc_lists, rel_lists = _split_references(references, relevance)
    if isinstance(predictions, (str, bytes, Mapping)):
        raise ValueError(
            f"predictions must be a list with one ranking (list of doc ids) per query, got {type(predictions).__name__}"
        )
    rows = [_check_ranking(ranking, i) for i, ranking in enumerate(predictions)]
    for i, ranking in enumerate(rows):
        if any(not isinstance(doc, str) for doc in ranking):
            raise ValueError(f"ranking {i}: document ids must be strings, got {ranking!r}")
    if len(rows) != len(doc_lists):
        raise ValueError(
            f"predictions and references must have the same length (one per query), got {len(rows)} predictions "
            f"and {len(doc_lists)} references"
        )
    return {"predictions": rows, "references": doc_lists, "relevance": rel_lists}


def _refuse_embeddings(given: dict[str, Any]) -> None:
    named = [name for name, value in given.items() if value is not None]
    if named:
        raise ValueError(f"{', '.join(named)}: {_EMBEDDINGS_MOVED}")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Retrieval(evaluate.Metric):
    """`evaluate` metric: nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k of rankings."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                    "relevance": datasets.Sequence(datasets.Value("int64")),
                }
            ),
            reference_urls=[
                "https://github.com/usnistgov/trec_eval",
                "https://github.com/beir-cellar/beir",
            ],
        )

    def add_batch(
        self,
        *,
        predictions: Any = None,
        references: Any = None,
        relevance: Any = None,
        query_embeddings: Any = None,
        **kwargs: Any,
    ) -> None:
        """Add queries: `predictions` (rankings), plus `references` [+ `relevance`]."""
        _refuse_embeddings({"query_embeddings": query_embeddings})
        batch = _prepare_batch(predictions, references, relevance)
        if not batch["references"]:  # evaluate's feature inference would fail on it with an IndexError
            raise ValueError(
                "the retrieval metric got 0 queries (empty predictions and references); pass at least one query "
                "with its relevant document ids"
            )
        super().add_batch(**batch, **kwargs)

    def add(
        self,
        *,
        prediction: Any = None,
        reference: Any = None,
        relevance: Any = None,
        query_embedding: Any = None,
        **kwargs: Any,
    ) -> None:
        """Add one query: a `prediction` (ranking), its `reference` [+ `relevance`]."""
        _refuse_embeddings({"query_embedding": query_embedding})
        self.add_batch(
            predictions=None if prediction is None else [prediction],
            references=None if reference is None else [reference],
            relevance=None if relevance is None else [relevance],
            **kwargs,
        )

    def compute(
        self,
        *,
        predictions: Any = None,
        references: Any = None,
        relevance: Any = None,
        query_embeddings: Any = None,
        corpus_embeddings: Any = None,
        corpus_ids: Any = None,
        **kwargs: Any,
    ) -> dict[str, float] | None:
        """Compute over every query added so far plus this call's (see the module description)."""
        _refuse_embeddings(
            {"query_embeddings": query_embeddings, "corpus_embeddings": corpus_embeddings, "corpus_ids": corpus_ids}
        )
        if any(v is not None for v in (predictions, references, relevance)):
            self.add_batch(predictions=predictions, references=references, relevance=relevance)
        return super().compute(predictions=None, references=None, **kwargs)

    def _compute(
        self,
        predictions: Any,
        references: Any,
        relevance: Any,
        k_values: Sequence[int] = DEFAULT_K_VALUES,
        percent: bool = False,
    ) -> dict[str, float]:
        # Queries are numbered by their position among all the examples added.
        qrels = {
            str(i): dict(zip(docs, rels, strict=True))
            for i, (docs, rels) in enumerate(zip(references, relevance, strict=True))
        }
        return retrieval_metrics({str(i): ranking for i, ranking in enumerate(predictions)}, qrels, k_values, percent)
