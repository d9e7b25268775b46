"""The IVF over an index's compact codes (`compact_ivf.py`): built for int8 and binary with approximate=True, its
nprobe the smallest measured to keep the exact compact search's rescored top 10, searched at it by default, exactly
the exact search where every list is probed, a stopped build leaving the previous index as it was, the CLI, and bad
inputs refused naming the value and what is accepted."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.retrieval.exact import unit_rows
from hf_siamese.retrieval.index import compact_ivf
from hf_siamese.retrieval.index.additions import set_precision
from hf_siamese.retrieval.index.ann import RECALL_TARGET
from hf_siamese.retrieval.index.ann_build import nprobe_ladder
from hf_siamese.retrieval.index.compact import CompactPart, write_compact_part
from hf_siamese.retrieval.stores import build_index, load_index

pytest.importorskip("faiss")

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell"]


def _clustered(rows: int = 2400, dim: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(unit rows around 30 centers, 9 queries near some of them): clustered, so a few lists hold the neighbours."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((30, dim)).astype(np.float32)
    vectors = centers[rng.integers(0, 30, rows)] + 0.5 * rng.standard_normal((rows, dim)).astype(np.float32)
    queries = centers[:9] + 0.5 * rng.standard_normal((9, dim)).astype(np.float32)
    return unit_rows(vectors), unit_rows(queries)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    vectors, _ = _clustered()
    root = tmp_path_factory.mktemp("compact_ivf")
    for precision in ("int8", "binary"):
        write_compact_part(root / precision, vectors, precision, "cosine", None, approximate=True)
        write_compact_part(root / f"{precision}-exact", vectors, precision, "cosine", None)
    return {"root": root}


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_the_ivf_is_built_and_its_nprobe_the_smallest_reaching_the_target(parts, precision: str) -> None:
    part = CompactPart.load(parts["root"] / precision)
    record = part.approximate
    assert (parts["root"] / precision / compact_ivf.IVF_FILE).is_file()
    assert record["lists"] == compact_ivf.compact_lists(2400, 64) == 256  # 4 x sqrt(2400) = 196 -> 256
    assert record["queries"] == 1000 and record["measured_on"] == "held-out corpus rows"
    assert record["recall@10"] >= RECALL_TARGET and record["nprobe"] < record["lists"]  # clustered: a few lists
    curve = record["curve"]
    assert list(curve) == [str(n) for n in nprobe_ladder(256)[: len(curve)]] and list(curve)[-1] == str(
        record["nprobe"]
    )
    assert all(value < RECALL_TARGET for value in list(curve.values())[:-1])
    saved = json.loads((parts["root"] / precision / "compact.json").read_text())
    assert saved["approximate"] == record


@pytest.mark.parametrize("precision", ["int8", "binary"])
@pytest.mark.parametrize("rescore", [0, None, 2])
def test_probing_every_list_gives_the_exact_compact_search(parts, precision: str, rescore: int | None) -> None:
    vectors, queries = _clustered()
    part, exact = CompactPart.load(parts["root"] / precision), CompactPart.load(parts["root"] / f"{precision}-exact")
    expected = exact.search(queries, 10, vectors, rescore)
    everything = part.search(queries, 10, vectors, rescore, nprobe=part.approximate["lists"])
    assert np.array_equal(everything[1], expected[1]) and np.array_equal(everything[0], expected[0])
    # the IVF itself holds every row with its code: at every list its compact scores are the exact scan's
    index = compact_ivf.load_ivf(part.folder, precision)
    scores, rows = compact_ivf.ivf_candidates(part, index, queries, 300, part.approximate["lists"])
    exact_scores, exact_rows = exact.candidates(queries, 300)
    assert np.array_equal(np.sort(scores, axis=1), np.sort(exact_scores, axis=1))
    if precision == "int8":  # float scores: no ties to break otherwise
        assert np.array_equal(np.sort(rows, axis=1), np.sort(exact_rows, axis=1))


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_the_search_probes_the_recorded_nprobe_unless_told(parts, precision: str) -> None:
    vectors, queries = _clustered()
    part = CompactPart.load(parts["root"] / precision)
    recorded = part.approximate["nprobe"]
    default = part.search(queries, 10, vectors)
    assert np.array_equal(default[1], part.search(queries, 10, vectors, nprobe=recorded)[1])
    _, one = part.search(queries, 10, vectors, rescore=0, nprobe=1)
    exact = CompactPart.load(parts["root"] / f"{precision}-exact").search(queries, 10, vectors)
    assert (default[1] == exact[1]).mean() >= 0.9  # the recorded nprobe keeps the exact top 10 (0.999 on 1000 rows)
    part.nprobe = 1
    assert np.array_equal(part.search(queries, 10, vectors, rescore=0)[1], one)
    _, five = part.search(queries, 5, vectors)
    _, fifty = part.search(queries, 50, vectors)
    assert np.array_equal(fifty[:, :5], five)  # the same candidates for every top_k up to 100
    for bad, message in ((0, "nprobe=0: expected an int >= 1"), (True, "nprobe=True")):
        with pytest.raises(ValueError, match=message):
            part.search(queries, 10, vectors, nprobe=bad)
    with pytest.raises(ValueError, match="nprobe=4: these compact vectors have no IVF"):
        CompactPart.load(parts["root"] / f"{precision}-exact").search(queries, 10, vectors, nprobe=4)


def test_without_faiss_the_codes_are_searched_exactly(parts, monkeypatch, caplog) -> None:
    from hf_siamese.retrieval.index import compact

    vectors, queries = _clustered()
    exact = CompactPart.load(parts["root"] / "binary-exact").search(queries, 10, vectors, rescore=0)
    monkeypatch.setattr(compact, "faiss_available", lambda: False)
    part = CompactPart.load(parts["root"] / "binary")
    with caplog.at_level("WARNING"):
        found = part.search(queries, 10, vectors, rescore=0)
        part.search(queries, 10, vectors, rescore=0)
    assert np.array_equal(found[1], exact[1]) and np.array_equal(found[0], exact[0])
    assert caplog.text.count("faiss is not installed: the compact codes are searched exactly") == 1


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("compact_ivf_index")
    rng = random.Random(7)
    texts = (" ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(4, 10))) for _ in range(80))
    corpus = list(dict.fromkeys(texts))[:60]
    model = make_tiny_model()
    model.save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    build_index(
        model, corpus, root / "binary", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False,
        precision="binary",
    )  # fmt: skip
    return root


def test_an_index_built_and_converted_with_the_ivf(built: Path, tiny_tokenizer, tmp_path: Path) -> None:
    model = make_tiny_model()
    corpus = (built / "corpus.txt").read_text().split("\n")[:-1]
    index = build_index(
        model, corpus, tmp_path / "ivf", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False,
        precision="int8", approximate=True, calibration_queries=QUERIES,
    )  # fmt: skip
    record = index.info["compact"]["approximate"]
    assert record["lists"] == 32 and record["queries"] == 3 and record["measured_on"] == "calibration queries"
    assert index.backend == "approximate" and index.info["backend"] == "exact"  # no ANN of the float32 vectors
    queries = model.encode(QUERIES, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    exact = load_index(built / "binary")
    converted = set_precision(tmp_path / "ivf", "binary", approximate=True)
    assert converted.compact.approximate["measured_on"] == "held-out corpus rows"
    card = (tmp_path / "ivf" / "README.md").read_text()  # written with index.json
    assert "binary (8 bytes a document, float32 128), the best 4 x max(top-k, 100) rescored" in card
    assert "; candidates through an IVF over the codes (32 lists, nprobe " in card
    converted.compact.nprobe = converted.compact.approximate["lists"]
    assert np.array_equal(converted.dense_rows(queries, 5)[1], exact.dense_rows(queries, 5)[1])
    plain = set_precision(tmp_path / "ivf", "binary")
    assert plain.compact.approximate is None and not (tmp_path / "ivf" / "compact" / "ivf.faiss").exists()


def test_a_stopped_ivf_build_leaves_the_previous_index(
    built: Path, tiny_tokenizer, tmp_path: Path, monkeypatch
) -> None:
    shutil.copytree(built / "binary", tmp_path / "index")
    before = json.loads((tmp_path / "index" / "index.json").read_text())

    def stopped(index, path):
        path.write_bytes(b"half an index")
        raise KeyboardInterrupt

    monkeypatch.setattr(compact_ivf, "write_ivf", stopped)
    with pytest.raises(KeyboardInterrupt):
        set_precision(tmp_path / "index", "int8", approximate=True)
    index = load_index(tmp_path / "index")
    assert index.precision == "binary" and index.compact.approximate is None
    assert not (tmp_path / "index" / ".compact.building").exists()
    assert sorted(p.name for p in (tmp_path / "index" / "compact").iterdir()) == ["codes.npy", "compact.json"]
    model = make_tiny_model()
    corpus = (built / "corpus.txt").read_text().split("\n")[:-1]
    with pytest.raises(KeyboardInterrupt):
        build_index(
            model, corpus, tmp_path / "index", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False,
            precision="int8", approximate=True, overwrite=True,
        )  # fmt: skip
    assert json.loads((tmp_path / "index" / "index.json").read_text()) == before
    assert load_index(tmp_path / "index").search(model, QUERIES[:1], top_k=2, tokenizer=tiny_tokenizer)[0]
    monkeypatch.undo()  # the next build, uninterrupted, starts the compact part afresh
    index = build_index(
        model, corpus, tmp_path / "index", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False,
        precision="int8", approximate=True, overwrite=True,
    )  # fmt: skip
    assert index.precision == "int8" and index.compact.approximate["lists"] == 32


def test_bad_inputs_are_refused_naming_the_value(built: Path, tiny_tokenizer, tmp_path: Path) -> None:
    model = make_tiny_model()
    corpus = ["one text", "another text"]
    float16 = "precision='float16': the approximate index over compact codes serves precision int8 and binary"
    with pytest.raises(ValueError, match=float16):
        build_index(model, corpus, tmp_path / "a", tokenizer=tiny_tokenizer, precision="float16", approximate=True)
    with pytest.raises(ValueError, match=float16):
        set_precision(built / "binary", "float16", approximate=True)
    with pytest.raises(ValueError, match="precision='float32': set_precision writes compact codes"):
        set_precision(built / "binary", "float32", approximate=True)
    manhattan = make_tiny_model()
    manhattan.config.similarity = "manhattan"
    with pytest.raises(ValueError, match="the 'manhattan' similarity has no faiss index; faiss serves cosine"):
        build_index(manhattan, corpus, tmp_path / "b", tokenizer=tiny_tokenizer, precision="binary", approximate=True)
    euclidean = make_tiny_model()
    euclidean.config.similarity = "euclidean"
    with pytest.raises(ValueError, match="'euclidean': keep precision='float32'"):
        build_index(euclidean, corpus, tmp_path / "c", tokenizer=tiny_tokenizer, precision="int8", approximate=True)
    assert not any((tmp_path / name).exists() for name in "abc")
    assert load_index(built / "binary").compact.approximate is None


def test_the_cli_builds_the_ivf_and_searches_through_it(built: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "idx"
    argv = ["index", str(built / "corpus.txt"), "-o", str(out), "--model", str(built / "model"), "--precision",
            "binary", "--approximate", "--no-lexical"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (
        "approximate search" in printed
        and "binary vectors (8 bytes a document), rescore 4, IVF over the codes (32 " in printed
    )
    assert json.loads((out / "index.json").read_text())["compact"]["approximate"]["lists"] == 32
    assert main(["search", "--index", str(out), "--query", QUERIES[0], "--top-k", "2"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["index", "--set-precision", str(out), "--precision", "int8", "--approximate"]) == 0
    assert "int8 vectors (32 bytes a document), rescore 1, IVF over the codes (32 lists" in capsys.readouterr().out
    assert main(["index", "--set-precision", str(out), "--precision", "float16", "--approximate"]) != 0
    assert "serves precision int8 and binary" in capsys.readouterr().err
