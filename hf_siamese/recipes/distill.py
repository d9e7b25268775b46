"""Distilling a bi-encoder teacher into a student in one call (`distill`, what `hf-siamese distill` runs): the student
learns the teacher's embedding of each text by MSE (`EmbeddingMSELoss`). The student keeps some of the teacher's
layers (`student_from_teacher`: the smaller model of Reimers & Gurevych 2020), or is another bi-encoder, e.g. a
multilingual one learning an English teacher from parallel sentences. The teacher's embeddings are computed once
(`teacher_embeddings`), projected on their principal components for a narrower student, unless the student gets a
learned projection to the teacher's width (`projection="learned"`).

A work folder beside the output keeps what a stopped run needs, so the same call again goes on where it stopped:

    .NAME.distill/settings.json  the run's settings; a run with other settings is refused, not mixed in
    .NAME.distill/targets/       the teacher's embeddings, a chunk file at a time
    .NAME.distill/checkpoints/   a checkpoint every `save_steps` steps (the last one kept), resumed from

The student is saved in a staging folder and swapped into NAME whole (`storage.replace_folder`); the work folder
goes after it.

    rows = Dataset.from_dict({"sentence": texts})
    student = distill(rows, "student", teacher="sentence-transformers/all-MiniLM-L6-v2", layers=3, report=print)
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..storage import exclusive_output, replace_folder, staging_folder
from .stages import check_settings, check_training_numbers, last_checkpoint

PROJECTIONS = ("pca", "learned")


def distill(
    rows: Any,
    output_dir: str | os.PathLike,
    *,
    teacher: Any,
    student: Any = None,
    layers: Sequence[int] | int | None = None,
    projection: str = "pca",
    epochs: float = 1.0,
    batch_size: int = 64,
    lr: float = 1e-4,
    seed: int = 42,
    save_steps: int = 500,
    overwrite: bool = False,
    run_options: Mapping[str, Any] | None = None,
    show_progress_bar: bool = True,
    report: Callable[[str], None] | None = None,
) -> Any:
    """Distill `teacher` into a student on `rows`, save it to `output_dir`; returns it. Called again after a stop,
    with the same settings, the run resumes (see the module docstring).

    Args:
        rows: a `datasets.Dataset` of texts (one `sentence` / `text` column), or of parallel pairs (source,
            translation: the student learns the teacher's embedding of the source for both).
        teacher: a `SiameseBertModel` with its `tokenizer`, or its path / Hub id.
        student: the bi-encoder or encoder to train (a model with its `tokenizer`, or a path / Hub id); default: one
            made of the teacher's `layers`.
        layers: the teacher's layers the student keeps (indices, in order), or how many, spread evenly; default:
            half of them. Only without `student`.
        projection: a student of another width: learn the teacher's embeddings projected by PCA ("pca"), or add a
            dense layer to the student that learns to map onto the teacher's width ("learned").
        save_steps: a checkpoint every N steps, to resume from after a stop.
        overwrite: replace a model already in `output_dir` (kept until the student is saved); else one is refused.
        run_options: the caller's names of what it distilled (e.g. the teacher's path as the user gave it), over
            the settings a stopped run is compared on (`teacher`, `student`, `layers` by default).
        report: called with each progress line (the student's size and width, a learned projection, a resume).

    Raises:
        ValueError: bad settings, a model `output_dir` holds without `overwrite`, a stopped run with other settings.
    """
    from ..storage.score_store import teacher_id
    from ..training.students import student_from_teacher, teacher_embeddings

    output = _check_arguments(output_dir, student, layers, projection, overwrite)
    check_training_numbers(epochs=epochs, batch_size=batch_size, lr=lr, save_steps=save_steps)
    show = report or _silent
    teacher_name = teacher_id(teacher)
    student_name = None if student is None else teacher_id(student)
    teacher = _bi_encoder(teacher, "teacher")
    if student is None:
        count = int(teacher.config.encoder_config.num_hidden_layers)
        student = student_from_teacher(teacher, layers if layers is not None else max(1, count // 2))
    else:
        student = _bi_encoder(student, "student")
    width, teacher_width = student.config.embedding_size, teacher.config.embedding_size
    if width != teacher_width and projection == "learned":
        from ..training.students import add_projection

        student = add_projection(student, teacher_width)
        show(f"added a learned projection to the student: {width} -> {teacher_width}")
        width = teacher_width
    # A fixed work folder beside the output: the teacher's embeddings and the checkpoints of a stopped run are found
    # there by the same call again, and removed once the student is saved.
    work = output.parent / f".{output.name}.distill"
    settings = {
        "teacher": teacher_name, "student": student_name, "layers": layers, "projection": projection,
        "rows": len(rows), "epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed, **(run_options or {}),
    }  # fmt: skip
    with exclusive_output(output, "a distillation into this folder"):
        check_settings(work, settings)  # a stopped run with other settings is refused, not mixed in
        rows = teacher_embeddings(
            rows, teacher, dim=width if width != teacher_width else None, show_progress_bar=show_progress_bar,
            cache_dir=work / "targets",
        )  # fmt: skip
        layer_count = student.config.encoder_config.num_hidden_layers
        show(f"student: {layer_count} layers, width {width}; teacher width {teacher_width}; {len(rows)} training rows")
        trainer = _train(student, rows, work / "checkpoints", settings, save_steps, show_progress_bar, show)
        _save(trainer, output)
        shutil.rmtree(work, ignore_errors=True)
    return trainer.model


def _check_arguments(
    output_dir: str | os.PathLike, student: Any, layers: Any, projection: str, overwrite: bool
) -> Path:
    """Refuse settings that do not go together and an output in the way; returns the output folder."""
    if projection not in PROJECTIONS:
        raise ValueError(f"projection={projection!r}; accepted: {', '.join(PROJECTIONS)}")
    if student is not None and layers is not None:
        raise ValueError("layers= makes a student of the teacher's layers; give it or student=, not both")
    output = Path(output_dir)
    if output.exists() and not output.is_dir():
        raise ValueError(f"output_dir={os.fspath(output)!r} exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ValueError(f"output_dir={os.fspath(output)!r} is not empty; pass overwrite=True to replace it")
    return output


def _bi_encoder(model: Any, name: str) -> Any:
    """`model` with its `tokenizer`: loaded from a path or Hub id (`formats.loading.load_model`), or as given."""
    if isinstance(model, str | os.PathLike):
        from ..formats.loading import load_model

        model, tokenizer = load_model(os.fspath(model))
        model.tokenizer = tokenizer
    if getattr(model, "tokenizer", None) is None:
        raise ValueError(f"{name}: a model without its tokenizer; set {name}.tokenizer, or give its path")
    return model


def _train(
    student: Any, rows: Any, checkpoints: Path, settings: Mapping[str, Any], save_steps: int, progress: bool,
    show: Callable[[str], None],
) -> Any:  # fmt: skip
    """The `SiameseTrainer` after training the student on the teacher's embeddings (`embedding_mse`), resumed from
    the last complete checkpoint in `checkpoints` where a stopped run left one."""
    from ..training.arguments import SiameseTrainingArguments
    from ..training.trainer import SiameseTrainer

    training = SiameseTrainingArguments(
        output_dir=str(checkpoints), num_train_epochs=settings["epochs"],
        per_device_train_batch_size=settings["batch_size"], learning_rate=settings["lr"], warmup_steps=0.1,
        seed=settings["seed"], save_strategy="steps", save_steps=save_steps, save_total_limit=1, report_to=[],
        logging_steps=50, disable_tqdm=not progress,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=student, args=training, train_dataset=rows, processing_class=student.tokenizer, loss="embedding_mse"
    )
    last = last_checkpoint(checkpoints)
    if last:
        show(f"resuming from {last}")
    trainer.train(resume_from_checkpoint=last)
    return trainer


def _save(trainer: Any, output: Path) -> None:
    """The student, saved whole in a staging folder beside `output`, then swapped in: never mixed into an older
    model's files."""
    staging = staging_folder(output, "save")  # also mends what a killed earlier save left
    try:
        trainer.save_model(str(staging))
        replace_folder(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """The report where the caller wants none."""


__all__ = ["PROJECTIONS", "distill"]
