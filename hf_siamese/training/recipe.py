"""How a training run trains and ends (`hf-siamese train` asks this module): the `best` recipe for scored pairs, or a
`plain` run. Python users call `resolve_recipe`, `selection_arguments` and `end_training` the same way.

`best` is the recipe study's leading STSb stage (`benchmarks/bench_sts_recipes.py`, recipe
`cosine-4ep-lr5e-5-avg-wise`): four epochs at lr 5e-5, evaluated on `--eval` after every epoch; the model ends with the
best epoch's weights or the mean of the epoch-end weights, whichever scores higher on `--eval`, then moves back toward
the base model's weights by the alpha that scores best on `--eval` (WiSE-FT). It is the default where it applies: a
score loss (cosine, CoSENT, AnglE, scored MNR) with scored `--eval` pairs, the built-in demo included. `plain` trains
`--epochs` (default 1; 2 for a sparse or multi-vector model, `KIND_PLAIN_EPOCHS`) and keeps the last weights, unless
`--average-weights` / `--interpolate` say otherwise.
Options given explicitly (`--epochs`, `--[no-]average-weights`, `--interpolate`) override the recipe's part.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RECIPES = ("best", "plain")
BEST_EPOCHS = 4.0
PLAIN_EPOCHS = 1.0
# A kind's own plain default: a sparse model's new head needs more than one pass. On 162 held-out SciFact train claims,
# one mined negative a row, two epochs scored 71.31 and 72.34 nDCG@10 against one epoch's 67.24 and 68.70 (seeds 42
# and 7; benchmarks/RESULTS.md).
KIND_PLAIN_EPOCHS = {"sparse": 2.0, "multi-vector": 2.0}


@dataclass(frozen=True)
class Recipe:
    """What a `hf-siamese train` run does, resolved from `--recipe`, the loss, the eval data and explicit options."""

    name: str  # "best" or "plain"
    epochs: float
    select_best: bool  # evaluate on --eval and keep the best checkpoint (transformers' load_best_model_at_end)
    average: bool  # the mean of the epoch-end weights: kept if it scores better (best), or always (plain)
    interpolate: float | str | None  # WiSE-FT alpha, "auto" (chosen on --eval), or None
    metric: str | None  # the eval metric that selects: spearman_cosine, or ndcg@10 on a retrieval set

    def describe(self) -> str:
        parts = [f"{self.epochs:g} epoch(s)"]
        if self.select_best:
            parts.append("best epoch or mean of the epoch ends" if self.average else "best epoch")
        elif self.average:
            parts.append("mean of the epoch ends")
        if self.interpolate is not None:
            parts.append(f"interpolation toward the base ({self.interpolate})")
        return f"recipe {self.name}: " + ", ".join(parts)


def resolve_recipe(
    name: str | None,
    label_kind: str | None,
    eval_data: Any,
    *,
    epochs: float | None = None,
    average_weights: bool | None = None,
    interpolate: float | str | None = None,
    kind: str = "dense",
) -> Recipe:
    """The run's recipe: `name` (`--recipe`; None: `best` for a score loss with scored `eval_data` pairs, else
    `plain`), with the explicitly given `epochs`, `average_weights` and `interpolate` on top (None: the recipe's;
    a plain run of a model `kind` in `KIND_PLAIN_EPOCHS` trains that many epochs)."""
    retrieval = eval_data is not None and not hasattr(eval_data, "column_names")
    if name is None:
        name = "best" if label_kind == "score" and eval_data is not None and not retrieval else "plain"
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r}: expected one of {', '.join(RECIPES)}")
    if name == "best" and eval_data is None:
        raise ValueError("--recipe best chooses the epoch, the mean and the interpolation on --eval; give --eval")
    if name == "best" and label_kind == "class":
        raise ValueError(
            "--recipe best evaluates the training loss on --eval after every epoch, which --loss softmax cannot "
            "(scored eval pairs have no classes); use --recipe plain"
        )
    best = name == "best"
    average = average_weights if average_weights is not None else best
    interpolate = interpolate if interpolate is not None else ("auto" if best else None)
    plain_epochs = KIND_PLAIN_EPOCHS.get(kind, PLAIN_EPOCHS)
    epochs = epochs if epochs is not None else (BEST_EPOCHS if best else plain_epochs)
    metric = ("ndcg@10" if retrieval else "spearman_cosine") if best else None
    return Recipe(name, epochs, best, average, interpolate, metric)


def selection_arguments(recipe: Recipe, eval_steps: int | None = None, save_steps: int | None = None) -> dict[str, Any]:
    """TrainingArguments keywords that evaluate on --eval and keep the best checkpoint (empty for `plain`).

    Every epoch by default; every `--eval-steps` (or `--save-steps`) steps where given. Without `--save-steps` the
    checkpoints hold only the model and are removed after training (`remove_checkpoints`). There is no
    `save_total_limit`: transformers' rotation would also delete checkpoints of earlier runs in the same folder."""
    if not recipe.select_best:
        return {}
    every = eval_steps or save_steps
    if save_steps and save_steps % every:
        raise ValueError(
            f"--save-steps {save_steps} with --eval-steps {every}: the best checkpoint is chosen at the "
            "evaluations, so --save-steps must be a multiple of --eval-steps (or pass --recipe plain)"
        )
    strategy = "steps" if every else "epoch"
    return {
        "eval_strategy": strategy,
        "eval_steps": every,
        "save_strategy": strategy,
        "save_steps": save_steps or every or 500,
        "save_only_model": not save_steps,  # checkpoints the user asked for can resume training
        "load_best_model_at_end": True,
        "metric_for_best_model": recipe.metric,
        "greater_is_better": True,
    }


