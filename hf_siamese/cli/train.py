"""`hf-siamese train` (alias `demo`): fine-tune a sentence encoder and report Spearman before and after."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..training.averaging import WeightAveragingCallback
from ..training.fine_tune import encoder_to_train, measure, push_trained
from ..training.objective import Objective, choose_objective
from ..training.recipe import (
    Recipe,
    checkpoint_folders,
    end_training,
    remove_checkpoints,
    resolve_recipe,
    selection_arguments,
)
from ..training.run_folder import data_fingerprint, open_run_folder, run_settings
from .common import (
    DEMO_DEV_NAME,
    DEMO_OUTPUT_DIR,
    DEMO_TRAIN_NAME,
    PROG,
    default_model_path,
    load_data,
    parse_columns,
    parse_labels,
    parse_score_range,
    quiet_progress_bars,
    scored_pairs_layout,
    shutdown_distributed,
    take,
)
from .train_report import NO_EVAL_HINT, card_facts, describe_loss, headline, summary_lines


def _training_data(args: argparse.Namespace) -> tuple[Any, str, Any, str | None]:
    """(train rows, their name, eval rows or None, their name): from the arguments, or the built-in demo set."""
    from ..data.beir import beir_split, is_beir_folder, read_beir
    from ..data.readers import load_demo_dataset

    columns = parse_columns(args.columns)
    eval_columns = parse_columns(args.eval_columns, "--eval-columns")
    demo = args.train is None
    if demo and (columns or args.dataset_config):
        raise ValueError("--columns/--dataset-config describe --train data; give --train too")
    demo_splits = load_demo_dataset() if demo else None
    if demo:
        train_data, train_name = demo_splits["train"], DEMO_TRAIN_NAME
    else:
        train_data, train_name = load_data(args.train, args.train_split, columns, args.dataset_config), args.train
    train_data = take(train_data, args.max_train, args.seed)

    if args.eval is not None and is_beir_folder(args.eval):
        # A retrieval set: nDCG@10 before and after, IR metrics in the trainer's evaluations.
        # The split asked for (an error listing the splits there are if it is not there), else dev, then test.
        split = args.eval_split or beir_split(args.eval, ["dev", "validation", "test"])
        return train_data, train_name, read_beir(args.eval, split=split), f"{args.eval} ({split} split)"
    if args.eval is not None:
        eval_split = args.eval_split or "validation"
        eval_data, eval_name = load_data(args.eval, eval_split, eval_columns, args.eval_dataset_config), args.eval
    elif demo:
        eval_data, eval_name = demo_splits["dev"], DEMO_DEV_NAME
    else:
        if args.eval_steps:
            raise ValueError("--eval-steps needs --eval data")
        return train_data, train_name, None, None
    eval_data = take(eval_data, args.max_eval, args.seed)
    scored_pairs_layout(eval_data, eval_name)
    return train_data, train_name, eval_data, eval_name


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
    )
    if objective.loss.label_kind == "class" and args.eval_steps:
        # The Trainer's evaluation computes the training loss on the eval rows, and scored pairs have no class
        # labels; the before/after Spearman is computed all the same.
        raise ValueError("--eval-steps does not work with --loss softmax (scored eval pairs have no classes)")
    return objective


def _training_arguments(args: argparse.Namespace, output_dir: str, recipe: Recipe, periodic_eval: bool) -> Any:
    import torch

    from ..training.arguments import SiameseTrainingArguments

    arguments = dict(
        output_dir=output_dir,
        # Runs unchanged on a CPU-only machine, a GPU, and under `accelerate launch` / torchrun.
        use_cpu=not torch.cuda.is_available(),
        num_train_epochs=recipe.epochs,
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
    )
    return SiameseTrainingArguments(**{**arguments, **selection_arguments(recipe, args.eval_steps, args.save_steps)})


def run_train(args: argparse.Namespace) -> int:
    """Fine-tune, print a before/after summary on the main process, save (and optionally push) the model."""
    from transformers import set_seed

    from ..formats.loading import check_model_source

    if args.push_to_hub is not None and "/" not in args.push_to_hub.strip("/"):
        raise ValueError(f"--push-to-hub {args.push_to_hub!r}: expected a repository id OWNER/NAME")
    demo = args.train is None
    train_data, train_name, eval_data, eval_name = _training_data(args)
    if args.interpolate == "auto" and eval_data is None:
        raise ValueError("--interpolate auto chooses ALPHA by the score on --eval; give --eval, or a number for ALPHA")
    objective = _objective(args, train_data, train_name)
    train_data, loss = objective.train_data, objective.loss
    recipe = resolve_recipe(
        args.recipe, loss.label_kind, eval_data,
        epochs=args.epochs, average_weights=args.average_weights, interpolate=args.interpolate,
    )  # fmt: skip
    model_path = check_model_source(args.model or default_model_path())
    output_dir = args.output_dir or (DEMO_OUTPUT_DIR if demo else "runs/hf-siamese")
    training_args = _training_arguments(args, output_dir, recipe, periodic_eval=bool(args.eval_steps and eval_data))
    # A stopped run of the same settings resumes; anything else there is refused (--overwrite: replaced). The demo's
    # default folder is its own: each demo run replaces the last.
    run = open_run_folder(
        training_args, _settings(args, model_path, train_data, eval_data, training_args.world_size),
        overwrite=args.overwrite, replace_runs=demo and args.output_dir is None,
    )  # fmt: skip
    set_seed(args.seed)  # before building the model: a classifier head is initialised at random
    with quiet_progress_bars():
        model, tokenizer = encoder_to_train(
            model_path, pooling=args.pooling, normalize=args.normalize, max_seq_length=args.max_seq_length,
            **objective.head_kwargs,
        )  # fmt: skip
    trainer, averaging, start = _make_trainer(
        model, tokenizer, training_args, recipe, loss, (train_data, train_name), (eval_data, eval_name)
    )
    show = print if trainer.is_world_process_zero() else _silent

    show(f"{PROG} train: {train_name} ({len(train_data)} rows), loss {describe_loss(loss)}, base model {model_path}")
    hint = NO_EVAL_HINT if eval_data is None and loss.label_kind == "score" else ""
    show(f"{PROG} train: {recipe.describe()}{hint}")
    before = measure(trainer, eval_data)
    if before:
        label, value = headline(before)
        show(f"{PROG} train: {label} x100 on {eval_name} before training: {value:.2f}")
    if run.note:
        show(f"{PROG} train: {run.note}")
    lines, after = _train(args, trainer, run, recipe, averaging, start, eval_data)
    for line in lines:
        show(f"{PROG} train: {line}")
    facts = card_facts(
        args, demo, after, f"`{PROG} train` ({recipe.name} recipe) " + "; ".join(lines) if lines else None
    )
    _save(trainer, output_dir, facts)
    run.finish()
    if args.push_to_hub is not None:
        with quiet_progress_bars():
            message = f"{PROG} train: {objective.loss_name} loss on {train_name}"
            push_trained(trainer, args.push_to_hub, message, facts, option="--push-to-hub")
    trained = f"{train_name}: {len(train_data)} rows, {recipe.epochs:g} epoch(s), loss {describe_loss(loss)}"
    for line in summary_lines(
        model_path, trained, (before, after), (eval_data, eval_name), output_dir, args.push_to_hub
    ):
        show(line)
    shutdown_distributed()
    return 0


def _make_trainer(
    model: Any,
    tokenizer: Any,
    training_args: Any,
    recipe: Recipe,
    loss: Any,
    train: tuple[Any, str],
    evaluation: tuple[Any, str | None],
) -> tuple[Any, Any, dict[str, Any] | None]:
    """(the `SiameseTrainer`, the recipe's weight-averaging callback or None, the weights to interpolate from or
    None); a row the trainer refuses is named by the user's source it is in."""
    from ..training.trainer import SiameseTrainer

    (train_data, train_name), (eval_data, eval_name) = train, evaluation
    start = {n: p.detach().clone() for n, p in model.named_parameters()} if recipe.interpolate is not None else None
    # The best recipe keeps the best of the epochs (the mean is compared with it where both exist).
    averaging = WeightAveragingCallback(load_at_end=not recipe.select_best) if recipe.average else None
    try:
        trainer = SiameseTrainer(
            model=model,
            args=training_args,
            train_dataset=train_data,
            # The softmax loss cannot be computed on scored eval pairs, so the Trainer does not get them then.
            eval_dataset=None if loss.label_kind == "class" else eval_data,
            processing_class=tokenizer,
            loss=loss,
            callbacks=[averaging] if averaging else None,
        )
    except ValueError as err:
        # The Trainer checks every row up front; say which of the user's sources the row is in.
        message = str(err)
        source = eval_name if message.startswith("eval_dataset") else train_name
        if "outside the score range" in message:
            message += " Pass --score-range LOW,HIGH to match the data."
        raise ValueError(f"{source}: {message}") from None
    return trainer, averaging, start


