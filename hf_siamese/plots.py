"""PNG plots for similarity evaluation and learning curves. Needs the optional extra: `pip install "hf-siamese[plots]"`.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot), so no screen is needed and the caller's
pyplot backend and global figure state are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from .storage import write_atomic

MAX_LABEL_CHARS = 40
MAX_ANNOTATED_SIZE = 12


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            f'Plotting needs matplotlib, which is an optional extra: pip install "hf-siamese[plots]" ({err})'
        ) from None
    return Figure, FigureCanvasAgg


def _as_vector(values: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a sequence of numbers: {err}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per sentence pair), got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name} contains a non-finite value ({array[bad[0]]}) at index {int(bad[0])}")
    return array


def _save(figure: Any, canvas_cls: Any, path: str | os.PathLike[str]) -> str:
    """Render `figure` to PNG at `path` atomically: temp file in the same folder, then one rename (`write_atomic`)."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    canvas_cls(figure)

    def write(temporary: Path) -> None:
        with open(temporary, "xb") as handle:  # honours the umask like any write (mkstemp's 0600 would not)
            figure.savefig(handle, format="png", dpi=100)

    write_atomic(target, write)
    return target


def plot_similarity_scatter(
    predicted: Sequence[float] | np.ndarray,
    gold: Sequence[float] | np.ndarray,
    path: str | os.PathLike[str],
    title: str | None = None,
) -> str:
    """Scatter plot of predicted similarity (y) against gold score (x), saved as PNG.

    Args:
        predicted: predicted similarity per sentence pair, shape (N,), N >= 2, finite.
        gold: gold similarity score per pair, shape (N,), finite (e.g. 0..5 for STS Benchmark).
        path: PNG file to write; missing parent folders are created, an existing file is replaced atomically.
        title: first title line; the second line always shows Spearman x100 with 2 decimals
            ("undefined" if either side is constant).

    Returns:
        `path` as a string.
    """
    x = _as_vector(gold, "gold")
    y = _as_vector(predicted, "predicted")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"predicted and gold must have the same length, got {y.shape[0]} and {x.shape[0]}")
    if x.shape[0] < 2:
        raise ValueError(f"at least 2 points are needed for a scatter with a correlation, got {x.shape[0]}")
    if np.all(x == x[0]) or np.all(y == y[0]):
        spearman = "undefined (constant input)"
    else:
        spearman = f"{100.0 * float(stats.spearmanr(y, x).statistic):.2f}"

    figure_cls, canvas_cls = _matplotlib()
    figure = figure_cls(figsize=(6.0, 5.0))
    axes = figure.add_subplot()
    axes.scatter(x, y, s=12, alpha=0.6, edgecolors="none")
    axes.set_xlabel("gold score")
    axes.set_ylabel("predicted similarity")
    axes.set_title(f"{title or 'Predicted similarity vs gold score'}\nSpearman x100: {spearman}")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    return _save(figure, canvas_cls, path)


def _shorten(label: str) -> str:
    label = " ".join(label.split())
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"


