"""The training objective of a bi-encoder, chosen once from its training rows: the loss (named, or the one the rows
call for), the options each part of it takes, the classifier head a softmax loss needs, and the rows with their
scores as numbers.

    from hf_siamese.training.objective import choose_objective

    objective = choose_objective(rows, loss="cosine")  # score range 0..1 or 0..5, whichever holds the scores
    model = SiameseBertModel.from_encoder(path, **objective.head_kwargs)
    SiameseTrainer(model, args, train_dataset=objective.train_data, loss=objective.loss)

Errors name the options by their keyword (`margin_scale applies to loss margin_mse, not mnr`); a caller with other
names for them (the `train` command's flags) passes `option_names={"margin_scale": "--margin-scale", ...}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..data.columns import ColumnLayout, detect_layout
from ..losses import LOSSES, SiameseLoss, get_loss, parse_loss_spec
from .trainer_data import MULTIVECTOR_ROW_LOSSES, SPARSE_ROW_LOSSES, check_kind, default_loss, loss_kind

# The losses of `LOSSES` that train a dense model on the rows as they are (the `train` command's choices): all but
# cached_mnr (mnr with a memory setting), embedding_mse (a teacher's embeddings as targets, which `distill` makes),
# the sparse models' own (`SPARSE_ROW_LOSSES` and csr: every loss with `sparse = True`) and the multi-vector models'
# (`MULTIVECTOR_ROW_LOSSES` and cached_maxsim_mnr: every loss with `multivector = True`).
ROW_LOSSES: tuple[str, ...] = tuple(
    name for name, loss in LOSSES.items() if name not in ("cached_mnr", "embedding_mse") and loss_kind(loss) == "dense"
)
# What each kind of model trains with in `choose_objective` (a dense model: any dense loss or a sum of them).
_KIND_LOSSES = {"sparse": SPARSE_ROW_LOSSES, "multi-vector": (*MULTIVECTOR_ROW_LOSSES, "cached_maxsim_mnr")}
OPTIONS = ("loss", "score_range", "label2id", "positive_threshold", "margin_scale", "gather_across_processes")


@dataclass
class Objective:
    """What `choose_objective` chose: the loss's name (a combination such as `cosent+0.5*angle` as given), the loss
    object, the classifier-head arguments for `SiameseBertModel.from_encoder` (`label2id` or `num_labels`; empty
    unless the loss is softmax) and the training rows (score columns read as text turned into numbers)."""

    loss_name: str
    loss: SiameseLoss
    head_kwargs: dict[str, Any] = field(default_factory=dict)
    train_data: Any = None


def infer_score_range(scores: Sequence[float], source: str, option: str = "score_range") -> tuple[float, float]:
    """The usual STS scales: 0..1 (Hub `sentence-transformers/stsb`) or 0..5 (STS Benchmark files, demo set); other
    scores are refused, asking for `option` (the score range's name to the caller)."""
    low, high = min(scores), max(scores)
    if low >= 0 and high <= 1:
        return 0.0, 1.0
    if low >= 0 and high <= 5:
        return 0.0, 5.0
    raise ValueError(f"{source}: scores span {low:g}..{high:g}; pass {option} LOW,HIGH")


def choose_objective(
    train_data: Any,
    *,
    loss: str | None = None,
    score_range: tuple[float, float] | None = None,
    label2id: dict[str, int] | None = None,
    positive_threshold: float | None = None,
    margin_scale: float | None = None,
    gather_across_processes: bool = False,
    source: str = "train data",
    option_names: Mapping[str, str] | None = None,
    sparse: bool = False,
    kind: str | None = None,
) -> Objective:
    """The loss for `train_data` (a `datasets.Dataset`) and its options, checked against the rows.

    Args:
        train_data: the training rows (their columns found by `data.columns.detect_layout`).
        loss: a name of `LOSSES` or a weighted sum such as `cosent+0.5*angle`; None: the rows' own
            (`trainer_data.default_loss`: float scores -> cosine, class labels -> softmax, score lists -> margin_mse,
            no label -> mnr).
        score_range: cosine's (LOW, HIGH); None: 0..1 or 0..5, whichever holds the scores.
        label2id: softmax's class names -> ids; None: integer labels as they are, else the sorted label names.
        positive_threshold: scored_mnr's (needed): pairs scoring at least this are positives.
        margin_scale: margin_mse's scale of the student's margins.
        gather_across_processes: mnr: score against the in-batch negatives of all processes.
        source: what `train_data` is called in errors.
        option_names: the caller's names of the options above (keys: `OPTIONS`) for its errors; those not given are
            called by their keyword.
        sparse: the model is a sparse one (SPLADE or inference-free): its loss is one of `SPARSE_ROW_LOSSES`
            (default `sparse_mnr` on rows without labels, `sparse_margin_mse` on a teacher's score lists); a dense
            loss, a combination or `csr` is refused. A dense model (`sparse=False`) refuses the sparse losses.
        kind: the model's kind, one the registry trains (`modeling.kinds.model_kinds(trainable=True)`: "dense",
            "sparse", "multi-vector"; None: from `sparse`). A multi-vector model's loss is one of
            `MULTIVECTOR_ROW_LOSSES` or cached_maxsim_mnr (default `maxsim_mnr` on rows without labels,
            `maxsim_margin_mse` on a teacher's score lists); other kinds refuse them.

    Each option applies to the losses that take it (to each part of a combination that does); given with a loss that
    does not, it is refused. Raises `ValueError` naming the option, the loss and `source`.
    """
    names = {key: key for key in OPTIONS} | dict(option_names or {})
    unknown = set(names) - set(OPTIONS)
    if unknown:
        raise ValueError(f"option_names: unknown option(s) {sorted(unknown)}; the options are {list(OPTIONS)}")
    kind = check_kind(kind or ("sparse" if sparse else "dense"))
    layout, layout_error = _layout(train_data)
    if loss is None:
        if layout_error is not None:
            raise ValueError(f"{source}: {layout_error}")
        loss = default_loss(None if layout.label is None else train_data[0][layout.label], kind=kind)
    parts = {name for name, _ in parse_loss_spec(loss)}
    _check_kind(parts, loss, kind, names["loss"], source)
    if layout_error is not None and any(LOSSES[name].label_kind is not None for name in parts):
        raise ValueError(f"{source}: {layout_error}")
    if any(LOSSES[name].label_kind == "score" for name in parts):
        train_data = _as_scores(train_data, layout, source, f"{names['loss']} {loss}")
    loss_kwargs, head_kwargs = _loss_options(
        train_data, layout, parts, loss, names, source, score_range=score_range, positive_threshold=positive_threshold,
        label2id=label2id, margin_scale=margin_scale, gather_across_processes=gather_across_processes,
        kind=kind,
    )  # fmt: skip
    return Objective(loss, get_loss(loss, **loss_kwargs), head_kwargs, train_data)


def _check_kind(parts: set[str], loss: str, kind: str, loss_option: str, source: str) -> None:
    """A sparse or multi-vector model's loss is one of its kind's (`_KIND_LOSSES`), alone; a dense model's is no loss
    of another kind."""
    if kind == "dense":
        for other in ("sparse", "multi-vector"):
            foreign = sorted(name for name in parts if loss_kind(LOSSES[name]) == other)
            if foreign:
                model = "SparseSiameseModel" if other == "sparse" else "MultiVectorModel"
                raise ValueError(
                    f"{loss_option} {loss}: {', '.join(foreign)} train(s) a {other} model ({model}), not a dense "
                    f"one; a dense model trains with one of {', '.join(ROW_LOSSES)}"
                )
        return
    accepted = _KIND_LOSSES[kind]
    if len(parts) == 1 and parts <= set(accepted):
        return
    others = sorted(parts - set(accepted))
    if others:
        kinds = sorted({loss_kind(LOSSES[name]) for name in others} - {kind}) or ["dense"]
        # csr (sparse, a CSR model's own) is no loss of a SPLADE-style model from rows: it counts as "dense" here.
        why = f"{', '.join(others)} train(s) a {' or '.join(kinds)} model"
    else:
        why = f"{kind} losses are not combined"
    named = {"sparse": "sparse_mnr", "multi-vector": "maxsim_mnr"}[kind]
    raise ValueError(
        f"{loss_option} {loss}: {why}; a {kind} model trains on {source} with one of {', '.join(accepted)} "
        f"({named} on rows without labels, {accepted[1]} or {accepted[2]} on a teacher's score lists from "
        "'mine --teacher')"
    )


def _layout(train_data: Any) -> tuple[ColumnLayout | None, ValueError | None]:
    """The rows' column layout, or the error saying why there is none (raised where the layout is needed)."""
    try:
        return detect_layout(train_data.column_names), None
    except ValueError as error:
        return None, error


def _loss_options(
    train_data: Any,
    layout: ColumnLayout | None,
    parts: set[str],
    loss: str,
    names: Mapping[str, str],
    source: str,
    **given: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the constructor keywords of the loss's parts, the classifier-head arguments) from the options `given`; an
    option no part takes is refused."""
    kwargs: dict[str, Any] = {}
    head_kwargs: dict[str, Any] = {}
    if "cosine" in parts:
        scores = train_data[layout.label]  # a score loss: `_as_scores` found the column
        if isinstance(train_data[0][layout.label], list):
            raise ValueError(
                f"{names['loss']} {loss}: cosine needs one score per row; {source} holds score lists (a teacher's, "
                f"from 'mine --teacher'): train them with {names['loss']} margin_mse or list_distill"
            )
        kwargs["score_range"] = given["score_range"] or infer_score_range(scores, source, names["score_range"])
    elif given["score_range"] is not None:
        raise ValueError(f"{names['score_range']} applies to {names['loss']} cosine, not {loss}")
    if "scored_mnr" in parts:
        if given["positive_threshold"] is None:
            raise ValueError(
                f"{names['loss']} {loss} needs {names['positive_threshold']} T: pairs scoring at least T are the "
                "positives of scored_mnr (e.g. 4 on a 0-5 scale)"
            )
        kwargs["threshold"] = given["positive_threshold"]
    elif given["positive_threshold"] is not None:
        raise ValueError(f"{names['positive_threshold']} applies to {names['loss']} scored_mnr, not {loss}")
    if "softmax" in parts:
        head_kwargs = _softmax_head(train_data, layout, given["label2id"], names["loss"])
    elif given["label2id"] is not None:
        raise ValueError(f"{names['label2id']} applies to {names['loss']} softmax, not {loss}")
    margin_loss = {"dense": "margin_mse", "sparse": "sparse_margin_mse", "multi-vector": "maxsim_margin_mse"}[
        given["kind"]
    ]
    if margin_loss in parts and given["margin_scale"] is not None:
        kwargs["scale"] = given["margin_scale"]
    elif given["margin_scale"] is not None:
        raise ValueError(f"{names['margin_scale']} applies to {names['loss']} {margin_loss}, not {loss}")
    ranking = "maxsim_mnr" if given["kind"] == "multi-vector" else "mnr"
    if parts & {ranking, f"cached_{ranking}"}:
        kwargs["gather_across_processes"] = given["gather_across_processes"]
    elif given["gather_across_processes"]:
        raise ValueError(f"{names['gather_across_processes']} applies to {names['loss']} {ranking}, not {loss}")
    return kwargs, head_kwargs


def _as_scores(dataset: Any, layout: ColumnLayout, source: str, named_loss: str) -> Any:
    """Scores read from CSV under a column not named `score` arrive as text; score losses need numbers. `named_loss`
    is the loss as the caller names it in errors (`--loss cosine`)."""
    if layout.label is None:
        raise ValueError(f"{named_loss} needs a score column; {source} has columns {dataset.column_names}")
    values = dataset[layout.label]
    if all(isinstance(v, float) for v in values):
        return dataset
    if any(isinstance(v, list) for v in values):  # a teacher's score lists: the collator checks them row by row
        if len(layout.texts) < 3:
            raise ValueError(
                f"{named_loss} with score lists needs (anchor, positive, negative...) rows; {source} has columns "
                f"{dataset.column_names}"
            )
        return dataset
    scores = []
    for index, value in enumerate(values):
        try:
            scores.append(float(value))
        except (TypeError, ValueError):
            raise ValueError(
                f"{source}, row {index + 1}: {named_loss} needs numeric scores, column {layout.label!r} holds {value!r}"
            ) from None
    return dataset.remove_columns(layout.label).add_column(layout.label, scores)


def _softmax_head(
    dataset: Any, layout: ColumnLayout, label2id: dict[str, int] | None, loss_option: str
) -> dict[str, Any]:
    """`from_encoder` arguments for the classifier head: from `label2id`, or from the labels found in the data."""
    if layout.label is None:
        raise ValueError(f"{loss_option} softmax needs a label column; the data has columns {dataset.column_names}")
    if label2id is not None:
        return {"label2id": label2id}
    values = set(dataset[layout.label])
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"num_labels": max(values) + 1}
    # Sorted, so the same data always gives the same class ids.
    return {"label2id": {str(name): index for index, name in enumerate(sorted(map(str, values)))}}


__all__ = [
    "MULTIVECTOR_ROW_LOSSES",
    "OPTIONS",
    "ROW_LOSSES",
    "SPARSE_ROW_LOSSES",
    "Objective",
    "choose_objective",
    "infer_score_range",
]
