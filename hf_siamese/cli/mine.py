"""`hf-siamese mine`: add hard negatives mined by a model (or by BM25, or both: --negatives-from) to (anchor,
positive) rows and write the triplets."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..storage import row_file_kind, write_rows
from .common import (
    corpus_source,
    load_cross_encoder,
    load_data,
    load_inference_model,
    parse_columns,
)

# The options of a --corpus read by `open_corpus` (with their defaults), which the default corpus and a BEIR folder's
# do not take.
_CORPUS_ONLY = {
    "--text-column": ("text_column", "text"),
    "--id-column": ("id_column", None),
    "--corpus-split": ("corpus_split", None),
    "--corpus-dataset-config": ("corpus_config", None),
}


def run_mine(args: argparse.Namespace) -> int:
    """Mine `--num-negatives` negatives per row, ranked as --negatives-from says (the model, BM25 or both), and write
    `anchor, positive, negative_1, ...`."""
    from ..data.beir import is_beir_folder, read_beir
    from ..retrieval.mining import check_mining_stage, mine_hard_negatives
    from .index import lexical_settings

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
    check_mining_stage(args.negatives_from, settings, args.approximate)  # before the data and the model load
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
        given = [flag for flag, (name, default) in _CORPUS_ONLY.items() if getattr(args, name) != default]
        if given:
            raise ValueError(f"{', '.join(given)} describe(s) a --corpus file or Hub dataset; give one with --corpus")
    if args.corpus is None:
        corpus = default_corpus
    elif is_beir_folder(args.corpus):
        corpus = list(read_beir(args.corpus, split=args.split).corpus.values())
    else:
        corpus = corpus_source(args.corpus, args)  # streamed into shards, never a list
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    # Every corpus is embedded into shards: in --embeddings-dir (kept, reused by a later run) or a temporary folder.
    mined = mine_hard_negatives(
        rows, model, corpus, num_negatives=args.num_negatives, range_min=args.range_min, range_max=args.range_max,
        margin=args.margin, max_score=args.max_score, sampling=args.sampling, tokenizer=tokenizer,
        batch_size=args.batch_size, seed=args.seed, embeddings_dir=args.embeddings_dir, text_column=args.text_column,
        id_column=args.id_column, shard_size=args.shard_size, approximate=args.approximate, dtype=args.dtype,
        negatives_from=args.negatives_from, lexical_settings=settings,
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
