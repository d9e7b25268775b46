"""`hf-siamese augment`: Augmented SBERT in one command (`hf_siamese.recipes.augmented.augmented_sbert`): a
cross-encoder trained on the gold scored pairs (or `--teacher`) labels pairs sampled among the gold sentences by the
bi-encoder's nearest neighbours (and BM25's), and the bi-encoder trains on gold + silver. Every stage is kept in OUT:
the same command again resumes a stopped run."""

from __future__ import annotations

import argparse
from typing import Any

from ..data.training_sets import load_data
from .arguments import add_command, non_negative_int, positive_float, positive_int
from .common import _one_line, default_model_path, load_cross_encoder, parse_columns, quiet_progress_bars


def register(commands: Any) -> None:
    """Add `augment` to the `hf-siamese` subparsers."""
    add_command(
        commands, "augment", run_augment, add_arguments,
        summary="Augmented SBERT: a cross-encoder labels sampled pairs, the bi-encoder trains on gold + silver",
        description="Augmented SBERT (Thakur et al. 2021) in three stages kept in OUT: (1) a cross-encoder trained on "
        "the GOLD scored pairs (OUT/teacher; or --teacher), (2) every distinct gold sentence paired with its "
        "--neighbours nearest others by the bi-encoder --model (and --bm25 nearest by BM25), gold pairs left out, "
        "labelled by the teacher on the gold scores' range (OUT/silver.jsonl), (3) --model trained on gold + silver "
        "with the cosine loss (OUT/model, with a model card naming both). Run it again to resume a stopped run.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `augment`: the gold pairs, the run's folder, the bi-encoder, the teacher and the dev pairs, then the
    groups sampling and training."""
    parser.add_argument("data", metavar="GOLD", help="scored pairs (sentence1, sentence2, score): a file or Hub id")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the run's folder")
    parser.add_argument("--model", metavar="BI", help="the bi-encoder to sample with and train (default: MiniLM)")
    parser.add_argument("--teacher", metavar="CE_DIR", help="a trained cross-encoder to label with (skips stage 1)")
    parser.add_argument("--eval", metavar="DEV", help="scored pairs to measure the teacher and keep the best epoch on")
    parser.add_argument("--columns", metavar="NAME=COLUMN,...", help="e.g. sentence1=s1,sentence2=s2,score=gold")
    parser.add_argument("--split", help="split of a Hub dataset (GOLD)")
    parser.add_argument("--eval-split", help="split of a Hub dataset (--eval)")
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument(
        "--sentences", metavar="TEXTS", help="more sentences, unlabelled, to sample pairs among with the gold ones (a "
        ".txt file, one per line, or .jsonl / .csv / .parquet with a text column)",
    )  # fmt: skip
    sampling.add_argument(
        "--neighbours", type=non_negative_int, default=3, help="bi-encoder neighbours per sentence (3; 0: none)"
    )
    sampling.add_argument("--bm25", type=non_negative_int, default=0, metavar="K", help="BM25 neighbours (0: none)")
    training = parser.add_argument_group("training")
    training.add_argument("--teacher-epochs", type=positive_float, default=4.0, help="stage 1 (default: 4)")
    training.add_argument("--teacher-lr", type=positive_float, default=2e-5, help="stage 1 (default: 2e-5)")
    training.add_argument("--epochs", type=positive_float, default=1.0, help="stage 3 (default: 1)")
    training.add_argument("--lr", type=positive_float, default=2e-5, help="stage 3 (default: 2e-5)")
    training.add_argument(
        "--batch-size", type=positive_int, default=16, help="pairs per batch, both stages (%(default)s)"
    )
    training.add_argument("--seed", type=int, default=42, help="default: %(default)s")


def run_augment(args: argparse.Namespace) -> int:
    """Read the gold (and eval) pairs, load the teacher if given, run the three stages."""
    import warnings

    from ..recipes.augmented import augmented_sbert

    if args.neighbours == 0 and args.bm25 == 0:
        raise ValueError("--neighbours 0 and --bm25 0 sample no pairs; give one of them")
    teacher = load_cross_encoder(args.teacher, option="--teacher") if args.teacher else None
    columns = parse_columns(args.columns)
    gold = load_data(args.data, args.split, columns, None)
    eval_pairs = load_data(args.eval, args.eval_split, columns, None) if args.eval else None
    unlabelled = None
    if args.sentences:
        from ..data.corpus_stream import open_corpus

        unlabelled = [text for _, text in open_corpus(args.sentences) if text.strip()]
        if not unlabelled:
            raise ValueError(f"--sentences {args.sentences}: no sentences")
    with quiet_progress_bars(), warnings.catch_warnings():
        warnings.simplefilter("always")
        try:
            augmented_sbert(
                gold, args.output, model=args.model or default_model_path(), teacher=teacher,
                eval_pairs=eval_pairs, unlabelled=unlabelled, neighbours=args.neighbours, bm25_neighbours=args.bm25,
                teacher_epochs=args.teacher_epochs, teacher_batch_size=args.batch_size, teacher_lr=args.teacher_lr,
                epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
            )  # fmt: skip
        except ValueError as error:
            message = _one_line(error).replace("gold:", f"{args.data}:").replace("eval_pairs:", f"{args.eval}:")
            message = message.replace("unlabelled:", f"--sentences {args.sentences}:")
            raise ValueError(message) from None
    print(f"Augmented SBERT done: the bi-encoder is in {args.output}/model (its README.md says what it learned from)")
    return 0
