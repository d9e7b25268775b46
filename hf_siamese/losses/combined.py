"""Weighted sums of losses on one forward pass, and the loss strings that name them (`"cosent+0.5*angle"`)."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .base import SiameseLoss

LossLike = SiameseLoss | str

_LABELS_READ = {"score": "float scores", "class": "class labels", None: "no labels"}


class CombinedLoss(SiameseLoss):
    """`sum_k weight_k * loss_k(output, labels)` over its losses, all on the same model output (one forward pass).

    Rows and labels are the losses' own, which must agree: all read float scores (e.g. CoSENT + AnglE + cosine
    regression + `ScoredPairsRankingLoss`), or all class labels, or none. `label_kind`, `num_texts` and `score_range`
    are theirs, so the trainer checks the data as for one of them. A loss that runs the model itself (its own
    `compute`: `CachedMultipleNegativesRankingLoss`, `MatryoshkaLoss`) cannot share the forward pass and is refused;
    wrap the other way round instead: `MatryoshkaLoss(CombinedLoss(...), dims)`.

    By name: `get_loss("cosent+angle")` (weights 1) or `get_loss("cosent+0.5*angle")`.

    Args:
        losses: `{loss or name: weight}`, or a sequence of losses/names (weight 1) and `(loss or name, weight)` pairs.
            Weights are positive finite numbers.
    """

    def __init__(self, losses: Mapping[LossLike, float] | Sequence[LossLike | tuple[LossLike, float]]) -> None:
        super().__init__()
        from . import get_loss

        if isinstance(losses, str) or not isinstance(losses, Mapping | Sequence):
            raise TypeError(
                "CombinedLoss takes a mapping {loss: weight} or a sequence of losses and (loss, weight) pairs, got "
                + (f"the string {losses!r}: use get_loss({losses!r})." if isinstance(losses, str) else f"{losses!r}.")
            )
        items = list(losses.items()) if isinstance(losses, Mapping) else [_as_item(item) for item in losses]
        if not items:
            raise ValueError("CombinedLoss needs at least one loss, e.g. CombinedLoss({'cosent': 1, 'angle': 1}).")
        components = [get_loss(loss) for loss, _ in items]
        self.weights = [
            check_weight(weight, f"CombinedLoss: the weight of {type(c).__name__}")
            for c, (_, weight) in zip(components, items, strict=True)
        ]
        for component in components:
            _check_shares_forward(component)
        self.components = nn.ModuleList(components)
        self.label_kind = _agreed(components, "label_kind", lambda kind: _LABELS_READ.get(kind, repr(kind)))
        self.num_texts = _agreed(
            components, "num_texts", lambda n: "any number of texts" if n is None else f"{n} texts"
        )
        ranges = {c.score_range for c in components if c.score_range is not None}
        if len(ranges) > 1:
            raise ValueError(f"CombinedLoss: the losses expect different score ranges {sorted(ranges)}; give them one.")
        self.score_range = ranges.pop() if ranges else None

    @classmethod
    def from_string(cls, text: str, **kwargs: Any) -> CombinedLoss:
        """The loss that `text` names (`"cosent+0.5*angle"`, see `parse_loss_spec`). Each keyword argument goes to
        every named loss whose constructor takes it (`score_range` to `cosine`, `scale` to all that have one); one
        that none takes is an error."""
        from . import LOSSES

        terms = parse_loss_spec(text)
        unused = set(kwargs)
        built = []
        for name, weight in terms:
            accepted = inspect.signature(LOSSES[name]).parameters
            own = {key: value for key, value in kwargs.items() if key in accepted}
            unused -= set(own)
            built.append((LOSSES[name](**own), weight))
        if unused:
            raise ValueError(
                f"loss {text!r}: argument(s) {sorted(unused)} are taken by none of {[name for name, _ in terms]}."
            )
        return cls(built)

    @property
    def summary(self) -> str:
        """`"CoSENTLoss + 0.5 * AnglELoss"`."""
        return " + ".join(
            type(c).__name__ if w == 1 else f"{w:g} * {type(c).__name__}"
            for c, w in zip(self.components, self.weights, strict=True)
        )

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        total = None
        for component, weight in zip(self.components, self.weights, strict=True):
            term = weight * component(output, labels)
            total = term if total is None else total + term
        return total

    def extra_repr(self) -> str:
        return f"weights={self.weights}"


def parse_loss_spec(text: str, names: Iterable[str] | None = None) -> list[tuple[str, float]]:
    """`"cosent+0.5*angle"` -> `[("cosent", 1.0), ("angle", 0.5)]`: terms joined by `+`, each a loss name with an
    optional positive weight before `*`. Names are case-insensitive and must be in `names` (default: `LOSSES`), once
    each. Raises `ValueError` naming the bad part and the accepted names."""
    from . import LOSSES

    accepted = sorted(LOSSES if names is None else names)
    hint = f"accepted names: {', '.join(accepted)}; combine them as 'cosent+angle' or 'cosent+0.5*angle'"
    if not isinstance(text, str):
        raise TypeError(f"a loss string is needed, got {type(text).__name__}")
    terms: list[tuple[str, float]] = []
    for part in text.split("+"):
        weight_text, star, name = part.rpartition("*")
        name = name.strip().lower()
        if not name:
            raise ValueError(f"loss {text!r}: empty term {part.strip()!r}; {hint}.")
        if name not in accepted:
            order = " (write the weight first: '0.5*angle')" if _is_number(name) else ""
            raise ValueError(f"loss {text!r}: unknown loss {name!r}{order}; {hint}.")
        weight = 1.0
        if star:
            try:
                weight = float(weight_text.strip())
            except ValueError:
                raise ValueError(
                    f"loss {text!r}: weight {weight_text.strip()!r} of {name!r} is not a number; {hint}."
                ) from None
            check_weight(weight, f"loss {text!r}: the weight of {name!r}")
        if any(name == seen for seen, _ in terms):
            raise ValueError(f"loss {text!r}: {name!r} appears twice; give it once, with one weight.")
        terms.append((name, weight))
    return terms


def check_weight(weight: Any, what: str) -> float:
    """`weight` as a float, or `ValueError` unless it is a positive finite number."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"{what} is {weight!r}; weights must be positive finite numbers, e.g. 0.5.")
    return float(weight)


