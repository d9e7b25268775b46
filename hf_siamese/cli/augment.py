"""`hf-siamese augment`: Augmented SBERT's data step: scored gold pairs + silver pairs sampled among the gold sentences
by a bi-encoder's nearest neighbours and labelled by a cross-encoder trained on the gold pairs
(`hf_siamese.cross_encoder.silver_pairs`), written to one file that `hf-siamese train --train` reads."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .arguments import positive_int
from .common import load_cross_encoder, load_data, load_inference_model, parse_columns, row_file_kind, write_rows


def add_augment_command(commands: Any) -> None:
    """Register `augment` on the `hf-siamese` subparsers."""
    command = commands.add_parser(
        "augment",
        help="gold scored pairs + silver pairs labelled by a cross-encoder (Augmented SBERT), in one file",
        description="Pair every distinct sentence of the gold pairs with its --neighbours nearest others by the "
        "bi-encoder (--model), leave out the gold pairs, label the rest with the cross-encoder --teacher (trained on "
        "the gold pairs: hf-siamese train-reranker or CrossEncoderTrainer), map its scores onto the gold scores' "
        "range, and write gold + silver rows (sentence1, sentence2, score) to OUT.",
    )
    command.add_argument("data", metavar="GOLD", help="scored pairs (sentence1, sentence2, score): a file or Hub id")
    command.add_argument("--teacher", required=True, metavar="CE_DIR", help="the cross-encoder that labels the pairs")
    command.add_argument("--model", metavar="BI", help="the bi-encoder that samples the pairs (default: MiniLM)")
    command.add_argument("-o", "--output", required=True, metavar="OUT", help="a .csv, .tsv or .jsonl file")
    command.add_argument("--neighbours", type=positive_int, default=3, help="nearest sentences paired per sentence (3)")
    command.add_argument("--columns", metavar="NAME=COLUMN,...", help="e.g. sentence1=s1,sentence2=s2,score=gold")
    command.add_argument("--split", help="split of a Hub dataset")
    command.add_argument("--batch-size", type=positive_int, default=64, help="default: 64")
    command.set_defaults(handler=run_augment)


def run_augment(args: argparse.Namespace) -> int:
    """Read the gold pairs, sample and label the silver ones, write gold + silver."""
    import datasets

    from ..cross_encoder.augment import silver_pairs
    from ..data.columns import detect_layout

    output = Path(args.output)
    row_file_kind(output, "-o")
    teacher = load_cross_encoder(args.teacher, option="--teacher")
    gold = load_data(args.data, args.split, parse_columns(args.columns), None)
    layout = detect_layout(gold.column_names)
    scores = list(gold[layout.label]) if layout.label else []
    if len(layout.texts) != 2 or not scores or not all(isinstance(v, float | int) for v in scores):
        raise ValueError(
            f"{args.data}: augment needs scored pairs (sentence1, sentence2, score), got columns {gold.column_names}"
        )
    first, second = layout.texts
    gold = datasets.Dataset.from_dict(
        {"sentence1": list(gold[first]), "sentence2": list(gold[second]), "score": [float(v) for v in scores]}
    )
    bi_encoder, tokenizer = load_inference_model(args.model, None, None, None)
    bi_encoder.tokenizer = tokenizer
    pairs = list(zip(gold["sentence1"], gold["sentence2"], strict=True))
    silver = silver_pairs(
        [text for pair in pairs for text in pair], bi_encoder, teacher, args.neighbours, gold_pairs=pairs,
        score_range=(float(min(scores)), float(max(scores))), batch_size=args.batch_size, show_progress_bar=True,
    )  # fmt: skip
    rows = datasets.concatenate_datasets([gold, silver])
    write_rows(rows, output)
    print(f"{len(gold)} gold + {len(silver)} silver pairs -> {output}")
    return 0
