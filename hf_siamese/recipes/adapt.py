"""Adapting a bi-encoder to a corpus without labels (`hf-siamese adapt`): one call per method, stages kept on disk.

Methods (rows from `hf_siamese.data.pseudo_pairs`):

- `simcse`: each text twice, two dropout masks, in-batch negatives (`MultipleNegativesRankingLoss`, scale 20 =
  temperature 0.05; Gao et al. 2021).
- `crop` / `ict` / `title`: pseudo (query, document) pairs cut from the texts (independent cropping / inverse cloze)
  or a document's title and its body (corpora with a title column), the same in-batch loss.
- `tsdae`: TSDAE (Wang et al. 2021): 60% of each text's words deleted anew every step, a decoder tied to the encoder
  rebuilds the text from the damaged copy's embedding (`DenoisingAutoEncoderLoss`); the decoder is dropped at the end.
- `gpl`: GPL (Wang et al. 2022) with the corpus's own pseudo-queries (a sentence of each passage, the passage its
  positive: no query generator is needed):
  negatives mined from the corpus by the bi-encoder, every (query, document) scored by a cross-encoder `teacher`, and
  `MarginMSELoss` on the teacher's margins (the student's margins stretched by `fit_margin_scale`).

The run folder:

    output_dir/settings.json       the run's settings; another run with other settings is refused
    output_dir/pairs.jsonl         stage 1: the pseudo pairs, written as they are made from the corpus (no list)
    output_dir/scored.jsonl        gpl: stage 2, mined negatives + the teacher's scores (scores stream to
                                   output_dir/teacher-scores/ while it runs)
    output_dir/checkpoints/        the training's checkpoints while it runs (resumed from the last)
    output_dir/train_metrics.json  the training's runtime, steps and loss (transformers' `train()` metrics)
    output_dir/model/              the adapted bi-encoder, its model card naming the method and the corpus size
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.digest import TextDigest
from ..storage import write_rows, write_text_atomic
from .stages import check_settings, check_training_numbers, last_checkpoint, read_jsonl, save_final_model

METHODS = ("simcse", "tsdae", "crop", "ict", "title", "gpl")
IN_BATCH = ("simcse", "crop", "ict", "title")  # the methods trained with in-batch negatives
DEFAULT_LR = {"simcse": 3e-5, "tsdae": 3e-5, "crop": 2e-5, "ict": 2e-5, "title": 2e-5, "gpl": 2e-5}
TSDAE_MIN_WORDS = 3  # fewer words leave nothing to delete at 60% (one word is always kept)


def fit_margin_scale(rows: Any, model: Any, sample: int = 400, batch_size: int = 32) -> float:
    """The spread (standard deviation) of the teacher's margins over the model's own, on up to `sample` rows of
    (anchor, positive, negative_1..k) with the teacher's `1 + k` scores in `label`: the `scale` of `MarginMSELoss`
    that puts a normalized student's margins on the teacher's scale from the first step."""
    import numpy as np

    names = list(rows.column_names)
    documents = [name for name in names if name.startswith(("positive", "negative"))]
    if "anchor" not in names or len(documents) < 2 or "label" not in names:
        raise ValueError(f"fit_margin_scale: expected anchor, positive, negative... and label columns, got {names}")
    part = rows.select(range(min(len(rows), sample)))

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts, batch_size=batch_size, convert_to_numpy=True), dtype=np.float64)

    queries = embed(part["anchor"])
    student = np.stack([(queries * embed(part[name])).sum(1) for name in documents], 1)
    teacher = np.asarray(part["label"], dtype=np.float64)
    spread = (student[:, :1] - student[:, 1:]).std()
    if not spread > 0:
        raise ValueError("fit_margin_scale: the model gives every document the same score; nothing to scale")
    return float((teacher[:, :1] - teacher[:, 1:]).std() / spread)


def _gpl_rows(pairs: Any, model: Any, tokenizer: Any, corpus: list[str], teacher: Any, folder: Path, settings: dict):
    """Stage 2 of gpl: negatives from the bi-encoder's top 50 of the corpus (the pair's own document left out), the
    teacher's raw scores of each row's documents."""
    from ..cross_encoder.teacher import teacher_scores
    from ..retrieval.mining.negatives import mine_hard_negatives

    mined = mine_hard_negatives(
        pairs, model, corpus, num_negatives=settings["num_negatives"], range_max=50, sampling="random",
        tokenizer=tokenizer, seed=settings["seed"], show_progress_bar=settings["show_progress_bar"],
    )  # fmt: skip
    return teacher_scores(mined, teacher, output="scores", cache_dir=folder / "teacher-scores", batch_size=32)


@dataclass
class _CorpusScan:
    """What one read of the corpus found: the number of texts, how many have `TSDAE_MIN_WORDS` words, what they
    hold (so a rerun on other texts of the same count is not "done"), and for gpl the texts themselves."""

    count: int
    usable: int
    digest: TextDigest
    texts: list[str] | None


def _check_arguments(
    method: str, teacher: Any, max_texts: int | None, numbers: dict[str, Any], output_dir: str | os.PathLike
) -> Path:
    """Refuse a bad method, a teacher with the wrong method, bad training numbers or `max_texts`, and an output
    path that is a file; returns the run folder."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}; accepted: {list(METHODS)}")
    if (method == "gpl") != (teacher is not None):
        raise ValueError(
            "method='gpl' needs a cross-encoder teacher (teacher=...; --teacher CE_DIR)" if method == "gpl"
            else f"teacher= applies to method='gpl', not {method!r}"
        )  # fmt: skip
    check_training_numbers(**numbers)
    if max_texts is not None and (isinstance(max_texts, bool) or not isinstance(max_texts, int) or max_texts < 1):
        raise ValueError(f"max_texts={max_texts!r}: expected a positive int")
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir={os.fspath(folder)!r} exists and is not a folder")
    return folder


