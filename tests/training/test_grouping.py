"""Length-grouped batches: when SiameseTrainer groups (by default only where the model cannot run packed), and that
grouping keeps every row once per epoch (and the no-duplicates guarantee for ranking losses)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import make_tiny_model
from datasets import Dataset
from helpers import make_args
from transformers.trainer_pt_utils import LengthGroupedSampler

from hf_siamese import NoDuplicatesBatchSampler, SiameseTrainer, losses

WORDS = "man woman dog cat plays guitar piano music car bus train food soup bread market rain sun park ball".split()


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 3, 12, 20]))) + f" {i}" for i in range(n)]


def scored(n: int = 64) -> Dataset:
    return Dataset.from_dict({"sentence1": texts(n, 0), "sentence2": texts(n, 1), "score": [1.0] * n})


def triplets(n: int = 64) -> Dataset:
    anchors = texts(n, 2)
    # A few repeated positives: the no-duplicates batches must keep them apart.
    positives = [text if i % 8 else "a repeated positive" for i, text in enumerate(texts(n, 3))]
    return Dataset.from_dict({"anchor": anchors, "positive": positives, "negative": texts(n, 4)})


def trainer_for(tmp_path: Path, tokenizer, model=None, data=None, loss=None, **kwargs) -> SiameseTrainer:
    return SiameseTrainer(
        model=model if model is not None else make_tiny_model(),
        args=make_args(tmp_path, **kwargs.pop("args", {})),
        train_dataset=data if data is not None else scored(),
        processing_class=tokenizer,
        loss=loss or losses.CosineSimilarityLoss(score_range=(0, 5)),
        **kwargs,
    )


def test_auto_groups_only_models_that_cannot_run_packed(tmp_path: Path, tiny_tokenizer) -> None:
    packed = trainer_for(tmp_path, tiny_tokenizer)
    assert not packed.groups_by_length()
    assert not isinstance(packed._get_train_sampler(), LengthGroupedSampler)

    unpacked_model = make_tiny_model()
    unpacked_model.packing = False
    unpacked = trainer_for(tmp_path, tiny_tokenizer, model=unpacked_model)
    assert unpacked.groups_by_length()
    assert isinstance(unpacked._get_train_sampler(), LengthGroupedSampler)

    distil = trainer_for(tmp_path, tiny_tokenizer, model=make_tiny_model("distilbert"))
    assert distil.groups_by_length()

    # The softmax loss keeps random batches unless asked (grouping cost it 0.27 STSb test in the benchmark).
    labelled = Dataset.from_dict({"sentence1": texts(16, 5), "sentence2": texts(16, 6), "label": [0, 1] * 8})
    head = {"num_labels": 2}
    softmax = trainer_for(
        tmp_path, tiny_tokenizer, model=make_tiny_model("distilbert", **head), data=labelled, loss="softmax"
    )
    assert not softmax.groups_by_length()
    forced = trainer_for(
        tmp_path, tiny_tokenizer, model=make_tiny_model("distilbert", **head), data=labelled, loss="softmax",
        group_by_length=True,
    )  # fmt: skip
    assert forced.groups_by_length()


def test_explicit_switches(tmp_path: Path, tiny_tokenizer) -> None:
    assert trainer_for(tmp_path, tiny_tokenizer, group_by_length=True).groups_by_length()
    distil = make_tiny_model("distilbert")
    assert not trainer_for(tmp_path, tiny_tokenizer, model=distil, group_by_length=False).groups_by_length()
    by_args = trainer_for(tmp_path, tiny_tokenizer, args={"train_sampling_strategy": "group_by_length"})
    assert by_args.groups_by_length()
    sequential = trainer_for(tmp_path, tiny_tokenizer, model=distil, args={"train_sampling_strategy": "sequential"})
    assert not sequential.groups_by_length()


@pytest.mark.parametrize("bad", ["yes", 1, None, "AUTO "])
def test_bad_group_by_length_is_refused(tmp_path: Path, tiny_tokenizer, bad) -> None:
    with pytest.raises(ValueError, match=r"group_by_length=.*accepted: True, False, 'auto'"):
        trainer_for(tmp_path, tiny_tokenizer, group_by_length=bad)


def _batches(trainer: SiameseTrainer) -> list[dict]:
    return list(trainer.get_train_dataloader())


def test_grouped_pairs_use_every_row_once_with_less_padding(tmp_path: Path, tiny_tokenizer) -> None:
    data = scored()
    trainer = trainer_for(tmp_path, tiny_tokenizer, data=data, group_by_length=True)
    assert sorted(trainer._get_train_sampler()) == list(range(len(data)))
    grouped = _batches(trainer)
    plain = _batches(trainer_for(tmp_path, tiny_tokenizer, data=data, group_by_length=False))
    assert sum(len(b["labels"]) for b in grouped) == len(data)
    width = lambda batches: sum(b["attention_mask"].shape[-1] * len(b["attention_mask"]) for b in batches)  # noqa: E731
    assert width(grouped) < width(plain)


def test_grouped_ranking_batches_keep_every_row_once_and_no_duplicates(tmp_path: Path, tiny_tokenizer) -> None:
    data = triplets()
    trainer = trainer_for(
        tmp_path, tiny_tokenizer, data=data, loss=losses.MultipleNegativesRankingLoss(), group_by_length=True
    )
    sampler = trainer.get_train_dataloader().batch_sampler
    sampler = getattr(sampler, "batch_sampler", sampler)  # accelerate may wrap it
    assert isinstance(sampler, NoDuplicatesBatchSampler) and sampler.lengths is not None
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(len(data)))
    for batch in batches:
        batch_texts = [data[i][c] for i in batch for c in ("anchor", "positive", "negative")]
        assert len(batch_texts) == len(set(batch_texts))
    plain = NoDuplicatesBatchSampler(
        list(zip(data["anchor"], data["positive"], data["negative"], strict=True)), 8, seed=7
    )
    spread = lambda bs: sum(max(sampler.lengths[i] for i in b) - min(sampler.lengths[i] for i in b) for b in bs)  # noqa: E731
    assert spread(batches) < spread(list(plain))


def test_no_duplicates_sampler_needs_one_length_per_row() -> None:
    with pytest.raises(ValueError, match="3 lengths for 2 rows"):
        NoDuplicatesBatchSampler([("a", "b"), ("c", "d")], batch_size=2, lengths=[1, 2, 3])
