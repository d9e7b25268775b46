"""`hf-siamese index`: embed a corpus once into a vector index folder (streamed: shards and memory-mapped texts) that
`hf-siamese search --index` reads."""

from __future__ import annotations

import argparse
import sys

from .common import corpus_source, load_inference_model


def read_calibration_queries(path: str) -> list[str]:
    """The queries of --calibration-queries: a .txt file (one per line) or any file `open_corpus` reads with a
    `text` column."""
    from ..data.corpus_stream import open_corpus

    return [text for _, text in open_corpus(path)]


def run_index(args: argparse.Namespace) -> int:
    """Embed the corpus with the model and write the index folder."""
    from ..retrieval.vector_index import build_index

    source = corpus_source(args.corpus, args)
    queries = read_calibration_queries(args.calibration_queries) if args.calibration_queries else None
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    index = build_index(
        model, source, args.output, text_column=args.text_column, id_column=args.id_column, tokenizer=tokenizer,
        batch_size=args.batch_size, shard_size=args.shard_size, dtype=args.dtype,
        prompt_name=args.prompt_name, approximate=args.approximate, calibration_queries=queries,
        embeddings_dir=args.embeddings_dir, show_progress_bar=sys.stderr.isatty(), overwrite=args.overwrite,
    )  # fmt: skip
    print(
        f"indexed {len(index)} documents of {args.corpus} ({index.dim}-dim, {index.similarity} similarity, "
        f"{index.backend} search) into {args.output}"
    )
    return 0
