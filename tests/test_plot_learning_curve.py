"""plot_learning_curve: writes a real PNG atomically, skips missing points, names the bad value on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from hf_siamese.plots import plot_learning_curve  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = [50, 100, 350, 5749]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 5_000  # a real figure, not an empty image
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")], "temp file left behind"


def test_learning_curve_writes_png(tmp_path: Path) -> None:
    curves = {
        "hf-siamese": [[70.1, 71.0, 69.5], [75.0, 76.2, 74.9], [80.3, 80.9, 81.0], [85.0, 85.1, 84.8]],
        "sentence-transformers": [[70.0, 70.5, 69.9], [75.1, 75.9, 74.0], [80.0, 81.0, 80.2], [85.0, 84.9, 85.2]],
    }
    target = tmp_path / "nested" / "curve.png"
    baselines = {"zero-shot": 82.03}
    written = plot_learning_curve(SIZES, curves, target, title="STSb test", ylabel="Spearman x100", baselines=baselines)
    assert written == str(target)
    assert_png(target)


def test_learning_curve_single_seed_and_missing_points(tmp_path: Path) -> None:
    # One score per size (no band), and sizes not run yet (empty lists) are left out; an old file is replaced.
    target = tmp_path / "curve.png"
    target.write_bytes(b"old")
    curves = {"ours": [[60.0], [65.0], [], []], "random init": [[], [], [], []]}
    plot_learning_curve(SIZES, curves, str(target))
    assert_png(target)


@pytest.mark.parametrize(
    ("sizes", "curves", "message"),
    [
        ([], {"a": []}, "sizes is empty"),
        ([0, 10], {"a": [[1.0], [2.0]]}, r"sizes must be positive .* got 0 at index 0"),
        ([10, 10], {"a": [[1.0], [2.0]]}, r"strictly increasing, got 10 after 10 at index 1"),
        ([10, float("nan")], {"a": [[1.0], [2.0]]}, r"sizes contains a non-finite value \(nan\) at index 1"),
        ([10, 20], {}, "non-empty dict"),
        ([10, 20], [[1.0], [2.0]], "non-empty dict"),
        ([10, 20], {"ours": [[1.0]]}, r"curve 'ours' has 1 score lists for 2 sizes"),
        ([10, 20], {"ours": "ab"}, r"curve 'ours' must be a list of score lists"),
        ([10, 20], {"ours": [1.0, 2.0]}, r"curve 'ours' at size 10: expected a list of scores .* got 1.0"),
        ([10, 20], {"ours": [[1.0], [float("inf")]]}, r"curve 'ours' at size 20 contains a non-finite value \(inf\)"),
        ([10, 20], {"ours": [[1.0], ["x"]]}, r"curve 'ours' at size 20 must be a sequence of numbers"),
        ([10, 20], {"ours": [[], []]}, "no scores at all"),
    ],
)
def test_learning_curve_bad_inputs(tmp_path: Path, sizes, curves, message: str) -> None:
    target = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=message):
        plot_learning_curve(sizes, curves, target)
    assert not target.exists()


@pytest.mark.parametrize("value", [float("nan"), "82", None, True])
def test_learning_curve_bad_baseline(tmp_path: Path, value) -> None:
    target = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=r"baseline 'zero-shot' must be a finite number, got "):
        plot_learning_curve([10, 20], {"ours": [[1.0], [2.0]]}, target, baselines={"zero-shot": value})
    assert not target.exists()
