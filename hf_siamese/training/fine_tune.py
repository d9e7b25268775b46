"""Fine-tuning a bi-encoder from its settings in one call (`fine_tune`, what `hf-siamese train` runs), and its steps
around `SiameseTrainer` a script can take alone: the model to train from an encoder, the before/after measurement on
the eval set, the push to the Hub.

    sets = read_training_sets("pairs.jsonl", eval="sts-dev.csv")
    objective = choose_objective(sets.train, loss="cosine")
    recipe = resolve_recipe(None, objective.loss.label_kind, sets.eval)
    result = fine_tune(sets, objective, recipe, {"output_dir": "out", "per_device_train_batch_size": 32},
                       model="sentence-transformers/all-MiniLM-L6-v2")
    print(result.before, result.after)
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .recipe import Recipe, checkpoint_folders, end_training, remove_checkpoints, selection_arguments
from .train_report import NO_EVAL_HINT, card_facts, describe_loss, headline, summary_lines


@dataclasses.dataclass
class FineTuneResult:
    """What `fine_tune` made: the trained `model` (saved in `output_dir`), the headline eval metrics `before` and
    `after` (None without an eval set), how the recipe chose the final weights (`final_weights`, lines), the closing
    `summary` (lines: scores, where the model went, how to load it), and whether this is the main process (the one
    that reports and writes)."""

    model: Any
    output_dir: str
    before: dict[str, float] | None
    after: dict[str, float] | None
    final_weights: list[str]
    summary: list[str]
    main_process: bool


def fine_tune(
    sets: Any,
    objective: Any,
    recipe: Recipe,
    arguments: Mapping[str, Any],
    *,
    model: str,
    finetuned_from: str | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    run_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    replace_runs: bool = False,
    push_to_hub: str | None = None,
    made_by: str = "fine_tune",
    option_names: Mapping[str, str] | None = None,
    report: Callable[[str], None] | None = None,
    kind: str = "dense",
) -> FineTuneResult:
    """Fine-tune the encoder or bi-encoder `model` on `sets` (`data.training_sets.TrainingSets`) with `objective`
    (`choose_objective`) and `recipe` (`resolve_recipe`), save it with its model card, optionally push it.

    Args:
        arguments: `SiameseTrainingArguments` keywords (`output_dir` among them); the recipe sets
            `num_train_epochs` and, for `best`, the evaluation and checkpoint selection (`selection_arguments`).
        finetuned_from: the base model the card names (default: `model`).
        pooling: the sentence embedding's pooling (`encoder_to_train`: default the checkpoint's, else mean).
        normalize: unit-length embeddings (default the checkpoint's, else True).
        max_seq_length: tokens per text (default the encoder's).
        run_options: the settings the run folder records and compares (`open_run_folder`: the same settings
            resume a stopped run, others are refused unless `overwrite`; `replace_runs` replaces an earlier run).
        push_to_hub: a Hub repository id to upload the model and its card to.
        made_by: what the card and the commit name as the maker (e.g. "`hf-siamese train`").
        option_names: the caller's names of `score_range` and `push_to_hub` for errors.
        report: called with each progress line on the main process (the data, the recipe, the score before, how
            the final weights were chosen).
        kind: "dense" (a `SiameseBertModel`), "sparse" (a SPLADE `SparseSiameseModel` from the same encoder) or
            "multi-vector" (a ColBERT-style `MultiVectorModel`, measured by exact MaxSim on a BEIR eval set).

    Raises:
        ValueError: a row the trainer refuses (naming its source), a run folder in the way, a bad model source.
    """
    from transformers import set_seed

    from ..formats.loading import check_model_source
    from .arguments import SiameseTrainingArguments
    from .run_folder import open_run_folder

    names = {"score_range": "score_range", "push_to_hub": "push_to_hub", **(option_names or {})}
    model_path = check_model_source(model)
    steps = {key: arguments.get(f"{key}_steps") if arguments.get(f"{key}_strategy") == "steps" else None
             for key in ("eval", "save")}  # fmt: skip
    selection = selection_arguments(recipe, steps["eval"], steps["save"])
    training_args = SiameseTrainingArguments(**{**arguments, "num_train_epochs": recipe.epochs, **selection})
    settings = _settings(run_options or {}, model_path, objective.train_data, sets.eval, training_args.world_size)
    run = open_run_folder(training_args, settings, overwrite=overwrite, replace_runs=replace_runs)
    set_seed(training_args.seed)  # before building the model: a classifier head is initialised at random
    encoder, tokenizer = encoder_to_train(
        model_path, pooling=pooling, normalize=normalize, max_seq_length=max_seq_length, kind=kind,
        **objective.head_kwargs,
    )  # fmt: skip
    trainer, averaging, start = _make_trainer(encoder, tokenizer, training_args, recipe, objective.loss, sets, names)
    main_process = trainer.is_world_process_zero()
    show = report if report is not None and main_process else _silent
    rows, loss = objective.train_data, objective.loss
    show(f"{sets.train_name} ({len(rows)} rows), loss {describe_loss(loss)}, base model {model_path}")
    show(recipe.describe() + (NO_EVAL_HINT if sets.eval is None and loss.label_kind == "score" else ""))
    before = measure(trainer, sets.eval)
    if before:
        label, value = headline(before)
        show(f"{label} x100 on {sets.eval_name} before training: {value:.2f}")
    if run.note:
        show(run.note)
    lines, after = _train(trainer, run, recipe, averaging, start, sets.eval, keep_checkpoints=bool(steps["save"]))
    for line in lines:
        show(line)
    made = f"{made_by} ({recipe.name} recipe) " + "; ".join(lines) if lines else None
    facts = card_facts(finetuned_from or model_path, None if sets.demo else sets.train_name, after, made)
    _save(trainer, training_args.output_dir, facts)
    run.finish()
    if push_to_hub is not None:
        message = f"{made_by.strip('`')}: {objective.loss_name} loss on {sets.train_name}"
        push_trained(trainer, push_to_hub, message, facts, option=names["push_to_hub"])
    trained = f"{sets.train_name}: {len(rows)} rows, {recipe.epochs:g} epoch(s), loss {describe_loss(loss)}"
    summary = summary_lines(
        model_path, trained, (before, after), (sets.eval, sets.eval_name), training_args.output_dir, push_to_hub
    )
    return FineTuneResult(trainer.model, training_args.output_dir, before, after, lines, summary, main_process)


def _make_trainer(
    model: Any, tokenizer: Any, training_args: Any, recipe: Recipe, loss: Any, sets: Any, names: Mapping[str, str]
) -> tuple[Any, Any, dict[str, Any] | None]:
    """(the `SiameseTrainer`, the recipe's weight-averaging callback or None, the weights to interpolate from or
    None); a row the trainer refuses is named by the user's source it is in."""
    from .averaging import WeightAveragingCallback
    from .trainer import SiameseTrainer

    start = {n: p.detach().clone() for n, p in model.named_parameters()} if recipe.interpolate is not None else None
    # The best recipe keeps the best of the epochs (the mean is compared with it where both exist).
    averaging = WeightAveragingCallback(load_at_end=not recipe.select_best) if recipe.average else None
    try:
        trainer = SiameseTrainer(
            model=model,
            args=training_args,
            train_dataset=sets.train,
            # The softmax loss cannot be computed on scored eval pairs, so the Trainer does not get them then.
            eval_dataset=None if loss.label_kind == "class" else sets.eval,
            processing_class=tokenizer,
            loss=loss,
            callbacks=[averaging] if averaging else None,
        )
    except ValueError as err:
        # The Trainer checks every row up front; say which of the user's sources the row is in.
        message = str(err)
        source = sets.eval_name if message.startswith("eval_dataset") else sets.train_name
        if "outside the score range" in message:
            message += f" Pass {names['score_range']} LOW,HIGH to match the data."
        raise ValueError(f"{source}: {message}") from None
    return trainer, averaging, start


def _train(
    trainer: Any, run: Any, recipe: Recipe, averaging: Any, start: Any, eval_data: Any, keep_checkpoints: bool
) -> tuple[list[str], dict[str, float] | None]:
    """Train (resuming a stopped run), then the recipe's end (`end_training`): (what it did, the final eval
    metrics). The best recipe's selection checkpoints are removed unless the caller asked for checkpoints."""
    output_dir = trainer.args.output_dir
    resume_from = run.start()
    selection_checkpoints = checkpoint_folders(output_dir) if trainer.is_world_process_zero() else None
    trainer.train(resume_from_checkpoint=resume_from)
    lines, after = end_training(
        trainer, recipe, averaging, start, lambda: measure(trainer, eval_data), lambda m: headline(m)[1]
    )
    if selection_checkpoints is not None and recipe.select_best and not keep_checkpoints:
        remove_checkpoints(output_dir, selection_checkpoints)
    return lines, after or measure(trainer, eval_data)


def _save(trainer: Any, output_dir: str, facts: dict[str, Any]) -> None:
    """Save the model, with hf-siamese's model card (not Trainer's) written by the main process."""
    from .trainer import SiameseTrainer

    trainer.save_model(output_dir)
    from ..retrieval.ranking.maxsim import is_multivector_model

    # hf-siamese's card describes dense and sparse models; a multi-vector model's folder goes without one.
    multivector = is_multivector_model(trainer.accelerator.unwrap_model(trainer.model))
    if trainer.is_world_process_zero() and "create_model_card" in vars(SiameseTrainer) and not multivector:
        trainer.create_model_card(**facts)


def _settings(
    options: Mapping[str, Any], model: str, train_data: Any, eval_data: Any, processes: int
) -> dict[str, Any]:
    """What the run folder records and compares: the caller's options, the model, the data's fingerprints."""
    import os

    from .run_folder import data_fingerprint, run_settings

    eval_rows = data_fingerprint(eval_data) if hasattr(eval_data, "column_names") else None  # a BEIR set: its path
    model = os.path.abspath(model) if os.path.exists(model) else model
    return run_settings(options, model=model, train_data=data_fingerprint(train_data), eval_data=eval_rows,
                        processes=processes)  # fmt: skip


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """The report of processes other than the main one."""


def encoder_to_train(
    model_path: str,
    *,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    kind: str = "dense",
    **head_kwargs: Any,
) -> tuple[Any, Any]:
    """(`SiameseBertModel`, or for `kind="sparse"` a SPLADE `SparseSiameseModel`, for `kind="multi-vector"` a
    `MultiVectorModel` (ColBERT's defaults), tokenizer) to fine-tune from the encoder or bi-encoder at `model_path`:
    `pooling` and
    `normalize` as given, else the checkpoint's, else mean and normalized (`formats.loading.encoder_defaults`);
    `head_kwargs` (`label2id` / `num_labels`, `Objective.head_kwargs`) add a classifier head. The model's pad id is
    the tokenizer's where it has none (the Trainer would align them itself, with a warning that reads like a
    problem)."""
    from transformers import AutoTokenizer

    from ..formats.loading import encoder_defaults, source_max_seq_length
    from ..modeling.modeling_siamese import SiameseBertModel

    if kind in ("sparse", "multi-vector") and max_seq_length is None:  # a sentence-transformers source's own limit
        max_seq_length = source_max_seq_length(model_path)
    if kind == "sparse":  # SPLADE over the encoder's masked-language head (a new one where it has none)
        from ..modeling.modeling_sparse import SparseSiameseModel

        model = SparseSiameseModel.from_encoder(model_path, max_seq_length=max_seq_length)
        return model, AutoTokenizer.from_pretrained(model_path)
    if kind == "multi-vector":  # token vectors: a new projection over the encoder's token states
        from ..modeling.modeling_multivector import MultiVectorModel

        model = MultiVectorModel.from_encoder(model_path, max_seq_length=max_seq_length)
        return model, model.tokenizer
    if kind != "dense":
        raise ValueError(f"kind={kind!r}; accepted: dense, sparse, multi-vector")
    model = SiameseBertModel.from_encoder(
        model_path, **encoder_defaults(model_path, pooling, normalize), max_seq_length=max_seq_length, **head_kwargs
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # The encoder has no generation config: only the pad id matters.
    text_config = model.config.get_text_config()
    if getattr(text_config, "pad_token_id", None) is None and tokenizer.pad_token_id is not None:
        text_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def measure(trainer: Any, eval_data: Any) -> dict[str, float] | None:
    """The trainer's model on `eval_data`: retrieval metrics on a `RetrievalDataset`, STS metrics on scored pairs;
    None without eval data."""
    from ..data.beir import RetrievalDataset

    if eval_data is None:
        return None
    if isinstance(eval_data, RetrievalDataset):
        return trainer.retrieval_metrics(eval_data)
    return trainer.sts_metrics(eval_data)


def push_trained(
    trainer: Any, repo_id: str, commit_message: str, card_facts: dict[str, Any], option: str = "push_to_hub"
) -> None:
    """Upload the trained model to the Hub repository `repo_id` with its model card (`card_facts`); `option` is what
    the caller calls the push in errors."""
    push = getattr(trainer, "push_to_hub", None)
    if push is None:
        raise ValueError(f"{option}: this version of SiameseTrainer cannot push to the Hub")
    kwargs: dict[str, Any] = {"commit_message": commit_message}
    if "repo_id" in inspect.signature(push).parameters:
        kwargs["repo_id"] = repo_id
    push(**kwargs, **card_facts)


__all__ = ["FineTuneResult", "encoder_to_train", "fine_tune", "measure", "push_trained"]
