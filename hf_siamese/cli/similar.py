"""`hf-siamese similar` and `hf-siamese cluster`: near-duplicate pairs and groups of a whole corpus, written as
CSV / TSV / JSONL with ids and texts (`hf_siamese.retrieval.similar`)."""

from __future__ import annotations

import argparse

from .common import corpus_source, load_inference_model, shard_options


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
