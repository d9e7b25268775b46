"""STS Spearman: rank correlation between predicted sentence-pair similarities and gold similarity scores.

This file is both an `evaluate` metric script and a plain Python module. `evaluate.load` copies it into its
module cache and imports it from there, so it must stay self-contained: stdlib, numpy, scipy, datasets and
evaluate only, and no relative imports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import datasets
import evaluate
import numpy as np
from scipy import stats

SIMILARITY_FUNCTIONS: tuple[str, ...] = ("cosine", "dot", "euclidean", "manhattan")
DEFAULT_SCORE_RANGE: tuple[float, float] = (0.0, 5.0)

_DESCRIPTION = """\
Semantic Textual Similarity (STS) evaluation. Computes the Spearman rank correlation (the usual headline
number for STS Benchmark) and the Pearson correlation between predicted similarity scores and gold scores.

Two input modes:

* scores: `predictions` are similarity scores (one float per sentence pair) -> `spearman`, `pearson`.
* embeddings: `embeddings1` and `embeddings2` (two arrays of shape (N, D), row i of each is one side of
  pair i) -> the similarities are computed here with cosine, dot product, negative euclidean distance and
  negative manhattan distance, and the result has `spearman_<fn>` / `pearson_<fn>` for each, plus
  `mse_cosine` and `mae_cosine` (cosine similarity against the gold scores rescaled to [0, 1] with
  `score_range`).

Correlations are in [-1, 1] by default (like scipy); pass `percent=True` to get them x100. All computations
are done in numpy float64.
"""

_CITATION = """\
@inproceedings{cer-etal-2017-semeval,
    title = "{S}em{E}val-2017 Task 1: Semantic Textual Similarity Multilingual and Crosslingual
             Focused Evaluation",
    author = "Cer, Daniel and Diab, Mona and Agirre, Eneko and Lopez-Gazpio, I{\\~n}igo and Specia, Lucia",
    booktitle = "Proceedings of the 11th International Workshop on Semantic Evaluation ({S}em{E}val-2017)",
    year = "2017",
    publisher = "Association for Computational Linguistics",
    pages = "1--14",
    doi = "10.18653/v1/S17-2001",
}
@article{spearman1904proof,
    title = "The Proof and Measurement of Association between Two Things",
    author = "Spearman, Charles",
    journal = "The American Journal of Psychology",
    volume = "15",
    number = "1",
    pages = "72--101",
    year = "1904",
    doi = "10.2307/1412159",
}
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of float, shape (N,)): predicted similarity of each sentence pair (any monotone scale).
        Leave out when passing `embeddings1` / `embeddings2`.
    references (list of float, shape (N,)): gold similarity scores, e.g. 0..5 for STS Benchmark.
    embeddings1 (array-like, shape (N, D)): embeddings of the first sentence of each pair.
    embeddings2 (array-like, shape (N, D)): embeddings of the second sentence of each pair.
    similarity_fns (sequence of str, embeddings mode only): subset of
        ("cosine", "dot", "euclidean", "manhattan"); default all four.
    score_range (tuple (low, high), embeddings mode only): range of the gold scores, used to rescale them to
        [0, 1] for `mse_cosine` / `mae_cosine`. Default (0, 5) as in STS Benchmark.
    percent (bool): multiply the correlations by 100. Default False (values in [-1, 1], like scipy).
        MSE / MAE are never scaled.
Returns:
    scores mode: {"spearman": float, "pearson": float}
    embeddings mode: {"spearman_cosine", "pearson_cosine", "spearman_dot", "pearson_dot",
        "spearman_euclidean", "pearson_euclidean", "spearman_manhattan", "pearson_manhattan",
        "mse_cosine", "mae_cosine"}: floats,
        restricted to the requested `similarity_fns` (mse/mae only when "cosine" is requested).
Examples:
    >>> metric = evaluate.load(STS_SPEARMAN)
    >>> metric.compute(predictions=[0.1, 0.5, 0.9], references=[0.0, 2.5, 5.0])
    {'spearman': 1.0, 'pearson': 0.99...}
    >>> metric.compute(embeddings1=emb1, embeddings2=emb2, references=gold)["spearman_cosine"]
