"""`hf-siamese adapt`: adapt a bi-encoder to a corpus without labels (`hf_siamese.recipes.adapt.adapt`): SimCSE,
TSDAE, independent cropping, inverse cloze, title vs body, or GPL with a cross-encoder teacher; stages kept in OUT,
so the same command again resumes a stopped run."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import add_command, positive_float, positive_int
from .common import default_model_path, load_cross_encoder, quiet_progress_bars


def register(commands: Any) -> None:
    """Add `adapt` to the `hf-siamese` subparsers."""
    add_command(
        commands, "adapt", run_adapt, add_arguments,
        summary="adapt a bi-encoder to a corpus without labels (simcse, tsdae, crop, ict, title, gpl)",
        description="Train a bi-encoder on a corpus with no labels. simcse: each text twice with two dropout masks; "
        "tsdae: a decoder tied to the encoder rebuilds each text from the embedding of a copy missing 60%% of its "
        "words; "
        "crop: two spans of the same text; ict: a sentence vs the rest of its passage; title: a document's title vs "
        "its body (simcse, crop, ict, title: in-batch negatives); gpl: a sentence as the query of its passage, "
        "negatives mined from the corpus, margins from "
        "the cross-encoder --teacher, MarginMSE. Stages are kept in OUT: run the same command again to resume.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `adapt`: the corpus, the method, the run's folder, the bi-encoder and the teacher, the text
    columns, the training settings."""
    from ..recipes.adapt import METHODS

    parser.add_argument("data", metavar="CORPUS", help="texts: .txt (one per line), .jsonl/.csv/.parquet, or Hub id")
    parser.add_argument("--method", required=True, choices=METHODS, help="what to learn from the texts")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the run's folder (OUT/model at the end)")
    parser.add_argument("--model", metavar="BI", help="the bi-encoder to adapt (default: MiniLM)")
    parser.add_argument("--teacher", metavar="CE_DIR", help="gpl: the cross-encoder that scores the rows")
    parser.add_argument("--text-column", default="text", help="text column of a table or dataset (%(default)s)")
    parser.add_argument("--title-column", default="title", help="title: the column of the titles (%(default)s)")
    parser.add_argument("--max-texts", type=positive_int, metavar="N", help="use the first N texts")
    parser.add_argument("--epochs", type=positive_float, default=1.0, help="default: 1")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="rows per batch (default: %(default)s)")
    parser.add_argument("--lr", type=positive_float, help="default: 3e-5 for simcse and tsdae, else 2e-5")
    parser.add_argument(
        "--negatives", type=positive_int, default=4, help="gpl: mined negatives per query (%(default)s)"
    )
    parser.add_argument("--save-steps", type=positive_int, default=500, help="a checkpoint every N steps (%(default)s)")
    parser.add_argument("--seed", type=int, default=42, help="default: %(default)s")


def run_adapt(args: argparse.Namespace) -> int:
    """Load the teacher if given, run the method's stages."""
    from ..recipes.adapt import adapt

    teacher = load_cross_encoder(args.teacher, option="--teacher") if args.teacher else None
    with quiet_progress_bars():
        adapt(
            args.data, args.output, model=args.model or default_model_path(), method=args.method, teacher=teacher,
            text_column=args.text_column, title_column=args.title_column, max_texts=args.max_texts, epochs=args.epochs,
            batch_size=args.batch_size, lr=args.lr, num_negatives=args.negatives, save_steps=args.save_steps,
            seed=args.seed,
        )  # fmt: skip
    print(f"adapted ({args.method}): the bi-encoder is in {args.output}/model")
    return 0
