"""`hf-siamese search`: top-k semantic search of queries over a corpus file."""

from __future__ import annotations

import argparse

from .common import load_inference_model, read_text_lines


def run_search(args: argparse.Namespace) -> int:
    """Print the top-k corpus lines for every query, with their similarity."""
    import torch

    if args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {args.top_k}")
    queries = list(args.query or [])
    if args.queries:
        queries += read_text_lines(args.queries)
    queries = [query.strip() for query in queries]
    if not queries or not all(queries):
        raise ValueError("give at least one non-empty --query TEXT or a --queries FILE")
    corpus = read_text_lines(args.corpus)
    model, tokenizer = load_inference_model(args.model, args.pooling, args.normalize, args.max_seq_length)

    corpus_embeddings = model.encode(corpus, tokenizer=tokenizer, batch_size=args.batch_size)
    query_embeddings = model.encode(queries, tokenizer=tokenizer, batch_size=args.batch_size)
    scores = model.similarity(query_embeddings, corpus_embeddings)
    top = torch.topk(scores, k=min(args.top_k, len(corpus)), dim=1)
    for index, query in enumerate(queries):
        print(f"\nQuery: {query}")
        for rank, (score, position) in enumerate(zip(top.values[index], top.indices[index], strict=True), start=1):
            print(f"  {rank:>2}. {score.item():.4f}  {corpus[int(position)]}")
    return 0
