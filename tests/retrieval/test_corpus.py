"""Streamed corpus embedding into Parquet shards: the vectors and ids equal `model.encode` for every kind of source,
memory bounded by a shard, resume after a kill (finished shards checked and kept, damaged ones recomputed), refusal to
mix models or settings, several processes into one folder, bad input, and `hf-siamese embed`."""

from __future__ import annotations

import csv
import json
import os
import random
import re
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import WORDS, make_tiny_model

import hf_siamese
from hf_siamese.cli import main
from hf_siamese.data.readers import DataFormatError
from hf_siamese.retrieval import corpus as corpus_module
from hf_siamese.retrieval.corpus import CorpusShards, encode_corpus, read_corpus_shards

_rng = random.Random(0)
CORPUS = [" ".join(_rng.choice(WORDS[:60]) for _ in range(_rng.randint(3, 9))) for _ in range(23)]
DOC_IDS = [f"d{i}" for i in range(len(CORPUS))]
SHARD = 5  # 23 rows -> 5 shards, the last one of 3 rows


def _read(folder: Path) -> tuple[list, np.ndarray]:
    ids, vectors = [], []
    for shard_ids, shard_vectors in read_corpus_shards(folder):
        assert shard_vectors.dtype == np.float32 and len(shard_ids) == len(shard_vectors)
        ids += shard_ids
        vectors.append(shard_vectors)
    return ids, np.concatenate(vectors)


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


class Killed(Exception):
    pass


def _counting(monkeypatch: pytest.MonkeyPatch, model, fail_after: int | None = None) -> list[int]:
    """Count the model's encode calls (texts per call); with `fail_after`, the next call raises, as a kill would."""
    calls: list[int] = []
    original = type(model).encode.__get__(model)  # the real one, also when a wrapper is already in place

    def encode(texts, **kwargs):
        if fail_after is not None and len(calls) == fail_after:
            raise Killed
        calls.append(len(texts))
        return original(texts, **kwargs)

    monkeypatch.setattr(model, "encode", encode)
    return calls


@pytest.fixture
def model():
    return make_tiny_model()


@pytest.fixture
def reference(model, tiny_tokenizer) -> np.ndarray:
    return model.encode(CORPUS, tokenizer=tiny_tokenizer, convert_to_numpy=True)


def test_shards_equal_encode_and_the_manifest_records_the_run(tmp_path: Path, model, tiny_tokenizer, reference):
    result = encode_corpus(model, CORPUS, tmp_path / "out", tokenizer=tiny_tokenizer, shard_size=SHARD)
    assert result == CorpusShards(tmp_path / "out", 23, 5, 32, shards_computed=5, shards_reused=0, done=True)
    assert sorted(os.listdir(tmp_path / "out")) == ["corpus.json"] + [f"shard-0000{i}.parquet" for i in range(5)]
    shards = list(read_corpus_shards(tmp_path / "out"))
    assert [len(ids) for ids, _ in shards] == [5, 5, 5, 5, 3]
    ids, vectors = _read(tmp_path / "out")
    assert ids == list(range(23))
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    manifest = json.loads((tmp_path / "out" / "corpus.json").read_text())
    assert manifest["done"] is True and manifest["num_rows"] == 23 and manifest["num_shards"] == 5
    assert (
        manifest["model"]["fingerprint"]
        == hf_siamese.retrieval.index.fingerprint.model_fingerprint(model)["fingerprint"]
    )
    assert manifest["settings"] == {
        "shard_size": 5, "text_column": "text", "id_column": None, "prompt": "", "max_seq_length": 64,
        "dtype": "float32", "dim": 32, "similarity": "cosine", "normalize": model.config.normalize,
    }  # fmt: skip
    # the Parquet files are a dataset for `datasets` and a table for pyarrow
    loaded = datasets.load_dataset(
        "parquet", data_files=f"{tmp_path}/out/shard-*.parquet", split="train", cache_dir=str(tmp_path / "cache")
    )
    assert loaded.column_names == ["id", "embedding"] and loaded["id"] == list(range(23))
    np.testing.assert_allclose(np.array(loaded["embedding"], dtype=np.float32), reference, atol=1e-5)
    table = pq.read_table(tmp_path / "out" / "shard-00004.parquet")
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 32) and table.num_rows == 3
    assert hf_siamese.encode_corpus is encode_corpus and hf_siamese.read_corpus_shards is read_corpus_shards


