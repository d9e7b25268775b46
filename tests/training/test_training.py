"""SiamesePairCollator, NoDuplicatesBatchSampler and SiameseTrainer on a tiny model."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from datasets import Dataset
from helpers import WORDS, make_args, scored_pairs, sentence
from transformers import AutoModel, TrainerCallback

from hf_siamese import NoDuplicatesBatchSampler, SiameseBertModel, SiamesePairCollator, SiameseTrainer, losses
from hf_siamese.training.collator import check_dataset


def labelled_pairs(n: int = 64, seed: int = 0) -> Dataset:
    data = scored_pairs(n, seed)
    return Dataset.from_dict(
        {
            "premise": data["sentence1"],
            "hypothesis": data["sentence2"],
            "label": ["entailment" if s > 4 else "contradiction" for s in data["score"]],
        }
    )


def triplets(n: int = 64, seed: int = 0) -> Dataset:
    rng = random.Random(seed)
    anchors = [f"{sentence(rng)} {i}" for i in range(n)]
    return Dataset.from_dict(
        {"anchor": anchors, "positive": [a + " ." for a in anchors], "negative": [sentence(rng) for _ in anchors]}
    )


# ---------------------------------------------------------------------------------------------------- collator


def test_collator_pads_dynamically(tiny_tokenizer) -> None:
    collator = SiamesePairCollator(tiny_tokenizer, max_length=64)
    short = collator([{"sentence1": "a man", "sentence2": "a dog", "score": 1.0}])
    long = collator(
        [
            {"sentence1": "a man", "sentence2": "a dog", "score": 1.0},
            {"sentence1": "the red car is fast and the dog", "sentence2": "a", "score": 2.0},
        ]
    )
    assert short["input_ids"].shape == (1, 2, 4)  # [CLS] a man [SEP]
    assert long["input_ids"].shape == (2, 2, 10)
    assert long["attention_mask"][0, 0].tolist() == [1] * 4 + [0] * 6
    assert long["labels"].dtype == torch.float32
    multiple = SiamesePairCollator(tiny_tokenizer, pad_to_multiple_of=8)([{"sentence1": "a", "sentence2": "b"}] * 2)
    assert multiple["input_ids"].shape[-1] == 8 and "labels" not in multiple


def test_collator_layouts(tiny_tokenizer) -> None:
    collator = SiamesePairCollator(tiny_tokenizer, label2id={"entailment": 0, "contradiction": 1})
    labelled = collator([{"premise": "a man", "hypothesis": "a dog", "label": "contradiction"}])
    assert labelled["labels"].tolist() == [1] and labelled["labels"].dtype == torch.long
    ints = collator([{"sentence1": "a", "sentence2": "b", "label": 2}])
    assert ints["labels"].dtype == torch.long
    ranking = collator([{"anchor": "a", "positive": "b", "negative": "c", "negative_2": "d"}] * 3)
    assert ranking["input_ids"].shape[:2] == (3, 4) and "labels" not in ranking
    custom = SiamesePairCollator(tiny_tokenizer, columns={"texts": ["q", "d"], "label": "rel"})
    out = custom([{"q": "a man", "d": "a dog", "rel": 0.5, "other": 1}])
    assert out["input_ids"].shape[:2] == (1, 2) and out["labels"].tolist() == [0.5]


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ([{"txt": "a", "score": 1.0}], "columns ['txt', 'score']"),
        ([{"sentence1": "a", "sentence2": None, "score": 1.0}], "batch row 0: column 'sentence2' holds None"),
        ([{"sentence1": "a", "sentence2": 3, "score": 1.0}], "holds 3 (int)"),
        ([{"sentence1": "a", "sentence2": "b", "score": float("nan")}], "not a finite number"),
        ([{"sentence1": "a", "sentence2": "b", "label": "maybe"}], "'maybe'"),
        ([{"sentence1": "a", "sentence2": "b", "label": "x"}], "no label2id"),
        ([], "empty batch"),
    ],
)
def test_collator_errors(rows, fragment, tiny_tokenizer) -> None:
    label2id = {"yes": 0, "no": 1} if rows and rows[0].get("label") == "maybe" else None
    with pytest.raises(ValueError) as info:
        SiamesePairCollator(tiny_tokenizer, label2id=label2id)(rows)
    assert fragment in str(info.value)
    if "columns" in fragment:
        assert "anchor, positive" in str(info.value)  # the accepted layouts are listed


@pytest.mark.parametrize(
    ("data", "score_range", "fragment"),
    [
        ({"sentence1": ["a", "b"], "sentence2": ["c", None], "score": [1.0, 2.0]}, None, "row 1: column 'sentence2'"),
        ({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "score": [1.0, 7.5]}, (0, 5), "row 1: score 7.5"),
        ({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "score": [1.0, float("nan")]}, (0, 5), "row 1"),
        ({"sentence1": [], "sentence2": [], "score": []}, None, "is empty"),
        ({"left": ["a"], "right": ["b"]}, None, "columns ['left', 'right']"),
    ],
)
def test_check_dataset_names_the_row(data, score_range, fragment, tiny_tokenizer) -> None:
    with pytest.raises(ValueError) as info:
        check_dataset(Dataset.from_dict(data), SiamesePairCollator(tiny_tokenizer), score_range)
    assert fragment in str(info.value)


def test_collator_rejects_bad_settings(tiny_tokenizer) -> None:
    with pytest.raises(ValueError, match="max_length=0"):
        SiamesePairCollator(tiny_tokenizer, max_length=0)
    with pytest.raises(ValueError, match=r"names \[.d.\], but the dataset has columns"):
        SiamesePairCollator(tiny_tokenizer, columns=["q", "d"])([{"q": "a", "x": "b"}])


# ---------------------------------------------------------------------------------------------------- sampler


def test_no_duplicates_sampler() -> None:
    rng = random.Random(0)
    pool = [f"t{i}" for i in range(30)]
    rows = [(rng.choice(pool), rng.choice(pool)) for _ in range(200)]
    sampler = NoDuplicatesBatchSampler(rows, batch_size=8, seed=3)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(sampler) == len(batches)
        used = sorted(i for b in batches for i in b)
        assert used == list(range(200))  # every row once per epoch
        for batch in batches:
            texts = [t for i in batch for t in set(rows[i])]
            assert len(texts) == len(set(texts)), batch
            assert 1 <= len(batch) <= 8
    sampler.set_epoch(0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first  # reshuffled per epoch
    dropping = NoDuplicatesBatchSampler(rows, batch_size=8, drop_last=True, seed=3)
    assert all(len(b) == 8 for b in dropping) and len(dropping) == len(list(dropping))


def test_no_duplicates_sampler_would_fail_with_plain_batches() -> None:
    # A row whose text repeats in the next row: plain consecutive batching puts both in one batch.
    rows = [("x", "y"), ("x", "z"), ("a", "b"), ("c", "d")]
    sampler = NoDuplicatesBatchSampler(rows, batch_size=4, seed=0)
    for batch in sampler:
        assert not ({0, 1} <= set(batch))


# ---------------------------------------------------------------------------------------------------- trainer


@pytest.mark.parametrize(
    ("loss", "dataset", "model_kwargs"),
    [
        ("cosine", scored_pairs(), {}),
        (losses.CoSENTLoss(), scored_pairs(), {}),
        ("softmax", labelled_pairs(), {"label2id": {"entailment": 0, "contradiction": 1}, "normalize": True}),
        ("mnr", triplets(), {}),
    ],
)
def test_training_lowers_the_loss(loss, dataset, model_kwargs, tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(**model_kwargs)
    loss_object = losses.get_loss(loss)
    if isinstance(loss_object, losses.CosineSimilarityLoss):
        loss_object = losses.CosineSimilarityLoss(score_range=(0, 5))
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path),
        train_dataset=dataset,
        data_collator=SiamesePairCollator(tiny_tokenizer),
        loss=loss_object,
    )
    before = trainer.evaluate(dataset)["eval_loss"]
    trainer.train()
    after = trainer.evaluate(dataset)["eval_loss"]
    assert after < before * 0.9, (before, after)


def test_softmax_head_trains_and_survives_save_load(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(label2id={"entailment": 0, "contradiction": 1}, normalize=True)
    head_before = model.classifier.weight.detach().clone()
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path, num_train_epochs=1),
        train_dataset=labelled_pairs(),
        processing_class=tiny_tokenizer,
        loss="softmax",
    )
    trainer.train()
    assert not torch.equal(head_before, model.classifier.weight)
    trainer.save_model(str(tmp_path / "saved"))
    loaded = AutoModel.from_pretrained(tmp_path / "saved")
    assert isinstance(loaded, SiameseBertModel)
    assert loaded.config.label2id == {"entailment": 0, "contradiction": 1}
    assert torch.equal(loaded.classifier.weight, model.classifier.weight)
    assert (tmp_path / "saved" / "tokenizer.json").exists()  # tokenizer saved beside the model
    torch.testing.assert_close(loaded.encode(["a man plays"]), model.encode(["a man plays"], tokenizer=tiny_tokenizer))


def test_head_learning_rate_group(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(num_labels=2)
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path, learning_rate=1e-4),
        train_dataset=labelled_pairs().map(lambda r: {"label": int(r["label"] == "entailment")}),
        processing_class=tiny_tokenizer,
        loss="softmax",
        head_learning_rate=3e-2,
    )
    optimizer = trainer.create_optimizer()
    head_ids = {id(p) for p in model.classifier.parameters()}
    rates = {g["lr"] for g in optimizer.param_groups if any(id(p) in head_ids for p in g["params"])}
    assert rates == {3e-2}
    assert {g["lr"] for g in optimizer.param_groups if not any(id(p) in head_ids for p in g["params"])} == {1e-4}
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_trainer_infers_loss_and_rejects_bad_setups(tmp_path: Path, tiny_tokenizer) -> None:
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=make_args(tmp_path), train_dataset=triplets(), processing_class=tiny_tokenizer
    )
    assert isinstance(trainer.loss, losses.MultipleNegativesRankingLoss) and trainer.no_duplicates_sampler
    with pytest.raises(ValueError, match="classifier head"):
        SiameseTrainer(
            model=make_tiny_model(),
            args=make_args(tmp_path),
            train_dataset=labelled_pairs(),
            processing_class=tiny_tokenizer,
            loss="softmax",
        )
    with pytest.raises(ValueError, match="Unknown loss 'triplet'"):
        SiameseTrainer(
            model=make_tiny_model(),
            args=make_args(tmp_path),
            train_dataset=triplets(),
            processing_class=tiny_tokenizer,
            loss="triplet",
        )
    with pytest.raises(TypeError, match="needs a SiameseBertModel"):
        SiameseTrainer(model=torch.nn.Linear(2, 2), args=make_args(tmp_path))
    with pytest.raises(ValueError, match="row 1: score 9.0"):
        SiameseTrainer(
            model=make_tiny_model(),
            args=make_args(tmp_path),
            processing_class=tiny_tokenizer,
            train_dataset=Dataset.from_dict({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "score": [1.0, 9.0]}),
            loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
        )


def test_mnr_trainer_batches_have_no_duplicate_texts(tmp_path: Path, tiny_tokenizer) -> None:
    anchors = ["man", "dog", "cat", "car", "bus"]
    positives = [f"{WORDS[i % 19]} {WORDS[i // 19]}" for i in range(40)]
    data = Dataset.from_dict({"anchor": [anchors[i % 5] for i in range(40)], "positive": positives})
    trainer = SiameseTrainer(
        model=make_tiny_model(),
        args=make_args(tmp_path),
        train_dataset=data,
        processing_class=tiny_tokenizer,
        loss="mnr",
    )
    loader = trainer.get_train_dataloader()
    seen_rows = 0
    for batch in loader:
        ids = batch["input_ids"][:, 0]
        assert len({tuple(row.tolist()) for row in ids}) == ids.shape[0]
        seen_rows += ids.shape[0]
    assert seen_rows == 40


class StopAfter(TrainerCallback):
    """Simulates an interruption: training stops right after `step` (and the checkpoint written there)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def test_resume_from_checkpoint_matches_uninterrupted_run(tmp_path: Path, tiny_tokenizer) -> None:
    data = scored_pairs(48)

    def trainer_for(output: str, callbacks=None) -> SiameseTrainer:
        args = make_args(
            tmp_path,
            output_dir=str(tmp_path / output),
            max_steps=12,
            num_train_epochs=1,
            save_strategy="steps",
            save_steps=4,
            lr_scheduler_type="linear",
            warmup_steps=2,
        )
        return SiameseTrainer(
            model=make_tiny_model(seed=3),
            args=args,
            train_dataset=data,
            processing_class=tiny_tokenizer,
            loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
            callbacks=callbacks,
        )

    full = trainer_for("full")
    full.train()
    interrupted = trainer_for("interrupted", callbacks=[StopAfter(4)])
    interrupted.train()
    assert interrupted.state.global_step == 4
    checkpoint = tmp_path / "interrupted" / "checkpoint-4"
    assert (checkpoint / "model.safetensors.index.json").exists()
    resumed = trainer_for("interrupted")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 12
    pairs = zip(full.model.state_dict().values(), resumed.model.state_dict().values(), strict=True)
    diff = max((a - b).abs().max().item() for a, b in pairs)
    assert diff < 1e-6, diff
    # and the interruption really changed something (the test can fail)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(full.model.state_dict().values(), interrupted.model.state_dict().values(), strict=True)
    )