def checkpoint_folders(output_dir: str) -> set[str]:
    """The `checkpoint-N` folders in `output_dir` now."""
    if not os.path.isdir(output_dir):
        return set()
    return {name for name in os.listdir(output_dir) if name.startswith("checkpoint-")}


def remove_checkpoints(output_dir: str, before: set[str]) -> None:
    """Remove the checkpoint folders written since `before` (the best recipe's selection checkpoints)."""
    for name in checkpoint_folders(output_dir) - before:
        shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)


def end_training(
    trainer: Any,
    recipe: Recipe,
    averaging: Any,
    start: dict[str, Any] | None,
    measure: Callable[[], dict[str, float]],
    headline: Callable[[dict[str, float]], float],
) -> tuple[list[str], dict[str, float] | None]:
    """After `trainer.train()`: the best recipe's choice between the best checkpoint and the mean, then the
    interpolation. `measure()` scores the model on --eval, `headline` picks the number that decides.
    Returns what was done (lines to print) and the --eval metrics of the final model where they were measured."""
    from .averaging import keep_average_if_better

    lines = []
    if recipe.select_best:
        best_epoch = _best_epoch(trainer.state)
        if averaging is not None and averaging.count:
            kept = keep_average_if_better(trainer, averaging)
            scores = f"{recipe.metric} {averaging.mean_score:.4f} vs {trainer.state.best_metric:.4f}"
            mean = f"the mean of the {averaging.count} epoch-end weights"
            lines.append(
                f"kept {mean} ({scores} for the best epoch, {best_epoch})"
                if kept
                else f"kept the best epoch ({best_epoch}); {mean} scored lower ({scores})"
            )
        else:
            lines.append(f"kept the best epoch ({best_epoch})")
    elif averaging is not None and averaging.count:
        lines.append(f"ended with the mean of the {averaging.count} epoch-end weights")
    after = None
    if start is not None:
        alpha, after = _interpolate(trainer.model, start, recipe.interpolate, measure, headline)
        lines.append(f"--interpolate {recipe.interpolate}: weights (1 - {alpha:g}) * base + {alpha:g} * trained")
    return lines, after


def _best_epoch(state: Any) -> str:
    for entry in state.log_history:
        if entry.get("step") == state.best_global_step and "epoch" in entry:
            return f"epoch {entry['epoch']:g}"
    return f"step {state.best_global_step}"


def _interpolate(
    model: Any,
    start: dict[str, Any],
    choice: float | str | None,
    measure: Callable[[], dict[str, float]],
    headline: Callable[[dict[str, float]], float],
) -> tuple[float, dict[str, float] | None]:
    """Move the trained model toward its starting weights: by `choice`, or, for "auto", by the alpha that scores
    highest on --eval (`choose_interpolation`). Returns the alpha and, for "auto", its eval metrics."""
    from .averaging import choose_interpolation, interpolate_toward

    if choice != "auto":
        interpolate_toward(model, start, float(choice))
        return float(choice), None
    measured: list[dict[str, float]] = []

    def score() -> float:
        measured.append(measure())
        return headline(measured[-1])

    alpha, scores = choose_interpolation(model, start, score)
    return alpha, measured[list(scores).index(alpha)]


__all__ = [
    "RECIPES",
    "Recipe",
    "checkpoint_folders",
    "end_training",
    "remove_checkpoints",
    "resolve_recipe",
    "selection_arguments",
]