def _write_sources(folder: Path) -> None:
    rows = [{"doc": doc, "body": text} for doc, text in zip(DOC_IDS, CORPUS, strict=True)]
    folder.mkdir()
    lines = [line for text in CORPUS for line in (f"  {text} ", "", "   ")]  # blank lines are skipped
    (folder / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for name, delimiter in (("corpus.csv", ","), ("corpus.tsv", "\t")):
        with open(folder / name, "w", encoding="utf-8", newline="") as file:
            writer = csv.DictWriter(file, ["doc", "body"], delimiter=delimiter)
            writer.writeheader()
            writer.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), folder / "corpus.parquet", row_group_size=4)
    (folder / "parts").mkdir()
    for name, part in (("b.jsonl", rows[9:]), ("a.jsonl", rows[:9])):  # read in sorted order: a, then b
        (folder / "parts" / name).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")


@pytest.mark.parametrize(
    "kind", ["list", "generator", "Dataset", "IterableDataset", "txt", "jsonl", "csv", "tsv", "parquet", "glob"]
)
def test_every_source_kind(tmp_path: Path, model, tiny_tokenizer, reference, kind: str) -> None:
    _write_sources(tmp_path / "src")
    table = datasets.Dataset.from_dict({"doc": DOC_IDS, "body": CORPUS, "other": list(range(23))})
    columns = {"text_column": "body", "id_column": "doc"}
    source, kwargs = {
        "list": (CORPUS, {}),
        "generator": ((text for text in CORPUS), {}),
        "Dataset": (table, columns),
        "IterableDataset": (table.to_iterable_dataset(), columns),
        "txt": (str(tmp_path / "src" / "corpus.txt"), {}),
        "glob": (str(tmp_path / "src" / "parts" / "*.jsonl"), {"text_column": "body"}),  # ids: positions over files
    }.get(kind, (tmp_path / "src" / f"corpus.{kind}", columns))
    result = encode_corpus(model, source, tmp_path / "out", tokenizer=tiny_tokenizer, shard_size=SHARD, **kwargs)
    assert (result.num_rows, result.num_shards, result.done) == (23, 5, True)
    ids, vectors = _read(tmp_path / "out")
    assert ids == (DOC_IDS if "id_column" in kwargs else list(range(23)))
    np.testing.assert_allclose(vectors, reference, atol=1e-5)


def test_the_stream_is_read_one_shard_at_a_time(tmp_path: Path, model, tiny_tokenizer, monkeypatch) -> None:
    pulled = []

    def texts():
        for text in CORPUS:
            pulled.append(text)
            yield text

    calls = []
    original = type(model).encode.__get__(model)  # the real one, also when a wrapper is already in place
    monkeypatch.setattr(
        model, "encode", lambda batch, **kw: calls.append((len(batch), len(pulled))) or original(batch, **kw)
    )
    encode_corpus(model, texts(), tmp_path / "out", tokenizer=tiny_tokenizer, shard_size=SHARD, batch_size=2)
    # (texts embedded, texts read so far): never more read than the shards up to the current one
    assert calls == [(5, 5), (5, 10), (5, 15), (5, 20), (3, 23)]


