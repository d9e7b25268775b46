"""Augmented SBERT (Thakur, Reimers, Daxenberger 2021) in one call: a cross-encoder teacher trained on the gold
pairs labels new pairs sampled among the gold sentences, and the bi-encoder trains on gold + silver.

`augmented_sbert(gold, output_dir, model=...)` runs three stages, each kept on disk in `output_dir`, so a stopped
run called again with the same arguments goes on where it stopped:

    output_dir/settings.json  the run's settings; a second call with other settings is refused (a new folder)
    output_dir/teacher/       stage 1: the cross-encoder (BCE on the score scaled to 0..1); skipped with `teacher=`
    output_dir/silver-scores/ stage 2 while it runs: the teacher's scores, a chunk file at a time (resumable)
    output_dir/silver.jsonl   stage 2: the silver pairs (sentence1, sentence2, score) on the gold scale
    output_dir/checkpoints/   stage 3 while it runs: a checkpoint per epoch, resumed from the last one
    output_dir/model/         stage 3: the bi-encoder, with a model card naming the gold and silver data and teacher

The pairs are the bi-encoder's `neighbours` nearest sentences of each sentence and, with `bm25_neighbours`, BM25's
(`hf_siamese.cross_encoder.augment.silver_pairs`); the paper shows that this sampling is what makes silver data
help, where random pairs do not. A teacher weaker than its student teaches nothing: with `eval_pairs` the start
bi-encoder and the teacher are both measured on them and a warning says when the teacher is the weaker.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.digest import TextDigest
from ..storage import work_folder, write_rows
from .stages import check_settings, check_training_numbers, last_checkpoint, read_jsonl, save_final_model


def _gold_pairs(gold: Any, where: str) -> tuple[list[tuple[str, str]], list[float]]:
    from ..data.columns import detect_layout

    names = list(getattr(gold, "column_names", None) or [])
    layout = detect_layout(names) if names else None
    if layout is None or len(layout.texts) != 2 or layout.label is None:
        raise ValueError(f"{where}: expected scored pairs (sentence1, sentence2, score), got columns {names}")
    first, second = (list(gold[name]) for name in layout.texts)
    scores = list(gold[layout.label])
    bad = next((v for v in scores if isinstance(v, bool) or not isinstance(v, int | float)), None)
    if bad is not None:
        raise ValueError(f"{where}: the {layout.label!r} column holds {bad!r:.40}; expected numeric scores")
    texts = next((t for t in first + second if not isinstance(t, str) or not t.strip()), None)
    if texts is not None:
        raise ValueError(f"{where}: a sentence is {texts!r:.60}; expected non-empty strings")
    if not scores:
        raise ValueError(f"{where}: no gold pairs")
    return list(zip(first, second, strict=True)), [float(v) for v in scores]


def _train_teacher(
    pairs: list[tuple[str, str]], scores: list[float], span: tuple[float, float], start: str, folder: Path,
    settings: dict[str, Any],
) -> Any:  # fmt: skip
    """Stage 1: a one-output cross-encoder from the bi-encoder's encoder, BCE on (score - low) / (high - low)."""
    from datasets import Dataset
    from transformers import TrainingArguments, set_seed

    from ..cross_encoder.model import CrossEncoder
    from ..cross_encoder.trainer import CrossEncoderTrainer

    low, high = span
    set_seed(settings["seed"])
    teacher = CrossEncoder.from_encoder(start, num_labels=1)
    rows = Dataset.from_dict(
        {
            "sentence1": [a for a, _ in pairs],
            "sentence2": [b for _, b in pairs],
            "label": [min(max((s - low) / (high - low), 0.0), 1.0) for s in scores],
        }
    )
    with work_folder(folder, "train") as work:  # the Trainer's files; one a killed run left goes with the next
        args = TrainingArguments(
            output_dir=str(work), num_train_epochs=settings["teacher_epochs"], learning_rate=settings["teacher_lr"],
            per_device_train_batch_size=settings["teacher_batch_size"], warmup_steps=0.1, seed=settings["seed"],
            save_strategy="no", report_to=[], logging_steps=50, disable_tqdm=not settings["show_progress_bar"],
        )  # fmt: skip
        CrossEncoderTrainer(teacher, args, train_dataset=rows, loss="bce").train()
    teacher.save_pretrained(folder)
    return teacher


