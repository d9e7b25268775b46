"""Retrieval metrics: values against hand computations, errors, and the `evaluate` module in process and loaded
offline (exact search, which ranks a corpus, is tested in tests/retrieval/test_exact.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hf_siamese.metrics import DEFAULT_K_VALUES, RETRIEVAL, Retrieval, retrieval_metrics

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
L3, L5 = math.log2(3), math.log2(5)  # the discounts of ranks 2 and 4

# Graded judgements (gains 1 and 2, a judged-irrelevant document), a query without any relevant document (q3,
# skipped), a judged query without a ranking (q4, all zeros) and a ranking without judgements (qx, ignored).
QRELS = {
    "q1": {"d1": 2, "d3": 1, "d5": 1, "d4": 0},
    "q2": {"d2": 1},
    "q3": {"d4": 0},
    "q4": {"d6": 1},
}
RANKINGS = {
    "q1": ["d3", "d2", "d1", "d4"],
    "q2": ["d1", "d2", "d3"],
    "q3": ["d4", "d1"],
    "qx": ["d1", "d2"],
}
K = (1, 3, 5)  # 5 is longer than every ranking


def hand_metrics() -> dict[str, float]:
    """The expected values of RANKINGS / QRELS at K, from the formulas, over the 3 evaluated queries q1, q2, q4.

    q1 gains by rank: 1, 0, 2, 0; ideal 2, 1, 1 (3 relevant); q2: relevant d2 at rank 2 (1 relevant); q4: nothing.
    """
    idcg_q1 = 2 + 1 / L3 + 1 / 2
    per_query = {
        "ndcg": ([1 / 2, 2 / idcg_q1, 2 / idcg_q1], [0, 1 / L3, 1 / L3]),
        "mrr": ([1, 1, 1], [0, 1 / 2, 1 / 2]),
        "recall": ([1 / 3, 2 / 3, 2 / 3], [0, 1, 1]),
        "map": ([1 / 3, (1 + 2 / 3) / 3, (1 + 2 / 3) / 3], [0, 1 / 2, 1 / 2]),
        "precision": ([1, 2 / 3, 2 / 5], [0, 1 / 3, 1 / 5]),
    }
    expected: dict[str, float] = {}
    for name, (q1, q2) in per_query.items():
        for k, a, b in zip(K, q1, q2, strict=True):
            expected[f"{name}@{k}"] = (a + b + 0.0) / 3
    expected["num_queries"] = 3
    return expected


# ---------------------------------------------------------------- retrieval_metrics


def test_retrieval_path_is_a_local_metric_folder() -> None:
    assert os.path.isabs(RETRIEVAL)
    assert os.path.isfile(os.path.join(RETRIEVAL, "retrieval.py"))
    assert os.path.isfile(os.path.join(RETRIEVAL, "README.md"))


def test_metrics_against_hand_computation() -> None:
    result = retrieval_metrics(RANKINGS, QRELS, k_values=K)
    expected = hand_metrics()
    assert list(result) == list(expected)  # ndcg@1, ndcg@3, ndcg@5, mrr@1, ..., precision@5, num_queries
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key
    assert result["num_queries"] == 3
    assert all(type(v) is float for k, v in result.items() if k != "num_queries")


def test_percent_and_k_values_order() -> None:
    plain = retrieval_metrics(RANKINGS, QRELS, k_values=K)
    percent = retrieval_metrics(RANKINGS, QRELS, k_values=[5, 1, 3, 3], percent=True)
    assert list(percent) == list(plain)  # sorted, each k once
    for key, value in plain.items():
        assert percent[key] == pytest.approx(value if key == "num_queries" else 100 * value, rel=1e-12)
    assert [k for k in retrieval_metrics(RANKINGS, QRELS) if k.startswith("ndcg")] == [
        f"ndcg@{k}" for k in DEFAULT_K_VALUES
    ]


def test_graded_gain_is_linear() -> None:
    # One query, relevances 2 and 1. Ranked [1-doc, 2-doc]: DCG = 1 + 2/log2(3), IDCG = 2 + 1/log2(3).
    qrels = {"q": {"hi": 2, "lo": 1}}
    worse = retrieval_metrics({"q": ["lo", "hi"]}, qrels, k_values=[1, 2])
    assert worse["ndcg@1"] == pytest.approx(1 / 2, abs=1e-15)
    assert worse["ndcg@2"] == pytest.approx((1 + 2 / L3) / (2 + 1 / L3), abs=1e-15)
    best = retrieval_metrics({"q": ["hi", "lo"]}, qrels, k_values=[1, 2])
    assert best["ndcg@1"] == best["ndcg@2"] == 1.0
    # Relevance does not weigh on MRR / recall / precision / MAP: both orders give the same.
    for name in ("mrr@2", "recall@2", "precision@2", "map@2"):
        assert worse[name] == best[name] == 1.0


def test_k_beyond_ranking_and_documents_outside_qrels() -> None:
    # Precision divides by k, not by the ranking length; unjudged documents count as not relevant.
    result = retrieval_metrics({"q": ["x", "r"]}, {"q": {"r": 1, "s": 3}}, k_values=[1, 100])
    assert result["precision@100"] == pytest.approx(1 / 100, abs=1e-15)
    assert result["recall@100"] == pytest.approx(1 / 2, abs=1e-15)
    assert result["map@100"] == pytest.approx((1 / 2) / 2, abs=1e-15)
    assert result["mrr@1"] == 0.0 and result["mrr@100"] == 0.5
    assert result["ndcg@100"] == pytest.approx((1 / L3) / (3 + 1 / L3), abs=1e-15)


def test_no_relevant_query_is_skipped_and_missing_ranking_counts_zero() -> None:
    with_skipped = retrieval_metrics({"a": ["d"]}, {"a": {"d": 1}, "b": {"d": 0}, "c": {}}, k_values=[1])
    assert with_skipped["num_queries"] == 1 and with_skipped["ndcg@1"] == 1.0
    with_missing = retrieval_metrics({"a": ["d"]}, {"a": {"d": 1}, "b": {"d": 1}}, k_values=[1])
    assert with_missing["num_queries"] == 2 and with_missing["ndcg@1"] == 0.5


@pytest.mark.parametrize(
    ("rankings", "qrels", "k_values", "message"),
    [
        (RANKINGS, QRELS, [1, 0], r"k_values must hold positive ints \(k >= 1\), got 0"),
        (RANKINGS, QRELS, [-3], "got -3"),
        (RANKINGS, QRELS, [], "k_values is empty"),
        (RANKINGS, QRELS, [2.5], "got 2.5"),
        (RANKINGS, {}, K, "qrels is empty"),
        (RANKINGS, {"q1": {"d1": -1}}, K, "negative relevance -1 for document 'd1' of query 'q1'"),
        (RANKINGS, {"q1": {"d1": 1.5}}, K, "must be an int >= 0, got 1.5"),
        (RANKINGS, {"q1": ["d1"]}, K, r"qrels\['q1'\] must be a mapping"),
        (RANKINGS, {"q3": {"d4": 0}}, K, "no query in qrels has a relevant document"),
        ({"q1": ["d3", "d1", "d3"]}, QRELS, K, "ranking of query 'q1' holds document 'd3' more than once"),
        ({"q2": "d2"}, QRELS, K, "ranking of query 'q2' must be a sequence of document ids"),
        ([["d1"]], QRELS, K, "rankings must be a mapping"),
    ],
)
def test_metric_errors(rankings, qrels, k_values, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        retrieval_metrics(rankings, qrels, k_values=k_values)


# ---------------------------------------------------------------- the evaluate metric, in process

# RANKINGS / QRELS as evaluate examples, one per query (q4 has an empty ranking; qx has no judgements, so it is left
# out: as an example with no relevant document it would be skipped anyway).
EXAMPLE_QUERIES = ["q1", "q2", "q3", "q4"]
EXAMPLE_PREDICTIONS = [RANKINGS.get(q, []) for q in EXAMPLE_QUERIES]
EXAMPLE_DICTS = [QRELS[q] for q in EXAMPLE_QUERIES]


@pytest.fixture
def metric(tmp_path: Path) -> Retrieval:
    # The class itself, not evaluate.load (see tests/test_metric.py); evaluate.load is checked in a subprocess below.
    return Retrieval(cache_dir=str(tmp_path), keep_in_memory=True)


def test_metric_rankings_mode_with_dict_references(metric: Retrieval) -> None:
    expected = retrieval_metrics(RANKINGS, QRELS, k_values=K)
    assert metric.compute(predictions=EXAMPLE_PREDICTIONS, references=EXAMPLE_DICTS, k_values=K) == expected


def test_metric_rankings_mode_with_lists_and_relevance(metric: Retrieval) -> None:
    references = [list(judged) for judged in EXAMPLE_DICTS]
    relevance = [list(judged.values()) for judged in EXAMPLE_DICTS]
    got = metric.compute(predictions=EXAMPLE_PREDICTIONS, references=references, relevance=relevance, k_values=K)
    assert got == retrieval_metrics(RANKINGS, QRELS, k_values=K)


def test_metric_lists_without_relevance_are_binary(metric: Retrieval) -> None:
    references = [[d for d, rel in judged.items() if rel > 0] for judged in EXAMPLE_DICTS]
    binary = {q: dict.fromkeys(docs, 1) for q, docs in zip(EXAMPLE_QUERIES, references, strict=True)}
    got = metric.compute(predictions=EXAMPLE_PREDICTIONS, references=references, k_values=K)
    assert got == retrieval_metrics(RANKINGS, binary, k_values=K)


def test_metric_batches_and_single_examples(metric: Retrieval) -> None:
    metric.add_batch(predictions=EXAMPLE_PREDICTIONS[:2], references=EXAMPLE_DICTS[:2])
    metric.add(prediction=EXAMPLE_PREDICTIONS[2], reference=EXAMPLE_DICTS[2])
    metric.add_batch(predictions=EXAMPLE_PREDICTIONS[3:], references=[["d6"]], relevance=[[1]])
    assert metric.compute(k_values=K, percent=True) == retrieval_metrics(RANKINGS, QRELS, k_values=K, percent=True)


def test_metric_on_disk_cache(tmp_path: Path) -> None:
    on_disk = Retrieval(cache_dir=str(tmp_path))
    for start in range(0, 4, 3):
        on_disk.add_batch(
            predictions=EXAMPLE_PREDICTIONS[start : start + 3], references=EXAMPLE_DICTS[start : start + 3]
        )
    assert on_disk.compute(k_values=K) == retrieval_metrics(RANKINGS, QRELS, k_values=K)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"query_embeddings": [[1.0, 0.0]], "references": [["a"]]},
        {"predictions": [["a"]], "references": [["a"]], "corpus_embeddings": [[1.0, 0.0]]},
        {"predictions": [["a"]], "references": [["a"]], "corpus_ids": ["a"]},
    ],
)
def test_metric_refuses_embeddings_naming_exact_search(metric: Retrieval, kwargs: dict) -> None:
    # The metric script holds metrics only; ranking by embeddings is hf_siamese.retrieval's job.
    with pytest.raises(ValueError, match=r"takes rankings .*hf_siamese\.retrieval\.exact_search"):
        metric.compute(**kwargs)
    with pytest.raises(ValueError, match="query_embedding: this metric takes rankings"):
        metric.add(query_embedding=[1.0, 0.0], reference=["a"])


def test_metric_script_imports_only_what_it_promises() -> None:
    import ast

    tree = ast.parse(Path(RETRIEVAL, "retrieval.py").read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))  # no relative import
    assert imported - set(sys.stdlib_module_names) == {"numpy", "datasets", "evaluate"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": [["a"]]}, "references are missing"),
        ({"references": [["a"]]}, "predictions are missing"),
        ({"predictions": [["a"], ["b"]], "references": [["a"]]}, "got 2 predictions and 1 references"),
        ({"predictions": [["a"]], "references": [{"a": 2}], "relevance": [[2]]}, "pass relevance only with lists"),
        ({"predictions": [["a"]], "references": [["a", "b"]], "relevance": [[1]]}, "lists 2 doc ids but its relevance"),
        ({"predictions": [["a"]], "references": [["a"]], "relevance": [[-1]]}, "negative relevance -1"),
        ({"predictions": [["a"]], "references": [["a", "a"]]}, "lists a doc id more than once"),
        ({"predictions": [["a", "a"]], "references": [["a"]]}, "holds document 'a' more than once"),
        ({"predictions": [[1, 2]], "references": [["a"]]}, "ranking 0: document ids must be strings"),
        ({"predictions": [["a"]], "references": [["a"]], "k_values": [0]}, "k_values must hold positive ints"),
        ({"predictions": [["a"]], "references": [[]]}, "no query in qrels has a relevant document"),
        ({"predictions": [], "references": []}, "the retrieval metric got 0 queries"),
    ],
)
def test_evaluate_metric_errors(metric: Retrieval, kwargs: dict, message: str) -> None:
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
    from hf_siamese.metrics import RETRIEVAL

    data = json.loads(sys.argv[1])
    by_folder = evaluate.load(RETRIEVAL)
    by_script = evaluate.load(RETRIEVAL + "/retrieval.py")
    out = {
        "module_file": sys.modules[type(by_folder).__module__].__file__,
        "rankings": by_folder.compute(
            predictions=data["predictions"], references=data["references"], k_values=data["k"]
        ),
        "percent": by_script.compute(
            predictions=data["predictions"], references=data["references"], k_values=data["k"], percent=True
        ),
    }
    try:
        by_folder.compute(predictions=data["predictions"], references=data["references"], k_values=[0])
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
    data = {
        "predictions": EXAMPLE_PREDICTIONS,
        "references": EXAMPLE_DICTS,
        "k": list(K),
    }
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

    assert Path(out["module_file"]).is_relative_to(tmp_path / "hf_home")
    assert out["rankings"] == pytest.approx(hand_metrics(), abs=1e-12)
    assert out["rankings"] == retrieval_metrics(RANKINGS, QRELS, k_values=K)
    assert out["percent"] == retrieval_metrics(RANKINGS, QRELS, k_values=K, percent=True)
    assert "k_values must hold positive ints" in out["error"]
