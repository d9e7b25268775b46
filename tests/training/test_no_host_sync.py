"""No training step reads a tensor back to the host.

On a GPU, reading a value of a device tensor (`.item()`, `bool(t)`, `.tolist()`, `nonzero`, boolean indexing,
`repeat_interleave` without `output_size`) waits for every queued kernel: the host then cannot prepare the next step
while the GPU runs this one. The test runs `trainer.train()` for 2 and for 4 steps on the CPU under a
`TorchDispatchMode` that records every such operation with where it was called; what happens once per run (setup, the
last log) is allowed, so the per-step count, (reads in 4 steps - reads in 2 steps) / 2, must be 0.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from conftest import VOCAB, make_tiny_model
from datasets import Dataset
from helpers import make_args, scored_pairs
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

from hf_siamese import SiameseTrainer, losses
from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer

aten = torch.ops.aten
# Operations whose result (value or shape) the host must read from the device.
READS = {aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten.is_nonzero, aten.equal, aten._unique2}


def reads_back(func, args, kwargs) -> bool:
    packet = func.overloadpacket
    if packet in READS:
        return True
    if func in (aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor):  # the output's size is data
        return kwargs.get("output_size") is None
    if packet in (aten.index, aten.index_put, aten.index_put_):  # boolean-mask indexing: a nonzero inside
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())
    return False


class HostReads(TorchDispatchMode):
    """Records the Python frame (in hf_siamese or transformers) of every op that reads device data back."""

    def __init__(self) -> None:
        super().__init__()
        self.where: list[str] = []

    def record(self, what: str) -> None:
        frames = [
            f for f in traceback.extract_stack()[:-2] if "/torch/" not in f.filename and "test_no" not in f.filename
        ]
        frame = frames[-1] if frames else None
        self.where.append(f"{what} at {frame.filename}:{frame.lineno} {frame.line}" if frame else what)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if reads_back(func, args, kwargs):
            self.record(str(func))
        return func(*args, **kwargs)


def host_reads(make_trainer, steps: int, monkeypatch) -> list[str]:
    trainer = make_trainer(steps)
    mode = HostReads()
    real_tolist = torch.Tensor.tolist

    def tolist(tensor):
        mode.record("Tensor.tolist")
        return real_tolist(tensor)

    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "tolist", tolist)
        # The collator runs on the host before the step and builds host tensors from Python lists: not a read.
        collator_class = type(trainer.data_collator)
        collate = collator_class.__call__

        def collate_unwatched(self, rows):
            with torch.utils._python_dispatch._disable_current_modes():
                patch.setattr(torch.Tensor, "tolist", real_tolist)
                try:
                    return collate(self, rows)
                finally:
                    patch.setattr(torch.Tensor, "tolist", tolist)

        patch.setattr(collator_class, "__call__", collate_unwatched)
        with mode:
            trainer.train()
    return mode.where


def per_step_reads(make_trainer, monkeypatch) -> list[str]:
    two, four = host_reads(make_trainer, 2, monkeypatch), host_reads(make_trainer, 4, monkeypatch)
    extra = list(four)
    for item in two:
        if item in extra:
            extra.remove(item)
    return extra


def tokenizer() -> BertTokenizer:
    return BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)


def siamese_trainer(loss: str, rows: Dataset, tmp_path):
    def make(steps: int) -> SiameseTrainer:
        model = make_tiny_model()
        args = make_args(tmp_path, max_steps=steps, logging_steps=1000, per_device_train_batch_size=8)
        return SiameseTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer(), loss=loss)

    return make


def triplets(n: int = 64) -> Dataset:
    pairs = scored_pairs(n, seed=3)
    return Dataset.from_dict(
        {
            "anchor": [f"{t} {i}" for i, t in enumerate(pairs["sentence1"])],
            "positive": [f"{t} {i}" for i, t in enumerate(pairs["sentence2"])],
            "negative": [f"{i} {t}" for i, t in enumerate(reversed(pairs["sentence2"]))],
        }
    )


@pytest.mark.parametrize("loss", ["cosine", "mnr"])
def test_siamese_trainer_step_reads_nothing_back(loss, tmp_path, monkeypatch) -> None:
    rows = scored_pairs(64) if loss == "cosine" else triplets()
    loss = losses.CosineSimilarityLoss(score_range=(0, 5)) if loss == "cosine" else loss
    extra = per_step_reads(siamese_trainer(loss, rows, tmp_path), monkeypatch)
    assert not extra, "\n".join(extra)


LIST_ROWS = Dataset.from_list(
    [
        {
            "query": f"query {i % 5}",
            "documents": [f"dog {i}", "man", "a cat plays"][: 2 + i % 2],
            "scores": [1.0, 0.0, 0.5][: 2 + i % 2],
        }
        for i in range(64)
    ]
)


@pytest.mark.parametrize("loss", ["bce", "plistmle", "lambda"])
def test_cross_encoder_trainer_step_reads_nothing_back(loss, tmp_path, monkeypatch) -> None:
    rows = (
        LIST_ROWS
        if loss != "bce"
        else Dataset.from_list(
            [
                {"query": f"query {i % 5}", "document": f"document {i} man dog", "label": float(i % 3 == 0)}
                for i in range(64)
            ]
        )
    )

    def make(steps: int) -> CrossEncoderTrainer:
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=37,
            max_position_embeddings=64,
            num_labels=1,
        )
        model = BertForSequenceClassification(config)
        args = make_args(tmp_path, max_steps=steps, logging_steps=1000, per_device_train_batch_size=8)
        return CrossEncoderTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer(), loss=loss)

    extra = per_step_reads(make, monkeypatch)
    assert not extra, "\n".join(extra)


def test_the_detector_sees_reads(monkeypatch) -> None:
    mode = HostReads()
    with mode:
        t = torch.arange(6)
        t[t > 2].sum().item()
        torch.repeat_interleave(torch.arange(3), torch.tensor([1, 2, 3]))
        bool(t.any())
    assert len(mode.where) >= 4, mode.where
