"""`open_corpus`, the one corpus reader: every kind of source gives the same (id, text) rows, a Hub dataset id is opened
(streamed) in one place with its split and config, and bad sources, columns and lines are named."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from hf_siamese.data import DataFormatError, DatasetLoadError, open_corpus, resolve_corpus
from hf_siamese.data.corpus_stream import is_local_source

TEXTS = ["a man plays the guitar", "two dogs in the park", "rain in the city"]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """`datasets.load_dataset` replaced: "someone/docs" is a streamed dataset (columns body, doc), anything else
    fails as an unknown Hub id does; the calls are recorded."""
    calls: list[tuple] = []

    def load_dataset(path, name=None, split=None, streaming=False):
        calls.append((path, name, split, streaming))
        if path != "someone/docs":
            raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
        rows = {"body": TEXTS, "doc": [f"d{i}" for i in range(len(TEXTS))]}
        return datasets.Dataset.from_dict(rows).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_every_source_kind_gives_the_same_rows(tmp_path: Path, hub: list) -> None:
    ids = [f"d{i}" for i in range(len(TEXTS))]
    expected = list(zip(ids, TEXTS, strict=True))
    (tmp_path / "docs.txt").write_text("\n".join([TEXTS[0], "", "  ", *TEXTS[1:]]) + "\n", encoding="utf-8")
    rows = [{"doc": i, "body": t} for i, t in zip(ids, TEXTS, strict=True)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    table = datasets.Dataset.from_dict({"doc": ids, "body": TEXTS})
    table.to_csv(tmp_path / "docs.csv", index=False)
    table.to_parquet(tmp_path / "docs.parquet")
    (tmp_path / "parts").mkdir()
    for i, row in enumerate(rows):  # a glob: the matches in sorted order
        (tmp_path / "parts" / f"{i}.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert list(open_corpus(str(tmp_path / "docs.txt"))) == [(None, t) for t in TEXTS]
    assert list(open_corpus(TEXTS)) == [(None, t) for t in TEXTS]
    for source in (
        tmp_path / "docs.jsonl",
        str(tmp_path / "docs.csv"),
        str(tmp_path / "docs.parquet"),
        str(tmp_path / "parts" / "*.jsonl"),
        table,
        table.to_iterable_dataset(),
        "someone/docs",
    ):
        assert list(open_corpus(source, "body", "doc")) == expected, source
    assert hub == [("someone/docs", None, "train", True)]  # local sources never reach the Hub


def test_a_hub_id_takes_its_split_and_config_and_is_opened_once(hub: list) -> None:
    data = resolve_corpus("someone/docs", split="test", config="en")
    assert isinstance(data, datasets.IterableDataset)
    assert hub == [("someone/docs", "en", "test", True)]
    assert [text for _, text in open_corpus(data, "body")] == [text for _, text in open_corpus(data, "body")] == TEXTS
    assert len(hub) == 1  # the resolved dataset is read again without loading it again
    assert list(open_corpus("someone/docs", "body", split="validation"))[0] == (None, TEXTS[0])
    assert hub[-1] == ("someone/docs", None, "validation", True)


def test_a_hub_id_that_cannot_load_is_named(hub: list) -> None:
    with pytest.raises(DatasetLoadError) as caught:
        open_corpus("nobody/no-such-dataset", split="dev")
    message = str(caught.value)
    assert "corpus 'nobody/no-such-dataset' is not a local file or glob" in message
    assert "loading it as a Hub dataset (split 'dev') failed" in message and "doesn't exist on the Hub" in message


def test_local_and_hub_names(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    for local in ("docs.txt", "missing.jsonl", "data/*.parquet", "./docs", "/abs/docs", "~/docs", tmp_path / "x"):
        assert is_local_source(local), local
    assert is_local_source(str(tmp_path / "folder"))
    for hub_id in ("someone/docs", "imdb", "org/data.v2"):
        assert not is_local_source(hub_id), hub_id


def test_bad_sources_are_named(tmp_path: Path) -> None:
    (tmp_path / "docs.txt").write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"--text-column / --id-column\) apply to tables .*not to \.txt.*docs\.txt"):
        open_corpus(str(tmp_path / "docs.txt"), "body")
    with pytest.raises(ValueError, match=r"not to \.txt"):
        open_corpus(str(tmp_path / "docs.txt"), "text", "doc")
    with pytest.raises(ValueError, match=r"split='test' applies to a Hub dataset id; the local corpus .*docs.txt"):
        open_corpus(str(tmp_path / "docs.txt"), split="test")
    with pytest.raises(ValueError, match=r"config='en' applies to a Hub dataset id; a corpus given as list"):
        open_corpus(["a"], config="en")
    with pytest.raises(FileNotFoundError, match=r"corpus file not found: .*missing.jsonl"):
        open_corpus(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataFormatError, match=r"is a directory"):
        open_corpus(str(tmp_path))
    with pytest.raises(TypeError, match=r"source is int; expected .* or a Hub dataset id"):
        open_corpus(3)


def test_a_bad_line_is_named_when_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "fine too"}\n{"text": oops}\n', encoding="utf-8")
    rows = open_corpus(str(path))
    assert next(rows) == (None, "fine")
    with pytest.raises(DataFormatError, match=r"docs\.jsonl.*line 3.*is not JSON Lines"):
        list(rows)
    path.write_text('{"text": "fine"}\n{"body": "no text"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"line 2.*has no column 'text'"):
        list(open_corpus(str(path)))