def test_resume_after_a_kill_keeps_finished_shards(tmp_path: Path, model, tiny_tokenizer, reference, monkeypatch):
    encode_corpus(make_tiny_model(), CORPUS, tmp_path / "whole", tokenizer=tiny_tokenizer, shard_size=SHARD)
    _counting(monkeypatch, model, fail_after=2)
    with pytest.raises(Killed):
        encode_corpus(model, CORPUS, tmp_path / "out", tokenizer=tiny_tokenizer, shard_size=SHARD)
    assert sorted(p.name for p in (tmp_path / "out").glob("shard-*")) == ["shard-00000.parquet", "shard-00001.parquet"]
    with pytest.raises(ValueError, match=r"unfinished \(2 shard files so far\).*again with the same arguments"):
        read_corpus_shards(tmp_path / "out")
    (tmp_path / "out" / "shard-00002.parquet.tmp").write_bytes(b"half a shard")  # a kill during a write
    before = {
        name: (tmp_path / "out" / name).stat().st_mtime_ns for name in ("shard-00000.parquet", "shard-00001.parquet")
    }

    calls = _counting(monkeypatch, model)
    result = encode_corpus(model, CORPUS, tmp_path / "out", tokenizer=tiny_tokenizer, shard_size=SHARD)
    assert (result.shards_computed, result.shards_reused, result.done) == (3, 2, True)
    assert calls == [5, 5, 3]  # only the missing shards were embedded
    assert {name: (tmp_path / "out" / name).stat().st_mtime_ns for name in before} == before
    whole, resumed = _read(tmp_path / "whole"), _read(tmp_path / "out")
    assert resumed[0] == whole[0] == list(range(23))
    np.testing.assert_allclose(resumed[1], whole[1], atol=1e-6)
    np.testing.assert_allclose(resumed[1], reference, atol=1e-5)

    # a finished folder: every shard checked and kept, nothing embedded
    calls.clear()
    result = encode_corpus(model, CORPUS, tmp_path / "out", tokenizer=tiny_tokenizer, shard_size=SHARD)
    assert (result.shards_computed, result.shards_reused, calls) == (0, 5, [])


