"""Cross-encoder evaluation: reranking a first stage's candidates (an oracle stub raises nDCG@10 over the first stage,
a reversed stub lowers it, both reported with the difference; missed positives are not injected), STS and accuracy of
pair rows, the first stage from a tiny bi-encoder, and CrossEncoderTrainer reporting them and keeping the best
checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer
from hf_siamese.data.beir import RetrievalDataset
from hf_siamese.evaluation.pairs import evaluate_classification, evaluate_scores
from hf_siamese.evaluation.reranking import evaluate_reranking
from hf_siamese.evaluation.reranking_set import RerankingDataset, first_stage_candidates

CORPUS = {
    "d1": "a man plays the guitar",
    "d2": "the dog runs in the park",
    "d3": "someone sings a song",
    "d4": "the stock market fell today",
    "d5": "a woman cooks soup in the kitchen",
    "d6": "two cats eat bread",
}
QUERIES = {"q1": "who plays music", "q2": "what did the market do", "q3": "food in the kitchen"}
QRELS = {"q1": {"d1": 1}, "q2": {"d4": 2, "d2": 0}, "q3": {"d5": 1}}
# The first stage finds q1's and q2's positives at rank 3, and misses q3's (d5) altogether.
CANDIDATES = {"q1": ["d2", "d3", "d1", "d4"], "q2": ["d1", "d2", "d4"], "q3": ["d6", "d2", "d3"]}


def reranking_set(candidates=CANDIDATES) -> RerankingDataset:
    return RerankingDataset(queries=QUERIES, corpus=CORPUS, qrels=QRELS, candidates=candidates, name="tiny")


class OracleStub:
    """Scores a pair 1 when the document is relevant to the query, else 0; counts its predict calls."""

    num_labels = 1

    def __init__(self):
        self.calls = []
        text_to_doc = {text: doc for doc, text in CORPUS.items()}
        text_to_query = {text: query for query, text in QUERIES.items()}
        self.relevant = lambda q, d: QRELS.get(text_to_query[q], {}).get(text_to_doc[d], 0)

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        self.calls.append(list(pairs))
        return np.array([float(self.relevant(q, d)) for q, d in pairs], dtype=np.float32)


class ReversedStub:
    """Scores each candidate by its first-stage rank: the first stage's order reversed."""

    num_labels = 1

    def __init__(self, candidates=CANDIDATES):
        text_to_doc = {text: doc for doc, text in CORPUS.items()}
        text_to_query = {text: query for query, text in QUERIES.items()}
        self.rank = lambda q, d: candidates[text_to_query[q]].index(text_to_doc[d])

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        return np.array([float(self.rank(q, d)) for q, d in pairs], dtype=np.float32)


def test_oracle_raises_ndcg_over_the_first_stage_in_one_predict_call():
    stub = OracleStub()
    metrics = evaluate_reranking(stub, reranking_set())
    assert len(stub.calls) == 1 and len(stub.calls[0]) == 4 + 3 + 3
    # q1 and q2: positive moved from rank 3 to rank 1; q3: the missed positive is not injected (0 either way).
    first = (1 / np.log2(4)) * 2 / 3
    assert metrics["first_stage_ndcg@10"] == pytest.approx(first)
    assert metrics["ndcg@10"] == pytest.approx(2 / 3)
    assert metrics["mrr@10"] == pytest.approx(2 / 3)
    assert metrics["first_stage_mrr@10"] == pytest.approx(2 / 9)
    assert metrics["ndcg@10_delta"] == pytest.approx(2 / 3 - first) and metrics["ndcg@10_delta"] > 0
    assert metrics["mrr@10_delta"] > 0
    assert metrics["candidate_recall"] == pytest.approx(2 / 3)
    assert metrics["num_queries"] == 3


def test_reversed_reranker_lowers_the_first_stage_and_the_delta_says_so():
    candidates = {"q1": ["d1", "d2", "d3", "d4"], "q2": ["d4", "d1", "d2"], "q3": ["d5", "d6", "d2"]}
    metrics = evaluate_reranking(ReversedStub(candidates), reranking_set(candidates))
    assert metrics["first_stage_ndcg@10"] == pytest.approx(1.0)
    assert metrics["ndcg@10"] < metrics["first_stage_ndcg@10"]
    assert metrics["ndcg@10_delta"] == pytest.approx(metrics["ndcg@10"] - 1.0) and metrics["ndcg@10_delta"] < 0
    assert metrics["mrr@10"] == pytest.approx((1 / 4 + 1 / 3 + 1 / 3) / 3)


