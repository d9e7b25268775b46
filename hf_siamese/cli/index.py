"""`hf-siamese index`: embed a corpus once into a vector index folder (streamed: shards and memory-mapped texts) that
`hf-siamese search --index` reads."""

from __future__ import annotations

import argparse
from typing import Any

from ..retrieval.index.compact import PRECISIONS, describe_precision
from .arguments import (
    CORPUS_HELP,
    DeprecatedOption,
    add_command,
    add_corpus_arguments,
    add_first_stage_arguments,
    add_lexical_arguments,
    add_model_arguments,
    add_rerank_arguments,
    add_shard_arguments,
    non_negative_int,
)
from .common import corpus_source, load_inference_model
from .multivector_options import (
    add_multivector_arguments,
    describe_multivector_part,
    multivector_build_options,
    run_add_multivector,
)
from .progress import progress_wanted
from .search_options import lexical_settings


def register(commands: Any) -> None:
    """Add `index` to the `hf-siamese` subparsers."""
    add_command(
        commands, "index", run_index, add_arguments,
        summary="embed a corpus once into a vector index folder for 'search --index'",
        description="Embed every document of a corpus once, streamed (one shard in memory at a time), into a folder "
        "with its texts (memory-mapped), ids, vectors and the model's fingerprint; from 100,000 documents on (with "
        "faiss installed) also an approximate index. 'hf-siamese search --index DIR' then embeds only the queries.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `index`: the corpus and the output (a folder or a search engine's collection), the lexical part,
    the pipeline kept in the index, the model, the corpus's columns and its embedding, the approximate index."""
    parser.add_argument("corpus", metavar="CORPUS", nargs="?", help=CORPUS_HELP)
    parser.add_argument(
        "-o", "--output", metavar="DIR|URI",
        help="the index folder to write, or a search engine's collection: milvus://HOST:PORT/COLLECTION (a server or "
        "cluster; token from $MILVUS_TOKEN) or milvus-lite:FILE.db#COLLECTION (pip install 'hf-siamese[milvus]')",
    )  # fmt: skip
    _add_engine_arguments(parser)
    parser.add_argument(
        "--lexical", action=argparse.BooleanOptionalAction,
        help="also build the BM25 index of the texts, in the same pass (default: when bm25s is installed, "
        "pip install 'hf-siamese[lexical]'); --no-lexical: vectors only",
    )  # fmt: skip
    parser.add_argument(
        "--add-lexical", metavar="DIR",
        help="add the BM25 part to the index DIR built without it, from its stored texts (nothing is re-encoded; "
        "no CORPUS or -o)",
    )  # fmt: skip
    add_lexical_arguments(parser)
    parser.add_argument(
        "--sparse-model", metavar="SPARSE_DIR",
        help="also store the documents' term weights by this learned-sparse model (folder or Hub id): the index's "
        "sparse part, searched by --first-stage sparse and fused into the hybrid (rrf); with --add-sparse: the model",
    )  # fmt: skip
    parser.add_argument(
        "--add-sparse", metavar="DIR",
        help="add the sparse part (--sparse-model SPARSE_DIR) to the index DIR, from its stored texts (the vectors are "
        "kept; no CORPUS or -o; --overwrite replaces an existing one)",
    )  # fmt: skip
    add_multivector_arguments(parser)
    parser.add_argument(
        "--precision", choices=PRECISIONS, default=None,
        help="how the vectors are searched: float32 (default), float16, int8 (ranges calibrated on the corpus) or "
        "binary (sign bits, popcount Hamming): compact codes searched exactly (int8 and binary with --approximate: "
        "through an IVF over them), their best candidates rescored with the float32 vectors kept on disk; with "
        "--set-precision: the new precision",
    )  # fmt: skip
    parser.add_argument(
        "--rescore", type=non_negative_int, metavar="R",
        help="with --precision: the candidates rescored, R x max(top-k, 100) (0: none; default: float16 0, int8 1, "
        "binary 4, chosen on SciFact's train claims); search/eval --rescore override it",
    )  # fmt: skip
    parser.add_argument(
        "--set-precision", metavar="DIR",
        help="search the index DIR at --precision P (codes written from its stored vectors; nothing re-encoded; "
        "float32 removes them; --approximate: with an IVF over int8 or binary codes); no CORPUS or -o",
    )  # fmt: skip
    pipeline = parser.add_argument_group(
        "the pipeline kept in the index: search --index and eval --index then rerank with it, with no further flags"
    )
    pipeline.add_argument(
        "--attach", metavar="IDX",
        help="record --rerank CE_DIR (and the settings below) in the existing index IDX (a folder or milvus...); "
        "no CORPUS or -o",
    )  # fmt: skip
    add_rerank_arguments(pipeline, searching=False)
    add_first_stage_arguments(pipeline, "the index's default (hybrid where it has its lexical part)")
    add_model_arguments(parser, training=False)
    add_corpus_arguments(parser)
    add_shard_arguments(parser)
    parser.add_argument("--prompt-name", metavar="NAME", help="model prompt for the documents (default: its default)")
    parser.add_argument(
        "--approximate", action=argparse.BooleanOptionalAction,
        help="search through an approximate faiss index (default: from 100,000 documents on, when faiss is "
        "installed); with --precision int8|binary: an IVF over the codes, nprobe chosen by measured recall (default: "
        "none, the codes searched exactly); --no-approximate: exact search",
    )  # fmt: skip
    parser.add_argument(
        "--calibration-queries", metavar="FILE",
        help="queries like the ones you will search with (.txt one per line, or a file with a text column), on "
        "which the approximate index measures its recall (default: held-out documents)",
    )  # fmt: skip
    parser.add_argument(
        "--embeddings-dir", metavar="DIR",
        help="the embedded corpus to reuse (the folder 'hf-siamese embed -o DIR' writes, e.g. on N GPUs; embedded "
        "or resumed there first), hard-linked into the index; default: embedded inside the index",
    )  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace DIR if it exists and is not empty")
    parser.add_argument(
        "--no-faiss", dest="approximate", action=DeprecatedOption, nargs=0, const=False,
        instead="use --no-approximate",
    )  # fmt: skip
    parser.add_argument(
        "--streamed", dest=argparse.SUPPRESS, action=DeprecatedOption, nargs=0,
        instead="it does nothing: every index streams its corpus",
    )  # fmt: skip


def _add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """How `index -o milvus://...` / `milvus-lite:...` builds the collection: its BM25, its dense index, its work
    folder."""
    group = parser.add_argument_group("a search engine's collection (-o milvus://... or milvus-lite:...)")
    group.add_argument(
        "--engine-lexical", choices=("ours", "milvus"),
        help="the collection's BM25: our weights as sparse vectors (ours, the default: the folder's scores) or "
        "Milvus's own BM25 function (milvus: the engine tokenizes and weighs; a collection that grows)",
    )  # fmt: skip
    group.add_argument(
        "--dense-index", metavar="TYPE",
        help="the engine's index of the vectors (default: FLAT below 100,000 documents, else IVF_FLAT with nprobe "
        "chosen by measured recall@10; also HNSW, ... where the engine builds it: one it does not build is refused "
        "before any work, naming those it does)",
    )  # fmt: skip
    group.add_argument("--dense-index-params", metavar="JSON", help="its build parameters, e.g. '{\"M\": 16}'")
    group.add_argument(
        "--work-dir", metavar="DIR",
        help="the local folder the corpus is embedded into before the export (kept; default: beside the Lite file, "
        "or ./.hf-siamese-export-COLLECTION, removed once exported)",
    )  # fmt: skip


def read_calibration_queries(path: str) -> list[str]:
    """The queries of --calibration-queries: a .txt file (one per line) or any file `open_corpus` reads with a
    `text` column."""
    from ..data.corpus_stream import open_corpus

    return [text for _, text in open_corpus(path)]


def engine_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """`build_index`'s `engine_options` of --engine-lexical, --dense-index, --dense-index-params, --work-dir (None
    where none is given; given with a folder output, the library refuses them)."""
    import json

    options = {"lexical": args.engine_lexical, "dense_index": args.dense_index, "work_dir": args.work_dir}
    if args.dense_index_params is not None:
        try:
            options["dense_params"] = json.loads(args.dense_index_params)
        except ValueError as error:
            raise ValueError(f"--dense-index-params {args.dense_index_params!r} is not JSON ({error})") from None
        if not isinstance(options["dense_params"], dict):
            raise ValueError(f"--dense-index-params {args.dense_index_params!r}: expected a JSON object")
    options = {key: value for key, value in options.items() if value is not None}
    if "lexical" in options:
        options["engine_lexical"] = options.pop("lexical")
    return options or None


def run_index(args: argparse.Namespace) -> int:
    """Embed the corpus with the model and write the index folder (with its lexical part), or add the lexical part
    to an index (--add-lexical)."""
    from ..retrieval.index.additions import add_lexical, attach_reranker
    from ..retrieval.index.pipeline import describe_pipeline
    from ..retrieval.stores import build_index

    settings = lexical_settings(args)
    pipeline = {
        "rerank_top": args.rerank_top, "first_stage_weight": args.first_stage_weight, "first_stage": args.first_stage,
        "fusion": args.fusion, "dense_weight": args.dense_weight,
    }  # fmt: skip
    if args.rerank is None and any(value is not None for value in pipeline.values()):
        raise ValueError(
            "--rerank-top, --first-stage-weight, --first-stage, --fusion and --dense-weight set the pipeline kept in "
            "the index: give them with --rerank CE_DIR"
        )
    pipeline = {key: value for key, value in pipeline.items() if value is not None}
    if args.set_precision:
        return _set_precision(args)
    if args.rescore is not None and args.precision in (None, "float32"):
        raise ValueError(f"--rescore {args.rescore} applies to compact vectors: give --precision float16|int8|binary")
    if args.add_multi_vector:
        return run_add_multivector(args)
    if args.add_sparse:
        return _add_sparse(args)
    if args.attach:
        if args.corpus or args.output or args.add_lexical or args.rerank is None or args.sparse_model:
            raise ValueError(
                "--attach IDX records --rerank CE_DIR in an existing index: give no CORPUS, -o or --add-lexical"
            )
        if args.multi_vector_model or args.multi_vector_precision:
            raise ValueError(
                "--attach IDX records --rerank CE_DIR or MV_DIR in an existing index: give no --multi-vector-model "
                "(--add-multi-vector IDX --multi-vector-model MV adds the multi-vector part)"
            )
        index = attach_reranker(args.attach, args.rerank, **pipeline)
        print(f"{args.attach} now searches: {describe_pipeline(index.pipeline)}")
        return 0
    if args.add_lexical:
        if args.corpus or args.output or args.lexical is not None or args.sparse_model or args.multi_vector_model:
            raise ValueError(
                "--add-lexical DIR adds to an existing index: give no CORPUS, -o, --(no-)lexical, --sparse-model or "
                "--multi-vector-model (--add-sparse / --add-multi-vector DIR add those parts)"
            )
        index = add_lexical(args.add_lexical, settings, overwrite=args.overwrite)
        record = index.info["lexical"]
        print(f"added the lexical part ({record['terms']} terms, {record['count']} documents) to {args.add_lexical}")
        return 0
    if not args.corpus or not args.output:
        raise ValueError("give a CORPUS and -o DIR (or --add-lexical DIR to add BM25 to an existing index)")
    source = corpus_source(args.corpus, args)
    queries = read_calibration_queries(args.calibration_queries) if args.calibration_queries else None
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    index = build_index(
        model, source, args.output, text_column=args.text_column, id_column=args.id_column, tokenizer=tokenizer,
        batch_size=args.batch_size, shard_size=args.shard_size, dtype=args.dtype, engine_options=engine_options(args),
        prompt_name=args.prompt_name, approximate=args.approximate, calibration_queries=queries,
        embeddings_dir=args.embeddings_dir, show_progress_bar=progress_wanted(), overwrite=args.overwrite,
        lexical=args.lexical, lexical_settings=settings, **_sparse_model(args), **multivector_build_options(args),
        precision=args.precision or "float32", rescore=args.rescore,
    )  # fmt: skip
    lexical = "with its lexical part (BM25)" if index.has_lexical else "vectors only, no lexical part"
    lexical += ", with its sparse part" if index.has_sparse else ""
    lexical += f", with {describe_multivector_part(index.info['multivector'])}" if index.has_multivector else ""
    lexical += describe_precision(index)
    print(
        f"indexed {len(index)} documents of {args.corpus} ({index.dim}-dim, {index.similarity} similarity, "
        f"{index.backend} search; {lexical}) into {args.output}"
    )
    if args.rerank is not None:
        index = attach_reranker(args.output, args.rerank, **pipeline)
        print(f"{args.output} searches: {describe_pipeline(index.pipeline)}")
    return 0


def _set_precision(args: argparse.Namespace) -> int:
    """--set-precision DIR --precision P [--rescore R]: the index's compact vectors written (or removed) anew."""
    from ..retrieval.index.additions import set_precision

    given = [flag for flag, value in (("CORPUS", args.corpus), ("-o", args.output), ("--add-lexical", args.add_lexical),
                                      ("--add-sparse", args.add_sparse), ("--attach", args.attach),
                                      ("--add-multi-vector", args.add_multi_vector)) if value]  # fmt: skip
    if given or not args.precision:
        raise ValueError(
            "--set-precision DIR sets the precision of an existing index: give "
            + (f"no {', '.join(given)}" if given else "--precision float32|float16|int8|binary")
        )
    index = set_precision(args.set_precision, args.precision, rescore=args.rescore, approximate=args.approximate)
    print(f"{args.set_precision} now searches {describe_precision(index)[2:] or 'its float32 vectors'}")
    return 0


def _add_sparse(args: argparse.Namespace) -> int:
    """--add-sparse DIR --sparse-model SPARSE_DIR: the sparse part added to an existing index."""
    from ..retrieval.index.additions import add_sparse

    given = [flag for flag, value in (("CORPUS", args.corpus), ("-o", args.output), ("--add-lexical", args.add_lexical),
                                      ("--attach", args.attach), ("--rerank", args.rerank),
                                      ("--multi-vector-model", args.multi_vector_model)) if value]  # fmt: skip
    if given or not args.sparse_model:
        raise ValueError(
            "--add-sparse DIR adds the sparse part of --sparse-model SPARSE_DIR to an existing index: give "
            + (f"no {', '.join(given)}" if given else "--sparse-model SPARSE_DIR")
        )
    loaded = _sparse_model(args)
    index = add_sparse(
        args.add_sparse, loaded["sparse_model"], tokenizer=loaded["sparse_tokenizer"], overwrite=args.overwrite,
        batch_size=args.batch_size,
    )  # fmt: skip
    record = index.info["sparse"]
    print(
        f"added the sparse part ({record['count']} documents, {record['weights']} term weights, model "
        f"{record['model']['name_or_path']}) to {args.add_sparse}"
    )
    return 0


def _sparse_model(args: argparse.Namespace) -> dict[str, Any]:
    """`build_index`'s sparse_model and sparse_tokenizer of --sparse-model (a siamese-sparse or a SparseEncoder folder,
    or a Hub id), loaded before any work: a wrong folder fails fast; nothing where it is not given."""
    if not args.sparse_model:
        return {}
    from .sparse_options import load_sparse_model

    model, tokenizer = load_sparse_model(args.sparse_model, device=args.device)
    return {"sparse_model": model, "sparse_tokenizer": tokenizer}
