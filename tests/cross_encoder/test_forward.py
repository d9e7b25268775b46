"""The cross-encoder's packed route (forward.py): the same logits as transformers' padded forward for BERT and RoBERTa
heads, in float32 and under a low-precision runner; left padding and other heads stay padded; training packed gives
the padded route's loss curve; the collator and predict hand the pairs' lengths over from the host. Train pairs
tokenized once before training make the batches raw rows make, and train the same."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from conftest import tiny_encoder_config
from datasets import Dataset
from helpers import SCORED_PAIRS
from transformers import AutoModelForSequenceClassification, DistilBertConfig, TrainingArguments

from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.cross_encoder.collator import CrossEncoderCollator
from hf_siamese.cross_encoder.forward import first_state_reader, packs, pair_logits
from hf_siamese.cross_encoder.last_layer import can_skip
from hf_siamese.cross_encoder.tokenization import PAIR_TOKENS, tokenize_pair_rows
from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer


def tiny_classifier(model_type: str = "bert", seed: int = 0, dropout: float | None = None):
    torch.manual_seed(seed)
    config = tiny_encoder_config(model_type)
    config.num_labels = 1
    if dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
        if hasattr(config, "classifier_dropout"):
            config.classifier_dropout = dropout
    return AutoModelForSequenceClassification.from_config(config).eval()


def batch_of(tokenizer, pairs=SCORED_PAIRS):
    return CrossEncoderCollator(tokenizer, max_length=48)(
        [{"query": q, "document": d, "label": float(i % 2)} for i, (q, d) in enumerate(pairs)]
    )


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_packed_logits_equal_the_padded_forward(tiny_tokenizer, model_type) -> None:
    model = tiny_classifier(model_type)
    batch = batch_of(tiny_tokenizer)
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    assert batch["text_lengths"] == lengths and len(set(lengths)) > 1  # pairs of several lengths: real packing
    assert packs(model)
    with torch.no_grad():
        padded = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
        packed = pair_logits(model, batch)
        unpacked = pair_logits(model, batch, packing=False)
        without_lengths = pair_logits(model, {k: v for k, v in batch.items() if k != "text_lengths"})
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(unpacked, padded, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(without_lengths, padded, atol=1e-5, rtol=1e-5)
    # the hook that feeds the head the pairs' first states is gone after the call
    assert not first_state_reader(model)._forward_pre_hooks


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_a_separate_runner_under_the_float32_head_gives_the_same_logits(tiny_tokenizer, model_type) -> None:
    model = tiny_classifier(model_type)
    runner = copy.deepcopy(model)  # the low-precision copy's place (float32 here, so the numbers must agree)
    batch = batch_of(tiny_tokenizer)
    with torch.no_grad():
        expected = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
        for packing in (True, False):
            torch.testing.assert_close(pair_logits(model, batch, packing, runner), expected, atol=1e-5, rtol=1e-5)


def test_left_padding_and_other_heads_run_padded(tiny_tokenizer) -> None:
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.padding_side = "left"
    batch = batch_of(tokenizer)
    assert "text_lengths" not in batch
    model = tiny_classifier("bert")
    with torch.no_grad():
        expected = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
        torch.testing.assert_close(pair_logits(model, batch), expected, atol=1e-5, rtol=1e-5)
    config = DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=37, num_labels=1)
    assert not packs(AutoModelForSequenceClassification.from_config(config))


@pytest.mark.parametrize("batch_size", [4, 1])
def test_predict_packs_and_scores_like_the_padded_route(tiny_tokenizer, batch_size) -> None:
    scorer = CrossEncoder(tiny_classifier("bert"), tiny_tokenizer, max_length=48)
    pairs = list(SCORED_PAIRS) + [(d, q) for q, d in SCORED_PAIRS]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # predict scores two batches at a time in two threads through one model
    try:
        packed = scorer.predict(pairs, batch_size=batch_size, dtype=None)
        scorer.packing = False
        padded = scorer.predict(pairs, batch_size=batch_size, dtype=None)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(torch.as_tensor(packed), torch.as_tensor(padded), atol=1e-6, rtol=1e-5)


def train_losses(tokenizer, packing: bool, tmp_path, dropout: float) -> list[float]:
    model = tiny_classifier("bert", seed=3, dropout=dropout).train()
    rows = [{"query": q, "document": d, "label": float(i % 2)} for i, (q, d) in enumerate(SCORED_PAIRS)] * 2
    args = TrainingArguments(
        output_dir=str(tmp_path / f"run-{packing}"),
        per_device_train_batch_size=4,
        max_steps=6,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=7,
        data_seed=7,
        disable_tqdm=True,
    )
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer
    )
    assert trainer.packing
    trainer.packing = packing
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_training_packed_gives_the_padded_loss_curve(tiny_tokenizer, tmp_path) -> None:
    packed = train_losses(tiny_tokenizer, True, tmp_path, dropout=0.0)
    padded = train_losses(tiny_tokenizer, False, tmp_path, dropout=0.0)
    assert len(packed) == 6
    assert packed == pytest.approx(padded, rel=1e-4, abs=1e-5)
    assert packed[-1] < packed[0]  # it learns


ROWS = {
    "pairs": [{"query": q, "document": d, "label": float(i % 2)} for i, (q, d) in enumerate(SCORED_PAIRS)],
    "tuples": [{"query": q, "positive": d, "negative": q + " " + d} for q, d in SCORED_PAIRS],
    "lists": [
        {"query": q, "documents": [d, "the stock market"][: 1 + i % 2], "scores": [1.0, 0.0][: 1 + i % 2]}
        for i, (q, d) in enumerate(SCORED_PAIRS)
    ],
}


@pytest.mark.parametrize("shape", list(ROWS))
def test_pretokenized_rows_make_the_batch_raw_rows_make(tiny_tokenizer, shape) -> None:
    collator = CrossEncoderCollator(tiny_tokenizer, max_length=40)
    dataset = Dataset.from_list(ROWS[shape])
    tokenized = tokenize_pair_rows(collator, dataset)
    assert PAIR_TOKENS in tokenized.column_names and len(tokenized) == len(dataset)
    raw, ready = collator(list(dataset)), collator(list(tokenized))
    assert set(raw) == set(ready)
    for key, value in raw.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(ready[key], value)
        else:
            assert ready[key] == value


def test_the_trainer_tokenizes_once_and_trains_as_before(tiny_tokenizer, tmp_path) -> None:
    def losses(pretokenize: bool) -> tuple[list[float], Any]:
        model = tiny_classifier("bert", seed=3, dropout=0.0).train()
        args = TrainingArguments(
            output_dir=str(tmp_path / f"run-{pretokenize}"), per_device_train_batch_size=2, max_steps=4,
            learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=7,
            disable_tqdm=True,
        )  # fmt: skip
        rows = Dataset.from_list(ROWS["tuples"] * 2)
        trainer = CrossEncoderTrainer(
            model=model, args=args, train_dataset=rows, processing_class=tiny_tokenizer, pretokenize=pretokenize
        )
        trainer.train()
        return [e["loss"] for e in trainer.state.log_history if "loss" in e], trainer.training_rows()

    tokenized, rows = losses(True)
    assert PAIR_TOKENS in rows.column_names
    plain, raw = losses(False)
    assert PAIR_TOKENS not in raw.column_names
    assert tokenized == pytest.approx(plain, rel=1e-5, abs=1e-6)


def test_pretokenize_must_be_a_bool(tiny_tokenizer) -> None:
    with pytest.raises(ValueError, match="pretokenize='yes'"):
        CrossEncoderTrainer(model=tiny_classifier(), processing_class=tiny_tokenizer, loss="bce", pretokenize="yes")


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_scoring_skips_the_last_layers_unread_tokens_exactly(tiny_tokenizer, attention) -> None:
    """In inference the last layer runs for each pair's first token alone (last_layer.py): the same logits as the
    model's full forward, packed or padded; in training (or with gradients) the full layer runs."""
    model = tiny_classifier("bert")
    model.config._attn_implementation = attention
    batch = batch_of(tiny_tokenizer)
    base = model.bert
    with torch.no_grad():
        assert can_skip(base)
        expected = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
        for packing in (True, False):
            torch.testing.assert_close(pair_logits(model, batch, packing), expected, atol=1e-5, rtol=1e-5)
    assert not can_skip(base)  # gradients on
    model.train()
    with torch.no_grad():
        assert not can_skip(base)
