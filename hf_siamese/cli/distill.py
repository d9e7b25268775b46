"""`hf-siamese distill`: a student learns a teacher's embeddings (`EmbeddingMSELoss`): a smaller student made of some
of the teacher's layers (`student_from_teacher`), or another model (`--student`, e.g. a multilingual encoder learning
an English teacher from parallel sentences: Reimers & Gurevych 2020). The teacher's embeddings are computed once
(`teacher_embeddings`, PCA-projected when the student is narrower)."""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from ..data.training_sets import load_data
from .arguments import add_command, positive_float, positive_int
from .common import (
    _one_line,
    default_model_path,
    load_inference_model,
    model_output_folder,
    parse_columns,
    quiet_progress_bars,
)


def register(commands: Any) -> None:
    """Add `distill` to the `hf-siamese` subparsers."""
    add_command(
        commands, "distill", run_distill, add_arguments,
        summary="train a smaller (or another) bi-encoder on a teacher's embeddings of your texts",
        description="Distill a bi-encoder teacher into a student: the student's embedding of each text (with "
        "--parallel, of the source and of its translation) regresses on the teacher's embedding of the text (of the "
        "source) by MSE. The student keeps --layers / --keep of the teacher's layers (default: half of them, spread "
        "evenly, first and last kept), or is --student.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `distill`: the texts, the output, the teacher, which student (--layers, --keep or --student), the
    projection, the columns and the training settings."""
    parser.add_argument(
        "data", metavar="TEXTS", help="a text file (.txt, one per line; .jsonl / .csv / .parquet with --text-column); "
        "with --parallel, a pairs file of (source, translation)"
    )  # fmt: skip
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="folder the student is saved to")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUT if it holds a model (kept until the new one is saved)"
    )
    parser.add_argument("--teacher", metavar="T", help="the teacher bi-encoder (default: the shipped all-MiniLM-L6-v2)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--layers", metavar="I,J,...", help="the teacher's layers the student keeps, e.g. 0,2,5")
    which.add_argument("--keep", type=positive_int, metavar="N", help="keep N of the teacher's layers, spread evenly")
    which.add_argument("--student", metavar="S", help="train this bi-encoder or encoder instead of a layer copy")
    parser.add_argument(
        "--projection", choices=("pca", "learned"), default="pca", help="a student of another width than the "
        "teacher: learn the teacher's embeddings projected on their principal components (pca, the default), or add "
        "a dense layer to the student that learns to map onto the teacher's width (learned)",
    )  # fmt: skip
    parser.add_argument("--parallel", action="store_true", help="TEXTS holds (source, translation) pairs")
    parser.add_argument("--columns", metavar="NAME=COLUMN,...", help="--parallel: e.g. sentence1=en,sentence2=de")
    parser.add_argument("--text-column", default="text", help="the text column of a .jsonl/.csv/.parquet (%(default)s)")
    parser.add_argument("--epochs", type=positive_float, default=1.0, help="default: 1")
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="texts (rows) per batch (default: %(default)s)"
    )
    parser.add_argument("--lr", type=positive_float, default=1e-4, help="learning rate (default: 1e-4)")
    parser.add_argument("--seed", type=int, default=42, help="default: %(default)s")
    parser.add_argument(
        "--save-steps", type=positive_int, default=500, help="checkpoint every N steps: a stopped run resumes (500)"
    )


def _layers(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--layers {text!r}: expected layer indices separated by commas, e.g. 0,2,5") from None


def _rows(args: argparse.Namespace) -> Any:
    from datasets import Dataset

    if args.parallel:
        rows = load_data(args.data, None, parse_columns(args.columns), None)
        if len(rows.column_names) < 2 or "label" in rows.column_names:
            raise ValueError(f"{args.data}: --parallel expects (source, translation) columns, got {rows.column_names}")
        return rows
    if args.columns is not None:
        raise ValueError("--columns applies with --parallel; use --text-column for a file of texts")
    from ..data.corpus_stream import open_corpus

    texts = [text for _, text in open_corpus(args.data, text_column=args.text_column)]
    if not texts:
        raise ValueError(f"{args.data}: no texts to distill on")
    return Dataset.from_dict({"sentence": texts})


def run_distill(args: argparse.Namespace) -> int:
    """Build the student, label the texts with the teacher's embeddings, train, save."""
    from ..recipes.stages import check_settings, last_checkpoint
    from ..storage import recover_output, replace_folder
    from ..training.arguments import SiameseTrainingArguments
    from ..training.students import student_from_teacher, teacher_embeddings
    from ..training.trainer import SiameseTrainer

    output = model_output_folder(args.output, args.overwrite, "a student")
    rows = _rows(args)
    teacher_path = args.teacher or default_model_path()
    try:
        teacher, teacher_tokenizer = load_inference_model(teacher_path, None, None, None)
    except ValueError as error:
        raise ValueError(f"--teacher {teacher_path}: {_one_line(error)}") from None
    teacher.tokenizer = teacher_tokenizer
    if args.student is not None:
        try:
            student, tokenizer = load_inference_model(args.student, None, None, None)
        except ValueError as error:
            raise ValueError(f"--student {args.student}: {_one_line(error)}") from None
        student.tokenizer = tokenizer
    else:
        count = int(teacher.config.encoder_config.num_hidden_layers)
        keep = _layers(args.layers) if args.layers else (args.keep or max(1, count // 2))
        student, tokenizer = student_from_teacher(teacher, keep), teacher_tokenizer
    width, teacher_width = student.config.embedding_size, teacher.config.embedding_size
    if width != teacher_width and args.projection == "learned":
        from ..training.students import add_projection

        student = add_projection(student, teacher_width)
        print(f"added a learned projection to the student: {width} -> {teacher_width}")
        width = teacher_width
    # A fixed work folder beside the output: the teacher's embeddings and the checkpoints of a stopped run are found
    # there by the same command again, and removed once the student is saved.
    work = output.parent / f".{output.name}.distill"
    settings = {
        "teacher": teacher_path, "student": args.student, "layers": args.layers, "keep": args.keep,
        "projection": args.projection, "rows": len(rows), "epochs": args.epochs, "batch_size": args.batch_size,
        "lr": args.lr, "seed": args.seed,
    }  # fmt: skip
    check_settings(work, settings)  # a stopped run with other settings is refused, not mixed in
    with quiet_progress_bars():
        rows = teacher_embeddings(
            rows, teacher, dim=width if width != teacher_width else None, show_progress_bar=True,
            cache_dir=work / "targets",
        )  # fmt: skip
    layers = student.config.encoder_config.num_hidden_layers
    print(f"student: {layers} layers, width {width}; teacher width {teacher_width}; {len(rows)} training rows")
    training = SiameseTrainingArguments(
        output_dir=str(work / "checkpoints"), num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_steps=0.1, seed=args.seed, save_strategy="steps", save_steps=args.save_steps,
        save_total_limit=1, report_to=[], logging_steps=50, disable_tqdm=False,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=student, args=training, train_dataset=rows, processing_class=tokenizer, loss="embedding_mse"
    )
    last = last_checkpoint(work / "checkpoints")
    if last:
        print(f"resuming from {last}")
    trainer.train(resume_from_checkpoint=last)
    staging = work / "student"  # saved whole, then swapped in: never mixed into an older model's files
    trainer.save_model(str(staging))
    recover_output(output)
    replace_folder(staging, output)
    shutil.rmtree(work, ignore_errors=True)
    print(f"saved the student -> {output}")
    return 0