def test_reranking_set_bad_input_is_named():
    with pytest.raises(ValueError, match="'q2' has no first-stage candidates"):
        reranking_set({**CANDIDATES, "q2": []})
    with pytest.raises(ValueError, match="not in the corpus: \\['d9'\\]"):
        reranking_set({**CANDIDATES, "q1": ["d9"]})
    with pytest.raises(ValueError, match="needs a RerankingDataset"):
        evaluate_reranking(OracleStub(), {"q1": ["d1"]})
    with pytest.raises(ValueError, match="predict"):
        evaluate_reranking(object(), reranking_set())


def test_sts_and_accuracy_of_pairs():
    class Scores:
        num_labels = 1

        def predict(self, pairs, batch_size=32, show_progress_bar=False):
            return np.array([len(q) + len(d) for q, d in pairs], dtype=np.float32)

    pairs = [("a", "b"), ("aa", "b"), ("aaa", "bb"), ("a", "bbbbbb")]
    sts = evaluate_scores(Scores(), pairs, [0.0, 1.0, 2.0, 3.0])
    assert sts["spearman"] == pytest.approx(1.0)
    assert evaluate_classification(Scores(), pairs, [0, 0, 1, 1], threshold=3.5) == {"accuracy": 1.0}

    class Classes:
        num_labels = 3

        def predict(self, pairs, batch_size=32, show_progress_bar=False):
            return np.eye(3, dtype=np.float32)[[len(q) % 3 for q, _ in pairs]]

    labels = ["a", "b", "c", "b"]
    result = evaluate_classification(Classes(), pairs, labels, label2id={"b": 1, "c": 0, "a": 2})
    assert result == {"accuracy": 0.5}  # predicted 1, 2, 0, 1
    with pytest.raises(ValueError, match="'z' is not a known class name"):
        evaluate_classification(Classes(), pairs, ["z"] * 4, label2id={"a": 0})
    with pytest.raises(ValueError, match="gold has 2 scores for 4 pairs"):
        evaluate_scores(Scores(), pairs, [0.0, 1.0])


def test_first_stage_from_a_tiny_bi_encoder(tiny_model, tiny_tokenizer):
    retrieval = RetrievalDataset(queries=QUERIES, corpus=CORPUS, qrels=QRELS, name="tiny")
    candidates = first_stage_candidates(tiny_model, retrieval, 4, tokenizer=tiny_tokenizer)
    assert set(candidates) == set(QRELS) and all(len(found) == 4 for found in candidates.values())
    dataset = RerankingDataset.from_first_stage(retrieval, tiny_model, 100, tokenizer=tiny_tokenizer)
    assert all(sorted(found) == sorted(CORPUS) for found in dataset.candidates.values())  # 100 > 6 documents
    assert evaluate_reranking(OracleStub(), dataset)["ndcg@10"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------- the trainer


def tiny_cross_encoder(num_labels: int = 1) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=64, num_labels=num_labels,
    )  # fmt: skip
    return BertForSequenceClassification(config)


def train_rows(n: int = 8) -> Dataset:
    texts = list(CORPUS.values())
    return Dataset.from_list(
        [{"query": QUERIES["q1"], "document": texts[i % 6], "label": float(i % 6 == 0)} for i in range(n)]
    )


def arguments(tmp_path, **overrides) -> TrainingArguments:
    settings = dict(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, use_cpu=True, report_to=[],
        save_strategy="no", learning_rate=1e-3,
    )  # fmt: skip
    return TrainingArguments(**{**settings, **overrides})


def test_trainer_reports_reranking_and_catches_a_reranker_that_lowers_the_first_stage(tmp_path, tiny_tokenizer):
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(), arguments(tmp_path), train_dataset=train_rows(),
        eval_dataset={"dev": reranking_set()}, processing_class=tiny_tokenizer,
    )  # fmt: skip
    metrics = trainer.evaluate()
    for name in ("ndcg@10", "mrr@10", "first_stage_ndcg@10", "first_stage_mrr@10", "ndcg@10_delta"):
        assert np.isfinite(metrics[f"eval_dev_{name}"])
    candidates = {"q1": ["d1", "d2", "d3", "d4"], "q2": ["d4", "d1", "d2"], "q3": ["d5", "d6", "d2"]}
    trainer.scorer = lambda: ReversedStub(candidates)
    metrics = trainer.evaluate(reranking_set(candidates))
    assert metrics["eval_first_stage_ndcg@10"] == pytest.approx(1.0)
    assert metrics["eval_ndcg@10_delta"] < 0


