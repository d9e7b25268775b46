"""PNG plots: files are real PNGs, writes are atomic, bad inputs raise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from hf_siamese.plots import plot_similarity_heatmap, plot_similarity_scatter  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 5_000  # a real figure, not an empty image
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")], "temp file left behind"


def test_scatter_writes_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, size=50)
    predicted = gold / 5 + rng.normal(scale=0.1, size=50)
    target = tmp_path / "nested" / "scatter.png"
    assert plot_similarity_scatter(predicted, gold, target, title="STSb dev") == str(target)
    assert_png(target)


def test_scatter_replaces_existing_file_and_handles_constant_input(tmp_path: Path) -> None:
    target = tmp_path / "scatter.png"
    target.write_bytes(b"old")
    plot_similarity_scatter([0.5, 0.5, 0.5], [1.0, 2.0, 3.0], str(target))
    assert_png(target)


@pytest.mark.parametrize(
    ("predicted", "gold", "message"),
    [
        ([0.1, 0.2, 0.3], [1.0, 2.0], "same length, got 3 and 2"),
        ([0.1], [1.0], "at least 2 points"),
        ([0.1, float("nan")], [1.0, 2.0], r"predicted contains a non-finite value \(nan\) at index 1"),
        ([[0.1, 0.2]], [1.0], "must be 1-D"),
    ],
)
def test_scatter_bad_inputs(tmp_path: Path, predicted, gold, message: str) -> None:
    target = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=message):
        plot_similarity_scatter(predicted, gold, target)
    assert not target.exists()


def test_heatmap_small_annotated_and_long_labels(tmp_path: Path) -> None:
    sentences = ["A man is playing a guitar.", "Someone plays music. " * 5, "The stock market fell today."]
    matrix = np.array([[1.0, 0.8, 0.1], [0.8, 1.0, 0.05], [0.1, 0.05, 1.0]])
    target = tmp_path / "heatmap.png"
    assert plot_similarity_heatmap(sentences, matrix, target, title="cosine") == str(target)
    assert_png(target)


def test_heatmap_large_not_annotated(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    matrix = rng.uniform(-1, 1, size=(20, 20))
    target = tmp_path / "big.png"
    plot_similarity_heatmap([f"sentence {i}" for i in range(20)], matrix.tolist(), target)
    assert_png(target)


@pytest.mark.parametrize(
    ("sentences", "matrix", "message"),
    [
        (["a", "b"], np.ones((2, 3)), r"must be square \(n, n\), got shape \(2, 3\)"),
        (["a", "b", "c"], np.eye(2), r"2x2 but there are 3 sentences; expected shape \(3, 3\)"),
        (["a"], np.ones(1), r"got shape \(1,\)"),
        ([], np.ones((0, 0)), "sentences is empty"),
        ("ab", np.eye(2), "sequence of strings"),
        (["a", 3], np.eye(2), "sequence of strings"),
        (["a", "b"], [[1.0, float("inf")], [0.0, 1.0]], r"non-finite value \(inf\) at \[0, 1\]"),
    ],
)
def test_heatmap_bad_inputs(tmp_path: Path, sentences, matrix, message: str) -> None:
    target = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=message):
        plot_similarity_heatmap(sentences, matrix, target)
    assert not target.exists()


def test_missing_matplotlib_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r'pip install "hf-siamese\[plots\]"'):
        plot_similarity_scatter([0.1, 0.2], [1.0, 2.0], tmp_path / "x.png")
