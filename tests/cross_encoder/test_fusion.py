"""Score fusion of the two stages: `fuse_scores` against the formula written out, `rerank_hits` at weights 0, 1 and
between (and the reranker's own saved weight as the default), `choose_first_stage_weight` picking 1 for a reranker
that reverses the first stage and 0 for an oracle, the weight saved in config.json and loaded back, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import TINY
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cross_encoder import CrossEncoder, RerankingDataset, choose_first_stage_weight, evaluate_reranking
from hf_siamese.retrieval.fusion.rerank import fuse_scores, rerank_hits
from tests.cross_encoder.test_evaluation import CANDIDATES, CORPUS, QRELS, QUERIES, OracleStub

# first-stage scores, best first, for CANDIDATES
FIRST_SCORES = {q: [0.9 - 0.1 * i for i in range(len(docs))] for q, docs in CANDIDATES.items()}


class FixedScores:
    """A reranker with fixed scores per text and an optional saved fusion weight, chosen on the corpus `HERE`."""

    num_labels = 1
    fusion_corpus = {"name": "here", "fingerprint": "HERE"}

    def __init__(self, scores: dict[str, float], first_stage_weight: float | None = None):
        self.scores = scores
        if first_stage_weight is not None:
            self.first_stage_weight = first_stage_weight

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        return np.array([self.scores[d] for _, d in pairs], dtype=np.float32)


def test_fuse_scores_is_the_weighted_sum_of_standardized_scores():
    reranker, first = np.array([2.0, 0.0, 1.0]), np.array([0.9, 0.8, 0.4])
    z_reranker = (reranker - 1.0) / np.sqrt(2 / 3)
    z_first = (first - first.mean()) / first.std()
    np.testing.assert_allclose(fuse_scores(reranker, first, 0.25), 0.75 * z_reranker + 0.25 * z_first)
    np.testing.assert_allclose(fuse_scores(reranker, first, 0.0), reranker)  # the reranker alone, unscaled
    np.testing.assert_allclose(fuse_scores(reranker, [0.5, 0.5, 0.5], 1.0), [0.0, 0.0, 0.0])  # equal scores: zeros
    with pytest.raises(ValueError, match="2 first-stage scores for 3 candidates"):
        fuse_scores(reranker, [0.1, 0.2], 0.5)


def hits() -> list[list[dict]]:
    texts, scores = ["a", "b", "c"], [0.9, 0.8, 0.4]
    return [
        [{"id": t, "text": t, "score": s, "rank": i + 1} for i, (t, s) in enumerate(zip(texts, scores, strict=True))]
    ]


def test_rerank_hits_weights_from_reranker_alone_to_first_stage_alone():
    reranker = FixedScores({"a": 0.0, "b": 1.0, "c": 2.0})  # the first stage's order reversed
    order = lambda found: [hit["id"] for hit in found[0]]  # noqa: E731
    assert order(rerank_hits(reranker, ["q"], hits())) == ["c", "b", "a"]  # no saved weight: the reranker alone
    assert order(rerank_hits(reranker, ["q"], hits(), first_stage_weight=1.0)) == ["a", "b", "c"]
    # w = 0.6: c = 0.4 * 1.2247 + 0.6 * -1.3728 = -0.33, a = 0.4 * -1.2247 + 0.6 * 0.9806 = 0.10, b ~ 0.23
    fused = rerank_hits(reranker, ["q"], hits(), first_stage_weight=0.6)[0]
    assert [hit["id"] for hit in fused] == ["b", "a", "c"]
    assert [hit["reranker_score"] for hit in fused] == [1.0, 0.0, 2.0]
    assert [hit["first_stage_score"] for hit in fused] == [0.8, 0.9, 0.4]
    # the reranker's own saved weight is the default on the corpus it was chosen on, and an explicit weight overrides
    # it; on another corpus (or an unknown one) the setting-free order: reciprocal ranks of the two orders
    assert order(rerank_hits(FixedScores(reranker.scores, 1.0), ["q"], hits(), corpus="HERE")) == ["a", "b", "c"]
    assert order(rerank_hits(FixedScores(reranker.scores, 0.5), ["q"], hits(), corpus="THERE")) == [
        "c",
        "a",
        "b",
    ]  # c, a tie (1/61 + 1/63): the reranker first
    assert order(rerank_hits(FixedScores(reranker.scores, 1.0), ["q"], hits(), first_stage_weight=0)) == ["c", "b", "a"]


@pytest.mark.parametrize("weight", [1.5, -0.1, True, "0.5"])
def test_bad_weights_are_named(weight):
    with pytest.raises(ValueError, match=r"first_stage_weight=.*expected a number in \[0, 1\]"):
        rerank_hits(FixedScores({"a": 0.0, "b": 1.0, "c": 2.0}), ["q"], hits(), first_stage_weight=weight)


def test_fusing_needs_first_stage_scores():
    found = [[{"id": "a", "text": "a"}, {"id": "b", "text": "b"}]]
    with pytest.raises(ValueError, match=r"hits\[0\]\[0\] has no first-stage 'score'"):
        rerank_hits(FixedScores({"a": 0.0, "b": 1.0}), ["q"], found, first_stage_weight=0.5)
    assert [h["id"] for h in rerank_hits(FixedScores({"a": 0.0, "b": 1.0}), ["q"], found)[0]] == ["b", "a"]


def scored_set(**overrides) -> RerankingDataset:
    fields = dict(queries=QUERIES, corpus=CORPUS, qrels=QRELS, candidates=CANDIDATES, first_stage_scores=FIRST_SCORES)
    return RerankingDataset(**{**fields, **overrides})


class AntiOracle(OracleStub):
    """Scores the relevant documents lowest: a reranker worse than any first stage."""

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        return -super().predict(pairs, batch_size, show_progress_bar)


def test_choose_first_stage_weight_keeps_the_first_stage_from_a_harmful_reranker():
    weight, table = choose_first_stage_weight(AntiOracle(), scored_set())
    first = evaluate_reranking(AntiOracle(), scored_set())["first_stage_ndcg@10"]
    assert table[0.0] < first and table[1.0] == pytest.approx(first)
    assert weight >= 0.5 and table[weight] == pytest.approx(first)  # the smallest weight that keeps its order
    oracle_weight, oracle_table = choose_first_stage_weight(OracleStub(), scored_set(), weights=[0.0, 0.5, 1.0])
    assert oracle_weight == 0.0 and oracle_table[0.0] == pytest.approx(1 / np.log2(1 + 1) * 2 / 3)  # q3 missed
    fused = evaluate_reranking(OracleStub(), scored_set(), first_stage_weight=1.0)
    assert fused["ndcg@10_delta"] == pytest.approx(0.0)


def test_reranking_set_scores_must_fit_its_candidates():
    with pytest.raises(ValueError, match="query 'q1' has 2 first-stage scores for 4 candidates"):
        scored_set(first_stage_scores={**FIRST_SCORES, "q1": [0.5, 0.4]})
    unscored = RerankingDataset(queries=QUERIES, corpus=CORPUS, qrels=QRELS, candidates=CANDIDATES, name="tiny")
    with pytest.raises(ValueError, match="fuses the first stage's scores, but query 'q1' has none"):
        evaluate_reranking(OracleStub(), unscored, first_stage_weight=0.5)


def test_cross_encoder_saves_and_loads_its_weight(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, max_position_embeddings=64, num_labels=1)).eval()
    reranker = CrossEncoder(model, tiny_tokenizer)
    assert reranker.first_stage_weight == 0.0
    with pytest.raises(ValueError, match=r"first_stage_weight=2.*\[0, 1\]"):
        reranker.first_stage_weight = 2
    reranker.first_stage_weight = 0.7
    reranker.save_pretrained(tmp_path / "ce")
    assert json.loads((tmp_path / "ce" / "config.json").read_text())["first_stage_weight"] == 0.7
    assert CrossEncoder.from_pretrained(tmp_path / "ce").first_stage_weight == 0.7


@pytest.fixture(scope="module")
def saved_reranker(tmp_path_factory, tiny_tokenizer):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, max_position_embeddings=64, num_labels=1)).eval()
    folder = tmp_path_factory.mktemp("fusion") / "ce"
    CrossEncoder(model, tiny_tokenizer).save_pretrained(folder)
    return folder


FIRST_STAGE_ACCEPTED = "expected a number in [0, 1] (0: the reranker's order alone, 1: the first stage's order)"
STAGES_ACCEPTED = (
    "expected {'dense': a, 'lexical': b}, each in [0, 1] with a + b <= 1 (the reranker's share is 1 - a - b)"
)


@pytest.mark.parametrize(
    ("key", "saved", "accepted"),
    [
        ("first_stage_weight", "abc", FIRST_STAGE_ACCEPTED),
        ("first_stage_weight", True, FIRST_STAGE_ACCEPTED),
        ("first_stage_weight", "0.3", FIRST_STAGE_ACCEPTED),
        ("first_stage_weight", 1.5, FIRST_STAGE_ACCEPTED),
        ("stage_weights", {"dense": "0.3", "lexical": 0.2}, STAGES_ACCEPTED),
        ("stage_weights", {"dense": 0.8, "lexical": 0.5}, STAGES_ACCEPTED),
        ("stage_weights", [0.3, 0.2], STAGES_ACCEPTED),
    ],
)
def test_a_bad_saved_weight_is_refused_naming_the_file_and_key(saved_reranker, tmp_path, key, saved, accepted):
    """config.json's fusion weights are checked where the reranker loads: not a raw float() error, nor a string or a
    boolean taken for a number."""
    from hf_siamese.cli.common import load_cross_encoder

    folder = tmp_path / "ce"
    folder.mkdir()
    for path in saved_reranker.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, key: saved}))
    message = f"{folder / 'config.json'}: {key}={saved!r}: {accepted}; correct the saved value, or remove the key"
    with pytest.raises(ValueError) as refused:
        CrossEncoder.from_pretrained(folder)
    assert str(refused.value) == message
    with pytest.raises(ValueError) as refused:  # the commands' one error line
        load_cross_encoder(str(folder))
    assert str(refused.value) == f"--rerank {folder}: {message}"


def test_a_null_saved_weight_is_none(saved_reranker, tmp_path):
    config = json.loads((saved_reranker / "config.json").read_text())
    assert "first_stage_weight" not in config or config["first_stage_weight"] in (None, 0, 0.0)
    reranker = CrossEncoder.from_pretrained(saved_reranker)
    assert reranker.first_stage_weight == 0.0 and reranker.stage_weights is None