def test_trainer_keeps_the_best_reranking_checkpoint(tmp_path, tiny_tokenizer):
    args = arguments(
        tmp_path, eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1,
        load_best_model_at_end=True, metric_for_best_model="ndcg@10",
    )  # fmt: skip
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(), args, train_dataset=train_rows(), eval_dataset=reranking_set(),
        processing_class=tiny_tokenizer,
    )  # fmt: skip
    trainer.train()
    assert trainer.state.best_model_checkpoint is not None
    logged = [entry for entry in trainer.state.log_history if "eval_ndcg@10" in entry]
    assert len(logged) == 2
    assert trainer.state.best_metric == max(entry["eval_ndcg@10"] for entry in logged)


def test_trainer_sts_and_accuracy_on_pair_rows(tmp_path, tiny_tokenizer):
    texts = list(CORPUS.values())
    scored = Dataset.from_list([{"sentence1": texts[i], "sentence2": texts[-i], "score": i / 5} for i in range(6)])
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(), arguments(tmp_path), train_dataset=scored, processing_class=tiny_tokenizer
    )
    metrics = trainer.evaluate(scored)
    assert {"eval_loss", "eval_spearman", "eval_pearson"} <= set(metrics)
    assert "eval_accuracy" in trainer.evaluate(train_rows())
    nli = Dataset.from_list([{"premise": texts[i], "hypothesis": texts[-i], "label": i % 3} for i in range(6)])
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(3), arguments(tmp_path), train_dataset=nli, processing_class=tiny_tokenizer
    )
    assert 0 <= trainer.evaluate(nli)["eval_accuracy"] <= 1


# ---------------------------------------------------------------------------------------------------- the evaluators


def test_the_evaluators_are_the_functions():
    from hf_siamese.evaluation import PairClassificationEvaluator, PairScoreEvaluator, RerankingEvaluator

    evaluator = RerankingEvaluator(reranking_set(), batch_size=2, name="dev")
    assert evaluator(OracleStub()) == evaluate_reranking(OracleStub(), reranking_set())
    assert evaluator.primary_metric == "ndcg@10" and len(evaluator) == 3
    with pytest.raises(ValueError, match="needs a RerankingDataset"):
        RerankingEvaluator({"q1": ["d1"]})

    class Scores:
        num_labels = 1

        def predict(self, pairs, batch_size=32, show_progress_bar=False):
            return np.array([len(q) + len(d) for q, d in pairs], dtype=np.float32)

    pairs = [("a", "b"), ("aa", "b"), ("aaa", "bb"), ("a", "bbbbbb")]
    scores = PairScoreEvaluator(pairs, [0.0, 1.0, 2.0, 3.0])
    assert scores(Scores()) == evaluate_scores(Scores(), pairs, [0.0, 1.0, 2.0, 3.0]) and scores.primary_metric in (
        scores(Scores())
    )
    classes = PairClassificationEvaluator(pairs, [0, 0, 1, 1], threshold=3.5)
    assert classes(Scores()) == {"accuracy": 1.0} and classes.primary_metric == "accuracy"
    with pytest.raises(ValueError, match="labels has 1 entries for 4 pairs"):
        PairClassificationEvaluator(pairs, [0])


def test_trainer_takes_an_evaluator_and_keeps_the_best_by_its_primary_metric(tmp_path, tiny_tokenizer):
    from hf_siamese.evaluation import RerankingEvaluator

    args = arguments(
        tmp_path, eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1, load_best_model_at_end=True
    )
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(), args, train_dataset=train_rows(),
        eval_dataset={"dev": RerankingEvaluator(reranking_set(), name="rerank")}, processing_class=tiny_tokenizer,
    )  # fmt: skip
    trainer.train()
    assert trainer.args.metric_for_best_model == "dev_rerank_ndcg@10" and trainer.args.greater_is_better
    logged = [
        entry["eval_dev_rerank_ndcg@10"] for entry in trainer.state.log_history if "eval_dev_rerank_ndcg@10" in entry
    ]
    assert len(logged) == 2 and trainer.state.best_metric == max(logged)
