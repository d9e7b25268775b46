"""`hf-siamese train` (alias `demo`): fine-tune a sentence encoder and report Spearman before and after."""

from __future__ import annotations

import argparse
import inspect
import os
from typing import TYPE_CHECKING, Any

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
    infer_score_range,
    load_data,
    parse_columns,
    parse_labels,
    parse_score_range,
    quiet_progress_bars,
    scored_pairs_layout,
    shutdown_distributed,
    take,
)
from .train_report import NO_EVAL_HINT, card_facts, describe_loss, headline, load_snippet

if TYPE_CHECKING:
    import datasets


def _infer_loss(dataset: datasets.Dataset, source: str) -> str:
    """SiameseTrainer's rule (`trainer_data.default_loss`) on the columns of `dataset` (named `source` in errors)."""
    from ..data.columns import detect_layout
    from ..training.trainer_data import default_loss

    try:
        layout = detect_layout(dataset.column_names)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    return default_loss(None if layout.label is None else dataset[0][layout.label])


def _as_scores(dataset: datasets.Dataset, source: str, loss: str) -> datasets.Dataset:
    """Scores read from CSV under a column not named `score` arrive as text; score losses need numbers."""
    from ..data.columns import detect_layout

    layout = detect_layout(dataset.column_names)
    if layout.label is None:
        raise ValueError(f"--loss {loss} needs a score column; {source} has columns {dataset.column_names}")
    values = dataset[layout.label]
    if all(isinstance(v, float) for v in values):
        return dataset
    if any(isinstance(v, list) for v in values):  # a teacher's score lists: the collator checks them row by row
        if len(layout.texts) < 3:
            raise ValueError(
                f"--loss {loss} with score lists needs (anchor, positive, negative...) rows; {source} has columns "
                f"{dataset.column_names}"
            )
        return dataset
    scores = []
    for index, value in enumerate(values):
        try:
            scores.append(float(value))
        except (TypeError, ValueError):
            raise ValueError(
                f"{source}, row {index + 1}: --loss {loss} needs numeric scores, column {layout.label!r} "
                f"holds {value!r}"
            ) from None
    return dataset.remove_columns(layout.label).add_column(layout.label, scores)


def _softmax_labels(dataset: datasets.Dataset, label2id: dict[str, int] | None) -> dict[str, Any]:
    """`from_encoder` arguments for the classifier head: from `--labels`, or from the labels found in the data."""
    from ..data.columns import detect_layout

    layout = detect_layout(dataset.column_names)
    if layout.label is None:
        raise ValueError(f"--loss softmax needs a label column; the data has columns {dataset.column_names}")
    if label2id is not None:
        return {"label2id": label2id}
    values = set(dataset[layout.label])
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"num_labels": max(values) + 1}
    # Sorted, so the same data always gives the same class ids.
    return {"label2id": {str(name): index for index, name in enumerate(sorted(map(str, values)))}}


def _measure(trainer: Any, eval_data: Any) -> dict[str, float] | None:
    from ..data.beir import RetrievalDataset

    if eval_data is None:
        return None
    if isinstance(eval_data, RetrievalDataset):
        return trainer.retrieval_metrics(eval_data)
    return trainer.sts_metrics(eval_data)


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


