"""`hf-siamese embed`: embed a corpus of any size into Parquet shards (`hf_siamese.retrieval.corpus`), resumably; under
`accelerate launch` / `torchrun` every process embeds its share of the shards on its own device. The folder it writes
is what `--embeddings-dir` of search, mine, similar and cluster reuses."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import CORPUS_HELP, add_command, add_corpus_arguments, add_model_arguments, add_shard_arguments
from .common import corpus_source, load_inference_model, shard_options


def register(commands: Any) -> None:
    """Add `embed` to the `hf-siamese` subparsers."""
    add_command(
        commands, "embed", run_embed, add_arguments,
        summary="embed a corpus of any size into Parquet shards, resumably (also across processes)",
        description="Embed every text of a corpus into Parquet shards (columns id, embedding) in DIR, reading the "
        "corpus as a stream and holding one shard at a time. Run it again with the same arguments to resume a "
        "stopped run (finished shards are checked and kept); under accelerate launch / torchrun each process embeds "
        "its share of the shards on its own device. DIR/corpus.json records the model and settings. DIR is what "
        "--embeddings-dir of search, mine, similar and cluster reuses.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `embed`: the corpus, the shard folder, the model, the corpus's columns, the shard sizes."""
    parser.add_argument("corpus", metavar="CORPUS", help=CORPUS_HELP)
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="the shard folder to write or resume")
    add_model_arguments(parser, training=False)
    add_corpus_arguments(parser)
    add_shard_arguments(parser)
    parser.add_argument("--prompt-name", metavar="NAME", help="model prompt for the texts (default: its default)")


def run_embed(args: argparse.Namespace) -> int:
    """Embed the corpus into shards in the output folder (resuming one started with the same arguments)."""
    from ..retrieval.corpus import encode_corpus

    source = corpus_source(args.corpus, args)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    result = encode_corpus(model, source, args.output, **shard_options(args, tokenizer), prompt_name=args.prompt_name)
    state = "" if result.done else " (other processes are still running; the last one marks the folder done)"
    shards = f"{result.num_shards} shard{'s' if result.num_shards != 1 else ''}"
    print(
        f"embedded {result.num_rows} rows of {args.corpus} into {shards} ({result.shards_computed} computed, "
        f"{result.shards_reused} reused here), {result.dim}-dim, in {args.output}{state}"
    )
    return 0
