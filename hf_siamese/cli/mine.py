"""`hf-siamese mine`: add hard negatives mined by a model (or by BM25, or both: --negatives-from) to (anchor,
positive) rows and write the triplets. The model is dense or learned-sparse (told apart by its config.json); a sparse
--sparse-model beside a dense --model adds its list to the hybrid."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..data.training_sets import load_data
from ..retrieval.fusion.hybrid import INDEX_FIRST_STAGES
from ..storage import row_file_kind, write_rows
from .arguments import (
    APPROXIMATE_HELP,
    CORPUS_HELP,
    add_command,
    add_corpus_arguments,
    add_embeddings_dir_arguments,
    add_lexical_arguments,
    add_model_arguments,
    add_shard_arguments,
    corpus_flags,
    given_flags,
    positive_int,
)
from .common import corpus_source, load_cross_encoder, load_inference_model, parse_columns
from .sparse_options import is_sparse_model_path, load_sparse_model, refuse_dense_flags

# The Hub split and config flags of --corpus (mine's own split flags are those of SOURCE), and the options of a
# --corpus read by `open_corpus` (flag -> dest), which the default corpus and a BEIR folder's do not take.
_CORPUS_FLAGS = ("--corpus-split", "--corpus-dataset-config")
_CORPUS_ONLY = corpus_flags(*_CORPUS_FLAGS)
# What only a dense model's corpus embedding reads (refused with a sparse --model): flag -> dest.
_EMBEDDED_ONLY = {"--embeddings-dir": "embeddings_dir", "--approximate": "approximate", "--dtype": "dtype"}


def register(commands: Any) -> None:
    """Add `mine` to the `hf-siamese` subparsers."""
    add_command(
        commands, "mine", run_mine, add_arguments,
        summary="add hard negatives mined by a model to (anchor, positive) rows",
        description="For every (anchor, positive) row, rank the corpus with the model (or BM25, or both: "
        "--negatives-from) and add the best-ranked "
        "documents that are not a positive of the anchor (within --range-min..--range-max, below --max-score, "
        "and at least --margin below the positive's score) as negative_1 ... negative_N. The corpus is embedded "
        "into shards first (as 'embed'), in --embeddings-dir when given (kept and reused).",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `mine`: the rows and the output, the corpus, the model, the teacher, how the negatives are chosen
    and ranked, BM25's settings, the corpus's embedding."""
    parser.add_argument(
        "data", metavar="SOURCE", help="(anchor, positive) rows: file, folder or Hub dataset id, or a BEIR folder"
    )
    parser.add_argument("-o", "--output", required=True, help="output rows: NAME.jsonl, NAME.tsv or NAME.csv")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUTPUT if it exists (written whole at the end)"
    )
    parser.add_argument(
        "--corpus", metavar="CORPUS",
        help=f"documents to mine from: {CORPUS_HELP}; or a BEIR folder (default: the positives, or a BEIR folder's "
        "corpus)",
    )  # fmt: skip
    add_model_arguments(parser, training=False)
    parser.add_argument("--columns", metavar="ROLE=NAME,...", help="e.g. anchor=question,positive=answer")
    parser.add_argument(
        "--split", default="train", help="split of SOURCE: Hub dataset or folder (default: %(default)s)"
    )
    parser.add_argument(
        "--teacher", metavar="CE_DIR", help="a cross-encoder that scores each row's (anchor, positive) and (anchor, "
        "negative_j) pairs into a label column (its 1 + N raw scores, positive first): rows for --loss margin_mse or "
        "list_distill. The scores stream to OUTPUT.scores/ (a stopped run resumes)",
    )  # fmt: skip
    add_corpus_arguments(parser, *_CORPUS_FLAGS)
    parser.add_argument(
        "--num-negatives", type=positive_int, default=3, help="negatives per row (default: %(default)s)"
    )
    parser.add_argument("--range-min", type=int, default=0, help="skip the best RANGE_MIN ranks (default: %(default)s)")
    parser.add_argument("--range-max", type=positive_int, help="consider ranks below this (default: min + 100)")
    parser.add_argument("--margin", type=float, help="drop candidates scoring above the positive's score - MARGIN")
    parser.add_argument("--max-score", type=float, help="drop candidates scoring above MAX_SCORE")
    parser.add_argument("--sampling", choices=("top", "random"), default="top", help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=42, help="for --sampling random (default: %(default)s)")
    parser.add_argument(
        "--negatives-from", choices=INDEX_FIRST_STAGES,
        help="what ranks the candidates: the model (default: dense, or sparse for a sparse --model: its exact "
        "ranking), BM25 over the corpus texts (lexical: documents sharing the anchor's words), both fused by "
        "reciprocal ranks (hybrid; with --sparse-model its list too, as an index's hybrid), or --sparse-model's "
        "list alone (sparse). --margin and --max-score always compare --model's scores; lexical embeds the corpus "
        "only for them or for --embeddings-dir, which also keeps the BM25 index (DIR/lexical)",
    )  # fmt: skip
    parser.add_argument(
        "--sparse-model", metavar="SPARSE_DIR",
        help="a learned-sparse model beside the dense --model: its exact ranking is a list of --negatives-from "
        "hybrid (dense + BM25 + sparse) or the only one (--negatives-from sparse)",
    )  # fmt: skip
    add_lexical_arguments(parser)
    add_shard_arguments(parser)
    add_embeddings_dir_arguments(
        parser, "a temporary folder", APPROXIMATE_HELP.replace("neighbours", "candidates"), deprecated_alias=True
    )


