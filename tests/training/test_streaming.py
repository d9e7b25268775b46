"""Training on streams: every loss trains from a `datasets.IterableDataset`; MNR batches from the stream hold no
repeated text; bad rows are named by their position; each process reads its own part; resume continues the stream."""

from __future__ import annotations

import pytest
import torch
from conftest import WORDS, make_tiny_model
from datasets import Dataset
from test_training import StopAfter
from transformers import TrainingArguments

from hf_siamese import SiamesePairCollator, SiameseTrainer
from hf_siamese.losses import CachedMultipleNegativesRankingLoss, get_loss
from hf_siamese.training.streaming import STREAM_ROW, NoDuplicatesStreamBatcher, NumberedStream, stream_for_process

LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % 60] for k in range(4 + i % 3)) + " ."


def rows_for(loss_name: str, count: int = 40) -> list[dict]:
    rows = []
    for i in range(count):
        first, second = sentence(i), sentence(i + 101)
        if loss_name in ("mnr", "cached_mnr"):
            rows.append({"anchor": first, "positive": second, "negative": sentence(i + 211)})
        elif loss_name == "softmax":
            rows.append({"premise": first, "hypothesis": second, "label": list(LABELS)[i % 3]})
        else:
            rows.append({"sentence1": first, "sentence2": second, "score": (i % 6) / 5})
    return rows


def make_trainer(tmp_path, tokenizer, rows, loss, max_steps: int = 8, args: dict | None = None, **kwargs):
    head = loss == "softmax" or getattr(loss, "label_kind", None) == "class"
    model = make_tiny_model(seed=0, **({"label2id": LABELS} if head else {})).train()
    settings = {"per_device_train_batch_size": 8, "learning_rate": 3e-3, "save_strategy": "no", "seed": 3}
    settings.update(args or {})
    arguments = TrainingArguments(str(tmp_path), max_steps=max_steps, use_cpu=True, report_to=[], **settings)
    stream = Dataset.from_list(rows).to_iterable_dataset(num_shards=2)
    return SiameseTrainer(
        model=model, args=arguments, train_dataset=stream, processing_class=tokenizer, loss=loss, **kwargs
    )


def batch_loss(trainer: SiameseTrainer, rows: list[dict]) -> float:
    model = trainer.model.eval()
    with torch.no_grad():
        batch = trainer.data_collator(rows)
        return trainer.loss.compute(model, {k: v for k, v in batch.items() if k != "labels"}, batch.get("labels"))[
            0
        ].item()


@pytest.mark.parametrize("loss", ["cosine", "cosent", "softmax", "mnr", "cached_mnr"])
def test_every_loss_trains_from_a_stream(loss: str, tmp_path, tiny_tokenizer) -> None:
    rows = rows_for(loss)
    chosen = CachedMultipleNegativesRankingLoss(mini_batch_size=3) if loss == "cached_mnr" else get_loss(loss)
    trainer = make_trainer(tmp_path, tiny_tokenizer, rows, chosen, max_steps=15)
    before = batch_loss(trainer, rows[:8])
    trainer.train()
    assert trainer.state.global_step == 15
    assert batch_loss(trainer, rows[:8]) < before


def test_the_loss_is_inferred_from_the_first_row(tmp_path, tiny_tokenizer) -> None:
    trainer = make_trainer(tmp_path, tiny_tokenizer, rows_for("cosine"), None, max_steps=1)
    assert type(trainer.loss).__name__ == "CosineSimilarityLoss"


class RecordingCollator(SiamesePairCollator):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[list[dict]] = []

    def __call__(self, rows):
        self.batches.append(list(rows))
        return super().__call__(rows)


def test_mnr_batches_from_a_stream_hold_no_repeated_text(tmp_path, tiny_tokenizer) -> None:
    # Many rows share an anchor or a positive: a plain batching would put repeats together.
    rows = [{"anchor": sentence(i % 5), "positive": sentence(100 + i % 7)} for i in range(60)]
    collator = RecordingCollator(tiny_tokenizer)
    trainer = make_trainer(tmp_path, tiny_tokenizer, rows, "mnr", data_collator=collator)
    for _ in trainer.get_train_dataloader():
        pass
    used = [row[STREAM_ROW] for batch in collator.batches for row in batch]
    assert sorted(used) == list(range(60))  # every row once
    for batch in collator.batches:
        texts = [row[c] for row in batch for c in ("anchor", "positive")]
        assert len(texts) == len(set(texts))
    assert max(len(b) for b in collator.batches) == 5  # only 5 distinct anchors exist