def _train(
    args: argparse.Namespace, trainer: Any, run: Any, recipe: Recipe, averaging: Any, start: Any, eval_data: Any
) -> tuple[list[str], dict[str, float] | None]:
    """Train (resuming a stopped run), then the recipe's end (`end_training`): (what it did, the final --eval
    metrics)."""
    output_dir = trainer.args.output_dir
    resume_from = run.start()
    selection_checkpoints = checkpoint_folders(output_dir) if trainer.is_world_process_zero() else None
    trainer.train(resume_from_checkpoint=resume_from)
    lines, after = end_training(
        trainer, recipe, averaging, start, lambda: measure(trainer, eval_data), lambda m: headline(m)[1]
    )
    if selection_checkpoints is not None and recipe.select_best and not args.save_steps:
        remove_checkpoints(output_dir, selection_checkpoints)
    return lines, after or measure(trainer, eval_data)


def _save(trainer: Any, output_dir: str, facts: dict[str, Any]) -> None:
    """Save the model, with hf-siamese's model card (not Trainer's) written by the main process."""
    from ..training.trainer import SiameseTrainer

    with quiet_progress_bars():
        trainer.save_model(output_dir)
        if trainer.is_world_process_zero() and "create_model_card" in vars(SiameseTrainer):
            trainer.create_model_card(**facts)


def _settings(args: argparse.Namespace, model: str, train_data: Any, eval_data: Any, processes: int) -> dict[str, Any]:
    """What the run folder records and compares: every option that changes the model, the data's fingerprints."""
    options = {key: value for key, value in vars(args).items() if key not in _NOT_SETTINGS}
    for key in ("train", "eval"):  # a local file is the same from any working folder
        options[key] = os.path.abspath(options[key]) if options[key] and os.path.exists(options[key]) else options[key]
    eval_rows = data_fingerprint(eval_data) if hasattr(eval_data, "column_names") else None  # a BEIR set: its path
    model = os.path.abspath(model) if os.path.exists(model) else model
    return run_settings(options, model=model, train_data=data_fingerprint(train_data), eval_data=eval_rows,
                        processes=processes)  # fmt: skip


# Options that change where the model goes or what is printed, not the model.
_NOT_SETTINGS = {"handler", "command", "output_dir", "overwrite", "push_to_hub", "logging_steps"}


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """print() for processes other than the main one."""