def _scan_corpus(items: Iterable[Any], method: str, batch_size: int) -> _CorpusScan:
    """Count and fingerprint the corpus's texts (title: (title, body) pairs), keeping them for gpl; refuses a
    corpus too small for the method's batches."""
    scan = _CorpusScan(count=0, usable=0, digest=TextDigest(), texts=[] if method == "gpl" else None)
    for item in items:
        scan.count += 1
        scan.digest.add(*(item if isinstance(item, tuple) else (item,)))
        scan.usable += len((item[1] if method == "title" else item).split()) >= TSDAE_MIN_WORDS
        if scan.texts is not None:
            scan.texts.append(item)
    if scan.count < 2 * batch_size and method in IN_BATCH:
        raise ValueError(
            f"the corpus has {scan.count} texts: in-batch negatives need at least two batches of {batch_size} (give "
            "more texts or a smaller batch size)"
        )
    if method == "tsdae" and scan.usable < batch_size:
        raise ValueError(
            f"tsdae: {scan.usable} texts of {TSDAE_MIN_WORDS} words or more (shorter ones are too short for the "
            f"deletion noise); too few for a batch of {batch_size}"
        )
    return scan


def _load_teacher(teacher: Any) -> tuple[str | None, Any]:
    """`(the teacher's id for the settings, the teacher)`: a path is loaded; a teacher of more than one output is
    refused."""
    from ..cross_encoder.model import CrossEncoder
    from ..storage.score_store import teacher_id

    teacher_name = None if teacher is None else teacher_id(teacher)
    if isinstance(teacher, str | os.PathLike):
        teacher = CrossEncoder.from_pretrained(os.fspath(teacher))
    if teacher is not None and getattr(teacher, "num_labels", 1) != 1:
        raise ValueError(f"teacher: a cross-encoder of {teacher.num_labels} outputs; gpl needs one score per pair")
    return teacher_name, teacher


