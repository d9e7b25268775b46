"""`hf-siamese mine`: add hard negatives mined by a model to (anchor, positive) rows and write the triplets."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from .common import load_data, load_inference_model, parse_columns

OUTPUT_FORMATS = {".jsonl": "json", ".json": "json", ".tsv": "tsv", ".csv": "csv"}


def run_mine(args: argparse.Namespace) -> int:
    """Mine `--num-negatives` negatives per row with the model and write `anchor, positive, negative_1, ...`."""
    from ..data.beir import is_beir_folder, read_beir
    from ..data.corpus_stream import TextLines
    from ..retrieval.mining import mine_hard_negatives
    from ..retrieval.mining_corpus import work_folder

    output = Path(args.output)
    kind = OUTPUT_FORMATS.get(output.suffix.lower())
    if kind is None:
        raise ValueError(f"--output {args.output!r}: the file name must end in one of {sorted(OUTPUT_FORMATS)}")
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
    if args.corpus is None:
        corpus = default_corpus
    elif is_beir_folder(args.corpus):
        corpus = list(read_beir(args.corpus, split=args.split).corpus.values())
    else:
        corpus = TextLines(args.corpus)  # streamed into shards, never a list
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    # A corpus file goes through shards (in --corpus-dir, else a temporary folder); an in-memory one only with
    # --corpus-dir.
    streamed = args.corpus_dir is not None or isinstance(corpus, TextLines)
    with work_folder(args.corpus_dir) if streamed else contextlib.nullcontext() as folder:
        mined = mine_hard_negatives(
            rows,
            model,
            corpus,
            num_negatives=args.num_negatives,
            range_min=args.range_min,
            range_max=args.range_max,
            margin=args.margin,
            max_score=args.max_score,
            sampling=args.sampling,
            tokenizer=tokenizer,
            batch_size=args.batch_size,
            seed=args.seed,
            corpus_dir=folder,
            shard_size=args.shard_size,
            approximate=args.approximate,
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(output.name + ".partial")
    if kind == "json":
        mined.to_json(str(temporary), lines=True, force_ascii=False)
    else:
        mined.to_csv(str(temporary), sep="\t" if kind == "tsv" else ",", index=False)
    temporary.replace(output)  # a failed write never leaves a half-written output
    print(f"mined {len(mined)} of {len(rows)} rows ({args.num_negatives} negatives each) -> {output}")
    return 0