def _objective(args: argparse.Namespace, train_data: Any, train_name: str) -> tuple[str, Any, dict[str, Any], Any]:
    """(loss name, loss object, classifier-head arguments for `from_encoder`, train rows with numeric scores)."""
    from .. import losses

    score_range = parse_score_range(args.score_range)
    label2id = parse_labels(args.labels)
    loss_name = args.loss or _infer_loss(train_data, train_name)
    # A combination such as cosent+0.5*angle names several losses; each option below goes to those that take it.
    names = {name for name, _ in losses.parse_loss_spec(loss_name)}
    loss_kwargs: dict[str, Any] = {}
    head_kwargs: dict[str, Any] = {}
    if any(losses.LOSSES[name].label_kind == "score" for name in names):
        train_data = _as_scores(train_data, train_name, loss_name)
    if "cosine" in names and isinstance(train_data[0][_infer_label_column(train_data)], list):
        raise ValueError(
            f"--loss {loss_name}: cosine needs one score per row; {train_name} holds score lists (a teacher's, from "
            "'mine --teacher'): train them with --loss margin_mse or list_distill"
        )
    if "cosine" in names:
        score_range = score_range or infer_score_range(train_data[_infer_label_column(train_data)], train_name)
        loss_kwargs["score_range"] = score_range
    elif score_range is not None:
        raise ValueError(f"--score-range applies to --loss cosine, not {loss_name}")
    if "scored_mnr" in names:
        if args.positive_threshold is None:
            raise ValueError(
                f"--loss {loss_name} needs --positive-threshold T: pairs scoring at least T are the positives of "
                "scored_mnr (e.g. 4 on a 0-5 scale)"
            )
        loss_kwargs["threshold"] = args.positive_threshold
    elif args.positive_threshold is not None:
        raise ValueError(f"--positive-threshold applies to --loss scored_mnr, not {loss_name}")
    if "softmax" in names:
        head_kwargs = _softmax_labels(train_data, label2id)
        if args.eval_steps:
            # The Trainer's evaluation computes the training loss on the eval rows, and scored pairs have no
            # class labels; the before/after Spearman is computed all the same.
            raise ValueError("--eval-steps does not work with --loss softmax (scored eval pairs have no classes)")
    elif label2id is not None:
        raise ValueError(f"--labels applies to --loss softmax, not {loss_name}")
    if "margin_mse" in names and args.margin_scale is not None:
        loss_kwargs["scale"] = args.margin_scale
    elif args.margin_scale is not None:
        raise ValueError(f"--margin-scale applies to --loss margin_mse, not {loss_name}")
    if "mnr" in names:
        loss_kwargs["gather_across_processes"] = args.gather_across_processes
    elif args.gather_across_processes:
        raise ValueError(f"--gather-across-processes applies to --loss mnr, not {loss_name}")
    return loss_name, losses.get_loss(loss_name, **loss_kwargs), head_kwargs, train_data


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
    from transformers import AutoTokenizer, set_seed

    from ..formats.loading import check_model_source, encoder_defaults
    from ..modeling.modeling_siamese import SiameseBertModel
    from ..training.averaging import WeightAveragingCallback
    from ..training.trainer import SiameseTrainer

    if args.push_to_hub is not None and "/" not in args.push_to_hub.strip("/"):
        raise ValueError(f"--push-to-hub {args.push_to_hub!r}: expected a repository id OWNER/NAME")
    demo = args.train is None
    train_data, train_name, eval_data, eval_name = _training_data(args)
    if args.interpolate == "auto" and eval_data is None:
        raise ValueError("--interpolate auto chooses ALPHA by the score on --eval; give --eval, or a number for ALPHA")
    loss_name, loss, head_kwargs, train_data = _objective(args, train_data, train_name)
    recipe = resolve_recipe(
        args.recipe,
        loss.label_kind,
        eval_data,
        epochs=args.epochs,
        average_weights=args.average_weights,
        interpolate=args.interpolate,
    )

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
        model = SiameseBertModel.from_encoder(
            model_path,
            **encoder_defaults(model_path, args.pooling, args.normalize),
            max_seq_length=args.max_seq_length,
            **head_kwargs,
        )
        tokenizer = AutoTokenizer.from_pretrained(model_path)

    # The Trainer would align these itself, with a warning that reads like a problem; the encoder has no
    # generation config, only the pad id matters.
    text_config = model.config.get_text_config()
    if getattr(text_config, "pad_token_id", None) is None and tokenizer.pad_token_id is not None:
        text_config.pad_token_id = tokenizer.pad_token_id

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
    main_process = trainer.is_world_process_zero()
    show = print if main_process else _silent

    show(f"{PROG} train: {train_name} ({len(train_data)} rows), loss {describe_loss(loss)}, base model {model_path}")
    hint = NO_EVAL_HINT if eval_data is None and loss.label_kind == "score" else ""
    show(f"{PROG} train: {recipe.describe()}{hint}")
    before = _measure(trainer, eval_data)
    if before:
        label, value = headline(before)
        show(f"{PROG} train: {label} x100 on {eval_name} before training: {value:.2f}")
    if run.note:
        show(f"{PROG} train: {run.note}")
    resume_from = run.start()
    selection_checkpoints = checkpoint_folders(output_dir) if main_process else None
    trainer.train(resume_from_checkpoint=resume_from)
    lines, after = end_training(
        trainer, recipe, averaging, start, lambda: _measure(trainer, eval_data), lambda m: headline(m)[1]
    )
    for line in lines:
        show(f"{PROG} train: {line}")
    if selection_checkpoints is not None and recipe.select_best and not args.save_steps:
        remove_checkpoints(output_dir, selection_checkpoints)
    after = after or _measure(trainer, eval_data)
    facts = card_facts(args, demo)
    if after:
        # The card states the final weights' scores (the trainer's log holds those of the epochs or the checkpoint).
        facts["eval_results"] = {f"eval_{key}": value for key, value in after.items()}
    if lines:
        facts["final_weights"] = f"`{PROG} train` ({recipe.name} recipe) " + "; ".join(lines)
    with quiet_progress_bars():
        trainer.save_model(output_dir)
        if main_process and "create_model_card" in vars(SiameseTrainer):  # hf-siamese's own card, not Trainer's
            trainer.create_model_card(**facts)
    run.finish()

    pushed = None
    if args.push_to_hub is not None:
        push = getattr(trainer, "push_to_hub", None)
        if push is None:
            raise ValueError("--push-to-hub: this version of SiameseTrainer cannot push to the Hub")
        push_kwargs: dict[str, Any] = {"commit_message": f"{PROG} train: {loss_name} loss on {train_name}"}
        if "repo_id" in inspect.signature(push).parameters:
            push_kwargs["repo_id"] = args.push_to_hub
        with quiet_progress_bars():
            push(**push_kwargs, **facts)
        pushed = args.push_to_hub

    show("")
    show("=" * 80)
    show(f"Trained {model_path}")
    show(f"  on      {train_name}: {len(train_data)} rows, {recipe.epochs:g} epoch(s), loss {describe_loss(loss)}")
    if before and after:
        (label, old), (_, new) = headline(before), headline(after)
        unit = "queries" if not hasattr(eval_data, "column_names") else "pairs"
        show(f"  eval    {eval_name}: {len(eval_data)} {unit}")
        show(f"          {label} x100: before {old:.2f}  ->  after {new:.2f}  ({new - old:+.2f})")
    show(f"  saved   {os.path.abspath(output_dir)}")
    if pushed:
        from huggingface_hub import constants

        show(f"  pushed  {constants.ENDPOINT}/{pushed}")
    show("Load it with:")
    show(load_snippet(pushed or output_dir))
    show("=" * 80)
    shutdown_distributed()
    return 0


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


def _infer_label_column(dataset: datasets.Dataset) -> str:
    from ..data.columns import detect_layout

    label = detect_layout(dataset.column_names).label
    assert label is not None  # _as_scores has checked it
    return label


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """print() for processes other than the main one."""
