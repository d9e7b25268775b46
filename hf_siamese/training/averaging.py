"""Weight averaging over a training run: the mean of the weights at the end of several epochs (or every N steps).

Fine-tuning an already trained encoder on a few thousand pairs moves it a little each epoch, and the epochs' weights
sit on the sides of one wide basin: their mean usually scores at least as well as the best of them, without choosing
one (Izmailov et al. 2018, "Averaging Weights Leads to Wider Optima and Better Generalization"; Wortsman et al. 2022,
"Model soups"). `WeightAveragingCallback` keeps a running mean of the model's floating-point weights and, at the end
of training, puts that mean into the model.

    trainer = SiameseTrainer(model=model, args=args, train_dataset=train, callbacks=[WeightAveragingCallback()])
    trainer.train()  # the model now holds the mean of its weights at the end of every epoch

With `load_best_model_at_end` and `load_at_end=False`, `keep_average_if_better(trainer, callback)` keeps whichever of
the mean and the best checkpoint scores higher on the eval set.

`interpolate_weights` (and `interpolate_toward`, in place) moves a fine-tuned model part of the way back to the
weights it started from (WiSE-FT, Wortsman et al. 2022, "Robust fine-tuning of zero-shot models"): between a general
encoder and its fine-tuned copy lie models that keep more of what the general one knew, often at no cost on the
fine-tuning task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class WeightAveragingCallback(TrainerCallback):
    """Average the model's weights over the end of every epoch (or every `every_steps` optimizer steps).

    Args:
        start_epoch: the first epoch whose end counts (1 = all epochs); earlier snapshots are skipped.
        every_steps: snapshot every this many optimizer steps instead of at epoch ends (0: epoch ends).
        load_at_end: put the average into the model when training ends. It runs after transformers'
            `load_best_model_at_end`, so with both the average wins; pass False to keep the best checkpoint and use
            `average_state_dict()` / `load_average(model)` yourself (e.g. to compare both on a dev set).

    `mean_score` is the mean weights' eval score once `keep_average_if_better` has compared them (else None).

    The average is kept in float32 on the parameters' device, one copy of the floating-point weights (buffers such
    as position ids are left as they are). It runs on the model of one process: under DDP every process holds the
    same weights, so each keeps the same average; sharded training (FSDP, DeepSpeed ZeRO-3) is not supported.
    """

    def __init__(self, start_epoch: int = 1, every_steps: int = 0, load_at_end: bool = True) -> None:
        if not isinstance(start_epoch, int) or isinstance(start_epoch, bool) or start_epoch < 1:
            raise ValueError(f"start_epoch must be an integer >= 1 (1 averages every epoch), got {start_epoch!r}")
        if not isinstance(every_steps, int) or isinstance(every_steps, bool) or every_steps < 0:
            raise ValueError(f"every_steps must be an integer >= 0 (0 snapshots at epoch ends), got {every_steps!r}")
        self.start_epoch = start_epoch
        self.every_steps = every_steps
        self.load_at_end = load_at_end
        self.count = 0
        self.mean_score: float | None = None
        self._sum: dict[str, torch.Tensor] = {}

    # -------------------------------------------------------------------------------------------------- averaging

    def add_snapshot(self, model: torch.nn.Module) -> None:
        """Add the model's current weights to the running mean."""
        with torch.no_grad():
            for name, param in model.named_parameters():
                if not param.is_floating_point():
                    continue
                if name not in self._sum:
                    self._sum[name] = torch.zeros_like(param, dtype=torch.float32)
                self._sum[name].add_(param.detach().float())
        self.count += 1

    def average_state_dict(self) -> dict[str, torch.Tensor]:
        """The mean of the snapshots so far, parameter name -> float32 tensor."""
        if self.count == 0:
            raise RuntimeError(
                "WeightAveragingCallback has no snapshot to average: training ended before the end of epoch "
                f"{self.start_epoch} (start_epoch) and before any every_steps={self.every_steps} step"
            )
        return {name: total / self.count for name, total in self._sum.items()}

    def load_average(self, model: torch.nn.Module) -> None:
        """Copy the average into `model`'s parameters (each in its own dtype)."""
        average = self.average_state_dict()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name in average:
                    param.copy_(average[name].to(param.dtype))

    # -------------------------------------------------------------------------------------------------- callbacks

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.count = 0
        self._sum = {}

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.every_steps and state.global_step % self.every_steps == 0 and _epoch_number(state) >= self.start_epoch:
            self.add_snapshot(kwargs["model"])

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self.every_steps and round(state.epoch or 0) >= self.start_epoch:
            self.add_snapshot(kwargs["model"])

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.load_at_end:
            self.load_average(kwargs["model"])


def _epoch_number(state: TrainerState) -> int:
    """The 1-based epoch a step belongs to (state.epoch runs from just above 0 to 1.0 over the first epoch)."""
    return max(1, math.ceil(state.epoch or 0))


