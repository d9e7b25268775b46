"""Training a reranker in one call (`train_reranker`, what `hf-siamese train-reranker` runs), the model it starts
from (`reranker_to_train`), and the losses it trains with on rows made from (query, positive) pairs.

`train_reranker` trains a one-output `CrossEncoder` on (query, positive, negatives...) tuples or (query, document,
label) pairs in a checkpoint folder beside the output, removed afterwards. With an evaluation set (a
`RerankingDataset`: a first stage's candidates of judged queries) every epoch reranks the candidates and the best
epoch's weights are kept. The model is saved in a staging folder and swapped into place whole
(`CrossEncoder.save_pretrained`, `storage.replace_folder`), so a failed run leaves an older model as it was.

    rows = reranker_training_rows(pairs, bi_encoder, corpus, num_negatives=5, random_negatives=2, output="tuples")
    dev = RerankingDataset.from_first_stage(read_beir("scifact", split="dev"), bi_encoder, 100)
    result = train_reranker("bert-base-uncased", rows, "reranker", eval_set=dev, eval_name="dev", report=print)

Rows mined from (query, positive) pairs hold the positive (first) and the negatives, and no label column, so they
train the registry's (`losses.LOSSES`) one-output losses that need no labels: `RERANKER_LOSSES`.
`choose_reranker_loss` picks the default for such rows and refuses the others, naming what is accepted.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..storage import exclusive_output, work_folder
from .losses import LOSSES, PAIRS, TUPLES, CrossEncoderLoss, default_loss, get_loss

DEFAULT_MAX_LENGTH = 256  # a new cross-encoder's tokens per (query, document) pair
EVAL_METRIC = "ndcg@10"  # what chooses the best epoch
# The losses rows made from (query, positive) pairs train: one score per pair, no label column needed (the positive
# is first, the negatives follow).
RERANKER_LOSSES = tuple(name for name, loss in LOSSES.items() if loss.num_labels == "1" and not loss.needs_labels)
# How errors name the settings, unless the caller names them otherwise (a command: its flags).
OPTION_NAMES = {
    "loss": "loss", "pos_weight": "pos_weight", "negatives": "num_negatives", "random_negatives": "random_negatives"
}  # fmt: skip


def reranker_row_shape(loss: str) -> str:
    """The rows a reranker trains on with `loss` (one of `RERANKER_LOSSES`) when they are made from (query,
    positive) pairs: `PAIRS` (query, document, 0/1 label) for a loss that reads pairs (bce), else `TUPLES` (query,
    positive, negative_1, ...), what the ranking losses compare."""
    return PAIRS if PAIRS in LOSSES[loss].shapes else TUPLES


def check_reranker_loss(
    loss: str | None, pos_weight: float | None = None, option_names: Mapping[str, str] | None = None
) -> None:
    """Refuse a `loss` that rows made from (query, positive) pairs cannot train (one that needs a teacher's scores
    or classes), and `pos_weight` with a loss other than bce, naming the value and what is accepted. `option_names`:
    the caller's names of `loss` and `pos_weight` in the messages (a command's flags)."""
    names = {**OPTION_NAMES, **(option_names or {})}
    if loss is not None and loss not in RERANKER_LOSSES:
        kind = LOSSES.get(loss)
        if kind is None:
            reason = "not a cross-encoder loss"
        elif kind.num_labels != "1":
            reason = "it trains a classifier of several outputs, and a reranker has one"
        else:
            reason = (
                "it reads a teacher's scores from a label column, which rows mined from (query, positive) pairs lack"
            )
        elsewhere = " (it trains with CrossEncoderTrainer on rows that hold its labels)" if kind is not None else ""
        raise ValueError(f"{names['loss']} {loss}: {reason}; accepted: {', '.join(RERANKER_LOSSES)}{elsewhere}")
    _check_pos_weight(loss, pos_weight, names)


def _check_pos_weight(loss: Any, pos_weight: float | None, names: Mapping[str, str]) -> None:
    """`pos_weight` weighs bce's positive pairs: refused with another loss (None: bce is then the default)."""
    if pos_weight is not None and loss not in (None, "bce"):
        raise ValueError(f"{names['pos_weight']} applies to {names['loss']} bce, not {names['loss']} {loss}")


