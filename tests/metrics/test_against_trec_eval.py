"""The retrieval metrics agree with trec_eval (pytrec_eval) on random runs with tied scores and graded judgements."""

from __future__ import annotations

import random

import pytest

from hf_siamese.metrics.retrieval.retrieval import retrieval_metrics

pytrec_eval = pytest.importorskip("pytrec_eval")
KS = (1, 3, 5, 10, 100)


def _random_set(seed: int) -> tuple[dict, dict]:
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(40):
        docs = [f"d{rng.randrange(300)}" for _ in range(rng.randint(5, 150))]
        run[f"q{q}"] = {doc: float(rng.randint(0, 8)) for doc in docs}  # few distinct scores: many ties
        judged = rng.sample(sorted(set(docs)) + [f"d{300 + i}" for i in range(5)], rng.randint(1, 6))
        qrels[f"q{q}"] = {doc: rng.choice([0, 1, 1, 2, 3]) for doc in judged}
        qrels[f"q{q}"][judged[0]] = max(1, qrels[f"q{q}"][judged[0]])  # at least one relevant
    return qrels, run


def _trec_order(scores: dict[str, float]) -> list[str]:
    """trec_eval's ranking: decreasing score, ties by decreasing document id."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_trec_eval(seed) -> None:
    qrels, run = _random_set(seed)
    ours = retrieval_metrics({q: _trec_order(scores) for q, scores in run.items()}, qrels, KS)
    measures = {f"{name}_{k}" for name in ("ndcg_cut", "P", "recall", "map_cut") for k in KS}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    names = {"ndcg": "ndcg_cut", "precision": "P", "recall": "recall", "map": "map_cut"}
    for ours_name, trec_name in names.items():
        for k in KS:
            expected = sum(trec[q][f"{trec_name}_{k}"] for q in trec) / len(trec)
            assert ours[f"{ours_name}@{k}"] == pytest.approx(expected, abs=1e-6), f"{ours_name}@{k}"
    for k in KS:  # MRR@k: trec_eval's reciprocal rank of the run cut at k
        cut = {q: dict(list(sorted(s.items(), key=lambda i: (i[1], i[0]), reverse=True))[:k]) for q, s in run.items()}
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
        expected = sum(rr[q]["recip_rank"] for q in rr) / len(rr)
        assert ours[f"mrr@{k}"] == pytest.approx(expected, abs=1e-6), f"mrr@{k}"
