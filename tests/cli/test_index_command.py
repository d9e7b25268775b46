"""`hf-siamese index`: any corpus source with the shared corpus and shard options, --approximate with
--calibration-queries, the deprecated --streamed / --no-faiss still working with a warning, the one summary line,
and `search --index` printing what `search --corpus` prints."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import pytest
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main

HUB_ID = "someone/docs"


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 8)))


@pytest.fixture
def files(tmp_path: Path, tiny_tokenizer) -> Path:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    rng = random.Random(4)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(30)))[:20]
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    rows = [{"doc": f"d{i}", "body": text} for i, text in enumerate(corpus)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text(json.dumps(rows[0]) + "\n" + "not json\n", encoding="utf-8")
    (tmp_path / "queries.txt").write_text("\n".join(_sentence(rng) for _ in range(12)) + "\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    return tmp_path


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _hits(out: str) -> list[tuple[str, str, float]]:
    """(id, text, score) of every hit line `rank. score  [id] text`."""
    found = []
    for line in out.splitlines():
        if line.startswith("  ") and line.split()[0][:-1].isdigit():  # "   1. ", "  10. "
            _, score, rest = line.split(maxsplit=2)
            found.append((rest[1 : rest.index("]")], rest[rest.index("] ") + 2 :], float(score)))
    return found


def test_index_then_search_prints_what_search_corpus_prints(files: Path, capsys) -> None:
    w = files
    code, out, err = _run(["index", w / "corpus.txt", "--model", w / "model", "-o", w / "idx"], capsys)
    assert code == 0, err
    summary = (
        f"indexed 20 documents of {w / 'corpus.txt'} (32-dim, cosine similarity, exact search; with its lexical part "
        f"(BM25)) into {w / 'idx'}"
    )
    assert out == summary + "\n"
    query = ["--query", "a dog in the park", "--query", "music", "--top-k", "6"]
    code, by_index, err = _run(["search", "--index", w / "idx", *query, "--first-stage", "dense"], capsys)
    assert code == 0, err
    code, by_corpus, err = _run(["search", "--corpus", w / "corpus.txt", "--model", w / "model", *query], capsys)
    assert code == 0, err
    index_hits, corpus_hits = _hits(by_index), _hits(by_corpus)
    assert len(index_hits) == 12 and [h[:2] for h in index_hits] == [h[:2] for h in corpus_hits]
    assert all(abs(a[2] - b[2]) <= 1e-4 for a, b in zip(index_hits, corpus_hits, strict=True))


def test_a_table_a_hub_id_and_the_deprecated_flags(files: Path, capsys, monkeypatch) -> None:
    w = files
    table = ["--text-column", "body", "--id-column", "doc"]
    argv = ["index", w / "corpus.jsonl", "--model", w / "model", "-o", w / "idx", *table, "--shard-size", "8"]
    code, out, err = _run([*argv, "--no-approximate", "--batch-size", "4"], capsys)
    assert code == 0 and "indexed 20 documents" in out and "exact search" in out, err
    code, hits, _ = _run(["search", "--index", w / "idx", "--query", "music", "--top-k", "20"], capsys)
    assert sorted(doc for doc, _, _ in _hits(hits)) == sorted(f"d{i}" for i in range(20))
    # the index folder exists: --overwrite replaces it; the old flags still work, each with a warning
    code, _, err = _run([*argv, "--no-faiss"], capsys)
    assert code == 1 and "--overwrite" in err
    code, again, err = _run([*argv, "--no-faiss", "--streamed", "--overwrite"], capsys)
    assert code == 0 and again == out, err
    assert err.splitlines() == [
        "hf-siamese: warning: --no-faiss is deprecated; use --no-approximate",
        "hf-siamese: warning: --streamed is deprecated; it does nothing: every index streams its corpus",
    ]
    # a Hub dataset id, opened once with its split and config
    calls = []

    def load_dataset(path, name=None, split=None, streaming=False):
        calls.append((path, name, split, streaming))
        return datasets.Dataset.from_json(str(w / "corpus.jsonl")).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    hub = ["index", HUB_ID, "--model", w / "model", "-o", w / "hub", *table, "--split", "test", "--dataset-config", "x"]
    code, out, err = _run(hub, capsys)
    assert code == 0 and f"indexed 20 documents of {HUB_ID} " in out, err
    assert calls == [(HUB_ID, "x", "test", True)]
    assert _run(["search", "--index", w / "hub", "--query", "music", "--top-k", "20"], capsys)[1] == hits


def test_approximate_with_calibration_queries(files: Path, capsys) -> None:
    pytest.importorskip("faiss")
    w = files
    argv = ["index", w / "corpus.txt", "--model", w / "model", "-o", w / "idx", "--approximate"]
    code, out, err = _run([*argv, "--calibration-queries", w / "queries.txt"], capsys)
    assert code == 0 and out.endswith(
        f"(32-dim, cosine similarity, approximate search; with its lexical part (BM25)) into {w / 'idx'}\n"
    ), err
    info = json.loads((w / "idx" / "index.json").read_text(encoding="utf-8"))
    assert info["ann"]["recall"]["measured_on"] == "calibration queries"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--text-column", "body"], "apply to tables and datasets, not to .txt"),
        (["--id-column", "doc"], "apply to tables and datasets, not to .txt"),
        (["--split", "test"], "split='test' applies to a Hub dataset id"),
        (["--calibration-queries", "{w}/missing.txt"], "corpus file not found"),
        (["--calibration-queries", "{w}/empty.txt"], "empty.txt: is empty"),
    ],
    ids=["txt-text-column", "txt-id-column", "split-of-a-file", "missing-queries", "empty-queries"],
)
def test_bad_input_is_one_clear_line(files: Path, capsys, argv: list[str], fragment: str) -> None:
    w = files
    base = ["index", w / "corpus.txt", "--model", w / "model", "-o", w / "x"]
    code, _, err = _run([*base, *(part.format(w=w) for part in argv)], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), err
    assert fragment in lines[0] and not (w / "x").exists()


def test_bad_sources_are_named(files: Path, capsys, monkeypatch) -> None:
    w = files

    def load_dataset(path, name=None, split=None, streaming=False):
        raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    for corpus, fragment in (
        (w / "bad.jsonl", "bad.jsonl, line 2: is not JSON Lines"),
        ("nobody/nothing", "corpus 'nobody/nothing' is not a local file or glob, and loading it as a Hub dataset"),
    ):
        code, _, err = _run(["index", corpus, "--model", w / "model", "-o", w / "x", "--text-column", "body"], capsys)
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and fragment in lines[0], err
