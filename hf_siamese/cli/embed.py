"""`hf-siamese embed`: embed a corpus of any size into Parquet shards (`hf_siamese.retrieval.corpus`), resumably; under
`accelerate launch` / `torchrun` every process embeds its share of the shards on its own device."""

from __future__ import annotations

import argparse
import glob
import os
from pathlib import Path
from typing import Any

from .common import load_inference_model


def corpus_source(corpus: str, split: str, subset: str | None) -> Any:
    """A local file or glob as given (encode_corpus reads it), or a Hub dataset id streamed with `datasets`."""
    from ..data.corpus_stream import SUFFIXES

    local = glob.has_magic(corpus) or Path(corpus).exists() or Path(corpus).suffix.lower() in SUFFIXES
    if local or os.path.isabs(corpus) or corpus.startswith("."):
        return corpus
    import datasets

    from ..data.readers import DatasetLoadError

    try:
        return datasets.load_dataset(corpus, name=subset, split=split, streaming=True)
    except Exception as err:  # any failure of the Hub route means: not a file, not a loadable dataset
        raise DatasetLoadError(
            f"{corpus!r} is not a local file or glob, and loading it as a Hub dataset failed: {err}"
        ) from None


def shard_options(args: argparse.Namespace, tokenizer: Any) -> dict[str, Any]:
    """The `encode_corpus` keywords of the shard arguments `embed`, `similar` and `cluster` share."""
    return dict(
        tokenizer=tokenizer,
        text_column=args.text_column,
        id_column=args.id_column,
        batch_size=args.batch_size,
        shard_size=args.shard_size,
        dtype=args.dtype,
        show_progress_bar=True,
    )


def run_embed(args: argparse.Namespace) -> int:
    """Embed the corpus into shards in the output folder (resuming one started with the same arguments)."""
    from ..retrieval.corpus import encode_corpus

    source = corpus_source(args.corpus, args.split, args.dataset_config)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, device=args.device
    )
    result = encode_corpus(model, source, args.output, **shard_options(args, tokenizer), prompt_name=args.prompt_name)
    state = "" if result.done else " (other processes are still running; the last one marks the folder done)"
    shards = f"{result.num_shards} shard{'s' if result.num_shards != 1 else ''}"
    print(
        f"embedded {result.num_rows} rows of {args.corpus} into {shards} ({result.shards_computed} computed, "
        f"{result.shards_reused} reused here), {result.dim}-dim, in {args.output}{state}"
    )
    return 0