def interpolate_weights(
    model: torch.nn.Module, start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor], alpha: float
) -> None:
    """Set `model`'s floating-point parameters to `(1 - alpha) * start + alpha * end`, name by name.

    `start` and `end` are state dicts of the same architecture (e.g. the general encoder's weights before fine-tuning
    and after it); alpha 1 gives `end`, 0 gives `start`. The sum is taken in float32 and stored in each parameter's
    dtype, on the parameter's device (`start` and `end` may live elsewhere, e.g. on the CPU). Buffers are left as
    they are. `end` may be the model's own parameters: each mix is computed before it is written.
    """
    params = _checked(model, alpha, start=start, end=end)
    with torch.no_grad():
        for name, param in params.items():
            low, high = (weights[name].to(device=param.device, dtype=torch.float32) for weights in (start, end))
            param.copy_(torch.lerp(low, high, float(alpha)).to(param.dtype))


def interpolate_toward(model: torch.nn.Module, start: Mapping[str, torch.Tensor], alpha: float) -> None:
    """Move `model` toward `start` in place: its floating-point parameters become `(1 - alpha) * start + alpha *
    <their current value>` (`interpolate_weights` with the model's own parameters as `end`, without copying them)."""
    interpolate_weights(model, start, dict(model.named_parameters()), alpha)


def _checked(model: torch.nn.Module, alpha: float, **weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's floating-point parameters, after checking alpha and that every state dict in `weights` has each of
    them with its shape."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be a number between 0 and 1 (1 keeps `end`, 0 gives `start`), got {alpha!r}")
    params = {name: p for name, p in model.named_parameters() if p.is_floating_point()}
    for label, state in weights.items():
        missing = sorted(set(params) - set(state))
        if missing:
            raise KeyError(f"`{label}` has no weights for {len(missing)} parameter(s) of the model, e.g. {missing[:3]}")
        wrong = [n for n, p in params.items() if tuple(state[n].shape) != tuple(p.shape)]
        if wrong:
            raise ValueError(
                f"`{label}` weight {wrong[0]!r} has shape {tuple(state[wrong[0]].shape)}, the model's is "
                f"{tuple(params[wrong[0]].shape)}"
            )
    return params


def parse_interpolation(text: str) -> float | str:
    """A command-line interpolation choice: "auto" (choose alpha on an eval set) or a number above 0 and at most 1
    (the share of the fine-tuned weights; 1 turns the interpolation off). Raises ValueError naming `text`."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 1.0:  # NaN fails too
        raise ValueError(
            f"expected a number above 0 and at most 1 (the share of the fine-tuned weights) or auto, got {text!r}"
        )
    return value


def keep_average_if_better(trainer: Any, averaging: WeightAveragingCallback) -> bool:
    """After `trainer.train()` with `load_best_model_at_end`, put `averaging`'s mean weights into the model and keep
    them if they score better on the trainer's eval set (its `metric_for_best_model`) than the best checkpoint did;
    otherwise restore the best checkpoint's weights. Returns True where the mean was kept; the mean's score is left in
    `averaging.mean_score`."""
    args, best = trainer.args, trainer.state.best_metric
    if best is None or not args.metric_for_best_model:
        raise ValueError(
            "keep_average_if_better compares with the best checkpoint's eval score: train with an eval_dataset, "
            f"load_best_model_at_end=True and metric_for_best_model (got metric_for_best_model="
            f"{args.metric_for_best_model!r}, best_metric={best!r})"
        )
    model = trainer.model
    best_weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
    averaging.load_average(model)
    key = args.metric_for_best_model
    key = key if key.startswith("eval_") else f"eval_{key}"
    score = averaging.mean_score = trainer.evaluate()[key]
    if score > best if args.greater_is_better else score < best:
        return True
    model.load_state_dict(best_weights)
    return False


INTERPOLATION_ALPHAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


def choose_interpolation(
    model: torch.nn.Module,
    start: Mapping[str, torch.Tensor],
    score: Callable[[], float],
    alphas: Sequence[float] = INTERPOLATION_ALPHAS,
) -> tuple[float, dict[float, float]]:
    """Move a fine-tuned `model` toward `start` by the alpha that scores best (WiSE-FT with alpha chosen on dev).

    For each alpha, `interpolate_weights(model, start, <the model's weights now>, alpha)` and call `score()` (higher is
    better, e.g. STS Spearman on a dev set). The model is left at the best alpha; ties go to the larger one (closer to
    the fine-tuned weights). Returns that alpha and every alpha's score.
    """
    if not alphas:
        raise ValueError("choose_interpolation needs at least one alpha, got an empty sequence")
    for alpha in alphas:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
            raise ValueError(f"every alpha must be a number between 0 and 1, got {alpha!r} in {list(alphas)}")
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.is_floating_point()}
    scores: dict[float, float] = {}
    for alpha in alphas:
        interpolate_weights(model, start, trained, alpha)
        scores[float(alpha)] = float(score())
    best = max(scores, key=lambda a: (scores[a], a))
    interpolate_weights(model, start, trained, best)
    return best, scores
