"""SiameseTrainer.check_parallel_setup: the parallel settings a loss cannot train under are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_tiny_model
from datasets import Dataset
from helpers import make_args
from transformers import TrainingArguments

from hf_siamese import SiameseTrainer, losses

ROWS = Dataset.from_dict({"anchor": ["a man", "a dog", "the car"], "positive": ["a woman", "a cat", "the bus"]})


def trainer(tmp_path: Path, tokenizer, loss, model=None, **args) -> SiameseTrainer:
    return SiameseTrainer(
        model=model or make_tiny_model(),
        args=make_args(tmp_path, **args),
        train_dataset=ROWS,
        processing_class=tokenizer,
        loss=loss,
    )


@pytest.mark.parametrize("setting", ["is_fsdp_enabled", "is_deepspeed_enabled"])
def test_cached_mnr_refuses_fsdp_and_deepspeed(tmp_path: Path, tiny_tokenizer, setting: str) -> None:
    run = trainer(tmp_path, tiny_tokenizer, losses.CachedMultipleNegativesRankingLoss(mini_batch_size=2))
    run.check_parallel_setup()  # plain DDP / one process: fine
    setattr(run, setting, True)
    name = setting.removeprefix("is_").removesuffix("_enabled")
    with pytest.raises(ValueError, match=rf"TrainingArguments\({name}=\.\.\.\)"):
        run.check_parallel_setup()
    plain = trainer(tmp_path, tiny_tokenizer, losses.MultipleNegativesRankingLoss())
    setattr(plain, setting, True)
    plain.check_parallel_setup()  # the plain loss has no replay: allowed


def test_unused_head_with_find_unused_parameters_false(
    tmp_path: Path, tiny_tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    with_head = make_tiny_model(label2id={"yes": 0, "no": 1}, id2label={0: "yes", 1: "no"})
    with pytest.raises(ValueError, match=r"ddp_find_unused_parameters=False.*classifier\.weight"):
        trainer(tmp_path, tiny_tokenizer, "mnr", model=with_head, ddp_find_unused_parameters=False)
    trainer(tmp_path, tiny_tokenizer, "mnr", model=with_head)  # left unset: DDP finds them itself
    trainer(tmp_path, tiny_tokenizer, "mnr", ddp_find_unused_parameters=False)  # no head: nothing unused