def _write_pairs(
    pairs_file: Path,
    method: str,
    read: Callable[[], Iterable[Any]],
    texts: list[str] | None,
    query_generator: Callable[[list[str]], list[str]] | None,
    seed: int,
    batch_size: int,
) -> None:
    """Stage 1: the pseudo pairs (tsdae: the texts long enough to damage) written to `pairs_file`, unless there
    already; refuses too few pairs for a batch."""
    from datasets import Dataset

    from ..data.pseudo_pairs import pseudo_pair_needs, pseudo_pairs

    if pairs_file.is_file():
        return
    if method == "tsdae":
        write_rows(pairs_file, ({"text": text} for text in read() if len(text.split()) >= TSDAE_MIN_WORDS))
    elif method == "gpl" and query_generator is not None:
        queries = list(query_generator(list(texts)))
        if len(queries) != len(texts) or not all(isinstance(q, str) and q.strip() for q in queries):
            raise ValueError(
                f"query_generator gave {len(queries)} queries for {len(texts)} texts; expected one non-empty string "
                "per text"
            )
        write_rows(pairs_file, Dataset.from_dict({"anchor": queries, "positive": texts}))
    else:
        kind = "sentence" if method == "gpl" else method
        write_rows(pairs_file, pseudo_pairs(read() if texts is None else texts, kind, seed=seed))
        written = sum(1 for _ in pairs_file.open(encoding="utf-8"))
        if written < batch_size:
            pairs_file.unlink()
            raise ValueError(
                f"the corpus gives {written} {method} pairs ({method} needs {pseudo_pair_needs(kind)}); too few for "
                f"a batch of {batch_size}"
            )


def _rows_and_loss(
    method: str, pairs: Any, student: Any, tokenizer: Any, scan: _CorpusScan, teacher: Any, folder: Path,
    settings: dict, denoising: Any, show: Callable[..., Any],
) -> tuple[Any, Any]:  # fmt: skip
    """The training rows and loss: gpl's scored rows (stage 2, kept on disk) with `MarginMSELoss`, tsdae's texts
    with its denoising loss, else the pairs with in-batch negatives."""
    from ..losses import MarginMSELoss, MultipleNegativesRankingLoss

    if method == "gpl":
        scored_file = folder / "scored.jsonl"
        if not scored_file.is_file():
            write_rows(scored_file, _gpl_rows(pairs, student, tokenizer, scan.texts, teacher, folder, settings))
            shutil.rmtree(folder / "teacher-scores", ignore_errors=True)
        rows = read_jsonl(scored_file)
        loss: Any = MarginMSELoss(scale=fit_margin_scale(rows, student))
        show(f"adapt: {len(rows)} scored rows; MarginMSE with student scale {loss.scale:.2f}")
        return rows, loss
    if method == "tsdae":
        return pairs, denoising
    return pairs, MultipleNegativesRankingLoss(scale=20.0)


def _train_and_save(
    student: Any, tokenizer: Any, rows: Any, loss: Any, folder: Path, settings: dict, save_steps: int, origin: str,
    show: Callable[..., Any],
) -> Any:  # fmt: skip
    """Stage 3: train from the last checkpoint, write the metrics, save the model with a card naming `origin`."""
    from transformers import TrainingArguments

    from ..training.trainer import SiameseTrainer

    checkpoints = folder / "checkpoints"
    args = TrainingArguments(
        output_dir=str(checkpoints), num_train_epochs=settings["epochs"],
        per_device_train_batch_size=settings["batch_size"], learning_rate=settings["lr"], warmup_steps=0.1,
        seed=settings["seed"], report_to=[], logging_steps=50, save_strategy="steps", save_steps=save_steps,
        save_total_limit=1, disable_tqdm=not settings["show_progress_bar"],
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=student.train(), args=args, train_dataset=rows, processing_class=tokenizer, loss=loss
    )
    result = trainer.train(resume_from_checkpoint=last_checkpoint(checkpoints))
    write_text_atomic(folder / "train_metrics.json", json.dumps({**result.metrics, "global_step": result.global_step}))
    show(f"adapt: the adapted bi-encoder -> {save_final_model(trainer, tokenizer, folder, origin)}")
    return trainer.model