def _gold_fingerprint(pairs: Sequence[tuple[str, str]], scores: Sequence[float]) -> str:
    """What the gold pairs hold (count and a hash of texts and scores): a rerun on other pairs of the same count
    starts afresh instead of finding its stages done."""
    digest = TextDigest()
    for (first, second), score in zip(pairs, scores, strict=True):
        digest.add(first, second, float(score))
    return digest.describe("pairs")


def _text_fingerprint(texts: Sequence[str] | None) -> str | None:
    if texts is None:
        return None
    if isinstance(texts, str):
        raise ValueError("unlabelled: expected a list of sentences, got one string")
    bad = next((text for text in texts if not isinstance(text, str) or not text.strip()), None)
    if bad is not None:
        raise ValueError(f"unlabelled: a sentence is {bad!r:.60}; expected non-empty strings")
    digest = TextDigest()
    for text in texts:
        digest.add(text)
    return digest.describe("sentences")


@dataclass
class _GoldData:
    """The checked gold pairs with their scores and the scores' range, and the dev pairs with theirs (None without
    `eval_pairs`)."""

    pairs: list[tuple[str, str]]
    scores: list[float]
    span: tuple[float, float]
    dev: tuple[list[tuple[str, str]], list[float]] | None


def _check_inputs(
    gold: Any, output_dir: str | os.PathLike, eval_pairs: Any, neighbours: int, bm25_neighbours: int,
    numbers: dict[str, Any],
) -> tuple[Path, _GoldData]:  # fmt: skip
    """The run folder and the gold (and dev) pairs, after refusing an output path that is a file, bad pairs, gold
    scores that are all equal, a bad sampling and bad training numbers."""
    from ..cross_encoder.augment import check_sampling

    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir={os.fspath(folder)!r} exists and is not a folder")
    pairs, scores = _gold_pairs(gold, "gold")
    span = (min(scores), max(scores))
    if not span[1] > span[0]:
        raise ValueError(f"gold: every score is {span[0]:g}; a teacher needs scores that differ")
    dev = _gold_pairs(eval_pairs, "eval_pairs") if eval_pairs is not None else None
    check_sampling(neighbours, bm25_neighbours)
    check_training_numbers(**numbers)
    return folder, _GoldData(pairs, scores, span, dev)


def _stage_teacher(
    teacher: Any, folder: Path, gold: _GoldData, model: str, settings: dict[str, Any], show: Callable[..., Any]
) -> Any:
    """Stage 1: the given teacher (loaded from its path), else the one trained before, else one trained now; a
    teacher of more than one output is refused."""
    from ..cross_encoder.model import CrossEncoder

    if isinstance(teacher, str | os.PathLike):
        teacher = CrossEncoder.from_pretrained(os.fspath(teacher))
    elif teacher is None and (folder / "teacher" / "config.json").is_file():
        teacher = CrossEncoder.from_pretrained(str(folder / "teacher"))
        show(f"augment: stage 1 done before: the teacher in {folder / 'teacher'}")
    elif teacher is None:
        show(f"augment: stage 1: training the teacher cross-encoder on {len(gold.pairs)} gold pairs")
        teacher = _train_teacher(gold.pairs, gold.scores, gold.span, model, folder / "teacher", settings)
    if getattr(teacher, "num_labels", 1) != 1:
        raise ValueError(f"teacher: a cross-encoder of {teacher.num_labels} outputs; a teacher of scores has one")
    return teacher


def _stage_silver(
    folder: Path, gold: _GoldData, unlabelled: Sequence[str] | None, bi_encoder: Any, teacher: Any,
    settings: dict[str, Any], show: Callable[..., Any],
) -> Any:  # fmt: skip
    """Stage 2: the silver pairs read back from `silver.jsonl`, or sampled by the bi-encoder (and BM25) among the
    gold and unlabelled sentences and labelled by the teacher."""
    from ..cross_encoder.augment import silver_pairs

    silver_file = folder / "silver.jsonl"
    if silver_file.is_file():
        silver = read_jsonl(silver_file)
        show(f"augment: stage 2 done before: {len(silver)} silver pairs in {silver_file}")
        return silver
    sentences = [text for pair in gold.pairs for text in pair] + list(unlabelled or [])
    silver = silver_pairs(
        sentences, bi_encoder, teacher, settings["neighbours"], bm25_neighbours=settings["bm25_neighbours"],
        gold_pairs=gold.pairs, score_range=gold.span, show_progress_bar=settings["show_progress_bar"],
        cache_dir=folder / "silver-scores",
    )  # fmt: skip
    write_rows(silver_file, silver)
    shutil.rmtree(folder / "silver-scores", ignore_errors=True)
    show(f"augment: stage 2: {len(silver)} silver pairs -> {silver_file}")
    return silver


