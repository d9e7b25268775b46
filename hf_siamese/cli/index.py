"""`hf-siamese index`: embed a corpus once into a vector index folder that `hf-siamese search --index` reads."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import load_data, load_inference_model, read_text_lines


def read_corpus(
    source: str, text_column: str | None, id_column: str | None, split: str | None, subset: str | None
) -> tuple[list[Any], list[Any] | None]:
    """(texts, ids or None) of a .txt file (one document per line, blank lines skipped, ids = positions) or of a
    CSV/TSV/JSONL/JSON file, folder or Hub dataset (the `--text-column` and optional `--id-column`)."""
    if Path(source).suffix.lower() == ".txt":
        if text_column or id_column:
            raise ValueError(
                f"--text-column/--id-column apply to table files and datasets; {source!r} is a text file with one "
                "document per line (its ids are the line positions 0, 1, ... among non-blank lines)"
            )
        return read_text_lines(source), None
    columns = {"text": text_column or "text", **({"id": id_column} if id_column else {})}
    data = load_data(source, split, columns, subset)
    return list(data["text"]), list(data["id"]) if id_column else None


def run_index(args: argparse.Namespace) -> int:
    """Embed the corpus with the model and write the index folder."""
    from ..retrieval.vector_index import build_index

    texts, ids = read_corpus(args.corpus, args.text_column, args.id_column, args.split, args.dataset_config)
    model, tokenizer = load_inference_model(args.model, args.pooling, args.normalize, args.max_seq_length)
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
