"""Two stages: the vector index's search reranked by a cross-encoder (hits re-sorted exactly by `CrossEncoder.predict`
on the same pairs, one predict call, each distinct pair once, first-stage fields kept), `rerank_hits` on any hits,
`evaluate_retrieval`'s first-stage and reranked metrics side by side with an oracle reranker (positives the first stage
missed are not injected), and every bad input named."""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.data import RetrievalDataset
from hf_siamese.evaluation.retrieval import embed_retrieval_set, evaluate_retrieval
from hf_siamese.retrieval import exact_search
from hf_siamese.retrieval.fusion.rerank import rerank_hits
from hf_siamese.retrieval.stores import build_index

_rng = random.Random(3)
CORPUS = list(dict.fromkeys(" ".join(_rng.choice(WORDS[:60]) for _ in range(_rng.randint(3, 9))) for _ in range(30)))
CORPUS = CORPUS[:16]
QUERIES = ["a dog in the park", "music", "the stock market fell today .", "music"]  # a repeat: its pairs scored once


def tiny_cross_encoder(tokenizer, num_labels: int = 1, seed: int = 0) -> CrossEncoder:
    """A random cross-encoder whose scores spread over (0, 1) (large initial weights), so that the order is clear."""
    torch.manual_seed(seed)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=num_labels, initializer_range=0.5)
    return CrossEncoder(BertForSequenceClassification(config).eval(), tokenizer)


class Spy:
    """A reranker that records every predict call and passes it to a cross-encoder."""

    def __init__(self, reranker) -> None:
        self.reranker, self.calls = reranker, []

    def predict(self, pairs, **kwargs):
        self.calls.append(list(pairs))
        return self.reranker.predict(pairs, **kwargs)


class Constant:
    def predict(self, pairs, **kwargs):
        return np.zeros(len(pairs), dtype=np.float32)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_tokenizer):
    model = make_tiny_model()
    index = build_index(
        model, CORPUS, tmp_path_factory.mktemp("rerank") / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False
    )
    return model, index, tiny_cross_encoder(tiny_tokenizer)


def test_search_reranks_by_the_cross_encoders_scores(setup, tiny_tokenizer) -> None:
    model, index, ce = setup
    first = index.search(model, QUERIES, first_stage="dense", top_k=8, tokenizer=tiny_tokenizer)
    spy = Spy(ce)
    hits = index.search(
        model, QUERIES, first_stage="dense", top_k=3, tokenizer=tiny_tokenizer, rerank=spy, rerank_top=8
    )
    # one predict call over all queries, each distinct (query, text) pair once
    assert len(spy.calls) == 1
    expected_pairs = {(query, hit["text"]) for query, found in zip(QUERIES, first, strict=True) for hit in found}
    assert len(spy.calls[0]) == len(expected_pairs) == 3 * 8 and set(spy.calls[0]) == expected_pairs
    # exactly CrossEncoder.predict's scores of the same pairs (the same call: the same batches)
    reference = dict(zip(spy.calls[0], ce.predict(spy.calls[0]).tolist(), strict=True))
    for query, found, reranked in zip(QUERIES, first, hits, strict=True):
        scores = np.asarray([reference[(query, hit["text"])] for hit in found], dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:3]
        assert [hit["id"] for hit in reranked] == [found[i]["id"] for i in order]
        assert [hit["score"] for hit in reranked] == scores[order].tolist()
        # and, within bfloat16 noise, the scores of each query's pairs scored on their own
        alone = ce.predict([(query, hit["text"]) for hit in found])
        np.testing.assert_allclose([hit["score"] for hit in reranked], alone[order], atol=0.02)
        assert [hit["rank"] for hit in reranked] == [1, 2, 3]
        by_id = {hit["id"]: hit for hit in found}
        for hit in reranked:  # the first stage's score and rank kept
            assert hit["text"] == by_id[hit["id"]]["text"]
            assert hit["first_stage_score"] == by_id[hit["id"]]["score"]
            assert hit["first_stage_rank"] == by_id[hit["id"]]["rank"]
    assert hits[1] == hits[3]
    # without rerank the search is what it was
    assert index.search(model, QUERIES, first_stage="dense", top_k=8, tokenizer=tiny_tokenizer) == first


def test_rerank_hits_on_any_first_stage() -> None:
    hits = [[{"text": "b"}, {"text": "a", "id": 7}], []]
    out = rerank_hits(Constant(), ["q", "r"], hits)  # equal scores keep the first stage's order
    assert out == [
        [{"text": "b", "score": 0.0, "rank": 1, "first_stage_rank": 1}, {"text": "a", "id": 7, "score": 0.0, "rank": 2,
                                                                         "first_stage_rank": 2}],
        [],
    ]  # fmt: skip

    class Length:
        def predict(self, pairs, **kwargs):
            return [float(len(document)) for _, document in pairs]

    out = rerank_hits(Length(), "q", [[{"text": "aa", "rank": 1}, {"text": "aaaa", "rank": 2}]], top_k=1)
    assert out == [[{"text": "aaaa", "rank": 1, "score": 4.0, "first_stage_rank": 2}]]
    assert rerank_hits(Constant(), [], []) == []


def _retrieval_set() -> RetrievalDataset:
    rng = random.Random(1)
    queries = {f"q{i}": text for i, text in enumerate(["a dog in the park", "music", "red car", "soup", "rain"])}
    corpus = {f"d{i}": text for i, text in enumerate(CORPUS)}
    qrels = {q: {d: 1 for d in rng.sample(sorted(corpus), 2)} for q in queries}
    return RetrievalDataset(queries=queries, corpus=corpus, qrels=qrels, k_values=(1, 3, 5, 100))