def _as_item(item: Any) -> tuple[LossLike, Any]:
    if isinstance(item, tuple):
        if len(item) != 2:
            raise ValueError(f"CombinedLoss: {item!r} is not a (loss, weight) pair.")
        return item[0], item[1]
    return item, 1.0


def _check_shares_forward(loss: SiameseLoss) -> None:
    if type(loss).compute is SiameseLoss.compute:
        return
    name = type(loss).__name__
    hint = (
        "wrap the other way round: MatryoshkaLoss(CombinedLoss(...), dims)"
        if name == "MatryoshkaLoss"
        else "train with it alone"
    )
    raise ValueError(
        f"CombinedLoss cannot hold {name}: it runs the model itself (its own compute), so it cannot share one "
        f"forward pass with other losses; {hint}."
    )


def _agreed(components: list[SiameseLoss], attribute: str, describe: Any) -> Any:
    values = {getattr(c, attribute) for c in components}
    if len(values) == 1:
        return values.pop()
    each = ", ".join(f"{type(c).__name__} reads {describe(getattr(c, attribute))}" for c in components)
    advice = (
        " For in-batch negatives on scored pairs use ScoredPairsRankingLoss ('scored_mnr')."
        if attribute == "label_kind"
        else ""
    )
    raise ValueError(f"CombinedLoss: the losses need different rows ({each}); they cannot train on one batch.{advice}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


__all__ = ["CombinedLoss", "check_weight", "parse_loss_spec"]
