"""The `hf-siamese` command line (also `python -m hf_siamese`).

Subcommands:

* `train`  fine-tune a sentence encoder (local CSV/TSV/JSONL/STSb file or Hub dataset; built-in demo set by default)
* `eval`   STS Spearman/Pearson of a model on scored pairs, with optional scatter plot and similarity heatmap
* `encode` embed a text file (one text per line) into .npy or .safetensors
* `index`  embed a corpus once into a vector index folder (texts, ids, embeddings, faiss index when installed)
* `search` top-k semantic search of queries over a corpus file or an index folder

The package only parses arguments and calls the library. Every bad input ends in one line on stderr
(`hf-siamese: error: ...`) and a non-zero exit status, never a traceback (set HF_SIAMESE_TRACEBACK=1 to see one).

Layout: `common` (names, argument-value parsers, data and model loading, error text), `parser` (the argparse
parser), and one module per command: `train`, `evaluate` (`eval`), `encode`, `index`, `search`. `main` lives here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .common import (
    DEMO_DEV_NAME,
    DEMO_OUTPUT_DIR,
    DEMO_TRAIN_NAME,
    DTYPES,
    EXIT_BAD_INPUT,
    LOSS_NAMES,
    POOLING_NAMES,
    PROG,
    _one_line,
    check_model_source,
    default_model_path,
    encoder_defaults,
    infer_score_range,
    load_data,
    load_inference_model,
    parse_columns,
    parse_labels,
    parse_score_range,
    quiet_progress_bars,
    read_text_lines,
    scored_pairs_layout,
    shutdown_distributed,
    take,
)
from .encode import run_encode
from .evaluate import run_eval
from .index import run_index
from .mine import run_mine
from .parser import build_parser
from .search import run_search
from .train import run_train

__all__ = [
    "DEMO_DEV_NAME",
    "DEMO_OUTPUT_DIR",
    "DEMO_TRAIN_NAME",
    "DTYPES",
    "EXIT_BAD_INPUT",
    "LOSS_NAMES",
    "POOLING_NAMES",
    "PROG",
    "build_parser",
    "check_model_source",
    "default_model_path",
    "encoder_defaults",
    "infer_score_range",
    "load_data",
    "load_inference_model",
    "main",
    "parse_columns",
    "parse_labels",
    "parse_score_range",
    "quiet_progress_bars",
    "read_text_lines",
    "run_encode",
    "run_eval",
    "run_index",
    "run_mine",
    "run_search",
    "run_train",
    "scored_pairs_layout",
    "shutdown_distributed",
    "take",
]


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    from ..data.readers import DataFormatError, DatasetLoadError

    # ImportError: an optional extra (matplotlib for --plot) is missing; its message says what to install.
    return (DataFormatError, DatasetLoadError, FileNotFoundError, ValueError, TypeError, OSError, ImportError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a bad command line (already reported in one line)
        return stop.code if isinstance(stop.code, int) else EXIT_BAD_INPUT
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork warning from the tokenizer under the Trainer
    try:
        return args.handler(args)
    except _bad_input_errors() as error:
        if os.environ.get("HF_SIAMESE_TRACEBACK"):
            raise
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