def test_evaluate_retrieval_side_by_side_with_an_oracle(tiny_tokenizer) -> None:
    model, data, depth = make_tiny_model(), _retrieval_set(), 4
    relevant = {(data.queries[q], data.corpus[d]) for q, judged in data.qrels.items() for d in judged}

    class Oracle:
        def predict(self, pairs, **kwargs):
            return np.asarray([1.0 if pair in relevant else 0.0 for pair in pairs])

    plain = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer)
    both = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, rerank=Oracle(), rerank_top=depth)
    assert {key: both[key] for key in plain} == plain  # the first stage's numbers unchanged
    assert both["rerank_top"] == depth and "rerank_num_queries" not in both
    # the ideal within what the first stage retrieved: relevant retrieved documents first, none added
    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(model, data, tokenizer=tiny_tokenizer)
    _, found = exact_search(queries, corpus, depth, similarity=model.config.similarity)
    retrieved = {q: {corpus_ids[j] for j in row} for q, row in zip(query_ids, found.tolist(), strict=True)}
    found_relevant = {q: len(retrieved[q] & set(data.qrels[q])) for q in query_ids}
    assert any(found_relevant[q] < len(data.qrels[q]) for q in query_ids)  # some positive missed: not injected
    for k in (1, 3):

        def dcg(n: int) -> float:
            return sum(1 / math.log2(i + 2) for i in range(n))

        ideal = np.mean([dcg(min(k, found_relevant[q])) / dcg(min(k, len(data.qrels[q]))) for q in query_ids])
        assert both[f"rerank_ndcg@{k}"] == pytest.approx(ideal)
    for k in data.k_values:
        assert both[f"rerank_ndcg@{k}"] >= both[f"ndcg@{k}"] - 1e-9
    # ranks past rerank_top follow the first stage: the same documents within 100
    assert both["rerank_recall@100"] == pytest.approx(both["recall@100"])
    assert both["rerank_recall@3"] >= both["recall@3"]


def test_bad_input_is_named(setup, tiny_tokenizer, caplog) -> None:
    model, index, ce = setup
    search = dict(tokenizer=tiny_tokenizer)
    for value in (0, -1, True, 2.5, "10"):
        with pytest.raises(ValueError, match=r"rerank_top=.*expected a positive int"):
            index.search(model, ["music"], first_stage="dense", top_k=2, rerank=ce, rerank_top=value, **search)
    with pytest.raises(ValueError, match=r"rerank_top=2 is below top_k=3"):
        index.search(model, ["music"], first_stage="dense", top_k=3, rerank=ce, rerank_top=2, **search)
    with pytest.raises(ValueError, match=r"rerank: expected a cross-encoder .*got str"):
        index.search(model, ["music"], first_stage="dense", top_k=3, rerank="ce-folder", **search)
    with pytest.raises(ValueError, match=r"one score per pair \(a cross-encoder with one output\)"):
        index.search(
            model,
            ["music"],
            first_stage="dense",
            top_k=3,
            rerank=tiny_cross_encoder(tiny_tokenizer, num_labels=3),
            **search,
        )
    # more than the index holds: all of it reranked, one warning naming both numbers
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_siamese.retrieval.fusion.rerank"):
        clamped = index.search(model, ["music"], first_stage="dense", top_k=3, rerank=ce, rerank_top=100, **search)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [f"rerank_top=100 is more than the {len(CORPUS)} documents searched: reranking all 16"]
    assert clamped == index.search(
        model, ["music"], first_stage="dense", top_k=3, rerank=ce, rerank_top=len(CORPUS), **search
    )
    with pytest.raises(ValueError, match=r"hits: expected one list of hits per query \(2 queries\), got 1"):
        rerank_hits(ce, ["a", "b"], [[{"text": "x"}]])
    with pytest.raises(ValueError, match=r"hits\[0\]\[1\] has no text"):
        rerank_hits(ce, ["a"], [[{"text": "x"}, {"id": 3}]])
    with pytest.raises(ValueError, match=r"queries\[0\] is int"):
        rerank_hits(ce, [3], [[{"text": "x"}]])
    with pytest.raises(ValueError, match=r"top_k=0"):
        rerank_hits(ce, ["a"], [[{"text": "x"}]], top_k=0)
    data = _retrieval_set()
    with pytest.raises(ValueError, match=r"rerank_top=0"):
        evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, rerank=ce, rerank_top=0)
    with pytest.raises(ValueError, match=r"expected a cross-encoder"):
        evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, rerank=object())


def test_a_saved_cross_encoder_reranks_the_same(setup, tiny_tokenizer, tmp_path: Path) -> None:
    model, index, ce = setup
    ce.save_pretrained(tmp_path / "ce")
    back = CrossEncoder.from_pretrained(tmp_path / "ce")
    kwargs = dict(top_k=4, tokenizer=tiny_tokenizer, rerank_top=10)
    ours, theirs = (
        index.search(model, QUERIES, first_stage="dense", rerank=ce, **kwargs),
        index.search(model, QUERIES, first_stage="dense", rerank=back, **kwargs),
    )
    assert [[hit["id"] for hit in hits] for hits in ours] == [[hit["id"] for hit in hits] for hits in theirs]
