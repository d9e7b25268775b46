"""The evaluator contract (`evaluator(model) -> dict` with a `primary_metric`): the STS evaluator of a bi-encoder gives
what the metric function gives on the same embeddings, encodes each (prompt, text) once, and names its keys; a
duck-typed evaluator counts; both trainers run evaluators given as eval sets, log `eval_{name}_{metric}` and keep the
best checkpoint by the primary metric when `metric_for_best_model` is left at its default."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SENTENCES, make_tiny_model
from datasets import Dataset
from transformers import TrainingArguments

from hf_siamese import SiameseTrainer
from hf_siamese.evaluation import (
    EmbeddingSimilarityEvaluator,
    Evaluator,
    evaluator_primary_key,
    is_evaluator,
    prefixed_metrics,
)
from hf_siamese.metrics import sts_metrics_from_embeddings

GOLD = [0.1, 0.5, 0.9, 0.3, 0.7]


class StubEncoder:
    """`encode` of fixed vectors per text (a hash of the prompt + text), recording each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict]] = []

    def vector(self, text: str) -> np.ndarray:
        return np.random.default_rng(sum(map(ord, text))).normal(size=8).astype(np.float32)

    def encode(self, texts: list[str], **options) -> np.ndarray:
        self.calls.append((list(texts), options))
        prompt = options.get("prompt") or ""
        return np.stack([self.vector(prompt + text) for text in texts])


def test_sts_evaluator_is_the_metric_on_its_embeddings() -> None:
    left, right = SENTENCES, SENTENCES[::-1]
    evaluator = EmbeddingSimilarityEvaluator(left, right, GOLD, score_range=(0, 1), batch_size=4)
    model = StubEncoder()
    metrics = evaluator(model)
    vectors = {text: model.vector(text) for text in SENTENCES}
    expected = sts_metrics_from_embeddings(
        np.stack([vectors[t] for t in left]), np.stack([vectors[t] for t in right]), GOLD, score_range=(0, 1)
    )
    assert metrics == pytest.approx(expected)
    assert evaluator.primary_metric == "spearman_cosine" and evaluator.primary_metric in metrics
    assert len(model.calls) == 1 and sorted(model.calls[0][0]) == sorted(SENTENCES)  # each text once
    assert model.calls[0][1]["batch_size"] == 4 and "prompt" not in model.calls[0][1]  # None: the model's default
    assert [e.shape for e in evaluator.last_embeddings] == [(5, 8), (5, 8)]


def test_sts_evaluator_prompts_names_and_percent() -> None:
    model = StubEncoder()
    evaluator = EmbeddingSimilarityEvaluator(
        SENTENCES, SENTENCES, GOLD, prompts=("query: ", "passage: "), similarity_fns=["dot"], percent=True,
        name="dev", max_length=16,
    )  # fmt: skip
    metrics = evaluator(model)
    assert set(metrics) == {"spearman_dot", "pearson_dot"} and evaluator.primary_metric == "spearman_dot"
    assert sorted(options["prompt"] for _, options in model.calls) == ["passage: ", "query: "]
    assert all(options["max_length"] == 16 for _, options in model.calls)
    assert abs(metrics["spearman_dot"]) <= 100 and evaluator_primary_key(evaluator) == "dev_spearman_dot"
    assert set(evaluator.prefixed(metrics, "eval")) == {"eval_dev_spearman_dot", "eval_dev_pearson_dot"}
    with pytest.raises(ValueError, match="sentences1 and sentences2 must have the same length"):
        EmbeddingSimilarityEvaluator(SENTENCES, SENTENCES[:2], GOLD)
    with pytest.raises(ValueError, match="gold"):
        EmbeddingSimilarityEvaluator(SENTENCES, SENTENCES, GOLD[:3], score_range=(0, 1))(model)


def test_contract_helpers() -> None:
    class Recall:  # no base class: the shape is what counts
        primary_metric = "recall"
        name = "mine"

        def __call__(self, model) -> dict[str, float]:
            return {"recall": 0.5, "num_queries": 2}

    assert is_evaluator(Recall()) and not is_evaluator({"primary_metric": "x"}) and not is_evaluator(len)
    assert evaluator_primary_key(Recall()) == "mine_recall"
    assert prefixed_metrics({"a": 1.0, "n": 2}, "eval", "dev", skip=("n",)) == {"eval_dev_a": 1.0}
    assert prefixed_metrics({"a": 1.0}) == {"a": 1.0}
    with pytest.raises(NotImplementedError, match="does not implement"):
        Evaluator()(None)


class MeanNormEvaluator(Evaluator):
    """A user's evaluator: the mean similarity of the first sentence with the others (a number training changes)."""

    primary_metric = "norm"
    name = "probe"
    greater_is_better = False

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    def __call__(self, model) -> dict[str, float]:
        self.calls += 1
        vectors = model.encode(SENTENCES, tokenizer=self.tokenizer, convert_to_numpy=True)
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return {"norm": float((vectors[1:] @ vectors[0]).mean())}


def test_siamese_trainer_runs_an_evaluator_and_keeps_the_best_by_its_primary_metric(tmp_path, tiny_tokenizer) -> None:
    rows = Dataset.from_dict({"anchor": SENTENCES, "positive": SENTENCES[1:] + SENTENCES[:1]})
    args = TrainingArguments(
        str(tmp_path), use_cpu=True, report_to=[], per_device_train_batch_size=5, max_steps=3, learning_rate=5e-3,
        eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1, load_best_model_at_end=True,
    )  # fmt: skip
    probe = MeanNormEvaluator(tiny_tokenizer)
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=args, train_dataset=rows, eval_dataset={"dev": probe},
        processing_class=tiny_tokenizer, loss="mnr",
    )  # fmt: skip
    trainer.train()
    assert probe.calls >= 3
    assert trainer.args.metric_for_best_model == "dev_probe_norm" and trainer.args.greater_is_better is False
    logged = [(e["step"], e["eval_dev_probe_norm"]) for e in trainer.state.log_history if "eval_dev_probe_norm" in e]
    assert len(logged) == 3
    best_step, best = min(logged, key=lambda entry: (entry[1], entry[0]))
    assert trainer.state.best_metric == pytest.approx(best)
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best_step}")
    direct = trainer.evaluate(probe)  # passed explicitly: logged the same way
    assert set(direct) >= {"eval_probe_norm", "eval_runtime"}


def test_siamese_trainer_sts_rows_through_the_evaluator(tmp_path, tiny_tokenizer) -> None:
    scored = Dataset.from_dict({"sentence1": SENTENCES, "sentence2": SENTENCES[::-1], "score": GOLD})
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to=[], per_device_eval_batch_size=2)
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=args, train_dataset=scored, processing_class=tiny_tokenizer, loss="cosine"
    )
    metrics = trainer.evaluate(scored)
    evaluator = EmbeddingSimilarityEvaluator(
        SENTENCES, SENTENCES[::-1], GOLD, score_range=(0, 1), tokenizer=tiny_tokenizer, prompts=("", "")
    )
    direct = evaluator(trainer.model)
    assert metrics["eval_spearman_cosine"] == pytest.approx(direct["spearman_cosine"], abs=1e-6)
    assert "eval_loss" in metrics
