"""Real tokens per second (and MFU where the GPU's peak is known) in both trainers' logs: the count is the batches'
non-pad tokens exactly, read without waiting for the device."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from conftest import make_tiny_model
from datasets import Dataset
from helpers import make_args, sentence

from hf_siamese import SiamesePairCollator, SiameseTrainer
from hf_siamese.training.throughput import PEAK_TFLOPS, non_embedding_parameters, peak_flops, real_tokens


def _pairs(n: int = 24, seed: int = 0) -> Dataset:
    rng = random.Random(seed)
    anchors = [f"{sentence(rng)} {i}" for i in range(n)]
    return Dataset.from_dict({"anchor": anchors, "positive": [a + " ." for a in anchors]})


def _non_pad_tokens(rows: Dataset, tokenizer) -> int:
    collator = SiamesePairCollator(tokenizer, max_length=64)
    return sum(int(collator([row])["attention_mask"].sum()) for row in rows)


def test_the_bi_encoder_trainer_logs_real_tokens_per_second(tmp_path: Path, tiny_tokenizer) -> None:
    rows = _pairs()
    args = make_args(tmp_path, num_train_epochs=1, logging_steps=1, per_device_train_batch_size=8)
    trainer = SiameseTrainer(model=make_tiny_model(), args=args, train_dataset=rows, processing_class=tiny_tokenizer)
    metrics = trainer.train().metrics
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 3 and all(entry["tokens_per_second"] > 0 for entry in logged)
    assert "mfu" not in logged[0]  # a CPU: no peak to compare with
    final = trainer.state.log_history[-1]
    assert final["train_real_tokens"] == _non_pad_tokens(rows, tiny_tokenizer)  # every non-pad token, once
    assert final["train_tokens_per_second"] > 0 and metrics["train_tokens_per_second"] > 0


def test_the_cross_encoder_trainer_logs_them_too(tmp_path: Path, tiny_tokenizer) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    from hf_siamese.cross_encoder import CrossEncoder, CrossEncoderTrainer

    rng = random.Random(1)
    rows = Dataset.from_dict(
        {
            "query": [sentence(rng) for _ in range(16)],
            "document": [sentence(rng) for _ in range(16)],
            "label": [1.0] * 16,
        }
    )
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                        max_position_embeddings=64, num_labels=1)  # fmt: skip
    model = CrossEncoder(BertForSequenceClassification(config), tiny_tokenizer)
    args = make_args(tmp_path, num_train_epochs=1, logging_steps=1, per_device_train_batch_size=8)
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=rows, processing_class=tiny_tokenizer)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logged and all(entry["tokens_per_second"] > 0 for entry in logged)
    assert trainer.state.log_history[-1]["train_real_tokens"] > 0


def test_real_tokens_from_the_host_or_the_mask() -> None:
    assert real_tokens({"text_lengths": [[3, 4], [5, 1]]}) == 13
    assert int(real_tokens({"attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])})) == 3
    assert real_tokens({}) == 0


def test_peak_and_parameters() -> None:
    assert peak_flops("cpu", "bf16") is None
    assert PEAK_TFLOPS["H100"]["bf16"] == 989.0
    model = make_tiny_model()
    embeddings = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters())
    assert non_embedding_parameters(model) == sum(p.numel() for p in model.parameters()) - embeddings > 0