def test_a_damaged_or_outdated_shard_is_recomputed(tmp_path: Path, model, tiny_tokenizer, reference, monkeypatch):
    out = tmp_path / "out"
    encode_corpus(model, CORPUS, out, tokenizer=tiny_tokenizer, shard_size=SHARD)
    shard = out / "shard-00001.parquet"
    shard.write_bytes(shard.read_bytes()[:-100])  # truncated: the footer is gone
    calls = _counting(monkeypatch, model)
    result = encode_corpus(model, CORPUS, out, tokenizer=tiny_tokenizer, shard_size=SHARD)
    assert (result.shards_computed, result.shards_reused, calls) == (1, 4, [5])
    np.testing.assert_allclose(_read(out)[1], reference, atol=1e-5)

    # texts edited in place (same ids): the shards holding them are embedded again; a shorter corpus drops the rest
    edited = CORPUS[:3] + ["a dog in the park"] + CORPUS[4:12]
    calls.clear()
    result = encode_corpus(model, edited, out, tokenizer=tiny_tokenizer, shard_size=SHARD)
    assert (result.num_rows, result.num_shards, result.shards_computed, calls) == (12, 3, 2, [5, 2])
    assert sorted(p.name for p in out.glob("shard-*")) == [f"shard-0000{i}.parquet" for i in range(3)]
    ids, vectors = _read(out)
    assert ids == list(range(12))
    np.testing.assert_allclose(vectors, model.encode(edited, tokenizer=tiny_tokenizer).numpy(), atol=1e-5)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"model": "seed"}, "model (same config, different weights)"),
        ({"model": "pooling"}, "pooling ('mean' there, 'cls' in this model)"),
        ({"shard_size": 4}, "shard_size (5 there, 4 now)"),
        ({"prompt": "passage: "}, "prompt ('' there, 'passage: ' now)"),
        ({"dtype": "bfloat16"}, "dtype ('float32' there, 'bfloat16' now)"),
        ({"id_column": "doc", "text_column": "body"}, "id_column (None there, 'doc' now); text_column"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_resume_with_another_model_or_setting_is_refused(
    tmp_path, model, tiny_tokenizer, monkeypatch, change, fragment
):
    out = tmp_path / "out"
    _counting(monkeypatch, model, fail_after=2)
    with pytest.raises(Killed):
        encode_corpus(model, CORPUS, out, tokenizer=tiny_tokenizer, shard_size=SHARD)
    before = _files(out)
    other = {"seed": make_tiny_model(seed=1), "pooling": make_tiny_model(pooling="cls")}.get(change.pop("model", None))
    source = datasets.Dataset.from_dict({"doc": DOC_IDS, "body": CORPUS}) if "id_column" in change else CORPUS
    kwargs = {"tokenizer": tiny_tokenizer, "shard_size": SHARD, **change}
    with pytest.raises(ValueError, match="holds corpus embeddings made differently") as error:
        encode_corpus(other or model, source, out, **kwargs)
    assert fragment in str(error.value) and str(out) in str(error.value)
    assert _files(out) == before  # nothing changed, not even the manifest


def test_two_processes_share_one_folder(tmp_path: Path, model, tiny_tokenizer, monkeypatch) -> None:
    single = encode_corpus(model, CORPUS, tmp_path / "one", tokenizer=tiny_tokenizer, shard_size=SHARD)
    calls = _counting(monkeypatch, model)
    first = encode_corpus(
        model,
        iter(CORPUS),
        tmp_path / "two",
        tokenizer=tiny_tokenizer,
        shard_size=SHARD,
        process_index=0,
        num_processes=2,
    )
    assert (first.shards_computed, first.done, calls) == (3, False, [5, 5, 3])  # shards 0, 2, 4
    with pytest.raises(ValueError, match="unfinished"):
        read_corpus_shards(tmp_path / "two")
    calls.clear()
    second = encode_corpus(
        model,
        iter(CORPUS),
        tmp_path / "two",
        tokenizer=tiny_tokenizer,
        shard_size=SHARD,
        process_index=1,
        num_processes=2,
    )
    assert (second.shards_computed, second.done, calls) == (2, True, [5, 5])  # shards 1, 3; it finds all: done
    assert json.loads((tmp_path / "two" / "corpus.json").read_text())["done"] is True
    assert (single.num_rows, single.num_shards) == (second.num_rows, second.num_shards) == (23, 5)
    for (ids_one, vectors_one), (ids_two, vectors_two) in zip(
        read_corpus_shards(tmp_path / "one"), read_corpus_shards(tmp_path / "two"), strict=True
    ):
        assert ids_one == ids_two
        np.testing.assert_allclose(vectors_one, vectors_two, atol=1e-5)


def test_process_layout_defaults_to_the_launcher(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert corpus_module._process_layout(None, None) == (1, 3)
    assert corpus_module._process_layout(0, 2) == (0, 2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert corpus_module._process_layout(None, None) == (0, 1)
    with pytest.raises(ValueError, match="process_index=2 must be in 0..1"):
        corpus_module._process_layout(2, 2)


def test_a_process_waits_for_the_manifest(tmp_path: Path, model, tiny_tokenizer, monkeypatch) -> None:
    monkeypatch.setattr(corpus_module, "MANIFEST_WAIT_S", 0.3)
    with pytest.raises(TimeoutError, match=r"process 1 of 2 waited 0 s for process 0 to write .*corpus.json"):
        encode_corpus(model, CORPUS, tmp_path / "out", tokenizer=tiny_tokenizer, process_index=1, num_processes=2)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_texts_and_files_are_named(tmp_path: Path, model, tiny_tokenizer) -> None:
    run = {"tokenizer": tiny_tokenizer, "shard_size": SHARD}
    later = tmp_path / "later"  # errors after the first row: the manifest is there (a fixed corpus resumes)
    bad = _write(tmp_path / "bad.jsonl", '{"text": "a dog"}\n\n{"text": 5}\n')
    with pytest.raises(DataFormatError, match=r"bad.jsonl, line 3: the text \(column 'text'\) is int \(got 5\)"):
        encode_corpus(model, bad, later, **run)
    table = datasets.Dataset.from_dict({"text": ["a", "b", None]})
    with pytest.raises(DataFormatError, match=r"the Dataset: row 2: the text \(column 'text'\) is NoneType"):
        encode_corpus(model, table, later, **run)
    with pytest.raises(DataFormatError, match=r"the corpus: row 1: the text is bytes"):
        encode_corpus(model, ["a", b"b"], later, **run)
    (tmp_path / "latin1.txt").write_bytes(b"a dog\ncaf\xe9\n")
    with pytest.raises(DataFormatError, match=r"latin1.txt, line 2: is not valid UTF-8 text"):
        encode_corpus(model, tmp_path / "latin1.txt", later, **run)
    assert not list(later.glob("shard-*")) and not json.loads((later / "corpus.json").read_text())["done"]

    out = tmp_path / "out"  # errors in the first row or before: nothing is written
    with pytest.raises(DataFormatError, match=r"short.csv, line 2: row has 1 fields but the header has 2"):
        encode_corpus(model, _write(tmp_path / "short.csv", "id,body\nd0\n"), out, text_column="body", **run)

    missing = _write(tmp_path / "m.jsonl", '{"body": "a dog", "doc": 1}\n')
    with pytest.raises(DataFormatError, match=r"m.jsonl, line 1: has no column 'text' \(got \['body', 'doc'\]\)"):
        encode_corpus(model, missing, out, **run)
    with pytest.raises(DataFormatError, match=r"has no column 'text' \(got \['body'\]\)"):
        encode_corpus(model, datasets.Dataset.from_dict({"body": ["a"]}), out, **run)
    with pytest.raises(DataFormatError, match=r"c.csv, line 1: has no column 'doc' \(got \['text'\]\)"):
        encode_corpus(model, _write(tmp_path / "c.csv", "text\na dog\n"), out, id_column="doc", **run)

    with pytest.raises(DataFormatError, match=r"empty.txt: is empty"):
        encode_corpus(model, _write(tmp_path / "empty.txt", ""), out, **run)
    with pytest.raises(DataFormatError, match=r"blank.jsonl: has no rows"):
        encode_corpus(model, _write(tmp_path / "blank.jsonl", "\n  \n"), out, **run)
    with pytest.raises(DataFormatError, match=r"header.tsv: has no rows"):
        encode_corpus(model, _write(tmp_path / "header.tsv", "text\n"), out, **run)
    with pytest.raises(DataFormatError, match=r"not.parquet: is not a readable Parquet file"):
        encode_corpus(model, _write(tmp_path / "not.parquet", "text\n"), out, **run)
    with pytest.raises(ValueError, match="the corpus is empty"):
        encode_corpus(model, [], out, **run)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        encode_corpus(model, tmp_path / "nowhere.txt", out, **run)
    with pytest.raises(FileNotFoundError, match="no corpus file matches"):
        encode_corpus(model, str(tmp_path / "*.nothing"), out, **run)
    with pytest.raises(ValueError, match=r"expected a name ending in \.txt, \.jsonl"):
        encode_corpus(model, _write(tmp_path / "x.json", "[]"), out, **run)
    with pytest.raises(ValueError, match="not to .txt"):
        encode_corpus(model, _write(tmp_path / "t.txt", "a\n"), out, id_column="doc", **run)
    assert not out.exists()  # every error came before anything was written

    (tmp_path / "busy").mkdir()
    _write(tmp_path / "busy" / "notes.md", "mine")
    with pytest.raises(ValueError, match="is not empty and holds no corpus.json"):
        encode_corpus(model, CORPUS, tmp_path / "busy", **run)
    with pytest.raises(FileNotFoundError, match="no corpus embeddings in"):
        read_corpus_shards(tmp_path / "busy")


def test_duplicate_ids(tmp_path: Path, model, tiny_tokenizer) -> None:
    run = {"tokenizer": tiny_tokenizer, "shard_size": SHARD, "id_column": "doc"}
    ids = ["a", "b", "c", "b", "e", "f", "a"]
    table = datasets.Dataset.from_dict({"doc": ids, "text": CORPUS[:7]})
    with pytest.raises(ValueError, match=r"duplicate id 'b' \(rows 1 and 3, both in shard-00000.parquet\)"):
        encode_corpus(model, table, tmp_path / "within", **run)
    # across shards ("a" in shards 0 and 1): refused before the folder is marked done, both rows named
    across = r"duplicate id 'a': rows 0 and 5 of the corpus \(shard-00000.parquet and shard-00001.parquet"
    with pytest.raises(ValueError, match=across):
        encode_corpus(model, table.select([0, 1, 2, 4, 5, 6]), tmp_path / "across", **run)
    with pytest.raises(ValueError, match="unfinished"):
        read_corpus_shards(tmp_path / "across")
    # int ids too (hash(1) == 1: the keys are the ids themselves)
    numbered = datasets.Dataset.from_dict({"doc": [1, 2, 3, 4, 5, 2], "text": CORPUS[:6]})
    with pytest.raises(ValueError, match=r"duplicate id 2: rows 1 and 5"):
        encode_corpus(model, numbered, tmp_path / "numbered", **run)
    mixed = _write(tmp_path / "mixed.jsonl", '{"doc": "a", "text": "x"}\n{"doc": 1, "text": "y"}\n')
    with pytest.raises(DataFormatError, match=r"mixed.jsonl, line 2: the id \(column 'doc'\) is int .*all str or all"):
        encode_corpus(model, mixed, tmp_path / "m", **run)
    with pytest.raises(DataFormatError, match=r"line 1: the id \(column 'doc'\) is float \(got 1.5\)"):
        encode_corpus(model, _write(tmp_path / "f.jsonl", '{"doc": 1.5, "text": "x"}\n'), tmp_path / "m", **run)


# ------------------------------------------------------------------------------------------------ hf-siamese embed


@pytest.fixture
def cli_files(tmp_path: Path, tiny_tokenizer) -> Path:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    _write(tmp_path / "corpus.txt", "\n".join(CORPUS[:10] + ["", "  "]) + "\n")
    rows = [{"doc": f"d{i}", "body": text} for i, text in enumerate(CORPUS[:10])]
    _write(tmp_path / "corpus.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    return tmp_path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_embed(cli_files: Path, capsys) -> None:
    w = cli_files
    argv = ["embed", w / "corpus.txt", "--model", w / "model", "-o", w / "txt", "--shard-size", "4"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert (
        out
        == f"embedded 10 rows of {w / 'corpus.txt'} into 3 shards (3 computed, 0 reused here), 32-dim, in {w / 'txt'}\n"
    )
    saved = hf_siamese.SiameseBertModel.from_pretrained(w / "model")
    ids, vectors = _read(w / "txt")
    assert ids == list(range(10))
    np.testing.assert_allclose(vectors, saved.encode(CORPUS[:10], convert_to_numpy=True), atol=1e-5)
    code, out, _ = _run(argv, capsys)
    assert code == 0 and "(0 computed, 3 reused here)" in out

    argv = ["embed", w / "corpus.jsonl", "--model", w / "model", "-o", w / "jsonl", "--text-column", "body"]
    code, out, err = _run([*argv, "--id-column", "doc", "--dtype", "bfloat16", "--batch-size", "3"], capsys)
    assert code == 0 and "embedded 10 rows" in out and "into 1 shard (1 computed" in out, err
    ids, vectors = _read(w / "jsonl")
    assert ids == [f"d{i}" for i in range(10)]
    np.testing.assert_allclose(vectors, saved.encode(CORPUS[:10], convert_to_numpy=True), atol=0.05)  # bfloat16


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["embed", "{w}/missing.txt", "--model", "{w}/model", "-o", "{w}/x"], "corpus file not found: "),
        (["embed", "{w}/corpus.jsonl", "--model", "{w}/model", "-o", "{w}/x"], "has no column 'text'"),
        (["embed", "{w}/corpus.txt", "--model", "{w}/model", "-o", "{w}/x", "--id-column", "doc"], "not to .txt"),
        (["embed", "{w}/corpus.txt", "--model", "{w}/model", "-o", "{w}/txt", "--shard-size", "3"], "shard_size (4"),
        (["embed", "{w}/corpus.txt", "--model", "{w}/model"], "-o/--output"),
        (["embed", "nobody/no-such-dataset", "--model", "{w}/model", "-o", "{w}/x"], "loading it as a Hub dataset"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_cli_embed_bad_input_is_one_clear_line(cli_files: Path, capsys, argv: list[str], fragment: str) -> None:
    w = cli_files
    assert (
        main(["embed", str(w / "corpus.txt"), "--model", str(w / "model"), "-o", str(w / "txt"), "--shard-size", "4"])
        == 0
    )
    capsys.readouterr()
    code, _, err = _run([part.format(w=w) for part in argv], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), err
    assert fragment in lines[0]


# ------------------------------------------------------------------------------------------------ real processes

GROUP_SCRIPT = """
import json, sys
import torch.distributed as dist
import hf_siamese
from hf_siamese.retrieval.corpus import encode_corpus

dist.init_process_group("gloo")
model = hf_siamese.SiameseBertModel.from_pretrained(sys.argv[1])
result = encode_corpus(model, sys.argv[2], sys.argv[3], shard_size=4)
print(json.dumps({"rank": dist.get_rank(), "computed": result.shards_computed, "done": result.done}))
dist.destroy_process_group()
"""


@pytest.mark.slow  # about 10 s: 2 processes, each importing transformers
@pytest.mark.parametrize("launch", ["process group", "hf-siamese embed"])
def test_two_real_processes(cli_files: Path, launch: str) -> None:
    """Under torchrun: with a process group (barriers), and the CLI, which has none (RANK / WORLD_SIZE only)."""
    import socket
    import subprocess
    import sys

    w = cli_files
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    _write(w / "group.py", GROUP_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    if launch == "process group":
        command += [str(w / "group.py"), str(w / "model"), str(w / "corpus.txt"), str(w / "two")]
    else:
        command += [
            "-m",
            "hf_siamese",
            "embed",
            str(w / "corpus.txt"),
            "--model",
            str(w / "model"),
            "-o",
            str(w / "two"),
        ]
        command += ["--shard-size", "4", "--device", "cpu"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    if launch == "process group":
        # The two processes share stdout: their lines may land on one line, so pick the objects out of the text.
        reports = sorted((json.loads(found) for found in re.findall(r"\{[^{}]*\}", done.stdout)), key=str)
        assert reports == [{"rank": 0, "computed": 2, "done": True}, {"rank": 1, "computed": 1, "done": True}]
    else:
        lines = sorted(line for line in done.stdout.splitlines() if line.startswith("embedded"))
        assert len(lines) == 2 and "(1 computed" in lines[0] + lines[1] and "(2 computed" in lines[0] + lines[1]
    assert json.loads((w / "two" / "corpus.json").read_text())["done"] is True
    saved = hf_siamese.SiameseBertModel.from_pretrained(w / "model")
    ids, vectors = _read(w / "two")
    assert ids == list(range(10))
    np.testing.assert_allclose(vectors, saved.encode(CORPUS[:10], convert_to_numpy=True), atol=1e-5)


def test_shard_size_defaults_to_the_folders_own(tmp_path: Path, model, tiny_tokenizer) -> None:
    first = encode_corpus(model, CORPUS, tmp_path / "emb", tokenizer=tiny_tokenizer, shard_size=SHARD)
    again = encode_corpus(model, CORPUS, tmp_path / "emb", tokenizer=tiny_tokenizer)  # shard_size=None: resumes
    assert first.num_shards == again.num_shards == 5 and again.shards_reused == 5 and again.shards_computed == 0
    assert encode_corpus(model, CORPUS[:3], tmp_path / "new", tokenizer=tiny_tokenizer).num_shards == 1  # 10,000