def _scored_rows(pairs: Sequence[tuple[str, str]], scores: Sequence[float]) -> Any:
    """A `datasets.Dataset` of (sentence1, sentence2, score) rows."""
    from datasets import Dataset

    return Dataset.from_dict({"sentence1": [a for a, _ in pairs], "sentence2": [b for _, b in pairs], "score": scores})


def _stage_student(
    bi_encoder: Any, tokenizer: Any, teacher: Any, gold: _GoldData, silver: Any, folder: Path,
    settings: dict[str, Any], show: Callable[..., Any],
) -> tuple[Any, dict[str, Any], Any]:  # fmt: skip
    """Stage 3: the bi-encoder trained on gold + silver (from the last checkpoint), with the teacher and the start
    bi-encoder measured on the dev pairs first (a warning when the teacher is the weaker); returns the trainer,
    those measures and the final dev metrics (None without dev pairs)."""
    from datasets import concatenate_datasets
    from transformers import TrainingArguments, set_seed

    from ..evaluation.pairs import evaluate_scores
    from ..losses import CosineSimilarityLoss
    from ..training.trainer import SiameseTrainer

    facts: dict[str, Any] = {}
    if gold.dev is not None:  # measured only when stage 3 runs: the card and the warning read it
        facts["teacher_dev"] = 100 * evaluate_scores(teacher, *gold.dev)["spearman"]
        show(f"augment: the teacher's Spearman x100 on eval_pairs: {facts['teacher_dev']:.2f}")
    gold_rows = _scored_rows(gold.pairs, gold.scores)
    rows = concatenate_datasets([gold_rows, silver.cast(gold_rows.features)]).shuffle(seed=settings["seed"])
    set_seed(settings["seed"])
    student = bi_encoder.train()
    dev = _scored_rows(*gold.dev) if gold.dev is not None else None
    checkpoints = folder / "checkpoints"
    args = TrainingArguments(
        output_dir=str(checkpoints), num_train_epochs=settings["epochs"],
        per_device_train_batch_size=settings["batch_size"], learning_rate=settings["lr"], warmup_steps=0.1,
        seed=settings["seed"], report_to=[], logging_steps=100,
        save_strategy="epoch", save_total_limit=None if dev is not None else 1,
        eval_strategy="epoch" if dev is not None else "no", load_best_model_at_end=dev is not None,
        metric_for_best_model="spearman_cosine" if dev is not None else None,
        disable_tqdm=not settings["show_progress_bar"],
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=student, args=args, train_dataset=rows, eval_dataset=dev, processing_class=tokenizer,
        loss=CosineSimilarityLoss(score_range=gold.span),
    )  # fmt: skip
    if dev is not None and last_checkpoint(checkpoints) is None:
        facts["start_dev"] = 100 * trainer.evaluate()["eval_spearman_cosine"]
        show(f"augment: the start bi-encoder's Spearman x100 on eval_pairs: {facts['start_dev']:.2f}")
        if facts["teacher_dev"] < facts["start_dev"]:
            warnings.warn(
                f"augment: the teacher ({facts['teacher_dev']:.2f}) is weaker than the start bi-encoder "
                f"({facts['start_dev']:.2f}) on eval_pairs; its silver labels are unlikely to help",
                stacklevel=3,  # the caller of augmented_sbert
            )
    show(f"augment: stage 3: training the bi-encoder on {len(gold_rows)} gold + {len(silver)} silver pairs")
    trainer.train(resume_from_checkpoint=last_checkpoint(checkpoints))
    final = trainer.evaluate() if dev is not None else None
    return trainer, facts, final


def _data_source(
    gold: _GoldData, silver: Any, unlabelled: Sequence[str] | None, teacher_name: str | None,
    settings: dict[str, Any], facts: dict[str, Any],
) -> str:  # fmt: skip
    """The model card's sentence on the training data: gold and silver counts, how the pairs were sampled and
    labelled, and the dev measures."""
    neighbours, bm25_neighbours = settings["neighbours"], settings["bm25_neighbours"]
    sampled = f"the bi-encoder's {neighbours} nearest sentences" if neighbours else ""
    if bm25_neighbours:
        sampled += (" and " if sampled else "") + f"BM25's {bm25_neighbours} nearest"
    extra = f" and of {len(unlabelled)} unlabelled sentences" if unlabelled else ""
    source = (
        f"{len(gold.pairs)} gold scored pairs and {len(silver)} silver pairs (Augmented SBERT): {sampled} of each gold "
        f"sentence{extra}, gold pairs left out, labelled by the cross-encoder "
        f"{teacher_name or 'trained on the gold pairs'}"
    )
    if "teacher_dev" in facts:
        source += f" (Spearman x100 on the eval pairs: teacher {facts['teacher_dev']:.2f}"
        source += f", start bi-encoder {facts['start_dev']:.2f})" if "start_dev" in facts else ")"
    return source


