"""`hf-siamese index`: embed a corpus once into a vector index folder that `hf-siamese search --index` reads."""

from __future__ import annotations

import argparse

from .common import load_inference_model


def run_index(args: argparse.Namespace) -> int:
    """Embed the corpus with the model and write the index folder."""
    from ..data.readers import read_corpus
    from ..retrieval.vector_index import build_index

    if args.streamed:
        return _run_streamed(args)
    texts, ids = read_corpus(
        args.corpus,
        text_column=args.text_column,
        id_column=args.id_column,
        split=args.split,
        subset=args.dataset_config,
    )
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    index = build_index(
        model,
        texts,
        args.output,
        ids=ids,
        tokenizer=tokenizer,
        batch_size=args.batch_size,
        dtype=args.dtype,
        prompt_name=args.prompt_name,
        use_faiss=False if args.no_faiss else None,
        overwrite=args.overwrite,
    )
    print(
        f"indexed {len(index)} documents of {args.corpus} ({index.dim}-dim, {index.similarity} similarity, "
        f"{index.backend} search) into {args.output}"
    )
    return 0


def _run_streamed(args: argparse.Namespace) -> int:
    """--streamed: the corpus streamed into shards and a memory-mapped text table (`build_corpus_index`)."""
    from ..retrieval.corpus_index import build_corpus_index
    from .embed import corpus_source

    source = corpus_source(args.corpus, args.split, args.dataset_config)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    index = build_corpus_index(
        model, source, args.output, text_column=args.text_column or "text", id_column=args.id_column,
        tokenizer=tokenizer, batch_size=args.batch_size, shard_size=args.shard_size, dtype=args.dtype,
        prompt_name=args.prompt_name, approximate=False if args.no_faiss else None, overwrite=args.overwrite,
    )  # fmt: skip
    print(
        f"indexed {len(index)} documents of {args.corpus} ({index.dim}-dim, {index.similarity} similarity, "
        f"{index.backend} search, streamed) into {args.output}"
    )
    return 0
