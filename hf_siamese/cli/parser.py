"""The argparse parser of `hf-siamese`: its one-line error reporting, the option groups several commands share,
and the assembly of the commands (each one's handler lives in its own module)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from ..training.recipe import RECIPES
from .adapt import add_adapt_command
from .arguments import (
    add_data_arguments,
    add_first_stage_arguments,
    add_lexical_arguments,
    add_model_arguments,
    add_rerank_arguments,
    interpolate_option,
    loss_option,
    positive_float,
    positive_int,
    warmup_ratio,
)
from .augment import add_augment_command
from .common import DEMO_OUTPUT_DIR, DTYPES, LOSS_NAMES, PROG
from .distill import add_distill_command
from .encode import run_encode
from .evaluate import run_eval
from .parser_corpus import add_corpus_commands
from .train import run_train
from .train_reranker import add_train_reranker_command


class _Parser(argparse.ArgumentParser):
    """argparse prints the whole usage block before an error; one line naming the problem is easier to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


def _package_version() -> str:
    import hf_siamese

    return hf_siamese.__version__


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Train, evaluate and use Sentence-BERT style siamese encoders built on transformers.",
        epilog="Run 'hf-siamese COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    train = commands.add_parser(
        "train",
        aliases=["demo"],  # `hf-siamese demo` (the Makefile's main job) is the default training run
        help="fine-tune a sentence encoder (with no --train: all-MiniLM-L6-v2 on the built-in demo set)",
        description="Fine-tune a sentence encoder. With no --train it fine-tunes all-MiniLM-L6-v2 on the built-in "
        "demo set (scored pairs 0-5) and reports Spearman on its dev split before and after.",
    )
    add_model_arguments(train, training=True)
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
    data.add_argument("--max-train", type=positive_int, metavar="N", help="train on N random rows only")
    data.add_argument("--eval", metavar="SOURCE", help="scored pairs to report Spearman on, before and after")
    data.add_argument(
        "--eval-split",
        help="split of a Hub dataset or folder (default: validation), or of a BEIR folder's qrels (default: dev, "
        "else test); a split asked for and not there is refused, listing the splits found",
    )
    data.add_argument("--eval-columns", metavar="NAME=COLUMN,...", help="select/rename eval columns")
    data.add_argument("--eval-dataset-config", metavar="NAME", help="configuration (subset) of a Hub eval dataset")
    data.add_argument("--max-eval", type=positive_int, metavar="N", help="evaluate on N random pairs only")
    objective = train.add_argument_group("objective")
    objective.add_argument(
        "--loss",
        type=loss_option,
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
        "--margin-scale", type=float, metavar="S", help="margin_mse: multiplies the student's score margins (default "
        "1; a normalized student's margins stay within [-2, 2], a cross-encoder's span tens)",
    )  # fmt: skip
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
    run.add_argument("--epochs", type=positive_float, help="default: 4 with --recipe best, else 1")
    run.add_argument("--batch-size", type=positive_int, default=16, help="per device (default: 16)")
    run.add_argument("--lr", type=float, default=5e-5, help="learning rate (default: 5e-5)")
    run.add_argument(
        "--warmup-ratio", type=warmup_ratio, default=0.1, help="linear warmup share of the steps (default: 0.1)"
    )
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
        type=interpolate_option,
        metavar="ALPHA|auto",
        help="end with (1-ALPHA) * the base model's weights + ALPHA * the fine-tuned ones (WiSE-FT: keeps more of "
        "what the base model knew); auto picks ALPHA from 0.5, 0.6, ..., 1 by the score on --eval (default with "
        "--recipe best; 1 turns it off)",
    )
    run.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    run.add_argument("--gradient-accumulation-steps", type=positive_int, default=1, help="default: 1")
    run.add_argument("--save-steps", type=positive_int, metavar="N", help="save a checkpoint every N steps")
    run.add_argument("--eval-steps", type=positive_int, metavar="N", help="evaluate on --eval every N steps")
    run.add_argument(
        "--logging-steps", type=positive_int, default=50, metavar="N", help="log the loss every N steps (default: 50)"
    )
    run.add_argument(
        "--output-dir",
        help=f"where the model and checkpoints go (default: {DEMO_OUTPUT_DIR} for the demo, replaced by each demo "
        "run; else runs/hf-siamese). A stopped run with the same settings resumes from its last complete checkpoint; "
        "a finished model, another run, an index or other files there are refused (see --overwrite)",
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output-dir: start afresh, deleting the earlier run's checkpoints and model (or another model, "
        "checkpoints or a vector index there) only once the data and the model have loaded; other files are never "
        "deleted",
    )
    run.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the trained model to this Hub repository")
    train.set_defaults(handler=run_train)

    evaluate = commands.add_parser(
        "eval",
        help="STS Spearman/Pearson on scored pairs, or the IR table on a BEIR folder (default: the demo dev split)",
        description="Spearman and Pearson correlation (x100) of cosine, dot, euclidean and manhattan similarity "
        "with gold scores of sentence pairs; on a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) nDCG, "
        "MRR, Recall, MAP and Precision at 1, 3, 5, 10 and 100; with --rerank CE_DIR, those of the first stage and "
        "of the two stages (the cross-encoder reranking the first stage's --rerank-top) side by side.",
    )
    evaluate.add_argument(
        "data",
        nargs="?",
        metavar="SOURCE",
        help="scored pairs (file, folder or Hub dataset id) or a BEIR folder (default: the built-in demo set)",
    )
    add_model_arguments(evaluate, training=False)
    add_data_arguments(
        evaluate, "", "test",
        "split of a Hub dataset, a local folder or a BEIR folder's qrels (default: test; with --choose-dense-weight: "
        "dev). A BEIR split that is not there is refused, listing the splits found: never swapped for another",
    )  # fmt: skip
    evaluate.add_argument(
        "--quantize",
        choices=("int8",),
        help="run an int8 dynamically quantized copy of the model on the CPU (faster; see hf_siamese.quantize)",
    )
    evaluate.add_argument("--score-range", metavar="LOW,HIGH", help="range of the gold scores (default: 0,1 or 0,5)")
    evaluate.add_argument("--max-eval", type=positive_int, metavar="N", help="evaluate on N random pairs only")
    evaluate.add_argument("--batch-size", type=positive_int, default=64, help="default: 64")
    evaluate.add_argument("--plot", metavar="PNG", help="write a scatter plot of cosine similarity vs gold score")
    evaluate.add_argument("--sentences", metavar="FILE", help="text file, one sentence per line, for --heatmap")
    evaluate.add_argument("--heatmap", metavar="PNG", help="write the similarity matrix of --sentences as a heatmap")
    evaluate.add_argument(
        "--index", metavar="INDEX",
        help="BEIR folder: run the first stage through this index of its corpus ('hf-siamese index BEIR_DIR -o ...': "
        "a folder, or milvus://... / milvus-lite:...), as users search it; --model defaults to the index's",
    )  # fmt: skip
    add_first_stage_arguments(evaluate, "dense (a BEIR folder; hybrid builds BM25 over its corpus in a moment)")
    add_lexical_arguments(evaluate)
    evaluate.add_argument(
        "--choose-dense-weight", action="store_true",
        help="BEIR folder: print nDCG@10 of z-score hybrid fusion at dense weights 0, 0.1, ..., 1 on --split and the "
        "best (choose on train or dev queries, then eval test with --fusion zscore --dense-weight W)",
    )  # fmt: skip
    add_rerank_arguments(evaluate)
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
    add_model_arguments(encode, training=False)
    encode.add_argument("--batch-size", type=positive_int, default=64, help="default: 64")
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

    add_corpus_commands(commands)
    add_train_reranker_command(commands)
    add_distill_command(commands)
    add_augment_command(commands)
    add_adapt_command(commands)
    return parser
