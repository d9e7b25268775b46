"""encode(dtype=...) on a CPU that only emulates bfloat16/float16: float32 instead, with one warning."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import SENTENCES, make_tiny_model

from hf_siamese.modeling import low_precision as encoding


@pytest.fixture
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding, "native_low_precision", lambda dtype: False)
    monkeypatch.setattr(encoding, "_WARNED_EMULATED", set())


def test_emulated_bfloat16_runs_float32_and_warns_once(emulated, tiny_tokenizer, caplog) -> None:
    model = make_tiny_model()
    texts = SENTENCES * 4
    reference = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=2)
    with caplog.at_level(logging.WARNING, logger="hf_siamese.modeling.low_precision"):
        first = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=2, dtype=torch.bfloat16)
        second = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=2, dtype=torch.bfloat16)
    assert torch.equal(first, reference) and torch.equal(second, reference)
    warnings = [r.getMessage() for r in caplog.records if "no native bfloat16" in r.getMessage()]
    assert len(warnings) == 1 and "float32 instead" in warnings[0]
    assert model not in encoding._COPIES  # no bfloat16 copy of the weights was made


def test_native_bfloat16_runs_bfloat16(tiny_tokenizer) -> None:  # conftest: every dtype counts as native
    model = make_tiny_model()
    texts = SENTENCES * 4
    reference = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=2)
    low = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=2, dtype=torch.bfloat16)
    assert not torch.equal(low, reference)
    assert torch.nn.functional.cosine_similarity(low, reference).min() > 0.99


def test_cpu_dtype_leaves_float32_and_other_devices_alone(emulated) -> None:
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert encoding.cpu_dtype(None, cpu) is None
    assert encoding.cpu_dtype(torch.float32, cpu) == torch.float32
    assert encoding.cpu_dtype(torch.bfloat16, meta) == torch.bfloat16  # e.g. a GPU: its own business
    assert encoding.cpu_dtype(torch.float16, cpu) == torch.float32


def test_native_low_precision_asks_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # conftest's stand-in off: the real probe
    assert isinstance(encoding.native_low_precision(torch.bfloat16), bool)
    assert encoding.native_low_precision(torch.float32) is True


def test_trainer_warns_about_emulated_bf16(emulated, tmp_path, tiny_tokenizer, caplog) -> None:
    from helpers import make_args, scored_pairs

    from hf_siamese import SiameseTrainer
    from hf_siamese.losses import CosineSimilarityLoss

    def build(bf16: bool) -> None:
        SiameseTrainer(model=make_tiny_model(), args=make_args(tmp_path, bf16=bf16), train_dataset=scored_pairs(16),
                       processing_class=tiny_tokenizer, loss=CosineSimilarityLoss(score_range=(0, 5)))  # fmt: skip

    with caplog.at_level(logging.WARNING, logger="hf_siamese.training.trainer"):
        build(bf16=False)
        assert not any("without native" in r.getMessage() for r in caplog.records)
        build(bf16=True)
    assert any(
        "TrainingArguments(bf16=True) on a CPU without native bfloat16" in r.getMessage() for r in caplog.records
    )