def test_batcher_keeps_its_buffer_bounded() -> None:
    rows = [{"anchor": f"a{i % 3}", "positive": f"p{i}"} for i in range(30)]
    batches = list(NoDuplicatesStreamBatcher(NumberedStream(rows), ["anchor", "positive"], batch_size=4, buffer_size=4))
    assert sorted(r[STREAM_ROW] for b in batches for r in b) == list(range(30))
    assert all(len({r["anchor"] for r in b}) == len(b) <= 3 for b in batches)
    with pytest.raises(ValueError, match=r"buffer_size=2 must be an int >= batch_size \(4\)"):
        NoDuplicatesStreamBatcher(rows, ["anchor"], batch_size=4, buffer_size=2)


def test_a_bad_row_later_in_the_stream_is_named(tmp_path, tiny_tokenizer) -> None:
    rows = rows_for("cosine", count=1200)
    rows[1100]["sentence2"] = None  # past the rows checked before training
    trainer = make_trainer(tmp_path, tiny_tokenizer, rows, "cosine", max_steps=150)
    with pytest.raises(ValueError, match=r"train_dataset stream row 1100: column 'sentence2' holds None"):
        trainer.train()


def test_a_bad_row_early_in_the_stream_is_found_before_training(tmp_path, tiny_tokenizer) -> None:
    rows = rows_for("cosine")
    rows[17]["sentence1"] = None
    with pytest.raises(ValueError, match=r"train_dataset row 17: column 'sentence1' holds None"):
        make_trainer(tmp_path, tiny_tokenizer, rows, "cosine")


def test_stream_needs_max_steps_and_map_style_eval(tmp_path, tiny_tokenizer) -> None:
    stream = Dataset.from_list(rows_for("cosine")).to_iterable_dataset()
    model = make_tiny_model()
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to=[])
    with pytest.raises(
        ValueError, match=r"train_dataset is a stream \(IterableDataset.*set TrainingArguments\(max_steps"
    ):
        SiameseTrainer(model=model, args=args, train_dataset=stream, processing_class=tiny_tokenizer, loss="cosine")
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to=[], max_steps=2)
    with pytest.raises(ValueError, match=r"dev is a stream .*Dataset\.from_list"):
        SiameseTrainer(
            model=model, args=args, train_dataset=stream, eval_dataset={"dev": stream},
            processing_class=tiny_tokenizer, loss="cosine",
        )  # fmt: skip


@pytest.mark.parametrize("num_shards", [4, 3], ids=["whole-shards", "every-other-row"])
def test_each_process_reads_its_own_part(num_shards: int) -> None:
    rows = [{"anchor": str(i), "positive": "p"} for i in range(24)]
    stream = Dataset.from_list(rows).to_iterable_dataset(num_shards=num_shards)
    parts = [[row["anchor"] for row in stream_for_process(stream, rank, 2)] for rank in (0, 1)]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1], key=int) == [str(i) for i in range(24)]
    generic = [[row["anchor"] for row in stream_for_process(rows, rank, 2)] for rank in (0, 1)]
    assert generic == [[str(i) for i in range(0, 24, 2)], [str(i) for i in range(1, 24, 2)]]


def test_resume_continues_the_stream(tmp_path, tiny_tokenizer) -> None:
    """An interrupted run resumed from its checkpoint ends where the uninterrupted run ends: the resumed run skips
    the batches trained on already and reads on from there (dropout on; the Trainer restores the random state)."""
    rows = rows_for("mnr", count=64)

    def run(name: str, resume: str | None = None, stop_after: int | None = None) -> dict[str, torch.Tensor]:
        trainer = make_trainer(
            tmp_path / name, tiny_tokenizer, rows, "mnr", max_steps=6,
            args={"save_strategy": "steps", "save_steps": 3},
            callbacks=[StopAfter(stop_after)] if stop_after else None,
        )  # fmt: skip
        trainer.train(resume_from_checkpoint=resume)
        return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    full = run("full")
    interrupted = run("interrupted", stop_after=3)
    resumed = run("interrupted", resume=str(tmp_path / "interrupted" / "checkpoint-3"))
    assert max((full[k] - interrupted[k]).abs().max().item() for k in full) > 1e-4  # the last 3 steps matter
    assert max((full[k] - resumed[k]).abs().max().item() for k in full) < 1e-6
