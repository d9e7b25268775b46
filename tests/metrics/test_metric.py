"""STS metric: values against scipy, similarity functions against hand computations, errors, offline loading."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import hand_similarity
from scipy import stats

from hf_siamese.metrics import (
    SIMILARITY_FUNCTIONS,
    STS_SPEARMAN,
    STSSpearman,
    paired_similarities,
    sts_correlations,
    sts_metrics_from_embeddings,
)

# Ties in both columns so Spearman's rank averaging is exercised.
PRED = [0.91, 0.35, 0.62, 0.62, 0.10, 0.77, 0.48, 0.05]
GOLD = [4.8, 1.5, 3.0, 2.6, 0.4, 4.8, 2.9, 0.0]

E1 = np.array(
    [
        [1.0, 2.0, 2.0],
        [0.5, -1.0, 3.0],
        [2.0, 2.0, 0.0],
        [-1.0, 0.5, 1.5],
        [3.0, 0.0, -2.0],
        [0.2, 0.4, 0.9],
    ]
)
E2 = np.array(
    [
        [2.0, 0.0, 1.0],
        [1.0, -1.5, 2.0],
        [-1.0, 1.0, 1.0],
        [0.0, 1.0, 1.0],
        [-2.0, 1.0, 1.0],
        [0.1, 0.5, 1.0],
    ]
)
E_GOLD = [3.5, 4.5, 1.0, 3.0, 0.5, 5.0]


def scipy_reference(x, y) -> tuple[float, float]:
    return float(stats.spearmanr(x, y).statistic), float(stats.pearsonr(x, y).statistic)


# ---------------------------------------------------------------- plain functions


def test_sts_spearman_path_is_a_local_metric_folder() -> None:
    assert os.path.isabs(STS_SPEARMAN)
    assert os.path.isfile(os.path.join(STS_SPEARMAN, "sts_spearman.py"))
    assert os.path.isfile(os.path.join(STS_SPEARMAN, "README.md"))


def test_sts_correlations_match_scipy() -> None:
    spearman, pearson = scipy_reference(PRED, GOLD)
    result = sts_correlations(PRED, GOLD)
    assert result == {"spearman": pytest.approx(spearman, abs=1e-12), "pearson": pytest.approx(pearson, abs=1e-12)}
    assert all(type(v) is float for v in result.values())


def test_sts_correlations_percent() -> None:
    plain = sts_correlations(PRED, GOLD)
    percent = sts_correlations(PRED, GOLD, percent=True)
    assert percent["spearman"] == pytest.approx(100 * plain["spearman"], rel=1e-12)
    assert percent["pearson"] == pytest.approx(100 * plain["pearson"], rel=1e-12)


def test_float64_internally_and_reproducible() -> None:
    as_float32 = np.asarray(PRED, dtype=np.float32)
    assert sts_correlations(as_float32, GOLD) == sts_correlations(as_float32.astype(np.float64), GOLD)
    assert sts_correlations(PRED, GOLD) == sts_correlations(list(PRED), tuple(GOLD))


def test_hand_computed_pair() -> None:
    # a = (1, 2, 2), b = (2, 0, 1): a.b = 4, |a| = 3, |b| = sqrt(5), a - b = (-1, 2, 1).
    a, b = [[1.0, 2.0, 2.0]], [[2.0, 0.0, 1.0]]
    assert paired_similarities(a, b, "cosine")[0] == pytest.approx(4 / (3 * math.sqrt(5)), abs=1e-15)
    assert paired_similarities(a, b, "dot")[0] == pytest.approx(4.0, abs=1e-15)
    assert paired_similarities(a, b, "euclidean")[0] == pytest.approx(-math.sqrt(6), abs=1e-15)
    assert paired_similarities(a, b, "manhattan")[0] == pytest.approx(-4.0, abs=1e-15)


@pytest.mark.parametrize("name", SIMILARITY_FUNCTIONS)
def test_paired_similarities_against_hand_computation(name: str) -> None:
    got = paired_similarities(E1, E2, name)
    assert got.shape == (len(E1),) and got.dtype == np.float64
    expected = [hand_similarity(a, b, name) for a, b in zip(E1.tolist(), E2.tolist(), strict=True)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_cosine_of_zero_vector_is_zero() -> None:
    assert paired_similarities([[0.0, 0.0]], [[1.0, 2.0]], "cosine").tolist() == [0.0]


def test_metrics_from_embeddings_keys_and_values() -> None:
    result = sts_metrics_from_embeddings(E1, E2, E_GOLD)
    assert list(result) == [
        "spearman_cosine",
        "pearson_cosine",
        "spearman_dot",
        "pearson_dot",
        "spearman_euclidean",
        "pearson_euclidean",
        "spearman_manhattan",
        "pearson_manhattan",
        "mse_cosine",
        "mae_cosine",
    ]
    for name in SIMILARITY_FUNCTIONS:
        sims = [hand_similarity(a, b, name) for a, b in zip(E1.tolist(), E2.tolist(), strict=True)]
        spearman, pearson = scipy_reference(sims, E_GOLD)
        assert result[f"spearman_{name}"] == pytest.approx(spearman, abs=1e-12)
        assert result[f"pearson_{name}"] == pytest.approx(pearson, abs=1e-12)


def test_mse_mae_use_gold_rescaled_by_score_range() -> None:
    cosine = [hand_similarity(a, b, "cosine") for a, b in zip(E1.tolist(), E2.tolist(), strict=True)]
    errors = [c - g / 5.0 for c, g in zip(cosine, E_GOLD, strict=True)]
    result = sts_metrics_from_embeddings(E1, E2, E_GOLD, similarity_fns=["cosine"])
    assert result["mse_cosine"] == pytest.approx(sum(e * e for e in errors) / len(errors), abs=1e-12)
    assert result["mae_cosine"] == pytest.approx(sum(abs(e) for e in errors) / len(errors), abs=1e-12)

    # Same gold on a 1..6 scale with score_range=(1, 6) must give the same errors.
    shifted = sts_metrics_from_embeddings(E1, E2, [g + 1 for g in E_GOLD], "cosine", score_range=(1, 6))
    assert shifted["mse_cosine"] == pytest.approx(result["mse_cosine"], abs=1e-12)
    assert shifted["mae_cosine"] == pytest.approx(result["mae_cosine"], abs=1e-12)


def test_metrics_from_embeddings_subset_and_percent() -> None:
    full = sts_metrics_from_embeddings(E1, E2, E_GOLD)
    subset = sts_metrics_from_embeddings(E1, E2, E_GOLD, similarity_fns=("dot", "manhattan"), percent=True)
    assert list(subset) == ["spearman_dot", "pearson_dot", "spearman_manhattan", "pearson_manhattan"]
    for key, value in subset.items():
        assert value == pytest.approx(100 * full[key], rel=1e-12)
    with_cosine = sts_metrics_from_embeddings(E1, E2, E_GOLD, similarity_fns="cosine", percent=True)
    assert with_cosine["mse_cosine"] == full["mse_cosine"]  # MSE/MAE are never scaled


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("predictions", "references", "message"),
    [
        ([0.1, 0.2, 0.3, 0.4, 0.5], [1, 2, 3, 4], "got 5 predictions and 4 references"),
        ([0.3], [1.0], "at least 2 sentence pairs are needed to compute a correlation, got 1"),
        ([], [], "got 0"),
        ([0.5, 0.5, 0.5], [1, 2, 3], "predictions is constant"),
        ([0.1, 0.2, 0.3], [2, 2, 2], "references is constant"),
        ([0.1, 0.2, float("nan"), 0.4], [1, 2, 3, 4], r"predictions contains a non-finite value \(nan\) at index 2"),
        ([0.1, 0.2, 0.3], [1, float("-inf"), 3], r"references contains a non-finite value \(-inf\) at index 1"),
        ([[0.1, 0.2], [0.3, 0.4]], [1, 2], r"predictions must be 1-D .* got shape \(2, 2\)"),
        (["a", "b"], [1, 2], "predictions must be a sequence of numbers"),
    ],
)
def test_correlation_errors(predictions, references, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sts_correlations(predictions, references)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"similarity_fns": ("cosine", "cos")}, r"unknown similarity function 'cos'; allowed: \['cosine', 'dot'"),
        ({"similarity_fns": ()}, "similarity_fns is empty"),
        ({"embeddings1": E1[:, 0]}, r"embeddings1 must be a 2-D array of shape \(N, D\).*got shape \(6,\)"),
        ({"embeddings2": E2[:, :2]}, r"same shape \(N, D\), got \(6, 3\) and \(6, 2\)"),
        ({"embeddings1": E1[:5], "embeddings2": E2[:5]}, "got 5 embedding pairs and 6 gold scores"),
        ({"embeddings1": np.where(E1 == 0.5, np.nan, E1)}, r"embeddings1 .*\(nan\) at row 1, column 0"),
        ({"embeddings2": E1}, r"cosine similarity is constant"),
        ({"gold": [1.0, 2.0, 3.0, 4.0, 5.0, 5.5]}, r"gold score 5.5 at index 5 lies outside score_range"),
        ({"gold": [1.0, 2.0, float("nan"), 4.0, 5.0, 0.0]}, r"gold contains a non-finite value \(nan\) at index 2"),
        ({"score_range": (5, 0)}, r"score_range must be finite with low < high, got \(5, 0\)"),
        ({"score_range": 5}, "score_range must be a pair"),
        ({"embeddings1": E1[:1], "embeddings2": E2[:1], "gold": [1.0]}, "at least 2 sentence pairs"),
    ],
)
def test_embedding_errors(kwargs: dict, message: str) -> None:
    arguments = {"embeddings1": E1, "embeddings2": E2, "gold": E_GOLD, **kwargs}
    with pytest.raises(ValueError, match=message):
        sts_metrics_from_embeddings(**arguments)


def test_paired_similarities_unknown_name() -> None:
    with pytest.raises(ValueError, match=r"unknown similarity function 'l2'; allowed"):
        paired_similarities(E1, E2, "l2")


# ---------------------------------------------------------------- the evaluate metric, in process


@pytest.fixture
def metric(tmp_path: Path) -> STSSpearman:
    # The class itself, not evaluate.load: loading in this process would pin evaluate's dynamic-module cache
    # (sys.path / sys.modules) for every later test. evaluate.load is checked in a subprocess below.
    return STSSpearman(cache_dir=str(tmp_path), keep_in_memory=True)


def test_metric_scores_mode(metric: STSSpearman) -> None:
    assert metric.compute(predictions=PRED, references=GOLD) == sts_correlations(PRED, GOLD)
    assert metric.compute(predictions=PRED, references=GOLD, percent=True) == sts_correlations(PRED, GOLD, percent=True)


def test_metric_embeddings_mode_and_batches(metric: STSSpearman) -> None:
    expected = sts_metrics_from_embeddings(E1, E2, E_GOLD)
    assert metric.compute(embeddings1=E1, embeddings2=E2, references=E_GOLD) == expected
    metric.add_batch(embeddings1=E1[:4], embeddings2=E2[:4], references=E_GOLD[:4])
    metric.add_batch(embeddings1=E1[4:], embeddings2=E2[4:], references=E_GOLD[4:])
    assert metric.compute(similarity_fns=["cosine"], percent=True) == sts_metrics_from_embeddings(
        E1, E2, E_GOLD, similarity_fns=["cosine"], percent=True
    )


def test_metric_on_disk_cache(tmp_path: Path) -> None:
    on_disk = STSSpearman(cache_dir=str(tmp_path))
    for start in range(0, len(PRED), 3):
        on_disk.add_batch(predictions=PRED[start : start + 3], references=GOLD[start : start + 3])
    assert on_disk.compute() == sts_correlations(PRED, GOLD)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": PRED[:3], "references": GOLD}, "got 3 predictions and 8 references"),
        ({"embeddings1": E1, "embeddings2": E2, "references": E_GOLD[:4]}, "6 embedding pairs and 4 references"),
        ({"embeddings1": E1, "embeddings2": E2[:, :2], "references": E_GOLD}, r"got \(6, 3\) and \(6, 2\)"),
        ({"embeddings1": E1, "references": E_GOLD}, "embeddings2 is missing"),
        ({"predictions": E_GOLD, "embeddings1": E1, "embeddings2": E2, "references": E_GOLD}, "not both"),
        ({"predictions": [0.4, 0.4, 0.4], "references": [1, 2, 3]}, "predictions is constant"),
        ({"predictions": [0.1, float("inf"), 0.2], "references": [1, 2, 3]}, r"\(inf\) at index 1"),
        ({"embeddings1": E1, "embeddings2": E2, "references": E_GOLD, "similarity_fns": ["x"]}, "'x'; allowed"),
    ],
)
def test_metric_errors(metric: STSSpearman, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        metric.compute(**kwargs)


# ---------------------------------------------------------------- evaluate.load, offline, in a clean process

OFFLINE_SCRIPT = textwrap.dedent(
    """
    import json, socket, sys

    def no_network(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    socket.socket.connect = no_network
    socket.create_connection = no_network
    socket.getaddrinfo = no_network

    import evaluate
    import numpy as np
    from hf_siamese.metrics import STS_SPEARMAN

    data = json.loads(sys.argv[1])
    by_folder = evaluate.load(STS_SPEARMAN)
    by_script = evaluate.load(STS_SPEARMAN + "/sts_spearman.py")
    e1, e2 = np.array(data["e1"]), np.array(data["e2"])
    out = {
        "module_file": sys.modules[type(by_folder).__module__].__file__,
        "scores": by_folder.compute(predictions=data["pred"], references=data["gold"]),
        "percent": by_script.compute(predictions=data["pred"], references=data["gold"], percent=True),
        "embeddings": by_folder.compute(embeddings1=e1, embeddings2=e2, references=data["e_gold"]),
    }
    try:
        by_folder.compute(predictions=data["pred"][:3], references=data["gold"])
    except ValueError as err:
        out["error"] = str(err)
    print(json.dumps(out))
    """
)


def test_evaluate_load_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_CACHE"))}
    env.update(
        HF_HOME=str(tmp_path / "hf_home"),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    data = {"pred": PRED, "gold": GOLD, "e1": E1.tolist(), "e2": E2.tolist(), "e_gold": E_GOLD}
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT, json.dumps(data)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    # The copied script lives in the temporary HF_HOME, not in ~/.cache.
    assert Path(out["module_file"]).is_relative_to(tmp_path / "hf_home")
    spearman, pearson = scipy_reference(PRED, GOLD)
    assert out["scores"]["spearman"] == pytest.approx(spearman, abs=1e-12)
    assert out["scores"]["pearson"] == pytest.approx(pearson, abs=1e-12)
    assert out["percent"]["spearman"] == pytest.approx(100 * spearman, rel=1e-12)
    assert out["percent"]["pearson"] == pytest.approx(100 * pearson, rel=1e-12)
    assert out["embeddings"] == pytest.approx(sts_metrics_from_embeddings(E1, E2, E_GOLD), abs=1e-12)
    assert "got 3 predictions and 8 references" in out["error"]
