"""The `hf-siamese` command line (also `python -m hf_siamese`).

Subcommands:

* `train`  fine-tune a sentence encoder (local CSV/TSV/JSONL/STSb file or Hub dataset; built-in demo set by default)
* `eval`   STS Spearman/Pearson of a model on scored pairs, with optional scatter plot and similarity heatmap
* `encode` embed a text file (one text per line) into .npy or .safetensors
* `index`  embed a corpus once into a vector index folder (texts, ids, vectors; an approximate index when large)
* `search` top-k semantic search of queries over a corpus or an index folder (`--rerank CE_DIR`: then a reranker)
* `rerank` rank each query's candidate documents (a JSONL file) with a cross-encoder
* `train-reranker` train a cross-encoder from a BEIR folder or pairs with mined negatives (`train_reranker`)
* `augment` gold scored pairs + silver pairs labelled by a cross-encoder (Augmented SBERT) in one file
* `distill` a smaller (or another) bi-encoder learns a teacher's embeddings of your texts or parallel sentences
* `export` write a model for serving: sentence-transformers layout (TEI), ONNX or OpenVINO, float32 or int8
* `embed`  embed a corpus of any size into resumable Parquet shards (one share per process under accelerate launch)
* `similar`, `cluster` near-duplicate pairs and groups of a corpus; `mine` hard negatives for (anchor, positive) rows

Every command that takes a corpus (index, embed, search --corpus, mine --corpus, similar, cluster) reads it through
`hf_siamese.data.open_corpus` with the same options (--text-column, --id-column, and --split / --dataset-config for a
Hub dataset id), and keeps the embedded corpus in `--embeddings-dir` (the folder `embed -o` writes) where it has one.

The package only parses arguments and calls the library. Every bad input ends in one line on stderr
(`hf-siamese: error: ...`) and a non-zero exit status, never a traceback (set HF_SIAMESE_TRACEBACK=1 to see one).

Layout: `common` (names, the model-loading call, error text), `arguments` (the flag groups, defaults and value parsers
several commands share), `parser` (the argparse parser: the list of the commands), and one module per command, each with
its flags (`add_arguments`), its entry in the parser (`register`) and its handler (`run_...`): `train_flags` (the flags
of `train`, run by `train`), `evaluate` (`eval`), `encode`, `index`, `search`, `rerank`, `mine`, `embed`, `similar`
(also `cluster`), `export`, `train_reranker`, `distill`, `augment`, `adapt`. `main` lives here. A command reads its
inputs (`hf_siamese.data`), loads its model (`hf_siamese.formats.loading.load_model`) and calls one library function.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from .common import EXIT_BAD_INPUT, PROG, _one_line, missing_module_message
from .parser import build_parser, register_command
from .progress import log_friendly_stderr

__all__ = ["build_parser", "main", "register_command"]


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    from ..data.readers import DataFormatError, DatasetLoadError

    # ImportError: an optional extra (matplotlib for --plot) is missing; its message says what to install.
    return (DataFormatError, DatasetLoadError, FileNotFoundError, ValueError, TypeError, OSError, ImportError)


def _joined_special_numbers(argv: list[str]) -> list[str]:
    """`--flag -inf` as `--flag=-inf`: argparse takes `-inf` / `-nan` / `-infinity` for an option and answers
    "expected one argument"; joined, the option's own check refuses the value by name."""
    special = re.compile(r"-(inf|infinity|nan)", re.IGNORECASE)
    joined: list[str] = []
    for token in argv:
        if special.fullmatch(token) and joined and joined[-1].startswith("--") and "=" not in joined[-1]:
            joined[-1] = f"{joined[-1]}={token}"
        else:
            joined.append(token)
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(_joined_special_numbers(argv))
    except SystemExit as stop:  # --help, or a bad command line (already reported in one line)
        return stop.code if isinstance(stop.code, int) else EXIT_BAD_INPUT
    except ImportError as error:  # a module the parser needs is missing: an incomplete install, never a traceback
        if os.environ.get("HF_SIAMESE_TRACEBACK"):
            raise
        print(f"{PROG}: error: {missing_module_message(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork warning from the tokenizer under the Trainer
    try:
        with log_friendly_stderr():  # progress bars as lines where stderr is a log
            return args.handler(args)
    except _bad_input_errors() as error:
        if os.environ.get("HF_SIAMESE_TRACEBACK"):
            raise
        text = missing_module_message(error) if isinstance(error, ModuleNotFoundError) else _one_line(error)
        print(f"{PROG}: error: {text}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
