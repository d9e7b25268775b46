"""The corpus options every corpus command shares: the same sources (files of every kind, a Hub dataset id) read by
`open_corpus` with --text-column / --id-column (and --split / --dataset-config for a Hub id), one embeddings folder
(--embeddings-dir, the folder 'embed -o' writes) reused by search, mine, similar and cluster, the deprecated
spellings still working with a warning, and the bad inputs named in one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import pytest
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.cli.parser import build_parser

HUB_ID = "someone/docs"


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 8)))


@pytest.fixture
def files(tmp_path: Path, tiny_tokenizer) -> Path:
    """A saved tiny model, one corpus as .txt and as .jsonl (columns doc, body), (anchor, positive) pairs."""
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    rng = random.Random(2)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(30)))[:24]
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    rows = [{"doc": f"d{i}", "body": text} for i, text in enumerate(corpus)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text(json.dumps(rows[0]) + "\n" + '{"doc": "d1", "body": oops}\n', encoding="utf-8")
    pairs = [{"anchor": _sentence(rng), "positive": corpus[i]} for i in range(0, 24, 3)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pairs), encoding="utf-8")
    return tmp_path


@pytest.fixture
def hub(files: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """`datasets.load_dataset`: HUB_ID is the .jsonl corpus, streamed; nobody/... fails as an unknown id; anything
    else is the real function (local pair files). The Hub calls are recorded."""
    real, calls = datasets.load_dataset, []

    def load_dataset(path, *args, **kwargs):
        if path == HUB_ID or path.startswith("nobody/"):
            calls.append((path, kwargs.get("name"), kwargs.get("split"), kwargs.get("streaming")))
            if path != HUB_ID:
                raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
            rows = [json.loads(line) for line in (files / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
            table = {"doc": [r["doc"] for r in rows], "body": [r["body"] for r in rows]}
            return datasets.Dataset.from_dict(table).to_iterable_dataset()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _hits(out: str) -> list[tuple[str, str]]:
    """(id, text) of every hit line `rank. score  [id] text`."""
    lines = [line.split(maxsplit=2)[2] for line in out.splitlines() if line.startswith("  ")]
    return [(line[1 : line.index("]")], line[line.index("] ") + 2 :]) for line in lines]


def _stamps(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in sorted(folder.glob("shard-*.parquet"))}


def test_search_reads_every_source_and_prints_ids(files: Path, hub: list, capsys) -> None:
    w = files
    base = ["search", "--model", w / "model", "--query", "a dog in the park", "--top-k", "4"]
    code, by_lines, err = _run([*base, "--corpus", w / "corpus.txt"], capsys)
    assert code == 0, err
    hits = _hits(by_lines)
    assert len(hits) == 4 and all(doc.isdigit() for doc, _ in hits)  # a line's id is its position
    table = ["--text-column", "body", "--id-column", "doc"]
    code, by_table, err = _run([*base, "--corpus", w / "corpus.jsonl", *table], capsys)
    assert code == 0, err
    assert _hits(by_table) == [(f"d{doc}", text) for doc, text in hits]
    code, by_hub, err = _run([*base, "--corpus", HUB_ID, *table, "--split", "test", "--dataset-config", "en"], capsys)
    assert code == 0 and by_hub == by_table, err
    assert hub == [(HUB_ID, "en", "test", True)]


def test_one_embeddings_folder_for_every_command(files: Path, capsys) -> None:
    """'embed -o DIR' writes the folder; search, mine, similar and cluster reuse it with --embeddings-dir, at its own
    shard size, without rewriting a shard; the old --corpus-dir still works, with a warning."""
    w, emb = files, files / "emb"
    corpus = ["--text-column", "body", "--id-column", "doc"]
    embed = ["embed", w / "corpus.jsonl", "--model", w / "model", "-o", emb, "--shard-size", "5", *corpus]
    assert _run(embed, capsys)[0] == 0
    stamps = _stamps(emb)
    assert len(stamps) == 5
    search = ["search", "--model", w / "model", "--corpus", w / "corpus.jsonl", *corpus, "--query", "music"]
    code, kept, err = _run([*search, "--embeddings-dir", emb], capsys)
    assert code == 0 and err == "" and _stamps(emb) == stamps, err
    assert kept == _run(search, capsys)[1]  # the same hits as a temporary folder
    code, old, err = _run([*search, "--corpus-dir", emb], capsys)
    assert code == 0 and old == kept and _stamps(emb) == stamps
    assert err == "hf-siamese: warning: --corpus-dir is deprecated; use --embeddings-dir DIR (the same folder)\n"
    mine = ["mine", w / "pairs.jsonl", "--model", w / "model", "--corpus", w / "corpus.jsonl", *corpus]
    mine += ["--num-negatives", "2"]
    assert _run([*mine, "-o", w / "a.jsonl", "--embeddings-dir", emb], capsys)[0] == 0
    assert _stamps(emb) == stamps
    code, _, err = _run([*mine, "-o", w / "b.jsonl", "--corpus-dir", emb], capsys)
    assert code == 0 and "--corpus-dir is deprecated" in err
    assert _run([*mine, "-o", w / "c.jsonl"], capsys)[0] == 0  # a temporary folder
    assert (w / "a.jsonl").read_text() == (w / "b.jsonl").read_text() == (w / "c.jsonl").read_text()
    for command, output in (("similar", "pairs.csv"), ("cluster", "groups.jsonl")):
        argv = [command, w / "corpus.jsonl", "--model", w / "model", *corpus, "-o", w / output, "--threshold", "0.5"]
        code, _, err = _run([*argv, "--embeddings-dir", emb], capsys)
        assert code == 0, err
        assert not (w / f"{output}.embeddings").exists() and _stamps(emb) == stamps


def test_mine_reads_a_table_or_a_hub_corpus(files: Path, hub: list, capsys) -> None:
    w = files
    mine = ["mine", w / "pairs.jsonl", "--model", w / "model", "--num-negatives", "2"]
    assert _run([*mine, "--corpus", w / "corpus.txt", "-o", w / "txt.jsonl"], capsys)[0] == 0
    table = ["--text-column", "body", "--id-column", "doc"]
    assert _run([*mine, "--corpus", w / "corpus.jsonl", *table, "-o", w / "table.jsonl"], capsys)[0] == 0
    code, _, err = _run([*mine, "--corpus", HUB_ID, *table, "--corpus-split", "dev", "-o", w / "hub.jsonl"], capsys)
    assert code == 0, err
    assert (w / "txt.jsonl").read_text() == (w / "table.jsonl").read_text() == (w / "hub.jsonl").read_text()
    assert hub == [(HUB_ID, None, "dev", True)]


def test_similar_and_embed_read_a_hub_corpus(files: Path, hub: list, capsys) -> None:
    w = files
    table = ["--text-column", "body", "--id-column", "doc"]
    code, out, err = _run(["embed", HUB_ID, "--model", w / "model", "-o", w / "emb", *table], capsys)
    assert code == 0 and f"embedded 24 rows of {HUB_ID} into 1 shard" in out, err
    argv = ["similar", HUB_ID, "--model", w / "model", *table, "-o", w / "pairs.jsonl", "--threshold", "0.5"]
    code, out, err = _run(argv, capsys)
    assert code == 0 and f"in {HUB_ID} -> " in out, err
    pairs = [json.loads(line) for line in (w / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert pairs and all(row["id_1"].startswith("d") for row in pairs)
    assert hub == [(HUB_ID, None, "train", True)] * 2  # once per command


def test_deprecated_index_flags_still_parse(capsys) -> None:
    args = build_parser().parse_args(["index", "docs.txt", "-o", "idx", "--no-faiss", "--streamed"])
    assert args.approximate is False and not hasattr(args, "streamed")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "hf-siamese: warning: --no-faiss is deprecated; use --no-approximate",
        "hf-siamese: warning: --streamed is deprecated; it does nothing: every index streams its corpus",
    ]
    assert build_parser().parse_args(["index", "docs.txt", "-o", "idx"]).approximate is None
    assert build_parser().parse_args(["search", "--corpus", "d.txt", "--query", "q"]).embeddings_dir is None
    # the old spellings are hidden from --help
    for command, hidden in (("index", ("--no-faiss", "--streamed")), ("search", ("--corpus-dir",)), ("mine", ())):
        assert main([command, "--help"]) == 0
        shown = capsys.readouterr().out
        assert "--embeddings-dir" in shown or command == "index"
        assert not any(flag in shown for flag in (*hidden, "--corpus-dir"))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        # a bad line of a .jsonl corpus, named with its file and line
        (["search", "--model", "{w}/model", "--corpus", "{w}/bad.jsonl", "--text-column", "body", "--query", "a"],
         "bad.jsonl, line 2: is not JSON Lines"),
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/model", "--corpus", "{w}/bad.jsonl", "--text-column", "body",
          "-o", "{w}/m.jsonl"], "bad.jsonl, line 2: is not JSON Lines"),
        (["similar", "{w}/bad.jsonl", "--model", "{w}/model", "--text-column", "body", "-o", "{w}/p.csv"],
         "bad.jsonl, line 2: is not JSON Lines"),
        # columns on a .txt (one text per line) refused
        (["search", "--model", "{w}/model", "--corpus", "{w}/corpus.txt", "--text-column", "body", "--query", "a"],
         "apply to tables and datasets, not to .txt"),
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/model", "--corpus", "{w}/corpus.txt", "--id-column", "doc",
          "-o", "{w}/m.jsonl"], "apply to tables and datasets, not to .txt"),
        (["embed", "{w}/corpus.txt", "--model", "{w}/model", "--text-column", "body", "-o", "{w}/e"],
         "apply to tables and datasets, not to .txt"),
        (["cluster", "{w}/corpus.txt", "--model", "{w}/model", "--id-column", "doc", "-o", "{w}/g.csv"],
         "apply to tables and datasets, not to .txt"),
        # a missing column named
        (["search", "--model", "{w}/model", "--corpus", "{w}/corpus.jsonl", "--query", "a"], "has no column 'text'"),
        # a Hub id that cannot load, named with its split
        (["search", "--model", "{w}/model", "--corpus", "nobody/nothing", "--query", "a"],
         "corpus 'nobody/nothing' is not a local file or glob, and loading it as a Hub dataset (split 'train') "
         "failed: Dataset 'nobody/nothing' doesn't exist"),
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/model", "--corpus", "nobody/nothing", "--corpus-split", "x",
          "-o", "{w}/m.jsonl"], "loading it as a Hub dataset (split 'x') failed"),
        (["cluster", "nobody/nothing", "--model", "{w}/model", "-o", "{w}/g.csv"], "loading it as a Hub dataset"),
        # a split for a local file
        (["search", "--model", "{w}/model", "--corpus", "{w}/corpus.txt", "--split", "test", "--query", "a"],
         "split='test' applies to a Hub dataset id; the local corpus"),
        # corpus options without a corpus to read
        (["search", "--index", "{w}/idx", "--text-column", "body", "--embeddings-dir", "{w}/e", "--query", "a"],
         "--text-column, --embeddings-dir describe(s) a --corpus to embed"),
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/model", "--text-column", "body", "-o", "{w}/m.jsonl"],
         "--text-column describe(s) a --corpus file or Hub dataset; give one with --corpus"),
    ],
    ids=["search-bad-line", "mine-bad-line", "similar-bad-line", "search-txt-column", "mine-txt-id",
         "embed-txt-column", "cluster-txt-id", "missing-column", "search-hub", "mine-hub", "cluster-hub",
         "split-of-a-file", "index-corpus-options", "mine-without-corpus"],
)  # fmt: skip
def test_bad_input_is_one_clear_line(files: Path, hub: list, capsys, argv: list[str], fragment: str) -> None:
    code, _, err = _run([part.format(w=files) for part in argv], capsys)
    lines = [line for line in err.strip().splitlines() if not line.startswith("Embedding corpus")]  # the bar
    assert code != 0 and len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), err
    assert fragment in lines[0]