"""


def _describe(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def _as_vector(values: Any, name: str) -> np.ndarray:
    """Convert one-score-per-pair input to a float64 array of shape (N,)."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a sequence of numbers ({type(values).__name__}): {err}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one score per sentence pair), got shape {array.shape}")
    return array


def _check_finite(array: np.ndarray, name: str) -> None:
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        where = f"index {index[0]}" if array.ndim == 1 else f"row {index[0]}, column {index[1]}"
        raise ValueError(
            f"{name} contains a non-finite value ({_describe(float(array[index]))}) at {where}; "
            "all values must be finite"
        )


def _check_pair(x: np.ndarray, y: np.ndarray, x_name: str, y_name: str) -> None:
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{x_name} and {y_name} must have the same length, got {x.shape[0]} {x_name} and {y.shape[0]} {y_name}"
        )
    if x.shape[0] < 2:
        raise ValueError(f"at least 2 sentence pairs are needed to compute a correlation, got {x.shape[0]}")
    _check_finite(x, x_name)
    _check_finite(y, y_name)
    for array, name in ((x, x_name), (y, y_name)):
        # Relative tolerance: cosines of identical vectors differ from 1.0 only by rounding error.
        if np.ptp(array) <= 1e-12 * np.max(np.abs(array)):
            raise ValueError(
                f"{name} is constant (every value is {float(array[0])!r} up to rounding), so the correlation "
                f"is undefined; {name} needs at least two distinct values"
            )


def _correlations(x: np.ndarray, y: np.ndarray, factor: float) -> tuple[float, float]:
    spearman = float(stats.spearmanr(x, y).statistic)
    pearson = float(stats.pearsonr(x, y).statistic)
    return spearman * factor, pearson * factor


def sts_correlations(predictions: Any, references: Any, *, percent: bool = False) -> dict[str, float]:
    """Spearman and Pearson correlation between predicted similarities and gold scores.

    Args:
        predictions: predicted similarity per sentence pair, array-like of shape (N,), N >= 2.
        references: gold similarity score per sentence pair, array-like of shape (N,).
        percent: if True, multiply both correlations by 100. Default False: values in [-1, 1], like scipy.

    Returns:
        `{"spearman": float, "pearson": float}`.

    Raises:
        ValueError: on a length mismatch, fewer than 2 pairs, NaN/inf values or a constant side.
    """
    x = _as_vector(predictions, "predictions")
    y = _as_vector(references, "references")
    _check_pair(x, y, "predictions", "references")
    spearman, pearson = _correlations(x, y, 100.0 if percent else 1.0)
    return {"spearman": spearman, "pearson": pearson}


def _as_embeddings(values: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric array of shape (N, D): {err}") from None
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"{name} must be a 2-D array of shape (N, D) with D >= 1, got shape {array.shape}")
    return array


def _check_embeddings(embeddings1: Any, embeddings2: Any) -> tuple[np.ndarray, np.ndarray]:
    e1 = _as_embeddings(embeddings1, "embeddings1")
    e2 = _as_embeddings(embeddings2, "embeddings2")
    if e1.shape != e2.shape:
        raise ValueError(f"embeddings1 and embeddings2 must have the same shape (N, D), got {e1.shape} and {e2.shape}")
    _check_finite(e1, "embeddings1")
    _check_finite(e2, "embeddings2")
    return e1, e2


def _check_similarity_fns(similarity_fns: str | Iterable[str]) -> list[str]:
    names = [similarity_fns] if isinstance(similarity_fns, str) else list(similarity_fns)
    if not names:
        raise ValueError(f"similarity_fns is empty; choose from {list(SIMILARITY_FUNCTIONS)}")
    for name in names:
        if name not in SIMILARITY_FUNCTIONS:
            raise ValueError(f"unknown similarity function {name!r}; allowed: {list(SIMILARITY_FUNCTIONS)}")
    return list(dict.fromkeys(names))