def choose_reranker_loss(
    loss: str | None,
    *,
    labelled: bool = False,
    num_negatives: int = 5,
    random_negatives: int = 2,
    pos_weight: float | None = None,
    source: str = "rows",
    option_names: Mapping[str, str] | None = None,
) -> str:
    """The loss (one of `RERANKER_LOSSES`) a reranker trains with on rows made from (query, positive) pairs: `loss`
    as given, else the default for the rows (`default_loss`): labelled pairs or pairs weighted by `pos_weight`
    (bce), else (query, positive, negatives...) tuples (plistmle).

    Refused, each in one line naming the value (`check_reranker_loss` first): no negative per pair to mine
    (`num_negatives` hard and `random_negatives` random ones), and labelled rows (`labelled`: (query, document,
    label) pairs, trained as they are; `source` names them) with a loss that does not read pairs.

    Args:
        option_names: the caller's names of `loss`, `pos_weight`, `negatives` (`num_negatives`) and
            `random_negatives` in the messages (a command's flags).
    """
    check_reranker_loss(loss, pos_weight, option_names)
    names = {**OPTION_NAMES, **(option_names or {})}
    if loss is None:
        loss = default_loss(PAIRS if labelled or pos_weight is not None else TUPLES)
    if not labelled and num_negatives + random_negatives == 0:
        hard, random = names["negatives"], names["random_negatives"]
        raise ValueError(
            f"{hard} 0 {random} 0: {names['loss']} {loss} needs at least one negative per pair (give {hard} K "
            f"and/or {random} R)"
        )
    pairs = [name for name in RERANKER_LOSSES if reranker_row_shape(name) == PAIRS]
    if labelled and loss not in pairs:
        accepted = " or ".join(f"{names['loss']} {name}" for name in pairs)
        raise ValueError(
            f"{source}: labelled (query, document, label) pairs train with {accepted}; {names['loss']} {loss} needs "
            "(query, positive) pairs to mine negatives for"
        )
    return loss


def reranker_to_train(
    source: str | os.PathLike, max_length: int | None = None, option: str = "model"
) -> tuple[Any, str]:
    """(the `CrossEncoder` to train from `source`, what `source` held: `"cross-encoder"`, `"bi-encoder"` or
    `"encoder"`): a one-output cross-encoder is continued, an encoder or bi-encoder starts one with a new head
    (`max_length` tokens per pair, default `DEFAULT_MAX_LENGTH`). `option` names `source` in errors."""
    from .model import CrossEncoder
    from .source import model_kind

    path = os.fspath(source)
    kind = model_kind(path)
    if kind == "unknown" and os.path.exists(path):
        raise ValueError(
            f"{option} {path}: neither a cross-encoder (a config.json naming a ...ForSequenceClassification) nor an "
            "encoder or bi-encoder folder (no readable config.json)"
        )
    if kind == "unknown":  # a Hub id: its config says which
        from transformers import AutoConfig

        from ..modeling.configuration_siamese import is_cross_encoder_config

        kind = "cross-encoder" if is_cross_encoder_config(AutoConfig.from_pretrained(path)) else "encoder"
    if kind == "cross-encoder":
        model = CrossEncoder.from_pretrained(path, max_length=max_length)
        if model.num_labels != 1:
            raise ValueError(f"{option} {path}: a cross-encoder with {model.num_labels} outputs; a reranker has 1")
    else:
        model = CrossEncoder.from_encoder(path, num_labels=1, max_length=max_length or DEFAULT_MAX_LENGTH)
    return model, kind


@dataclasses.dataclass
class RerankerTrainingResult:
    """What `train_reranker` made: the trained `model` (saved in `output_dir`; the best epoch's weights where there
    was an evaluation set), and the reranking metrics as the trainer names them (`eval_ndcg@10`,
    `eval_first_stage_ndcg@10`, `eval_mrr@10`, ...) `before` training (None without an evaluation set, or with a new
    head: its scores mean nothing yet) and of the `best` epoch (None without an evaluation set)."""

    model: Any
    output_dir: str
    before: dict[str, float] | None
    best: dict[str, float] | None


