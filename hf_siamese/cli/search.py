"""`hf-siamese search`: top-k semantic search of queries over a corpus file, or over an index built by
`hf-siamese index` (no re-embedding of the corpus)."""

from __future__ import annotations

import argparse

from .common import load_inference_model


def run_search(args: argparse.Namespace) -> int:
    """Print the top-k corpus lines for every query, with their similarity."""
    from ..data.readers import read_text_lines

    if args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {args.top_k}")
    queries = list(args.query or [])
    if args.queries:
        queries += read_text_lines(args.queries)
    queries = [query.strip() for query in queries]
    if not queries or not all(queries):
        raise ValueError("give at least one non-empty --query TEXT or a --queries FILE")
    if args.index:
        return _search_index(args, queries)
    import torch

    corpus = read_text_lines(args.corpus)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )

    corpus_embeddings = model.encode(corpus, tokenizer=tokenizer, batch_size=args.batch_size)
    query_embeddings = model.encode(
        queries, tokenizer=tokenizer, batch_size=args.batch_size, prompt_name=args.prompt_name
    )
    scores = model.similarity(query_embeddings, corpus_embeddings)
    top = torch.topk(scores, k=min(args.top_k, len(corpus)), dim=1)
    for index, query in enumerate(queries):
        print(f"\nQuery: {query}")
        for rank, (score, position) in enumerate(zip(top.values[index], top.indices[index], strict=True), start=1):
            print(f"  {rank:>2}. {score.item():.4f}  {corpus[int(position)]}")
    return 0


def _search_index(args: argparse.Namespace, queries: list[str]) -> int:
    """Search an index folder; the model defaults to the one recorded in it, at the recorded max length."""
    from ..retrieval.vector_index import load_index

    index = load_index(args.index)
    model_path = args.model or index.model_name
    if not model_path:
        raise ValueError(f"the index {args.index!r} records no model path (built from an unsaved model); pass --model")
    max_seq_length = args.max_seq_length or index.settings["max_seq_length"]
    model, tokenizer = load_inference_model(
        model_path, args.pooling, args.normalize, max_seq_length, device=args.device
    )
    results = index.search(
        model, queries, top_k=args.top_k, tokenizer=tokenizer, prompt_name=args.prompt_name, batch_size=args.batch_size
    )
    for query, hits in zip(queries, results, strict=True):
        print(f"\nQuery: {query}")
        for hit in hits:
            print(f"  {hit['rank']:>2}. {hit['score']:.4f}  [{hit['id']}] {hit['text']}")
    return 0
