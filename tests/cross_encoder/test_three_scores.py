"""Three scores fused (the reranker's, the dense and the lexical), weighed on held-out queries: `fuse_stages` against
the formula written out, `rerank_hits` choosing between the two- and three-score orders, the never-worse rule (no
share for the reranker: the first stage's order, the reranker not run), `choose_fusion` keeping three-score weights
only where they beat the two-score order on the queries it is given, hybrid candidates with both stages' scores,
and the weights saved with the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cross_encoder import CrossEncoder, RerankingDataset, choose_fusion
from hf_siamese.retrieval.fusion.rerank import check_stage_weights, fuse_stages, rerank_hits
from tests.cross_encoder.test_evaluation import CANDIDATES, CORPUS, QRELS, QUERIES, OracleStub
from tests.cross_encoder.test_fusion import FIRST_SCORES, AntiOracle, FixedScores


def z(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean()) / values.std()


def test_fuse_stages_is_the_weighted_sum_and_a_missing_score_takes_the_floor():
    reranker, dense, lexical = [2.0, 0.0, 1.0], [0.9, 0.8, 0.4], [3.0, None, 1.0]
    fused = fuse_stages(reranker, {"dense": dense, "lexical": lexical}, {"dense": 0.3, "lexical": 0.2})
    lexical_z = np.array([1.0, -1.0, -1.0])  # z of (3, 1) is (1, -1); the missing one takes the lowest, -1
    np.testing.assert_allclose(fused, 0.5 * z(reranker) + 0.3 * z(dense) + 0.2 * lexical_z)
    only_stages = fuse_stages(reranker, {"dense": dense, "lexical": lexical}, {"dense": 0.5, "lexical": 0.5})
    np.testing.assert_allclose(only_stages, 0.5 * z(dense) + 0.5 * lexical_z)  # no share left for the reranker


@pytest.mark.parametrize(
    "weights",
    [{"dense": 0.7, "lexical": 0.4}, {"dense": -0.1, "lexical": 0.1}, {"dense": 0.5}, {"dense": True, "lexical": 0}],
)
def test_bad_stage_weights_are_named(weights):
    with pytest.raises(ValueError, match=r"stage_weights=.*expected \{'dense': a, 'lexical': b\}"):
        check_stage_weights(weights)


def hybrid_hits() -> list[list[dict]]:
    rows = [("a", 0.9, 0.9, 1.0), ("b", 0.5, 0.8, None), ("c", 0.4, None, 4.0)]
    return [
        [
            {"id": t, "text": t, "score": s, "rank": i + 1, "dense_score": d, "lexical_score": lex}
            for i, (t, s, d, lex) in enumerate(rows)
        ]
    ]


class WithStageWeights(FixedScores):
    def __init__(self, scores, stage_weights, first_stage_weight=None):
        super().__init__(scores, first_stage_weight)
        self.stage_weights = stage_weights


def test_rerank_hits_fuses_three_scores_where_the_hits_carry_them():
    scores = {"a": 0.0, "b": 1.0, "c": 2.0}
    stages = {"dense": 0.2, "lexical": 0.6}
    reranked = rerank_hits(WithStageWeights(scores, stages), ["q"], hybrid_hits(), corpus="HERE")[0]
    expected = fuse_stages([0.0, 1.0, 2.0], {"dense": [0.9, 0.8, None], "lexical": [1.0, None, 4.0]}, stages)
    assert [hit["id"] for hit in reranked] == [["a", "b", "c"][i] for i in np.argsort(-expected, kind="stable")]
    assert [hit["score"] for hit in reranked] == pytest.approx(sorted(expected, reverse=True))
    assert {hit["id"]: hit["reranker_score"] for hit in reranked} == scores
    # an explicit first-stage weight asks for the two-score order; hits without stage scores get it too
    two = rerank_hits(WithStageWeights(scores, stages), ["q"], hybrid_hits(), first_stage_weight=0.0)[0]
    assert [hit["id"] for hit in two] == ["c", "b", "a"]
    plain = [[{k: v for k, v in hit.items() if not k.endswith("_score")} for hit in hybrid_hits()[0]]]
    assert [hit["id"] for hit in rerank_hits(WithStageWeights(scores, stages), ["q"], plain, corpus="HERE")[0]] == [
        "c", "b", "a"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="the hits carry no 'dense_score'"):
        rerank_hits(FixedScores(scores), ["q"], plain, stage_weights=stages)


class Refuses(FixedScores):
    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        raise AssertionError("the reranker must not run when the weights give it no share")


@pytest.mark.parametrize("weights", [{"first_stage_weight": 1.0}, {"stage_weights": {"dense": 0.5, "lexical": 0.5}}])
def test_no_share_for_the_reranker_keeps_the_first_stage_order(weights):
    reranked = rerank_hits(Refuses({}), ["q"], hybrid_hits(), top_k=2, **weights)[0]
    assert [(hit["id"], hit["rank"], hit["score"]) for hit in reranked] == [("a", 1, 0.9), ("b", 2, 0.5)]


def hybrid_set(**overrides) -> RerankingDataset:
    """The evaluation set of test_evaluation with each candidate's dense score (the first stage's) and a lexical
    score that ranks the relevant documents first: three scores can beat two here."""
    lexical = {
        q: [
            2.0 if QRELS.get(q, {}).get(doc, 0) > 0 else (None if i % 3 == 2 else 0.1 * i) for i, doc in enumerate(docs)
        ]
        for q, docs in CANDIDATES.items()
    }
    stage_scores = {q: {"dense": FIRST_SCORES[q], "lexical": lexical[q]} for q in CANDIDATES}
    fields = dict(
        queries=QUERIES, corpus=CORPUS, qrels=QRELS, candidates=CANDIDATES, first_stage_scores=FIRST_SCORES,
        stage_scores=stage_scores,
    )  # fmt: skip
    return RerankingDataset(**{**fields, **overrides})


def test_choose_fusion_keeps_three_scores_only_where_they_beat_two():
    chosen = choose_fusion(AntiOracle(), hybrid_set())
    assert chosen["stage_weights"] is not None and chosen["stage_weights"]["lexical"] > 0
    assert chosen["three_scores"] > chosen["two_scores"]
    assert 0 <= chosen["rrf3"] <= 1 and chosen["first_stage"] == pytest.approx(chosen["two_scores"])
    # the oracle alone is perfect: the two-score order with weight 0 wins, three-score weights are not kept
    oracle = choose_fusion(OracleStub(), hybrid_set())
    assert oracle["first_stage_weight"] == 0.0 and oracle["stage_weights"] is None
    assert oracle["best_three_weights"] == {"dense": 0.0, "lexical": 0.0}
    # chosen on the queries given: with no lexical scores there is nothing to weigh three ways
    assert "three_scores" not in choose_fusion(AntiOracle(), hybrid_set(stage_scores={}))


def test_stage_weights_are_saved_with_the_model(tiny_tokenizer, tmp_path):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, max_position_embeddings=64, num_labels=1))
    reranker = CrossEncoder(model, tiny_tokenizer)
    assert reranker.stage_weights is None
    reranker.stage_weights = {"dense": 0.2, "lexical": 0.3}
    reranker.save_pretrained(tmp_path / "ce")
    assert CrossEncoder.from_pretrained(tmp_path / "ce").stage_weights == {"dense": 0.2, "lexical": 0.3}
    with pytest.raises(ValueError, match="stage_weights="):
        reranker.stage_weights = {"dense": 0.9, "lexical": 0.3}


def test_evaluate_reranking_follows_the_same_precedence_as_search():
    """An explicit first-stage weight asks for the two-score order, as in rerank_hits; without one, a reranker's own
    stage weights fuse three scores over hybrid candidates."""
    from hf_siamese.cross_encoder import evaluate_reranking

    reranker = AntiOracle()
    reranker.stage_weights = {"dense": 0.0, "lexical": 1.0}  # the lexical order alone: perfect here
    three = evaluate_reranking(reranker, hybrid_set())
    two = evaluate_reranking(reranker, hybrid_set(), first_stage_weight=0.0)
    assert three["ndcg@10"] > two["ndcg@10"]
    assert two["ndcg@10"] == pytest.approx(evaluate_reranking(AntiOracle(), hybrid_set())["ndcg@10"])