def train_reranker(
    model: Any,
    rows: Any,
    output_dir: str | os.PathLike,
    *,
    loss: str | CrossEncoderLoss | None = None,
    pos_weight: float | None = None,
    eval_set: Any = None,
    eval_name: str = "eval",
    new_head: bool | None = None,
    max_length: int | None = None,
    epochs: float = 1.0,
    batch_size: int = 4,
    lr: float = 1e-4,
    head_lr: float | None = None,
    warmup_ratio: float = 0.1,
    seed: int = 42,
    bf16: bool = False,
    arguments: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    before_save: Callable[[Any], None] | None = None,
    report: Callable[[str], None] | None = None,
) -> RerankerTrainingResult:
    """Train the reranker `model` on `rows`, keep the best epoch on `eval_set`, save it to `output_dir`.

    Args:
        model: a one-output `CrossEncoder`, or the path / Hub id of a cross-encoder to continue or of an encoder or
            bi-encoder to start one from (`reranker_to_train`, with `max_length`).
        rows: the training rows: (query, positive, negative_1, ...) tuples or (query, document, label) pairs, e.g.
            from `reranker_training_rows`.
        loss: a `CrossEncoderLoss` or a registered name (`losses.LOSSES`); None: the trainer's default for the rows.
        pos_weight: bce's weight of the positive pairs.
        eval_set: a `RerankingDataset`: reranked every epoch, the best epoch (by nDCG@10) kept.
        eval_name: how the progress lines name `eval_set` (e.g. "dev, top 100").
        new_head: the head was just made (its scores before training mean nothing: the first stage is reported
            alone); default: True where `model` is a path to an encoder or bi-encoder, else False.
        epochs: passes over `rows`.
        batch_size: rows per batch.
        lr: the learning rate.
        head_lr: the classification head's learning rate (default: `lr`).
        warmup_ratio: the share of the steps the learning rate warms up over.
        seed: the training's seed.
        bf16: bfloat16 mixed precision (on a machine without a GPU too).
        arguments: other `CrossEncoderTrainingArguments` keywords, over the ones above (`output_dir` is the
            checkpoint folder's).
        overwrite: replace a model already in `output_dir` (kept until the new one is saved); else one is refused.
        before_save: called with the trained model before it is saved, e.g. to set its fusion weights
            (`choose_fusion`), which are saved with it.
        report: called with each progress line (the evaluation before training and the best epoch's).

    Raises:
        ValueError: a model `output_dir` holds without `overwrite`, an evaluation set that is not a
            `RerankingDataset`, a row the trainer refuses (naming it).
    """
    from ..evaluation.reranking_set import RerankingDataset
    from .model import CrossEncoder

    output = Path(output_dir)
    if output.exists() and not output.is_dir():
        raise ValueError(f"output_dir={os.fspath(output)!r} exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ValueError(f"output_dir={os.fspath(output)!r} is not empty; pass overwrite=True to replace it")
    if eval_set is not None and not isinstance(eval_set, RerankingDataset):
        raise ValueError(f"eval_set: expected a RerankingDataset (a first stage's candidates), got {type(eval_set)}")
    _check_pos_weight(loss if isinstance(loss, str | None) else type(loss).__name__, pos_weight, OPTION_NAMES)
    if pos_weight is not None:
        loss = get_loss("bce", pos_weight=pos_weight)
    if not isinstance(model, CrossEncoder):
        model, kind = reranker_to_train(model, max_length)
        new_head = kind != "cross-encoder" if new_head is None else new_head
    show = report or _silent
    settings = {
        "num_train_epochs": epochs, "per_device_train_batch_size": batch_size, "learning_rate": lr,
        "head_learning_rate": head_lr, "warmup_steps": warmup_ratio, "seed": seed, "bf16": bf16,
        **(arguments or {}),
    }  # fmt: skip
    with exclusive_output(output, "a training of this reranker"):
        # The checkpoints, beside the output, go when the training ends (a killed run's with the next run's start).
        with work_folder(output, "checkpoints") as checkpoints:
            trainer = _trainer(model, rows, loss, eval_set, {**settings, "output_dir": str(checkpoints)})
            before = _before_training(trainer, eval_set, eval_name, bool(new_head), show)
            trainer.train()
            best = _best_epoch(trainer, eval_set, eval_name, show)
        model.model = trainer.model
        if before_save is not None:
            before_save(model)
        model.save_pretrained(output)  # staged beside and swapped in whole
    return RerankerTrainingResult(model, os.fspath(output), before, best)


def _trainer(model: Any, rows: Any, loss: Any, eval_set: Any, settings: dict[str, Any]) -> Any:
    """The `CrossEncoderTrainer`: evaluating and saving each epoch where there is an evaluation set (the best epoch
    loaded at the end), one checkpoint kept."""
    import torch

    from .arguments import CrossEncoderTrainingArguments
    from .trainer import CrossEncoderTrainer

    strategy = "epoch" if eval_set is not None else "no"
    training = CrossEncoderTrainingArguments(
        **{
            # a CPU-only machine runs bf16 on the CPU (transformers refuses bf16 without a GPU unless told so)
            "use_cpu": not torch.cuda.is_available(),
            "per_device_eval_batch_size": max(32, settings["per_device_train_batch_size"]),
            "eval_strategy": strategy, "save_strategy": strategy, "save_total_limit": 1,
            "load_best_model_at_end": eval_set is not None, "metric_for_best_model": EVAL_METRIC,
            "greater_is_better": True, "report_to": [], "logging_steps": 50, "disable_tqdm": False,
            **settings,
        }
    )  # fmt: skip
    return CrossEncoderTrainer(model, training, train_dataset=rows, eval_dataset=eval_set, loss=loss)


def _before_training(
    trainer: Any, eval_set: Any, eval_name: str, new_head: bool, show: Callable[[str], None]
) -> dict[str, float] | None:
    """The reranking metrics before training (None for a new head, whose first stage alone is reported)."""
    from ..evaluation.reranking import first_stage_metrics

    if eval_set is None:
        return None
    title = f"before training ({eval_name})"
    if new_head:  # a new head's scores before training mean nothing: the first stage alone
        first = first_stage_metrics(eval_set)
        show(
            f"{title}: first stage nDCG@10 {100 * first[EVAL_METRIC]:.2f} MRR@10 {100 * first['mrr@10']:.2f} | "
            "the new head is not scored before training"
        )
        return None
    metrics = trainer.evaluate()
    show(reranking_line(title, metrics))
    return metrics


def _best_epoch(trainer: Any, eval_set: Any, eval_name: str, show: Callable[[str], None]) -> dict[str, float] | None:
    """The best epoch's evaluation, as logged (not scored again)."""
    if eval_set is None:
        return None
    logged = [entry for entry in trainer.state.log_history if f"eval_{EVAL_METRIC}" in entry]
    best = max(logged, key=lambda entry: entry[f"eval_{EVAL_METRIC}"]) if logged else trainer.evaluate()
    show(reranking_line(f"best epoch ({eval_name})", best))
    return best


def reranking_line(title: str, metrics: Mapping[str, float], prefix: str = "eval_") -> str:
    """One line of reranking metrics (`prefix` before their names): nDCG@10 and MRR@10 of the first stage and of
    the two stages, and the change."""
    first, second = metrics[f"{prefix}first_stage_{EVAL_METRIC}"], metrics[f"{prefix}{EVAL_METRIC}"]
    mrr_first, mrr = metrics[f"{prefix}first_stage_mrr@10"], metrics[f"{prefix}mrr@10"]
    return (
        f"{title}: first stage nDCG@10 {100 * first:.2f} MRR@10 {100 * mrr_first:.2f} | reranked nDCG@10 "
        f"{100 * second:.2f} MRR@10 {100 * mrr:.2f} | change {100 * (second - first):+.2f}"
    )


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """The report where the caller wants none."""


__all__ = [
    "DEFAULT_MAX_LENGTH",
    "RERANKER_LOSSES",
    "RerankerTrainingResult",
    "check_reranker_loss",
    "choose_reranker_loss",
    "reranker_row_shape",
    "reranker_to_train",
    "reranking_line",
    "train_reranker",
]
