"""The streamed batches of encode() on accelerators (forced on the CPU here) give what the all-at-once path gives."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import SENTENCES, make_tiny_model

import hf_siamese.modeling.batching as batching
from hf_siamese.modeling import encoding
from hf_siamese.modeling.batching import StreamedBatches

TEXTS = [s * (1 + i % 4) for i, s in enumerate(SENTENCES * 9)] + ["", "a", SENTENCES[0]]  # repeats, empty, 48 texts


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding, "streams_batches", lambda device: True)
    monkeypatch.setattr(batching, "WINDOW_BATCHES", 2)  # several windows on a small input
    monkeypatch.setattr(batching, "QUEUE_DEPTH", 1)  # the producer waits on the consumer


@pytest.mark.parametrize("pooling", ["mean", "cls", "weightedmean"])
def test_streamed_encode_equals_all_at_once(tiny_tokenizer, streamed: None, monkeypatch, pooling: str) -> None:
    # Batches differ between the paths (windows sorted by characters, then tokens): padding must not matter.
    model = make_tiny_model(pooling=pooling)
    got = model.encode(TEXTS, tokenizer=tiny_tokenizer, batch_size=4)
    monkeypatch.setattr(encoding, "streams_batches", lambda device: False)
    expected = model.encode(TEXTS, tokenizer=tiny_tokenizer, batch_size=4)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def test_streamed_batches_cover_every_text_once(tiny_tokenizer, streamed: None) -> None:
    source = StreamedBatches(TEXTS, tiny_tokenizer, max_length=8, batch_size=5, pin_memory=False)
    items = list(source)
    assert len(items) == len(source) == 10
    positions = torch.cat([rows for rows, _ in items])
    assert sorted(positions.tolist()) == list(range(len(TEXTS)))
    for rows, batch in items:
        assert batch["input_ids"].shape[0] == len(rows) and batch["input_ids"].shape[1] <= 8
        lengths = batch["attention_mask"].sum(1)
        assert lengths.tolist() == sorted(lengths.tolist(), reverse=True)  # sorted by tokens within the window
    long = {t for t in TEXTS if len(tiny_tokenizer(t)["input_ids"]) > 8}
    assert source.truncated == long and long


def test_streamed_truncation_warning_counts_repeats(tiny_tokenizer, streamed: None, caplog) -> None:
    model = make_tiny_model()
    with caplog.at_level(logging.WARNING, logger="hf_siamese.modeling.encoding"):
        model.encode(TEXTS, tokenizer=tiny_tokenizer, batch_size=4, max_length=8)
    long = sum(1 for t in TEXTS if len(tiny_tokenizer(t)["input_ids"]) > 8)
    assert f"{long} of {len(TEXTS)} texts were longer than max_length=8" in caplog.text


def test_an_error_in_the_producer_reaches_the_caller(tiny_tokenizer, streamed: None) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("tokenizer broke")

    source = StreamedBatches(TEXTS, broken, max_length=8, batch_size=4)
    with pytest.raises(RuntimeError, match="tokenizer broke"):
        list(source)


def test_stopping_early_ends_the_producer(tiny_tokenizer, streamed: None) -> None:
    source = StreamedBatches(TEXTS, tiny_tokenizer, max_length=8, batch_size=2)
    iterator = iter(source)
    next(iterator)
    iterator.close()  # the consumer stops with a full queue: the producer must not hang the join