def run_mine(args: argparse.Namespace) -> int:
    """Mine `--num-negatives` negatives per row, ranked as --negatives-from says (the model, BM25 or both), and write
    `anchor, positive, negative_1, ...`."""
    from ..data.beir import is_beir_folder, read_beir
    from ..retrieval.mining.negatives import check_mining_stage, mine_hard_negatives
    from .search_options import lexical_settings

    output = Path(args.output)
    if output.is_dir():
        raise ValueError(f"-o {args.output} is a folder; give a file: NAME.jsonl, NAME.tsv or NAME.csv")
    if output.exists() and not args.overwrite:
        raise ValueError(f"-o {args.output} exists; pass --overwrite to replace it, or give another -o")
    if row_file_kind(output) != "json" and args.teacher:
        raise ValueError(
            f"-o {args.output}: --teacher writes a list of scores per row, which CSV / TSV cannot hold as numbers: "
            "write JSON lines (-o rows.jsonl)"
        )
    settings = lexical_settings(args)
    sparse = is_sparse_model_path(args.model)
    if sparse:  # ranked exactly by its own term weights: what sets a dense model or its embedding is refused
        refuse_dense_flags(args.model, {
            "--pooling": args.pooling, "--normalize": args.normalize is not None,
            **{flag: True for flag in given_flags(args, _EMBEDDED_ONLY)}, "--sparse-model": args.sparse_model,
        })  # fmt: skip
    if args.sparse_model is not None and not is_sparse_model_path(args.sparse_model):
        raise ValueError(
            f"--sparse-model {args.sparse_model}: expected a learned-sparse model (config.json model_type "
            "siamese-sparse, or a sentence-transformers SparseEncoder folder); a dense model goes in --model"
        )
    kind = "sparse" if sparse else "dense"  # the model's own ranking by default; checked before anything loads
    negatives_from = args.negatives_from or kind
    check_mining_stage(negatives_from, settings, args.approximate, kind, args.sparse_model is not None)
    teacher = load_cross_encoder(args.teacher, option="--teacher") if args.teacher else None
    if is_beir_folder(args.data):
        # (query, relevant document) pairs of the split; the corpus defaults to the folder's documents.
        beir = read_beir(args.data, split=args.split)
        pairs = [(q, d) for q, judged in beir.qrels.items() for d, rel in judged.items() if rel > 0]
        from datasets import Dataset

        rows = Dataset.from_dict(
            {"anchor": [beir.queries[q] for q, _ in pairs], "positive": [beir.corpus[d] for _, d in pairs]}
        )
        default_corpus = list(beir.corpus.values())
    else:
        rows = load_data(args.data, args.split, parse_columns(args.columns), None)
        default_corpus = None
    if args.corpus is None or is_beir_folder(args.corpus):
        given = given_flags(args, _CORPUS_ONLY)
        if given:
            raise ValueError(f"{', '.join(given)} describe(s) a --corpus file or Hub dataset; give one with --corpus")
    if args.corpus is None:
        corpus = default_corpus
    elif is_beir_folder(args.corpus):
        corpus = list(read_beir(args.corpus, split=args.split).corpus.values())
    else:
        corpus = corpus_source(args.corpus, args)  # streamed into shards, never a list
    if sparse:
        model, tokenizer = load_sparse_model(args.model, args.max_seq_length, args.device)
    else:
        model, tokenizer = load_inference_model(
            args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
        )
    sparse_model = sparse_tokenizer = None
    if args.sparse_model is not None:
        sparse_model, sparse_tokenizer = load_sparse_model(args.sparse_model, device=args.device)
    # A dense model's corpus is embedded into shards: in --embeddings-dir (kept, reused) or a temporary folder.
    mined = mine_hard_negatives(
        rows, model, corpus, num_negatives=args.num_negatives, range_min=args.range_min, range_max=args.range_max,
        margin=args.margin, max_score=args.max_score, sampling=args.sampling, tokenizer=tokenizer,
        batch_size=args.batch_size, seed=args.seed, embeddings_dir=args.embeddings_dir, text_column=args.text_column,
        id_column=args.id_column, shard_size=args.shard_size, approximate=args.approximate,
        dtype=None if sparse else args.dtype, negatives_from=negatives_from, lexical_settings=settings,
        sparse_model=sparse_model, sparse_tokenizer=sparse_tokenizer,
    )  # fmt: skip
    cache = output.with_name(output.name + ".scores")  # the teacher's scores while they stream (a stop resumes)
    if teacher is not None:
        from ..cross_encoder.teacher import teacher_scores

        mined = teacher_scores(mined, teacher, output="scores", batch_size=args.batch_size, cache_dir=cache)
    write_rows(output, mined)
    if teacher is not None:
        import shutil

        shutil.rmtree(cache, ignore_errors=True)
    scored = ", scored by the teacher" if teacher is not None else ""
    print(f"mined {len(mined)} of {len(rows)} rows ({args.num_negatives} negatives each{scored}) -> {output}")
    return 0
