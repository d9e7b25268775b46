"""The flags of `hf-siamese train` (alias `demo`): the model, the data, the objective and the training run; the
command itself is `cli.train.run_train`. (`train-reranker` defines its own flags in `cli.train_reranker`.)"""

from __future__ import annotations

import argparse
from typing import Any

from ..losses.quantization_aware import QUANTIZATION_AWARE
from ..modeling.kinds import model_kinds
from ..training.hard_negatives import NEGATIVES_FROM
from ..training.objective import ROW_LOSSES
from ..training.recipe import RECIPES
from .arguments import (
    add_command,
    add_model_arguments,
    interpolate_option,
    loss_option,
    non_negative_int,
    positive_float,
    positive_int,
    warmup_ratio,
)
from .common import DEMO_OUTPUT_DIR
from .train import run_train


def register(commands: Any) -> None:
    """Add `train` (and its alias `demo`: the Makefile's main job is the default training run) to the `hf-siamese`
    subparsers."""
    add_command(
        commands, "train", run_train, add_arguments, aliases=("demo",),
        summary="fine-tune a sentence encoder (with no --train: all-MiniLM-L6-v2 on the built-in demo set)",
        description="Fine-tune a sentence encoder. With no --train it fine-tunes all-MiniLM-L6-v2 on the built-in "
        "demo set (scored pairs 0-5) and reports Spearman on its dev split before and after.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `train`: the model, then the groups data, objective and training."""
    add_model_arguments(parser, training=True)
    parser.add_argument(
        "--kind",
        choices=model_kinds(trainable=True),
        default="dense",
        help="the model to train: dense (a sentence embedding, the default), sparse (SPLADE term weights over the "
        "encoder's masked-language head; rows of anchor, positive[, negatives]; loss sparse_mnr, or sparse_margin_mse "
        "/ sparse_list_distill on rows with a teacher's scores) or multi-vector (ColBERT-style token vectors scored by "
        "MaxSim; the same rows; loss maxsim_mnr, or maxsim_margin_mse / maxsim_list_distill on a teacher's scores)",
    )
    _add_data_group(parser)
    _add_objective_group(parser)
    _add_training_group(parser)


def _add_data_group(parser: argparse.ArgumentParser) -> None:
    """What to train on and what to report Spearman on."""
    group = parser.add_argument_group("data")
    group.add_argument("--train", metavar="SOURCE", help="CSV/TSV/JSONL/STSb file, folder, or Hub dataset id")
    group.add_argument("--train-split", default="train", help="split of a Hub dataset or folder (default: %(default)s)")
    group.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="select/rename training columns, e.g. "
        "sentence1=premise,sentence2=hypothesis,label=gold (names understood: sentence1, sentence2, "
        "score, label, anchor, positive, negative)",
    )
    group.add_argument("--dataset-config", metavar="NAME", help="configuration (subset) of a Hub training dataset")
    group.add_argument("--max-train", type=positive_int, metavar="N", help="train on N random rows only")
    group.add_argument("--eval", metavar="SOURCE", help="scored pairs to report Spearman on, before and after")
    group.add_argument(
        "--eval-split",
        help="split of a Hub dataset or folder (default: validation), or of a BEIR folder's qrels (default: dev, "
        "else test); a split asked for and not there is refused, listing the splits found",
    )
    group.add_argument("--eval-columns", metavar="NAME=COLUMN,...", help="select/rename eval columns")
    group.add_argument("--eval-dataset-config", metavar="NAME", help="configuration (subset) of a Hub eval dataset")
    group.add_argument("--max-eval", type=positive_int, metavar="N", help="evaluate on N random pairs only")
    group.add_argument(
        "--hard-negatives",
        type=non_negative_int,
        metavar="N",
        help="with --train BEIR_DIR: add N negatives to every (query, relevant document) row, mined from the folder's "
        "corpus before training by the start model and BM25 fused (--negatives-from); default: "
        "1 for --kind sparse and --kind multi-vector (chosen on held-out SciFact train claims), else none; 0: none",
    )
    group.add_argument(
        "--negatives-from",
        choices=NEGATIVES_FROM,
        help="the first stage that ranks the mined negatives: hybrid (the start model's ranking fused with BM25's, the "
        "default), lexical (BM25 alone), dense / sparse (the start model alone)",
    )


