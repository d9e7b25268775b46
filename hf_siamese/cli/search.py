"""`hf-siamese search`: top-k semantic search of queries over a corpus (any source `open_corpus` reads), embedded into
shards as `hf-siamese embed` does (kept and reused with --embeddings-dir), or over an index built by `hf-siamese index`
(no re-embedding of the corpus). Both print the hits the same way: `rank. score  [id] text`. With --rerank CE_DIR
a cross-encoder re-scores each query's --rerank-top first-stage hits (`rerank_hits`) and each line ends with the
hit's first-stage rank and score: `rank. score  [id] text  (first stage: #rank, score)`. --rerank MV_DIR (a
multi-vector model, told by its config) reranks an --index's hits by MaxSim of its stored token vectors instead."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import (
    CORPUS_HELP,
    add_command,
    add_corpus_arguments,
    add_embeddings_dir_arguments,
    add_first_stage_arguments,
    add_model_arguments,
    add_rerank_arguments,
    add_rescore_argument,
    add_shard_arguments,
    corpus_flags,
    given_flags,
)
from .common import corpus_source, load_inference_model
from .multivector_options import refuse_multivector_rerank
from .progress import progress_wanted
from .search_options import index_query_model, print_hits, rerank_options
from .sparse_options import is_sparse_model_path, load_sparse_model, refuse_dense_flags

# What only a --corpus search reads (its columns, its Hub split, its embeddings folder): flag -> dest.
# What only a corpus embedded into vectors reads (refused with a sparse model): flag -> dest.
_EMBEDDED_ONLY = {
    "--embeddings-dir": "embeddings_dir",
    "--shard-size": "shard_size",
    "--dtype": "dtype",
    "--approximate": "approximate",
}
_CORPUS_ONLY = {**corpus_flags(), **_EMBEDDED_ONLY}


# What only a search that embeds the queries reads: flag -> dest.
_MODEL_ONLY = {
    "--model": "model",
    "--pooling": "pooling",
    "--normalize": "normalize",
    "--max-seq-length": "max_seq_length",
    "--prompt-name": "prompt_name",
}


def register(commands: Any) -> None:
    """Add `search` to the `hf-siamese` subparsers."""
    add_command(
        commands, "search", run_search, add_arguments,
        summary="top-k semantic search of queries over a corpus or a vector index",
        description="Rank the documents of a corpus (embedded on every call, or once into --embeddings-dir), or "
        "of an index built by 'hf-siamese index' (embedded once), by similarity to each query; prints "
        "'rank. score  [id] text' per hit.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `search`: where to search (--corpus or --index), the queries, the model, the corpus and its
    embedding, the first stage and the rerank."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", metavar="CORPUS", help=CORPUS_HELP)
    source.add_argument(
        "--index",
        metavar="INDEX",
        help="an index from 'hf-siamese index': a folder, or milvus://HOST:PORT/COLLECTION / milvus-lite:FILE.db#NAME "
        "(--model defaults to its model; a reranker it keeps reranks)",
    )
    parser.add_argument("--query", action="append", metavar="TEXT", help="a query (repeatable)")
    parser.add_argument("--queries", metavar="FILE", help="text file, one query per line")
    parser.add_argument("--top-k", type=int, default=5, help="matches per query (default: %(default)s)")
    add_model_arguments(parser, training=False)
    parser.add_argument("--prompt-name", metavar="NAME", help="model prompt for the queries (default: its default)")
    add_corpus_arguments(parser)
    add_shard_arguments(parser)
    add_embeddings_dir_arguments(
        parser, "a temporary folder",
        "candidates from an approximate faiss index (default: from 100,000 texts on, when faiss is installed, and "
        "only with --embeddings-dir, where the index is kept)",
        deprecated_alias=True,
    )  # fmt: skip
    add_first_stage_arguments(
        parser,
        "hybrid where the index has its lexical part (bm25s missing: refused, naming the install), else dense "
        "(--corpus: dense)",
    )
    add_rescore_argument(parser)
    add_rerank_arguments(parser)


def run_search(args: argparse.Namespace) -> int:
    """Print the top-k corpus documents for every query, with their similarity and id."""
    from ..data.readers import read_text_lines

    if args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {args.top_k}")
    queries = list(args.query or [])
    if args.queries:
        queries += read_text_lines(args.queries)
    queries = [query.strip() for query in queries]
    if not queries or not all(queries):
        raise ValueError("give at least one non-empty --query TEXT or a --queries FILE")
    own = "sparse" if is_sparse_model_path(args.model) else "multi-vector" if _multivector(args.model) else None
    if own:  # ranked exactly over a --corpus by its term weights / MaxSim; nothing kept
        refuse_dense_flags(args.model, {
            "--index": args.index, "--pooling": args.pooling, "--normalize": args.normalize is not None,
            **{flag: True for flag in given_flags(args, _EMBEDDED_ONLY)}, "--first-stage": args.first_stage,
            "--fusion": args.fusion, "--dense-weight": args.dense_weight,
        }, own)  # fmt: skip
    if not args.index:
        given = (("--first-stage", args.first_stage), ("--fusion", args.fusion), ("--dense-weight", args.dense_weight))
        for flag, value in given:
            if value is not None:
                raise ValueError(f"{flag} applies to --index (an index holds the lexical part); --corpus is dense")
        if args.rescore is not None:
            raise ValueError("--rescore applies to an --index of compact vectors; --corpus searches float32 vectors")
    if args.no_rerank and not args.index:
        raise ValueError("--no-rerank applies to an --index that keeps a reranker; --corpus reranks only with --rerank")
    if args.index:
        given = given_flags(args, _CORPUS_ONLY)
        if given:
            raise ValueError(f"{', '.join(given)} describe(s) a --corpus to embed; an --index is already embedded")
        results = _search_index(args, queries)
    else:
        reranker, rerank_top = rerank_options(args)
        refuse_multivector_rerank(reranker, args.rerank, f"the --corpus {args.corpus}")
        results = _search_corpus(args, queries, reranker, rerank_top)
    print_hits(queries, results)
    return 0


def _search_corpus(
    args: argparse.Namespace, queries: list[str], reranker: Any, rerank_top: int
) -> list[list[dict[str, Any]]]:
    """Load the model (of its kind), then one `search_corpus`: a dense model's corpus embedded into --embeddings-dir
    or a temporary folder; a sparse or multi-vector model's ranked exactly by its own scores."""
    from ..retrieval.corpus_search import search_corpus

    source = corpus_source(args.corpus, args)
    embedding = {}
    if is_sparse_model_path(args.model):
        model, tokenizer = load_sparse_model(args.model, args.max_seq_length, args.device)
    elif _multivector(args.model):
        from .multivector_options import load_multivector_option

        model, tokenizer = load_multivector_option(args.model, args.device, "--model")
    else:
        model, tokenizer = load_inference_model(
            args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
        )
        embedding = {
            "embeddings_dir": args.embeddings_dir, "approximate": args.approximate, "shard_size": args.shard_size,
            "dtype": args.dtype,
        }  # fmt: skip
    return search_corpus(
        model, source, queries, args.top_k, tokenizer=tokenizer, text_column=args.text_column,
        id_column=args.id_column, batch_size=args.batch_size, prompt_name=args.prompt_name, rerank=reranker,
        rerank_top=rerank_top, show_progress_bar=progress_wanted(), first_stage_weight=args.first_stage_weight,
        **embedding,
    )  # fmt: skip


