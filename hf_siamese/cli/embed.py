"""`hf-siamese embed`: embed a corpus of any size into Parquet shards (`hf_siamese.retrieval.corpus`), resumably; under
`accelerate launch` / `torchrun` every process embeds its share of the shards on its own device. The folder it writes
is what `--embeddings-dir` of search, mine, similar and cluster reuses."""

from __future__ import annotations

import argparse

from .common import corpus_source, load_inference_model, shard_options


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
