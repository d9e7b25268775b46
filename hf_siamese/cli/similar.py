"""`hf-siamese similar` and `hf-siamese cluster`: near-duplicate pairs and groups of a whole corpus, written as
CSV / TSV / JSONL with ids and texts (`hf_siamese.retrieval.similar`)."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import (
    APPROXIMATE_HELP,
    CORPUS_HELP,
    add_command,
    add_corpus_arguments,
    add_embeddings_dir_arguments,
    add_model_arguments,
    add_shard_arguments,
    positive_int,
)
from .common import corpus_source, load_inference_model, shard_options

_SIMILAR = "every pair of near-duplicate texts of a corpus above a similarity threshold"
_CLUSTER = "group a corpus into communities above a threshold, or --k k-means topics"


def _description(summary: str) -> str:
    return (
        f"Find {summary}, from each text's --top-k nearest neighbours (never an N x N matrix). The corpus is embedded "
        "first into resumable shards (as 'embed'; --embeddings-dir, default OUTPUT.embeddings, is reused by a later "
        "run). Writes CSV, TSV or JSONL (by the -o name) with ids and texts."
    )


def register(commands: Any) -> None:
    """Add `similar` and `cluster` to the `hf-siamese` subparsers."""
    add_command(commands, "similar", run_similar, add_arguments, summary=_SIMILAR, description=_description(_SIMILAR))
    add_command(
        commands, "cluster", run_cluster, add_cluster_arguments, summary=_CLUSTER, description=_description(_CLUSTER)
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `similar` (and the first ones of `cluster`): the corpus, the output, the model, the threshold and
    neighbours, the corpus's columns and its embedding."""
    parser.add_argument("corpus", metavar="CORPUS", help=CORPUS_HELP)
    parser.add_argument("-o", "--output", required=True, help="NAME.csv, NAME.tsv or NAME.jsonl")
    add_model_arguments(parser, training=False)
    parser.add_argument("--threshold", type=float, default=0.85, help="least similarity (default: %(default)s)")
    parser.add_argument("--top-k", type=positive_int, default=10, help="neighbours per text (default: %(default)s)")
    add_corpus_arguments(parser)
    add_shard_arguments(parser)
    add_embeddings_dir_arguments(parser, "OUTPUT.embeddings", APPROXIMATE_HELP)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `cluster`: those of `similar`, then the grouping (--k, --min-size, --method)."""
    add_arguments(parser)
    parser.add_argument("--k", type=positive_int, help="k-means into K groups instead of a threshold")
    parser.add_argument("--min-size", type=positive_int, default=2, help="smallest group kept (default %(default)s)")
    parser.add_argument(
        "--method", choices=("community", "components"), default="community",
        help="community: greedy, from the most-connected text; components: connected components",
    )  # fmt: skip


def _embeddings_dir(args: argparse.Namespace) -> str:
    """--embeddings-dir, else OUTPUT.embeddings: kept beside the output, so that a later run reuses it."""
    return args.embeddings_dir or f"{args.output}.embeddings"


def run_similar(args: argparse.Namespace) -> int:
    """Write every pair above --threshold among each text's --top-k neighbours."""
    from ..retrieval.similar import find_similar
    from ..storage import row_file_kind, write_rows

    row_file_kind(args.output)
    source = corpus_source(args.corpus, args)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    rows = find_similar(
        model, source, _embeddings_dir(args), threshold=args.threshold, top_k=args.top_k,
        approximate=args.approximate, **shard_options(args, tokenizer),
    )  # fmt: skip
    write_rows(args.output, rows, ("id_1", "id_2", "score", "text_1", "text_2"))
    print(f"{len(rows)} pairs with {model.config.similarity} >= {args.threshold} in {args.corpus} -> {args.output}")
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    """Write the groups (communities above --threshold, or --k k-means clusters), one row per member."""
    from ..retrieval.similar import find_clusters
    from ..storage import row_file_kind, write_rows

    row_file_kind(args.output)
    source = corpus_source(args.corpus, args)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    threshold = None if args.k is not None else args.threshold
    rows = find_clusters(
        model, source, _embeddings_dir(args), threshold=threshold, k=args.k, top_k=args.top_k,
        min_size=args.min_size, method=args.method, approximate=args.approximate, **shard_options(args, tokenizer),
    )  # fmt: skip
    write_rows(args.output, rows, ("cluster", "size", "id", "text"))
    groups = len({row["cluster"] for row in rows})
    print(f"{groups} groups ({len(rows)} texts) of {args.corpus} -> {args.output}")
    return 0
