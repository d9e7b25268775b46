"""The corpus and serving commands of the `hf-siamese` parser: index, embed, similar, cluster, mine, search, rerank,
export (each one's handler lives in its own module)."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import (
    CORPUS_HELP,
    DeprecatedOption,
    add_corpus_arguments,
    add_embeddings_dir_arguments,
    add_first_stage_arguments,
    add_first_stage_weight,
    add_lexical_arguments,
    add_model_arguments,
    add_rerank_arguments,
    add_shard_arguments,
    positive_int,
)
from .embed import run_embed
from .export import EXPORT_FORMATS, EXPORT_QUANTIZATION, run_export
from .index import run_index
from .mine import run_mine
from .rerank import run_rerank
from .search import run_search
from .similar import run_cluster, run_similar


def add_corpus_commands(commands: Any) -> None:
    """Add the corpus and serving commands to the subparsers action `commands`."""
    index = commands.add_parser(
        "index",
        help="embed a corpus once into a vector index folder for 'search --index'",
        description="Embed every document of a corpus once, streamed (one shard in memory at a time), into a folder "
        "with its texts (memory-mapped), ids, vectors and the model's fingerprint; from 100,000 documents on (with "
        "faiss installed) also an approximate index. 'hf-siamese search --index DIR' then embeds only the queries.",
    )
    index.add_argument("corpus", metavar="CORPUS", nargs="?", help=CORPUS_HELP)
    index.add_argument(
        "-o", "--output", metavar="DIR|URI",
        help="the index folder to write, or a search engine's collection: milvus://HOST:PORT/COLLECTION (a server or "
        "cluster; token from $MILVUS_TOKEN) or milvus-lite:FILE.db#COLLECTION (pip install 'hf-siamese[milvus]')",
    )  # fmt: skip
    engine = index.add_argument_group("a search engine's collection (-o milvus://... or milvus-lite:...)")
    engine.add_argument(
        "--engine-lexical", choices=("ours", "milvus"),
        help="the collection's BM25: our weights as sparse vectors (ours, the default: the folder's scores) or "
        "Milvus's own BM25 function (milvus: the engine tokenizes and weighs; a collection that grows)",
    )  # fmt: skip
    engine.add_argument(
        "--dense-index", metavar="TYPE",
        help="the engine's index of the vectors (default: FLAT below 100,000 documents, else IVF_FLAT with nprobe "
        "chosen by measured recall@10; a server also takes HNSW, ...)",
    )  # fmt: skip
    engine.add_argument("--dense-index-params", metavar="JSON", help="its build parameters, e.g. '{\"M\": 16}'")
    engine.add_argument(
        "--work-dir", metavar="DIR",
        help="the local folder the corpus is embedded into before the export (kept; default: beside the Lite file, "
        "or ./.hf-siamese-export-COLLECTION, removed once exported)",
    )  # fmt: skip
    index.add_argument(
        "--lexical", action=argparse.BooleanOptionalAction,
        help="also build the BM25 index of the texts, in the same pass (default: when bm25s is installed, "
        "pip install 'hf-siamese[lexical]'); --no-lexical: vectors only",
    )  # fmt: skip
    index.add_argument(
        "--add-lexical", metavar="DIR",
        help="add the BM25 part to the index DIR built without it, from its stored texts (nothing is re-encoded; "
        "no CORPUS or -o)",
    )  # fmt: skip
    add_lexical_arguments(index)
    pipeline = index.add_argument_group(
        "the pipeline kept in the index: search --index and eval --index then rerank with it, with no further flags"
    )
    pipeline.add_argument(
        "--attach", metavar="IDX",
        help="record --rerank CE_DIR (and the settings below) in the existing index IDX (a folder or milvus...); "
        "no CORPUS or -o",
    )  # fmt: skip
    add_rerank_arguments(pipeline)
    add_first_stage_arguments(pipeline, "the index's default (hybrid where it has its lexical part)")
    add_model_arguments(index, training=False)
    add_corpus_arguments(index)
    add_shard_arguments(index)
    index.add_argument("--prompt-name", metavar="NAME", help="model prompt for the documents (default: its default)")
    index.add_argument(
        "--approximate", action=argparse.BooleanOptionalAction,
        help="search through an approximate faiss index (default: from 100,000 documents on, when faiss is "
        "installed); --no-approximate: exact search",
    )  # fmt: skip
    index.add_argument(
        "--calibration-queries", metavar="FILE",
        help="queries like the ones you will search with (.txt one per line, or a file with a text column), on "
        "which the approximate index measures its recall (default: held-out documents)",
    )  # fmt: skip
    index.add_argument(
        "--embeddings-dir", metavar="DIR",
        help="the embedded corpus to reuse (the folder 'hf-siamese embed -o DIR' writes, e.g. on N GPUs; embedded "
        "or resumed there first), hard-linked into the index; default: embedded inside the index",
    )  # fmt: skip
    index.add_argument("--overwrite", action="store_true", help="replace DIR if it exists and is not empty")
    index.add_argument(
        "--no-faiss", dest="approximate", action=DeprecatedOption, nargs=0, const=False,
        instead="use --no-approximate",
    )  # fmt: skip
    index.add_argument(
        "--streamed", dest=argparse.SUPPRESS, action=DeprecatedOption, nargs=0,
        instead="it does nothing: every index streams its corpus",
    )  # fmt: skip
    index.set_defaults(handler=run_index)

    embed = commands.add_parser(
        "embed",
        help="embed a corpus of any size into Parquet shards, resumably (also across processes)",
        description="Embed every text of a corpus into Parquet shards (columns id, embedding) in DIR, reading the "
        "corpus as a stream and holding one shard at a time. Run it again with the same arguments to resume a "
        "stopped run (finished shards are checked and kept); under accelerate launch / torchrun each process embeds "
        "its share of the shards on its own device. DIR/corpus.json records the model and settings. DIR is what "
        "--embeddings-dir of search, mine, similar and cluster reuses.",
    )
    embed.add_argument("corpus", metavar="CORPUS", help=CORPUS_HELP)
    embed.add_argument("-o", "--output", required=True, metavar="DIR", help="the shard folder to write or resume")
    add_model_arguments(embed, training=False)
    add_corpus_arguments(embed)
    add_shard_arguments(embed)
    embed.add_argument("--prompt-name", metavar="NAME", help="model prompt for the texts (default: its default)")
    embed.set_defaults(handler=run_embed)

    approximate = "neighbours from an approximate faiss index (default: from 100,000 texts on, when faiss is installed)"
    for name, handler, summary in (
        ("similar", run_similar, "every pair of near-duplicate texts of a corpus above a similarity threshold"),
        ("cluster", run_cluster, "group a corpus into communities above a threshold, or --k k-means topics"),
    ):
        command = commands.add_parser(
            name,
            help=summary,
            description=f"Find {summary}, from each text's --top-k nearest neighbours (never an N x N matrix). The "
            "corpus is embedded first into resumable shards (as 'embed'; --embeddings-dir, default OUTPUT.embeddings, "
            "is reused by a later run). Writes CSV, TSV or JSONL (by the -o name) with ids and texts.",
        )
        command.add_argument("corpus", metavar="CORPUS", help=CORPUS_HELP)
        command.add_argument("-o", "--output", required=True, help="NAME.csv, NAME.tsv or NAME.jsonl")
        add_model_arguments(command, training=False)
        command.add_argument("--threshold", type=float, default=0.85, help="least similarity (default: 0.85)")
        command.add_argument("--top-k", type=positive_int, default=10, help="neighbours per text (default: 10)")
        add_corpus_arguments(command)
        add_shard_arguments(command)
        add_embeddings_dir_arguments(command, "OUTPUT.embeddings", approximate)
        if name == "cluster":
            command.add_argument("--k", type=positive_int, help="k-means into K groups instead of a threshold")
            command.add_argument("--min-size", type=positive_int, default=2, help="smallest group kept (default 2)")
            command.add_argument(
                "--method", choices=("community", "components"), default="community",
                help="community: greedy, from the most-connected text; components: connected components",
            )  # fmt: skip
        command.set_defaults(handler=handler)

    mine = commands.add_parser(
        "mine",
        help="add hard negatives mined by a model to (anchor, positive) rows",
        description="For every (anchor, positive) row, rank the corpus with the model (or BM25, or both: "
        "--negatives-from) and add the best-ranked "
        "documents that are not a positive of the anchor (within --range-min..--range-max, below --max-score, "
        "and at least --margin below the positive's score) as negative_1 ... negative_N. The corpus is embedded "
        "into shards first (as 'embed'), in --embeddings-dir when given (kept and reused).",
    )
    mine.add_argument(
        "data", metavar="SOURCE", help="(anchor, positive) rows: file, folder or Hub dataset id, or a BEIR folder"
    )
    mine.add_argument("-o", "--output", required=True, help="output rows: NAME.jsonl, NAME.tsv or NAME.csv")
    mine.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists (written whole at the end)")
    mine.add_argument(
        "--corpus", metavar="CORPUS",
        help=f"documents to mine from: {CORPUS_HELP}; or a BEIR folder (default: the positives, or a BEIR folder's "
        "corpus)",
    )  # fmt: skip
    add_model_arguments(mine, training=False)
    mine.add_argument("--columns", metavar="ROLE=NAME,...", help="e.g. anchor=question,positive=answer")
    mine.add_argument("--split", default="train", help="split of SOURCE: Hub dataset or folder (default: train)")
    mine.add_argument(
        "--teacher", metavar="CE_DIR", help="a cross-encoder that scores each row's (anchor, positive) and (anchor, "
        "negative_j) pairs into a label column (its 1 + N raw scores, positive first): rows for --loss margin_mse or "
        "list_distill. The scores stream to OUTPUT.scores/ (a stopped run resumes)",
    )  # fmt: skip
    add_corpus_arguments(mine, "--corpus-split", "--corpus-dataset-config")
    mine.add_argument("--num-negatives", type=positive_int, default=3, help="negatives per row (default: 3)")
    mine.add_argument("--range-min", type=int, default=0, help="skip the best RANGE_MIN ranks (default: 0)")
    mine.add_argument("--range-max", type=positive_int, help="consider ranks below this (default: min + 100)")
    mine.add_argument("--margin", type=float, help="drop candidates scoring above the positive's score - MARGIN")
    mine.add_argument("--max-score", type=float, help="drop candidates scoring above MAX_SCORE")
    mine.add_argument("--sampling", choices=("top", "random"), default="top", help="default: top")
    mine.add_argument("--seed", type=int, default=42, help="for --sampling random (default: 42)")
    mine.add_argument(
        "--negatives-from", choices=("dense", "lexical", "hybrid"), default="dense",
        help="what ranks the candidates: the model (dense, default), BM25 over the corpus texts (lexical: documents "
        "sharing the anchor's words), or both fused by reciprocal ranks (hybrid). --margin and --max-score always "
        "compare the model's similarities; lexical embeds the corpus only for them or for --embeddings-dir, which "
        "also keeps the BM25 index (DIR/lexical)",
    )  # fmt: skip
    add_lexical_arguments(mine)
    add_shard_arguments(mine)
    add_embeddings_dir_arguments(
        mine, "a temporary folder", approximate.replace("neighbours", "candidates"), deprecated_alias=True
    )
    mine.set_defaults(handler=run_mine)

    search = commands.add_parser(
        "search",
        help="top-k semantic search of queries over a corpus or a vector index",
        description="Rank the documents of a corpus (embedded on every call, or once into --embeddings-dir), or "
        "of an index built by 'hf-siamese index' (embedded once), by similarity to each query; prints "
        "'rank. score  [id] text' per hit.",
    )
    source = search.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", metavar="CORPUS", help=CORPUS_HELP)
    source.add_argument(
        "--index",
        metavar="INDEX",
        help="an index from 'hf-siamese index': a folder, or milvus://HOST:PORT/COLLECTION / milvus-lite:FILE.db#NAME "
        "(--model defaults to its model; a reranker it keeps reranks)",
    )
    search.add_argument("--query", action="append", metavar="TEXT", help="a query (repeatable)")
    search.add_argument("--queries", metavar="FILE", help="text file, one query per line")
    search.add_argument("--top-k", type=int, default=5, help="matches per query (default: 5)")
    add_model_arguments(search, training=False)
    search.add_argument("--prompt-name", metavar="NAME", help="model prompt for the queries (default: its default)")
    add_corpus_arguments(search)
    add_shard_arguments(search)
    add_embeddings_dir_arguments(
        search, "a temporary folder",
        "candidates from an approximate faiss index (default: from 100,000 texts on, when faiss is installed, and "
        "only with --embeddings-dir, where the index is kept)",
        deprecated_alias=True,
    )  # fmt: skip
    add_first_stage_arguments(
        search,
        "hybrid where the index has its lexical part (bm25s missing: refused, naming the install), else dense "
        "(--corpus: dense)",
    )
    add_rerank_arguments(search)
    search.add_argument(
        "--no-rerank", action="store_true",
        help="--index: search the first stage alone, where the index keeps a reranker (index --rerank / --attach)",
    )  # fmt: skip
    search.set_defaults(handler=run_search)

    rerank = commands.add_parser(
        "rerank",
        help="rank each query's candidate documents with a cross-encoder",
        description='Read a JSONL file of rows {"query": str, "documents": [str, ...]} (optionally "ids": one '
        "per document, and \"scores\": the first stage's score of each, which the cross-encoder's saved "
        "--first-stage-weight then fuses in) and rank each row's documents by a cross-encoder's score, all rows' "
        "pairs in one call; "
        "prints 'rank. score  [id] text  (first stage: #position)' per document, or writes "
        '{"query", "hits": [{"rank", "score", "id", "text", "first_stage_rank"}]} rows to --output.',
    )
    rerank.add_argument("candidates", metavar="CANDIDATES_FILE", help="JSONL: one query and its documents per line")
    rerank.add_argument("--model", required=True, metavar="CE_DIR", help="the cross-encoder (folder or Hub id)")
    rerank.add_argument("-o", "--output", metavar="OUT.jsonl", help="write the ranked rows here instead of printing")
    rerank.add_argument("--top-k", type=positive_int, help="documents kept per query (default: all)")
    add_first_stage_weight(rerank)
    rerank.add_argument("--batch-size", type=positive_int, default=32, help="pairs per forward pass (default: 32)")
    rerank.add_argument(
        "--device", default="auto", help="where the model runs: auto (default), cpu, cuda, cuda:N or mps"
    )
    rerank.set_defaults(handler=run_rerank)

    export = commands.add_parser(
        "export",
        help="write a model for serving: sentence-transformers layout, ONNX or OpenVINO, float32 or int8",
        description="Write the plain sentence-transformers layout (what text-embeddings-inference, "
        "sentence-transformers and MTEB load) and, with --format onnx / openvino, the encoder's graph in onnx/ or "
        "openvino/ (float32, plus an int8 version with --quantize). The folder appears only once the export "
        "succeeded and the float32 graph matched the torch model.",
    )
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write (must not exist)")
    add_model_arguments(export, training=True)
    export.add_argument(
        "--format", choices=EXPORT_FORMATS, default="sentence-transformers", help="default: %(default)s"
    )
    export.add_argument(
        "--quantize",
        choices=EXPORT_QUANTIZATION,
        default="none",
        help="int8-dynamic: int8 weights; int8-static: int8 weights and activations, calibrated on --calibration "
        "(default: none)",
    )
    export.add_argument(
        "--calibration",
        metavar="FILE",
        help="texts like the ones you will serve (.txt one per line, .jsonl, .csv, .parquet)",
    )
    export.add_argument(
        "--calibration-column", default="text", metavar="NAME", help="text column of a table file (default: text)"
    )
    export.add_argument(
        "--calibration-size", type=positive_int, default=300, help="texts drawn for calibration (default: 300)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace --output once the export succeeded")
    export.set_defaults(handler=run_export)
