"""The cross-encoder's pair evaluators (`evaluator.Evaluator`: `evaluator(cross_encoder) -> dict[str, float]` with a
`primary_metric`): STS correlations of a regression cross-encoder (`PairScoreEvaluator`, primary `spearman`) and
accuracy of a classifier (`PairClassificationEvaluator`, primary `accuracy`), with the one-call functions
`evaluate_scores` / `evaluate_classification`, and the scoring of pairs they share (`score_pairs`, which teacher scores
and silver pairs use too).

All work with any object that has `predict(pairs, batch_size=, show_progress_bar=)` (our `CrossEncoder`,
sentence-transformers' `CrossEncoder`, a test stub). The metric definitions are the ones of `hf_siamese.metrics`
(`sts_correlations`), not written again here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .evaluator import Evaluator


def _check_scorer(model: Any) -> None:
    if not callable(getattr(model, "predict", None)):
        raise ValueError(
            f"expected a cross-encoder (an object with .predict(pairs) -> scores), got {type(model).__name__}"
        )


def score_pairs(
    model: Any,
    pairs: Sequence[tuple[str, str]],
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> np.ndarray:
    """The model's scores of `pairs` in ONE `predict` call over the distinct pairs (a cross-encoder sorts its
    batches by length across all of them); float32 `(len(pairs),)` or `(len(pairs), num_labels)`."""
    _check_scorer(model)
    unique = list(dict.fromkeys((query, document) for query, document in pairs))
    if not unique:
        return np.zeros(0, dtype=np.float32)
    scores = np.asarray(
        model.predict(unique, batch_size=batch_size, show_progress_bar=show_progress_bar, **predict_kwargs),
        dtype=np.float32,
    )
    if len(scores) != len(unique):
        raise ValueError(f"the cross-encoder gave {len(scores)} scores for {len(unique)} pairs; expected one per pair")
    where = {pair: position for position, pair in enumerate(unique)}
    return scores[[where[pair] for pair in pairs]]


def _pairs_of(pairs: Any) -> list[tuple[str, str]]:
    rows = []
    for row, pair in enumerate(pairs):
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"pairs[{row}] is {pair!r:.80}: expected a (text, text) pair")
        if not all(isinstance(text, str) for text in pair):
            raise ValueError(f"pairs[{row}] is {pair!r:.80}: both texts must be strings")
        rows.append((pair[0], pair[1]))
    return rows


class _PairEvaluator(Evaluator):
    """What the pair evaluators share: checked (text, text) pairs, one expected value each, and the scoring."""

    expected_name, expected_unit = "labels", "entries"

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        expected: Sequence[Any],
        *,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        name: str = "",
        **predict_kwargs: Any,
    ) -> None:
        self.pairs = _pairs_of(pairs)
        if len(expected) != len(self.pairs):
            what = f"{self.expected_name} has {len(expected)} {self.expected_unit}"
            raise ValueError(f"{what} for {len(self.pairs)} pairs")
        self.batch_size, self.show_progress_bar = batch_size, show_progress_bar
        self.name, self.predict_kwargs = name, predict_kwargs

    def __len__(self) -> int:
        return len(self.pairs)

    def scores(self, model: Any) -> np.ndarray:
        """The model's score(s) of each pair, in one `predict` call."""
        return score_pairs(model, self.pairs, self.batch_size, self.show_progress_bar, **self.predict_kwargs)


class PairScoreEvaluator(_PairEvaluator):
    """STS metrics of a regression cross-encoder (one output): `spearman` and `pearson` (in [-1, 1]) between its
    scores of `pairs` (after its activation) and the `gold` scores, by `hf_siamese.metrics.sts_correlations`. An
    evaluator: `PairScoreEvaluator(pairs, gold)(cross_encoder)`; primary metric `spearman`. `predict_kwargs` (and
    `batch_size`, `show_progress_bar`, `name`) as for `PairClassificationEvaluator`."""

    primary_metric = "spearman"
    expected_name, expected_unit = "gold", "scores"

    def __init__(self, pairs: Sequence[tuple[str, str]], gold: Sequence[float], **settings: Any) -> None:
        super().__init__(pairs, gold, **settings)
        self.gold = gold

    def __call__(self, model: Any) -> dict[str, float]:
        """`{"spearman", "pearson"}` of `model` (anything with `predict(pairs, batch_size=, show_progress_bar=)`)."""
        from ..metrics import sts_correlations

        scores = self.scores(model)
        if scores.ndim != 1:
            raise ValueError(f"STS needs a one-output cross-encoder; its scores have shape {scores.shape}")
        return sts_correlations(scores, np.asarray(self.gold, dtype=np.float64))