def adapt(
    corpus: Any,
    output_dir: str | os.PathLike,
    *,
    model: str,
    method: str,
    teacher: Any = None,
    text_column: str = "text",
    title_column: str = "title",
    max_texts: int | None = None,
    epochs: float = 1.0,
    batch_size: int = 32,
    lr: float | None = None,
    num_negatives: int = 4,
    save_steps: int = 500,
    query_generator: Callable[[list[str]], list[str]] | None = None,
    seed: int = 42,
    show_progress_bar: bool = True,
) -> Any:
    """Adapt the bi-encoder `model` (a path or Hub id) to `corpus` by `method`; returns it (saved in
    `output_dir/model`). Called again on the same folder, a stopped run goes on (see the module docstring).

    Args:
        corpus: any `open_corpus` source: a .txt / .jsonl / .csv / .parquet file or glob, a Hub id, a list of texts.
            It is read lazily, once to count and check it and once to write the rows (gpl reads it once and keeps
            its texts in memory: they are the corpus its negatives are mined from).
        method: `simcse`, `tsdae`, `crop`, `ict`, `title` or `gpl`.
        title_column: `title`: the column of the titles (the bodies are `text_column`).
        teacher: gpl only: a one-output cross-encoder (a `CrossEncoder` or its path) that scores the rows.
        max_texts: use the first N texts of the corpus.
        lr: default 3e-5 for simcse and tsdae (the papers'), else 2e-5.
        num_negatives: gpl: mined negatives per pseudo-query.
        save_steps: a checkpoint every N training steps (the last one kept), to resume from after a stop.
        query_generator: gpl: `texts -> one query per text` (e.g. a doc2query T5's generate) used instead of the
            sentence pseudo-queries: GPL as published.
    """
    from transformers import set_seed

    from ..data.corpus_stream import resolve_corpus
    from ..data.pseudo_pairs import corpus_texts
    from ..formats.loading import load_model
    from ..losses import DenoisingAutoEncoderLoss

    numbers = {"epochs": epochs, "save_steps": save_steps, "batch_size": batch_size}
    folder = _check_arguments(method, teacher, max_texts, {**numbers, **({} if lr is None else {"lr": lr})}, output_dir)
    source = resolve_corpus(corpus)  # a Hub id opened once, read twice
    if isinstance(source, Iterator):  # a one-pass iterator (a generator) is kept, as it cannot be read twice
        source = list(source)

    def read() -> Any:  # the corpus's texts (title: (title, body) pairs), lazily
        titles = title_column if method == "title" else None
        return corpus_texts(source, text_column=text_column, title_column=titles, max_texts=max_texts)

    scan = _scan_corpus(read(), method, batch_size)
    teacher_name, teacher = _load_teacher(teacher)
    lr = lr if lr is not None else DEFAULT_LR[method]
    set_seed(seed)
    student, tokenizer = load_model(os.fspath(model))
    student.tokenizer = tokenizer
    # TSDAE's decoder is built (and an encoder without one refused) before anything is written
    denoising = DenoisingAutoEncoderLoss(student, tokenizer, deletion_ratio=0.6) if method == "tsdae" else None
    settings = {
        "model": os.fspath(model), "method": method, "teacher": teacher_name,
        "texts": scan.digest.describe("texts"), "epochs": epochs,
        "batch_size": batch_size, "lr": lr, "num_negatives": num_negatives, "seed": seed,
        "query_generator": query_generator is not None,
    }  # fmt: skip
    if method == "title":
        settings["title_column"] = title_column
    check_settings(folder, settings)
    settings["show_progress_bar"] = show_progress_bar
    show = print if show_progress_bar else (lambda *_: None)
    out = folder / "model"
    if (out / "config.json").is_file():
        show(f"adapt: done before: {out}")
        return load_model(str(out))[0]

    pairs_file = folder / "pairs.jsonl"
    _write_pairs(pairs_file, method, read, scan.texts, query_generator, seed, batch_size)
    pairs = read_jsonl(pairs_file)
    show(f"adapt: {len(pairs)} {method} rows from {scan.count} texts")
    rows, loss = _rows_and_loss(method, pairs, student, tokenizer, scan, teacher, folder, settings, denoising, show)
    origin = f"`hf-siamese adapt --method {method}` on {scan.count} unlabelled texts ({len(rows)} training rows"
    origin += f"; teacher {teacher_name})" if teacher_name else ")"
    return _train_and_save(student, tokenizer, rows, loss, folder, settings, save_steps, origin, show)


__all__ = ["METHODS", "adapt", "fit_margin_scale"]