# ---------------------------------------------------------------------------------------------------- evaluation


def test_evaluate_reports_sts_metrics_for_each_eval_set(tmp_path: Path, tiny_tokenizer) -> None:
    from scipy.stats import spearmanr

    model = make_tiny_model()
    # Dev pairs of two different sentences with spread scores: scored_pairs' identical pairs all have cosine 1 up to
    # float rounding (1e-7), and how rounding breaks those ties moved Spearman by up to 7e-3 between batchings.
    rng = random.Random(1)
    dev = Dataset.from_dict(
        {
            "sentence1": [sentence(rng) for _ in range(40)],
            "sentence2": [sentence(rng) for _ in range(40)],
            "score": [rng.uniform(0, 5) for _ in range(40)],
        }
    )
    test = scored_pairs(30, seed=2)
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path),
        train_dataset=scored_pairs(),
        eval_dataset={"dev": dev, "test": test},
        processing_class=tiny_tokenizer,
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    metrics = trainer.evaluate()
    for name in ("dev", "test"):
        for key in (
            "loss",
            "spearman_cosine",
            "pearson_cosine",
            "spearman_dot",
            "spearman_euclidean",
            "spearman_manhattan",
            "mse_cosine",
            "mae_cosine",
        ):
            assert f"eval_{name}_{key}" in metrics, key
    u = model.encode(dev["sentence1"], tokenizer=tiny_tokenizer)
    v = model.encode(dev["sentence2"], tokenizer=tiny_tokenizer)
    expected = spearmanr(torch.nn.functional.cosine_similarity(u, v).numpy(), dev["score"]).statistic
    assert metrics["eval_dev_spearman_cosine"] == pytest.approx(expected, abs=1e-4)