def _add_objective_group(parser: argparse.ArgumentParser) -> None:
    """The loss and what it reads from the data."""
    group = parser.add_argument_group("objective")
    group.add_argument(
        "--loss",
        type=loss_option,
        metavar="LOSS",
        help=f"one of {', '.join(ROW_LOSSES)}, or a weighted sum of them such as cosent+0.5*angle (default from the "
        "data: float scores -> cosine, class labels -> softmax, no label -> mnr); with --kind sparse or multi-vector "
        "one of that kind's (sparse_* / maxsim_*)",
    )
    group.add_argument(
        "--score-range",
        metavar="LOW,HIGH",
        help="range of the gold scores for cosine, e.g. 0,5 (default: 0,1 or 0,5, whichever holds the training scores)",
    )
    group.add_argument(
        "--labels",
        metavar="A,B,...",
        help="class names for softmax, in id order, e.g. "
        "entailment,neutral,contradiction (default: the sorted labels of the data)",
    )
    group.add_argument(
        "--margin-scale", type=float, metavar="S", help="margin_mse: multiplies the student's score margins (default "
        "1; a normalized student's margins stay within [-2, 2], a cross-encoder's span tens)",
    )  # fmt: skip
    group.add_argument(
        "--positive-threshold",
        type=float,
        metavar="T",
        help="scored_mnr: pairs scoring at least T are the positives (e.g. 4 on a 0-5 scale)",
    )
    group.add_argument(
        "--quantization-aware", choices=QUANTIZATION_AWARE,
        help="train through the int8 or binary quantizer (the loss on the float embeddings plus the loss on their "
        "codes, straight-through), so that 'index --precision int8|binary' ranks as the float index; dense only",
    )  # fmt: skip
    group.add_argument(
        "--gather-across-processes",
        action="store_true",
        help="mnr: score against the in-batch negatives of all processes (accelerate launch / torchrun)",
    )


def _add_training_group(parser: argparse.ArgumentParser) -> None:
    """The recipe, the optimizer's settings, the checkpoints and the output folder."""
    group = parser.add_argument_group("training")
    group.add_argument(
        "--recipe",
        choices=RECIPES,
        help="best: evaluate on --eval after every epoch, keep the best epoch or the mean of the epoch ends, then "
        "interpolate toward the base model by the alpha that scores best on --eval (the recipe study's leader for "
        "scored pairs: default for a score loss with scored --eval pairs); plain: train --epochs and keep the last "
        "weights (default otherwise). --epochs, --[no-]average-weights and --interpolate override its parts",
    )
    group.add_argument(
        "--epochs",
        type=positive_float,
        help="default: 4 with --recipe best, else 1 (2 for --kind sparse and multi-vector)",
    )
    group.add_argument("--batch-size", type=positive_int, default=16, help="per device (default: %(default)s)")
    group.add_argument("--lr", type=float, default=5e-5, help="learning rate (default: 5e-5)")
    group.add_argument(
        "--warmup-ratio", type=warmup_ratio, default=0.1, help="linear warmup share of the steps (default: %(default)s)"
    )
    group.add_argument("--seed", type=int, default=42, help="default: %(default)s")
    group.add_argument(
        "--group-by-length",
        action="store_true",
        help="always batch texts of similar length (default: only when the model cannot run packed)",
    )
    group.add_argument(
        "--average-weights",
        action=argparse.BooleanOptionalAction,
        help="end with the mean of the weights at the end of every epoch (hf_siamese.WeightAveragingCallback); "
        "with --recipe best (where it is on by default) only if it scores better on --eval than the best epoch",
    )
    group.add_argument(
        "--interpolate",
        type=interpolate_option,
        metavar="ALPHA|auto",
        help="end with (1-ALPHA) * the base model's weights + ALPHA * the fine-tuned ones (WiSE-FT: keeps more of "
        "what the base model knew); auto picks ALPHA from 0.5, 0.6, ..., 1 by the score on --eval (default with "
        "--recipe best; 1 turns it off)",
    )
    group.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    group.add_argument("--gradient-accumulation-steps", type=positive_int, default=1, help="default: %(default)s")
    group.add_argument("--save-steps", type=positive_int, metavar="N", help="save a checkpoint every N steps")
    group.add_argument("--eval-steps", type=positive_int, metavar="N", help="evaluate on --eval every N steps")
    group.add_argument(
        "--logging-steps",
        type=positive_int,
        default=50,
        metavar="N",
        help="log the loss every N steps (default: %(default)s)",
    )
    group.add_argument(
        "--output-dir",
        help=f"where the model and checkpoints go (default: {DEMO_OUTPUT_DIR} for the demo, replaced by each demo "
        "run; else runs/hf-siamese). A stopped run with the same settings resumes from its last complete checkpoint; "
        "a finished model, another run, an index or other files there are refused (see --overwrite)",
    )
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output-dir: start afresh, deleting the earlier run's checkpoints and model (or another model, "
        "checkpoints or a vector index there) only once the data and the model have loaded; other files are never "
        "deleted",
    )
    group.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the trained model to this Hub repository")
