"""`hf-siamese train` (alias `demo`): fine-tune a sentence encoder and report Spearman before and after."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..data.training_sets import read_training_sets
from ..training.fine_tune import fine_tune
from ..training.hard_negatives import default_hard_negatives, with_hard_negatives
from ..training.objective import Objective, choose_objective
from ..training.recipe import resolve_recipe
from .common import (
    DEMO_OUTPUT_DIR,
    PROG,
    default_model_path,
    parse_columns,
    parse_labels,
    parse_score_range,
    quiet_progress_bars,
    shutdown_distributed,
)

# The train flags of `choose_objective`'s options, for its errors.
OPTION_FLAGS = {
    "loss": "--loss",
    "score_range": "--score-range",
    "label2id": "--labels",
    "positive_threshold": "--positive-threshold",
    "margin_scale": "--margin-scale",
    "gather_across_processes": "--gather-across-processes",
}


def _objective(args: argparse.Namespace, train_data: Any, train_name: str) -> Objective:
    """The loss and its options (`training.objective.choose_objective`) from the flags and the training rows."""
    objective = choose_objective(
        train_data,
        loss=args.loss,
        score_range=parse_score_range(args.score_range),
        label2id=parse_labels(args.labels),
        positive_threshold=args.positive_threshold,
        margin_scale=args.margin_scale,
        gather_across_processes=args.gather_across_processes,
        source=train_name,
        option_names=OPTION_FLAGS,
        kind=args.kind,
    )
    if objective.loss.label_kind == "class" and args.eval_steps:
        # The Trainer's evaluation computes the training loss on the eval rows, and scored pairs have no class
        # labels; the before/after Spearman is computed all the same.
        raise ValueError("--eval-steps does not work with --loss softmax (scored eval pairs have no classes)")
    return objective


def _training_arguments(args: argparse.Namespace, output_dir: str, periodic_eval: bool) -> dict[str, Any]:
    """`SiameseTrainingArguments` keywords from the flags (`fine_tune` adds the recipe's epochs and selection)."""
    import torch

    return dict(
        output_dir=output_dir,
        # Runs unchanged on a CPU-only machine, a GPU, and under `accelerate launch` / torchrun.
        use_cpu=not torch.cuda.is_available(),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=max(args.batch_size, 32),
        learning_rate=args.lr,
        warmup_steps=args.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps in transformers 5
        seed=args.seed,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        bf16=args.bf16,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        eval_strategy="steps" if periodic_eval else "no",
        eval_steps=args.eval_steps,
        logging_steps=args.logging_steps,
        hub_model_id=args.push_to_hub,
        disable_tqdm=False,  # transformers hides the bar at its default log level; a CLI user wants it
        # Every parameter of the models built here gets a gradient (a classifier head exists only for softmax), so
        # DDP need not search for unused ones, and does not warn about the search on every process.
        ddp_find_unused_parameters=False,
        report_to="none",
        quantization_aware=args.quantization_aware,
    )


def run_train(args: argparse.Namespace) -> int:
    """Read the data, choose the loss and the recipe, fine-tune (`training.fine_tune.fine_tune`); print the progress
    and the before/after summary on the main process."""
    if args.push_to_hub is not None and "/" not in args.push_to_hub.strip("/"):
        raise ValueError(f"--push-to-hub {args.push_to_hub!r}: expected a repository id OWNER/NAME")
    if args.eval_steps and args.eval is None and args.train is not None:
        raise ValueError("--eval-steps needs --eval data")
    sets = read_training_sets(
        args.train, train_split=args.train_split, columns=parse_columns(args.columns),
        dataset_config=args.dataset_config, max_train=args.max_train, eval=args.eval, eval_split=args.eval_split,
        eval_columns=parse_columns(args.eval_columns, "--eval-columns"),
        eval_dataset_config=args.eval_dataset_config, max_eval=args.max_eval, seed=args.seed,
    )  # fmt: skip
    negatives = default_hard_negatives(args.kind, args.train) if args.hard_negatives is None else args.hard_negatives
    if args.negatives_from is not None and not negatives:
        raise ValueError(f"--negatives-from {args.negatives_from} ranks mined negatives: give --hard-negatives N")
    if negatives:
        sets = with_hard_negatives(
            sets, args.train, args.model or default_model_path(), negatives, kind=args.kind,
            negatives_from=args.negatives_from or "hybrid", pooling=args.pooling, normalize=args.normalize,
            max_seq_length=args.max_seq_length, seed=args.seed,
        )  # fmt: skip
    if args.interpolate == "auto" and sets.eval is None:
        raise ValueError("--interpolate auto chooses ALPHA by the score on --eval; give --eval, or a number for ALPHA")
    if args.kind != "dense":
        _check_kind(args, sets)
    objective = _objective(args, sets.train, sets.train_name)
    recipe = resolve_recipe(
        args.recipe, objective.loss.label_kind, sets.eval,
        epochs=args.epochs, average_weights=args.average_weights, interpolate=args.interpolate, kind=args.kind,
    )  # fmt: skip
    output_dir = args.output_dir or (DEMO_OUTPUT_DIR if sets.demo else "runs/hf-siamese")
    arguments = _training_arguments(args, output_dir, periodic_eval=bool(args.eval_steps and sets.eval))
    with quiet_progress_bars():
        # A stopped run of the same settings resumes; anything else there is refused (--overwrite: replaced). The
        # demo's default folder is its own: each demo run replaces the last.
        result = fine_tune(
            sets, objective, recipe, arguments, model=args.model or default_model_path(),
            finetuned_from=args.model or "sentence-transformers/all-MiniLM-L6-v2", pooling=args.pooling,
            normalize=args.normalize, max_seq_length=args.max_seq_length, run_options=_run_options(args),
            overwrite=args.overwrite, replace_runs=sets.demo and args.output_dir is None,
            push_to_hub=args.push_to_hub, made_by=f"`{PROG} train`",
            option_names={"score_range": "--score-range", "push_to_hub": "--push-to-hub"},
            report=lambda line: print(f"{PROG} train: {line}"), kind=args.kind,
        )  # fmt: skip
    if result.main_process:
        print("\n".join(result.summary))
    shutdown_distributed()
    return 0


# What `--kind sparse` / `--kind multi-vector` train, for the errors refusing a dense model's flags.
_KIND_TRAINS = {
    "sparse": "SPLADE term weights (loss sparse_mnr, or sparse_margin_mse / sparse_list_distill on a teacher's scores)",
    "multi-vector": "token vectors scored by MaxSim (loss maxsim_mnr, or maxsim_margin_mse / maxsim_list_distill on a "
    "teacher's scores)",
}


def _check_kind(args: argparse.Namespace, sets: Any) -> None:
    """`--kind sparse` / `multi-vector`: the flags that set a dense model are refused, and so is scored-pairs --eval
    (these models are measured on a BEIR folder's queries). `--loss` is checked by `choose_objective`: one of the
    kind's losses, another kind's refused naming them."""
    from ..data.beir import RetrievalDataset

    given = {"--pooling": args.pooling, "--normalize": args.normalize}
    refused = [flag for flag, value in given.items() if value is not None]
    if refused:
        raise ValueError(
            f"{', '.join(refused)} set(s) a dense model; --kind {args.kind} trains {_KIND_TRAINS[args.kind]}: give "
            "no " + ", ".join(refused)
        )
    if sets.eval is not None and not isinstance(sets.eval, RetrievalDataset):
        raise ValueError(
            f"--kind {args.kind} is measured on a BEIR folder's queries (--eval BEIR_DIR), not on scored pairs "
            f"({sets.eval_name})"
        )


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    """What the run folder records and compares: every option that changes the model (local files as absolute
    paths: the same from any working folder)."""
    options = {key: value for key, value in vars(args).items() if key not in _NOT_SETTINGS}
    for key in ("train", "eval"):
        options[key] = os.path.abspath(options[key]) if options[key] and os.path.exists(options[key]) else options[key]
    return options


# Options that change where the model goes or what is printed, not the model.
_NOT_SETTINGS = {"handler", "command", "output_dir", "overwrite", "push_to_hub", "logging_steps"}