class PairClassificationEvaluator(_PairEvaluator):
    """`accuracy` of a classifier cross-encoder on labelled pairs: the arg-max output of a several-output model
    against class ids (or names, through `label2id`); for a one-output model, a score above `threshold` (after its
    activation: 0.5 for sigmoid) against 0/1 labels. An evaluator:
    `PairClassificationEvaluator(pairs, labels)(cross_encoder)`; primary metric `accuracy`. `batch_size` and
    `show_progress_bar` and other `predict_kwargs` go to the model's `predict`; `name` is the logging prefix."""

    primary_metric = "accuracy"

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        labels: Sequence[int | str],
        *,
        label2id: Mapping[str, int] | None = None,
        threshold: float = 0.5,
        **settings: Any,
    ) -> None:
        super().__init__(pairs, labels, **settings)
        self.labels = [_class_id(row, label, label2id) for row, label in enumerate(labels)]
        self.threshold = threshold

    def __call__(self, model: Any) -> dict[str, float]:
        """`{"accuracy"}` of `model` (anything with `predict(pairs, batch_size=, show_progress_bar=)`)."""
        scores = self.scores(model)
        predicted = (scores > self.threshold).astype(np.int64) if scores.ndim == 1 else scores.argmax(axis=1)
        width = 2 if scores.ndim == 1 else scores.shape[1]
        bad = next(((row, label) for row, label in enumerate(self.labels) if not 0 <= label < width), None)
        if bad is not None:
            raise ValueError(f"labels[{bad[0]}] = {bad[1]} is outside the model's {width} classes")
        return {"accuracy": float(np.mean(predicted == np.asarray(self.labels)))}


def _class_id(row: int, label: Any, label2id: Mapping[str, int] | None) -> int:
    if isinstance(label, str):
        if not label2id or label not in label2id:
            raise ValueError(f"labels[{row}] = {label!r} is not a known class name ({sorted(label2id or {})})")
        label = label2id[label]
    if isinstance(label, bool) or not float(label).is_integer():
        raise ValueError(f"labels[{row}] = {label!r}: expected a class id (an int) or a class name")
    return int(label)


def evaluate_scores(
    model: Any,
    pairs: Sequence[tuple[str, str]],
    gold: Sequence[float],
    *,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> dict[str, float]:
    """STS metrics of a regression cross-encoder: `PairScoreEvaluator(pairs, gold, ...)(model)`, `spearman` and
    `pearson` (in [-1, 1])."""
    evaluator = PairScoreEvaluator(
        pairs, gold, batch_size=batch_size, show_progress_bar=show_progress_bar, **predict_kwargs
    )
    return evaluator(model)


def evaluate_classification(
    model: Any,
    pairs: Sequence[tuple[str, str]],
    labels: Sequence[int | str],
    *,
    label2id: Mapping[str, int] | None = None,
    threshold: float = 0.5,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **predict_kwargs: Any,
) -> dict[str, float]:
    """`accuracy` of a classifier cross-encoder on labelled pairs: `PairClassificationEvaluator(pairs, labels,
    ...)(model)` (see there)."""
    evaluator = PairClassificationEvaluator(
        pairs, labels, label2id=label2id, threshold=threshold, batch_size=batch_size,
        show_progress_bar=show_progress_bar, **predict_kwargs,
    )  # fmt: skip
    return evaluator(model)


__all__ = [
    "PairClassificationEvaluator",
    "PairScoreEvaluator",
    "evaluate_classification",
    "evaluate_scores",
    "score_pairs",
]