def test_best_model_selected_by_spearman(tmp_path: Path, tiny_tokenizer) -> None:
    args = make_args(
        tmp_path,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        max_steps=8,
        load_best_model_at_end=True,
        metric_for_best_model="spearman_cosine",
        greater_is_better=True,
        learning_rate=2e-3,
    )
    trainer = SiameseTrainer(
        model=make_tiny_model(),
        args=args,
        train_dataset=scored_pairs(),
        eval_dataset=scored_pairs(40, seed=5),
        processing_class=tiny_tokenizer,
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    trainer.train()
    history = [e for e in trainer.state.log_history if "eval_spearman_cosine" in e]
    best = max(history, key=lambda e: e["eval_spearman_cosine"])
    assert trainer.state.best_metric == pytest.approx(best["eval_spearman_cosine"])
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best['step']}")
    # the model in memory at the end is the best checkpoint's
    assert trainer.evaluate()["eval_spearman_cosine"] == pytest.approx(best["eval_spearman_cosine"], abs=1e-6)


def test_group_by_length_batches_rows_of_similar_length(tmp_path: Path, tiny_tokenizer) -> None:
    rng = random.Random(0)
    s1 = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([2, 20]))) for _ in range(64)]
    data = Dataset.from_dict({"sentence1": s1, "sentence2": ["a man"] * 64, "score": [1.0] * 64})
    args = make_args(tmp_path, train_sampling_strategy="group_by_length")
    trainer = SiameseTrainer(
        model=make_tiny_model(),
        args=args,
        train_dataset=data,
        processing_class=tiny_tokenizer,
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    assert trainer.row_lengths(data) == [len(s.split()) + 2 for s in s1]
    widths = [batch["input_ids"].shape[-1] for batch in trainer.get_train_dataloader()]
    plain = SiameseTrainer(
        model=make_tiny_model(),
        args=make_args(tmp_path),
        train_dataset=data,
        processing_class=tiny_tokenizer,
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    plain_widths = [batch["input_ids"].shape[-1] for batch in plain.get_train_dataloader()]
    assert sum(widths) < sum(plain_widths)  # less padding
    assert sum(len(b["labels"]) for b in trainer.get_train_dataloader()) == 64


def test_cosine_affine_map_trains_and_is_saved(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(cosine_affine=True)
    assert model.cosine_affine_weight.item() == 1.0 and model.cosine_affine_bias.item() == 0.0
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path, num_train_epochs=1),
        train_dataset=scored_pairs(),
        processing_class=tiny_tokenizer,
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    trainer.train()
    assert model.cosine_affine_weight.item() != 1.0 and model.cosine_affine_bias.item() != 0.0
    model.save_pretrained(tmp_path / "affine")
    loaded = AutoModel.from_pretrained(tmp_path / "affine")
    assert loaded.config.cosine_affine is True
    assert loaded.cosine_affine_weight.item() == model.cosine_affine_weight.item()
    assert loaded.cosine_affine_bias.item() == model.cosine_affine_bias.item()
    # the affine map changes the pair similarity, never the embedding
    batch = tiny_tokenizer(["a man plays", "a dog"], padding=True, return_tensors="pt")
    out = loaded(**{k: v.reshape(1, 2, -1) for k, v in batch.items()})
    u, v = out.sentence_embedding[0]
    cos = torch.nn.functional.cosine_similarity(u, v, dim=0)
    torch.testing.assert_close(out.similarity[0], loaded.cosine_affine_weight * cos + loaded.cosine_affine_bias)


def test_softmax_run_evaluates_on_scored_pairs(tmp_path: Path, tiny_tokenizer) -> None:
    """The Sentence-BERT recipe: train softmax on NLI labels, evaluate STS on scored pairs (no eval loss there)."""
    model = make_tiny_model(label2id={"entailment": 0, "contradiction": 1}, normalize=True)
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path, num_train_epochs=1),
        train_dataset=labelled_pairs(),
        eval_dataset=scored_pairs(30, seed=4),
        processing_class=tiny_tokenizer,
        loss="softmax",
    )
    metrics = trainer.evaluate()
    assert "eval_spearman_cosine" in metrics and "eval_loss" not in metrics
    assert "eval_loss" in trainer.evaluate(labelled_pairs(20, seed=9))