def _paired(e1: np.ndarray, e2: np.ndarray, similarity_fn: str) -> np.ndarray:
    if similarity_fn == "cosine":
        norms = np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1)
        dots = np.einsum("ij,ij->i", e1, e2)
        # A zero vector has no direction: score it 0 (orthogonal) instead of dividing by zero.
        return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    if similarity_fn == "dot":
        return np.einsum("ij,ij->i", e1, e2)
    diff = e1 - e2
    if similarity_fn == "euclidean":
        return -np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return -np.abs(diff).sum(axis=1)


def paired_similarities(embeddings1: Any, embeddings2: Any, similarity_fn: str = "cosine") -> np.ndarray:
    """Similarity of row i of `embeddings1` with row i of `embeddings2`.

    Args:
        embeddings1: array-like of shape (N, D).
        embeddings2: array-like of shape (N, D).
        similarity_fn: "cosine" (a zero vector gives 0), "dot", "euclidean" (negative L2 distance) or
            "manhattan" (negative L1 distance). Distances are negated: higher always means more similar.

    Returns:
        float64 array of shape (N,).
    """
    (name,) = _check_similarity_fns([similarity_fn])
    e1, e2 = _check_embeddings(embeddings1, embeddings2)
    return _paired(e1, e2, name)


def _check_score_range(score_range: Sequence[float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise ValueError(f"score_range must be a pair (low, high) of numbers, got {score_range!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"score_range must be finite with low < high, got {score_range!r}")
    return low, high


def sts_metrics_from_embeddings(
    embeddings1: Any,
    embeddings2: Any,
    gold: Any,
    similarity_fns: str | Iterable[str] = SIMILARITY_FUNCTIONS,
    score_range: Sequence[float] = DEFAULT_SCORE_RANGE,
    *,
    percent: bool = False,
) -> dict[str, float]:
    """STS metrics from the two embeddings of each sentence pair.

    Args:
        embeddings1: embeddings of the first sentences, array-like of shape (N, D), N >= 2.
        embeddings2: embeddings of the second sentences, array-like of shape (N, D).
        gold: gold similarity scores, array-like of shape (N,), inside `score_range`.
        similarity_fns: which of "cosine", "dot", "euclidean", "manhattan" to evaluate (a single name is
            accepted too). Distances are negated so that higher means more similar.
        score_range: (low, high) of the gold scale, default (0, 5) as in STS Benchmark. Only used to rescale
            gold to [0, 1] as (gold - low) / (high - low) for `mse_cosine` / `mae_cosine`.
        percent: multiply the correlations by 100 (default False: values in [-1, 1]). MSE/MAE are not scaled.

    Returns:
        `spearman_<fn>` and `pearson_<fn>` for each requested function, in the order given, followed by
        `mse_cosine` and `mae_cosine` when "cosine" is requested.

    Raises:
        ValueError: on bad shapes, a length mismatch, fewer than 2 pairs, NaN/inf values, constant
            similarities or gold, an unknown similarity name, a bad `score_range` or gold outside it.
    """
    names = _check_similarity_fns(similarity_fns)
    low, high = _check_score_range(score_range)
    e1, e2 = _check_embeddings(embeddings1, embeddings2)
    y = _as_vector(gold, "gold")
    if e1.shape[0] != y.shape[0]:
        raise ValueError(
            f"embeddings1/embeddings2 and gold must have the same length, got {e1.shape[0]} embedding pairs "
            f"and {y.shape[0]} gold scores"
        )
    _check_finite(y, "gold")
    if "cosine" in names:
        outside = np.flatnonzero((y < low) | (y > high))
        if outside.size:
            i = int(outside[0])
            raise ValueError(
                f"gold score {float(y[i])!r} at index {i} lies outside score_range ({low}, {high}); "
                "pass the score_range of your gold scale"
            )
    factor = 100.0 if percent else 1.0
    results: dict[str, float] = {}
    cosine: np.ndarray | None = None
    for name in names:
        scores = _paired(e1, e2, name)
        _check_pair(scores, y, f"{name} similarity", "gold")
        results[f"spearman_{name}"], results[f"pearson_{name}"] = _correlations(scores, y, factor)
        if name == "cosine":
            cosine = scores
    if cosine is not None:
        error = cosine - (y - low) / (high - low)
        results["mse_cosine"] = float(np.mean(error * error))
        results["mae_cosine"] = float(np.mean(np.abs(error)))
    return results


def _stack_embeddings(predictions: Any, embeddings1: Any, embeddings2: Any, references: Any) -> Any:
    """Turn `embeddings1` / `embeddings2` into evaluate's per-example `predictions`: shape (N, 2, D)."""
    if embeddings1 is None and embeddings2 is None:
        return predictions
    if embeddings1 is None or embeddings2 is None:
        missing = "embeddings1" if embeddings1 is None else "embeddings2"
        raise ValueError(f"{missing} is missing: pass both embeddings1 and embeddings2, each of shape (N, D)")
    if predictions is not None:
        raise ValueError("pass either predictions (similarity scores) or embeddings1/embeddings2, not both")
    e1 = _as_embeddings(embeddings1, "embeddings1")
    e2 = _as_embeddings(embeddings2, "embeddings2")
    if e1.shape != e2.shape:
        raise ValueError(f"embeddings1 and embeddings2 must have the same shape (N, D), got {e1.shape} and {e2.shape}")
    if references is not None and len(references) != e1.shape[0]:
        raise ValueError(
            f"embeddings1/embeddings2 and references must have the same length, got {e1.shape[0]} embedding "
            f"pairs and {len(references)} references"
        )
    return np.stack([e1, e2], axis=1)


def _check_lengths(predictions: Any, references: Any) -> None:
    if predictions is not None and references is not None and len(predictions) != len(references):
        raise ValueError(
            f"predictions and references must have the same length, got {len(predictions)} predictions "
            f"and {len(references)} references"
        )


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class STSSpearman(evaluate.Metric):
    """`evaluate` metric: Spearman/Pearson correlation for Semantic Textual Similarity."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features({"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}),
                # Embeddings mode: each prediction is the pair [embedding1, embedding2] of one example.
                datasets.Features(
                    {
                        "predictions": datasets.Sequence(datasets.Sequence(datasets.Value("float64"))),
                        "references": datasets.Value("float64"),
                    }
                ),
            ],
            reference_urls=[
                "https://aclanthology.org/S17-2001/",
                "https://docs.scipy.org/doc/scipy/reference/generated/scipy.stats.spearmanr.html",
            ],
        )

    def add_batch(
        self,
        *,
        predictions: Any = None,
        references: Any = None,
        embeddings1: Any = None,
        embeddings2: Any = None,
        **kwargs: Any,
    ) -> None:
        """Add a batch: `predictions` (N,) or `embeddings1` + `embeddings2` (N, D), plus `references` (N,)."""
        predictions = _stack_embeddings(predictions, embeddings1, embeddings2, references)
        _check_lengths(predictions, references)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def compute(
        self,
        *,
        predictions: Any = None,
        references: Any = None,
        embeddings1: Any = None,
        embeddings2: Any = None,
        **kwargs: Any,
    ) -> dict[str, float] | None:
        """Compute over everything added so far plus this call's inputs (see the module description)."""
        predictions = _stack_embeddings(predictions, embeddings1, embeddings2, references)
        _check_lengths(predictions, references)
        return super().compute(predictions=predictions, references=references, **kwargs)

    def _compute(
        self,
        predictions: Any,
        references: Any,
        similarity_fns: str | Iterable[str] = SIMILARITY_FUNCTIONS,
        score_range: Sequence[float] = DEFAULT_SCORE_RANGE,
        percent: bool = False,
    ) -> dict[str, float]:
        # Rows of a ragged list cannot form an (N, 2, D) array; let numpy's error surface as a ValueError.
        try:
            stacked = np.asarray(predictions, dtype=np.float64)
        except ValueError as err:
            raise ValueError(f"embedding pairs must all have the same dimension D: {err}") from None
        if stacked.ndim == 3 and stacked.shape[1] == 2:
            return sts_metrics_from_embeddings(
                stacked[:, 0], stacked[:, 1], references, similarity_fns, score_range, percent=percent
            )
        if stacked.ndim != 1:
            raise ValueError(
                "predictions must be similarity scores of shape (N,) or embedding pairs of shape (N, 2, D), "
                f"got shape {stacked.shape}"
            )
        return sts_correlations(stacked, references, percent=percent)