def plot_similarity_heatmap(
    sentences: Sequence[str],
    similarity_matrix: Sequence[Sequence[float]] | np.ndarray,
    path: str | os.PathLike[str],
    title: str | None = None,
) -> str:
    """Heatmap of a sentence-by-sentence similarity matrix, saved as PNG.

    Args:
        sentences: the n sentences labelling rows and columns; labels longer than 40 characters are cut.
        similarity_matrix: shape (n, n), finite; entry [i, j] is the similarity of sentence i and sentence j.
            Cells are annotated with their value (2 decimals) when n <= 12.
        path: PNG file to write; missing parent folders are created, an existing file is replaced atomically.
        title: figure title, default "Similarity matrix".

    Returns:
        `path` as a string.
    """
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must be a sequence of strings")
    n = len(sentences)
    if n == 0:
        raise ValueError("sentences is empty; at least one sentence is needed")
    try:
        matrix = np.asarray(similarity_matrix, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"similarity_matrix must be a numeric (n, n) array: {err}") from None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"similarity_matrix must be square (n, n), got shape {matrix.shape}")
    if matrix.shape[0] != n:
        raise ValueError(
            f"similarity_matrix is {matrix.shape[0]}x{matrix.shape[1]} but there are {n} sentences; "
            f"expected shape ({n}, {n})"
        )
    bad = np.argwhere(~np.isfinite(matrix))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(f"similarity_matrix contains a non-finite value ({matrix[i, j]}) at [{i}, {j}]")

    figure_cls, canvas_cls = _matplotlib()
    side = min(4.0 + 0.55 * n, 30.0)
    figure = figure_cls(figsize=(side + 1.5, side))
    axes = figure.add_subplot()
    image = axes.imshow(matrix, cmap="viridis", aspect="equal")
    figure.colorbar(image, ax=axes, label="similarity", fraction=0.046, pad=0.04)
    labels = [_shorten(s) for s in sentences]
    axes.set_xticks(range(n), labels=labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
    axes.set_yticks(range(n), labels=labels, fontsize=8)
    if n <= MAX_ANNOTATED_SIZE:
        low, high = float(matrix.min()), float(matrix.max())
        middle = (low + high) / 2.0
        for i in range(n):
            for j in range(n):
                # viridis is dark at the low end: white text there, black on the bright half.
                color = "white" if matrix[i, j] < middle or low == high else "black"
                axes.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", color=color, fontsize=8)
    axes.set_title(title or "Similarity matrix")
    figure.tight_layout()
    return _save(figure, canvas_cls, path)


def _learning_curve_inputs(
    sizes: Sequence[float], curves: dict[str, Sequence[Sequence[float]]]
) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
    """Checked copies of `plot_learning_curve`'s inputs; every problem is a ValueError naming the bad value."""
    x = _as_vector(sizes, "sizes")
    if x.size == 0:
        raise ValueError("sizes is empty; at least one training size is needed")
    if np.any(x <= 0):
        index = int(np.flatnonzero(x <= 0)[0])
        raise ValueError(f"sizes must be positive (the x axis is logarithmic), got {x[index]:g} at index {index}")
    if np.any(np.diff(x) <= 0):
        index = int(np.flatnonzero(np.diff(x) <= 0)[0]) + 1
        raise ValueError(f"sizes must be strictly increasing, got {x[index]:g} after {x[index - 1]:g} at index {index}")
    if not isinstance(curves, dict) or not curves:
        raise ValueError("curves must be a non-empty dict {name: one list of scores per size}")
    checked: dict[str, list[np.ndarray]] = {}
    for name, per_size in curves.items():
        if isinstance(per_size, (str, bytes)) or not hasattr(per_size, "__len__"):
            raise ValueError(f"curve {name!r} must be a list of score lists (one per size), got {per_size!r}")
        if len(per_size) != x.size:
            raise ValueError(
                f"curve {name!r} has {len(per_size)} score lists for {x.size} sizes; give one list of scores per size"
            )
        checked[name] = []
        for size, scores in zip(x, per_size, strict=True):
            where = f"curve {name!r} at size {size:g}"
            if np.ndim(scores) == 0:
                raise ValueError(f"{where}: expected a list of scores (one per seed), got {scores!r}")
            checked[name].append(_as_vector(scores, where))
    if not any(s.size for lists in checked.values() for s in lists):
        raise ValueError("curves hold no scores at all; nothing to plot")
    return x, checked


def plot_learning_curve(
    sizes: Sequence[float],
    curves: dict[str, Sequence[Sequence[float]]],
    path: str | os.PathLike[str],
    title: str | None = None,
    ylabel: str = "score",
    baselines: dict[str, float] | None = None,
) -> str:
    """Score against training-set size, one line per curve, saved as PNG.

    Each curve is drawn as the mean over its scores at every size (e.g. one score per seed), with a shaded band from
    the lowest to the highest score; the x axis is logarithmic and labelled with the sizes themselves.

    Args:
        sizes: the training-set sizes, positive and strictly increasing, e.g. `[50, 100, 350, 5749]`.
        curves: `{name: [scores at sizes[0], scores at sizes[1], ...]}`, one list of finite scores per size; an
            empty list leaves that point out (a run that has not finished yet).
        path: PNG file to write; missing parent folders are created, an existing file is replaced atomically.
        title: figure title, default "Learning curve".
        ylabel: label of the y axis.
        baselines: `{name: score}` drawn as dashed horizontal lines, e.g. the model's score before fine-tuning.

    Returns:
        `path` as a string.
    """
    x, checked = _learning_curve_inputs(sizes, curves)
    references = dict(baselines or {})
    for name, value in references.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value):
            raise ValueError(f"baseline {name!r} must be a finite number, got {value!r}")
    figure_cls, canvas_cls = _matplotlib()
    figure = figure_cls(figsize=(7.0, 4.5))
    axes = figure.add_subplot()
    for name, per_size in checked.items():
        present = [i for i, scores in enumerate(per_size) if scores.size]
        if not present:
            continue
        at = x[present]
        mean = np.array([per_size[i].mean() for i in present])
        low = np.array([per_size[i].min() for i in present])
        high = np.array([per_size[i].max() for i in present])
        (line,) = axes.plot(at, mean, marker="o", markersize=4, label=name)
        axes.fill_between(at, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    for name, value in references.items():
        axes.axhline(value, linestyle="--", linewidth=1, color="grey")
        axes.annotate(
            f"{name}: {value:g}", (x[-1], value), textcoords="offset points", xytext=(0, -11), ha="right", fontsize=8
        )
    axes.set_xscale("log")
    axes.set_xticks(x, labels=[f"{v:g}" for v in x])
    axes.minorticks_off()
    axes.set_xlabel("training pairs")
    axes.set_ylabel(ylabel)
    axes.set_title(title or "Learning curve")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    return _save(figure, canvas_cls, path)