def _search_index(args: argparse.Namespace, queries: list[str]) -> list[list[dict[str, Any]]]:
    """Search an index folder or store with the settings `index.plan` resolves (the library's one setup: the recorded
    pipeline where no --rerank or first-stage flag is given); the model defaults to the index's own
    (`index_query_model`)."""
    from ..retrieval.index.pipeline import describe_pipeline
    from ..retrieval.stores import load_index

    index = load_index(args.index, args.rescore)
    if args.no_rerank and args.rerank is not None:
        raise ValueError("--no-rerank searches the first stage alone: give no --rerank")
    reranker, rerank_top = rerank_options(args, recorded=index.pipeline is not None and not args.no_rerank)
    asked = False if args.no_rerank else reranker  # None: the index's pipeline, if it keeps one
    if hasattr(reranker, "check_index"):  # a multi-vector --rerank: the index's part, by its model, before any work
        reranker.check_index(index)
    # Before the model loads: a setting that does not apply, a missing lexical part or bm25s, each in one line.
    plan = index.plan(asked, args.first_stage, args.fusion, args.dense_weight)
    if reranker is None and plan.reranker is not None:
        print(f"(the index's pipeline: {describe_pipeline(index.pipeline)}; --no-rerank: the first stage alone)")
    options = {
        "top_k": args.top_k, "batch_size": args.batch_size, "rerank": asked, "first_stage": plan.first_stage,
        "fusion": plan.fusion, "dense_weight": plan.dense_weight,
        "rerank_top": rerank_top if plan.reranker is not None else None, "first_stage_weight": args.first_stage_weight,
    }  # fmt: skip
    flags = {flag: getattr(args, name) for flag, name in _MODEL_ONLY.items()}
    model, tokenizer = index_query_model(args, index, plan.first_stage, plan.lists, flags)
    if model is None:
        return index.search(None, queries, **options)
    return index.search(model, queries, tokenizer=tokenizer, prompt_name=args.prompt_name, **options)


def _multivector(path: str | None) -> bool:
    """Whether --model names a multi-vector model (its config, or sentence-transformers' MultiVectorEncoder layout)."""
    from ..retrieval.fusion.multivector_rerank import is_multivector_model_path

    return is_multivector_model_path(path)
