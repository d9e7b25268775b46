"""`hf-siamese distill`: a student learns a teacher's embeddings (`EmbeddingMSELoss`): a smaller student made of some
of the teacher's layers (`student_from_teacher`), or another model (`--student`, e.g. a multilingual encoder learning
an English teacher from parallel sentences: Reimers & Gurevych 2020). The teacher's embeddings are computed once
(`teacher_embeddings`, PCA-projected when the student is narrower). The command reads the texts and loads the models;
the training, its resume and the swap into OUT are the library's (`hf_siamese.recipes.distill.distill`)."""

from __future__ import annotations

import argparse
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


def _bi_encoder(path: str, option: str) -> Any:
    """The bi-encoder `option` names, loaded with its tokenizer; a bad one in one line naming the flag."""
    try:
        model, tokenizer = load_inference_model(path, None, None, None)
    except ValueError as error:
        raise ValueError(f"{option} {path}: {_one_line(error)}") from None
    model.tokenizer = tokenizer
    return model


def run_distill(args: argparse.Namespace) -> int:
    """Read the texts, load the teacher (and --student), distill (`hf_siamese.recipes.distill.distill`)."""
    from ..recipes.distill import distill

    output = model_output_folder(args.output, args.overwrite, "a student")
    rows = _rows(args)
    teacher_path = args.teacher or default_model_path()
    teacher = _bi_encoder(teacher_path, "--teacher")
    student = _bi_encoder(args.student, "--student") if args.student is not None else None
    # The run's settings name the models and layers as given, so the same command resumes a stopped run.
    given = {"teacher": teacher_path, "student": args.student, "layers": args.layers, "keep": args.keep}
    with quiet_progress_bars():
        distill(
            rows, output, teacher=teacher, student=student,
            layers=_layers(args.layers) if args.layers else args.keep, projection=args.projection,
            epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed, save_steps=args.save_steps,
            overwrite=args.overwrite, run_options=given, report=print,
        )  # fmt: skip
    print(f"saved the student -> {output}")
    return 0
