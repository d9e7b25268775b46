"""`hf-siamese search`: top-k semantic search of queries over a corpus file, streamed into shards as `hf-siamese embed`
does (kept and reused with --corpus-dir), or over an index built by `hf-siamese index` (no re-embedding of the
corpus)."""

from __future__ import annotations

import argparse
import sys

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
    return _search_corpus(args, queries)


def _search_corpus(args: argparse.Namespace, queries: list[str]) -> int:
    """Stream the corpus file into shards (in --corpus-dir, reused when it holds them, else a temporary folder), then
    search the memory-mapped vectors: exactly, or through a kept approximate index (see `corpus_search`)."""
    from ..data.corpus_stream import TextLines
    from ..retrieval.corpus import encode_corpus
    from ..retrieval.corpus_groups import _texts_of, corpus_matrix
    from ..retrieval.mining_corpus import corpus_search, resolve_shard_size, work_folder

    source = TextLines(args.corpus)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    # An approximate index pays off only when it is kept for later searches (--corpus-dir) or asked for.
    approximate = args.approximate if args.approximate is not None or args.corpus_dir else False
    with work_folder(args.corpus_dir) as folder:
        encode_corpus(
            model, source, folder, tokenizer=tokenizer, batch_size=args.batch_size,
            shard_size=resolve_shard_size(folder, args.shard_size), show_progress_bar=sys.stderr.isatty(),
        )  # fmt: skip
        _, vectors = corpus_matrix(folder)
        search = corpus_search(vectors, folder, model.config.similarity, approximate)
        query_vectors = model.encode(
            queries, tokenizer=tokenizer, batch_size=args.batch_size, prompt_name=args.prompt_name,
            convert_to_numpy=True,
        )  # fmt: skip
        scores, rows = search(query_vectors, min(args.top_k, len(vectors)))
        del vectors, search
    texts = _texts_of(source, {row for row in rows.ravel().tolist() if row >= 0}, "text", None)
    for index, query in enumerate(queries):
        print(f"\nQuery: {query}")
        hits = zip(scores[index].tolist(), rows[index].tolist(), strict=True)
        for rank, (score, row) in enumerate(((s, r) for s, r in hits if r >= 0), start=1):  # -1: no hit
            print(f"  {rank:>2}. {score:.4f}  {texts[row]}")
    return 0


def _search_index(args: argparse.Namespace, queries: list[str]) -> int:
    """Search an index folder; the model defaults to the one recorded in it, at the recorded max length."""
    from ..retrieval.corpus_index import load_index  # any index folder, streamed ones too

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