def augmented_sbert(
    gold: Any,
    output_dir: str | os.PathLike,
    *,
    model: str,
    teacher: Any = None,
    eval_pairs: Any = None,
    unlabelled: Sequence[str] | None = None,
    neighbours: int = 3,
    bm25_neighbours: int = 0,
    teacher_epochs: float = 4.0,
    teacher_batch_size: int = 16,
    teacher_lr: float = 2e-5,
    epochs: float = 1.0,
    batch_size: int = 16,
    lr: float = 2e-5,
    seed: int = 42,
    show_progress_bar: bool = True,
) -> Any:
    """Train a bi-encoder on `gold` scored pairs plus silver pairs labelled by a cross-encoder; returns it (saved in
    `output_dir/model`). See the module docstring for the stages and the folder.

    Args:
        gold: a `datasets.Dataset` of scored pairs (`sentence1, sentence2, score`, or another known layout).
        output_dir: the run's folder; called again after a stop, finished stages are read back, not redone.
        model: the bi-encoder to start from (a path or Hub id): it samples the pairs, starts the teacher's encoder
            (when no `teacher` is given) and is trained.
        teacher: a trained one-output cross-encoder (a `CrossEncoder` or its path) to label with instead of stage 1.
        eval_pairs: scored pairs (the dev split) to measure the start, the teacher and each epoch on; the best
            epoch is kept.
        unlabelled: more sentences (no labels) to sample pairs among, with the gold ones: the paper's setting where a
            few pairs are labelled and many sentences are not.
        neighbours: nearest sentences paired per sentence by the bi-encoder.
        bm25_neighbours: nearest sentences paired per sentence by BM25.
        teacher_epochs: stage 1's training epochs.
        teacher_batch_size: stage 1's training batch size.
        teacher_lr: stage 1's training learning rate.
        epochs: stage 3's training epochs (`CosineSimilarityLoss` on the gold scores' range).
        batch_size: stage 3's training batch size.
        lr: stage 3's training learning rate.
    """
    from ..formats.loading import load_model
    from ..modeling.modeling_siamese import SiameseBertModel
    from ..storage.score_store import teacher_id

    numbers = {
        "teacher_epochs": teacher_epochs, "teacher_batch_size": teacher_batch_size, "teacher_lr": teacher_lr,
        "epochs": epochs, "batch_size": batch_size, "lr": lr,
    }  # fmt: skip
    folder, gold_data = _check_inputs(gold, output_dir, eval_pairs, neighbours, bm25_neighbours, numbers)
    teacher_name = None if teacher is None else teacher_id(teacher)
    settings = {
        "model": os.fspath(model), "teacher": teacher_name,
        "gold_pairs": _gold_fingerprint(gold_data.pairs, gold_data.scores), "neighbours": neighbours,
        "bm25_neighbours": bm25_neighbours, "unlabelled": _text_fingerprint(unlabelled),
        "teacher_epochs": teacher_epochs, "teacher_batch_size": teacher_batch_size,
        "teacher_lr": teacher_lr, "epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed,
    }  # fmt: skip
    check_settings(folder, settings)
    show = print if show_progress_bar else (lambda *_: None)
    settings["show_progress_bar"] = show_progress_bar

    teacher = _stage_teacher(teacher, folder, gold_data, os.fspath(model), settings, show)
    bi_encoder, tokenizer = load_model(os.fspath(model))
    bi_encoder.tokenizer = tokenizer
    silver = _stage_silver(folder, gold_data, unlabelled, bi_encoder, teacher, settings, show)
    out = folder / "model"
    if (out / "config.json").is_file():
        show(f"augment: stage 3 done before: the bi-encoder in {out}")
        return SiameseBertModel.from_pretrained(str(out))
    trainer, facts, final = _stage_student(bi_encoder, tokenizer, teacher, gold_data, silver, folder, settings, show)
    source = _data_source(gold_data, silver, unlabelled, teacher_name, settings, facts)
    show(f"augment: stage 3: the bi-encoder -> {save_final_model(trainer, tokenizer, folder, source, final)}")
    return trainer.model


__all__ = ["augmented_sbert"]
