"""Tests for hf_siamese.data.readers: local pair readers, load_pairs and the built-in demo dataset.

Fixture files are written to tmp_path and reproduce the pitfalls of the real files (unbalanced quotes and
9-field rows in STS Benchmark, '-' labels in NLI), so the tests need nothing outside the repository. The
real files under /work/shared/data are checked only when present.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import pickle
from pathlib import Path

import datasets
import pytest

from hf_siamese import data as hd
from hf_siamese.data import (
    DataFormatError,
    DatasetLoadError,
    load_demo_dataset,
    load_pairs,
    read_nli_csv,
    read_pairs_file,
    read_sts_benchmark,
)

SHARED = Path("/work/shared/data")
DEMO_DIR = Path(hd.__file__).parent / "demo_data"

# STS Benchmark lines: tab-separated, no header. Line 2 has a sentence starting with a quote that never
# closes (default csv quoting would swallow the following lines into one field), line 3 has the two
# optional licence fields, line 4 has a trailing space that must survive.
STS_LINES = [
    "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.",
    'main-news\theadlines\t2013\t0042\t1.200\t"No to the plan, he said.\tThe plan was approved.',
    "main-forums\tanswers-forums\t2015\t0007\t3.400\tIt's fine.\tIt is fine!\tCC BY-SA 3.0\tCC BY-SA 3.0",
    "main-captions\timages\t2014\t0099\t0.000\tA dog runs. \tA cat sleeps.",
    'main-news\theadlines\t2013\t0043\t2.5\t"Quoted" start\tno quote here',
]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", newline="")
    return path


@pytest.fixture
def sts_file(tmp_path: Path) -> Path:
    return write(tmp_path / "sts-dev.csv", "\n".join(STS_LINES) + "\n")


# --------------------------------------------------------------------------------------------------------
# STS Benchmark


def test_sts_reads_every_line_byte_exact(sts_file: Path) -> None:
    ds = read_sts_benchmark(sts_file)
    assert isinstance(ds, datasets.Dataset)
    assert ds.column_names == ["sentence1", "sentence2", "score"]
    assert len(ds) == len(STS_LINES)
    assert ds[1]["sentence1"] == '"No to the plan, he said.'
    assert ds[2] == {"sentence1": "It's fine.", "sentence2": "It is fine!", "score": 3.4}
    assert ds[3]["sentence1"] == "A dog runs. "  # trailing space kept
    assert ds[4]["sentence1"] == '"Quoted" start'
    assert list(ds["score"]) == [5.0, 1.2, 3.4, 0.0, 2.5]


def test_sts_fixture_really_breaks_default_csv_quoting(sts_file: Path) -> None:
    # Guard the fixture itself: if default quoting read it correctly, the test above would prove nothing.
    rows = list(csv.reader(io.StringIO(sts_file.read_text(encoding="utf-8")), delimiter="\t"))
    assert len(rows) != len(STS_LINES)


def test_sts_crlf_line_endings(tmp_path: Path) -> None:
    ds = read_sts_benchmark(write(tmp_path / "sts.csv", "\r\n".join(STS_LINES) + "\r\n"))
    assert len(ds) == len(STS_LINES)
    assert ds[0]["sentence2"] == "An air plane is taking off."


def test_sts_eight_fields_reports_line(tmp_path: Path) -> None:
    lines = [*STS_LINES[:2], STS_LINES[0] + "\textra", *STS_LINES[2:]]
    path = write(tmp_path / "sts-bad.csv", "\n".join(lines) + "\n")
    with pytest.raises(DataFormatError) as info:
        read_sts_benchmark(path)
    err = info.value
    assert err.line == 3
    message = str(err)
    assert str(path) in message and "line 3" in message
    assert "8 tab-separated fields" in message and "7 fields" in message and "extra" in message


@pytest.mark.parametrize("bad", ["abc", "5.5", "-0.1", "nan"])
def test_sts_bad_score_reports_line(tmp_path: Path, bad: str) -> None:
    bad_line = STS_LINES[0].replace("5.000", bad)
    path = write(tmp_path / "sts.csv", "\n".join([STS_LINES[0], STS_LINES[2], bad_line]) + "\n")
    with pytest.raises(DataFormatError) as info:
        read_sts_benchmark(path)
    assert info.value.line == 3
    assert "line 3" in str(info.value) and repr(bad) in str(info.value) and "between 0 and 5" in str(info.value)


def test_sts_empty_file(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="empty"):
        read_sts_benchmark(write(tmp_path / "sts.csv", ""))


def test_error_is_valueerror_and_pickles(tmp_path: Path) -> None:
    err = DataFormatError(tmp_path / "x.csv", "bad thing", line=4, value="v", expected="w")
    assert isinstance(err, ValueError)
    clone = pickle.loads(pickle.dumps(err))
    assert str(clone) == str(err) and clone.line == 4


# --------------------------------------------------------------------------------------------------------
# NLI


NLI_CSV = (
    "pairID,sentence1,sentence2,label\n"
    '1e,"A man says ""hi"".",A man speaks.,entailment\n'
    "2n, Leading space kept.,Someone waits.,neutral\n"
    "3x,No majority here.,Nobody agreed.,-\n"
    '4c,"Two dogs, running.",No animals.,contradiction\n'
)


def test_nli_drops_dash_labels_and_keeps_text(tmp_path: Path) -> None:
    ds = read_nli_csv(write(tmp_path / "snli_dev.csv", NLI_CSV))
    assert ds.column_names == ["sentence1", "sentence2", "label"]
    assert list(ds["label"]) == ["entailment", "neutral", "contradiction"]
    assert ds[0]["sentence1"] == 'A man says "hi".'
    assert ds[1]["sentence1"] == " Leading space kept."
    assert ds[2]["sentence1"] == "Two dogs, running."


def test_nli_requires_header(tmp_path: Path) -> None:
    path = write(tmp_path / "nli.csv", "1e,A man.,A person.,entailment\n")
    with pytest.raises(DataFormatError) as info:
        read_nli_csv(path)
    assert info.value.line == 1 and "sentence1" in str(info.value)


def test_nli_wrong_field_count_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path / "nli.csv", NLI_CSV + "5e,only two fields\n")
    with pytest.raises(DataFormatError) as info:
        read_nli_csv(path)
    assert info.value.line == 6


# --------------------------------------------------------------------------------------------------------
# generic files


def test_csv_with_column_mapping(tmp_path: Path) -> None:
    path = write(tmp_path / "pairs.csv", 'id,premise,hypothesis,sim\n1,"Say ""yes"".",Agree.,4.5\n2,A,B,0\n')
    ds = read_pairs_file(path, columns={"sentence1": "premise", "sentence2": "hypothesis", "score": "sim"})
    assert ds.column_names == ["sentence1", "sentence2", "score"]
    assert ds[0] == {"sentence1": 'Say "yes".', "sentence2": "Agree.", "score": 4.5}
    assert ds.features["score"].dtype == "float64"


def test_csv_without_mapping_keeps_texts_as_strings_and_reads_number_labels(tmp_path: Path) -> None:
    ds = read_pairs_file(write(tmp_path / "p.csv", "a,b,label\nx,7,1\nz,w,0\n"))
    assert ds.column_names == ["a", "b", "label"]
    assert ds[0] == {"a": "x", "b": "7", "label": 1}  # 0/1 relevance or class ids are numbers, texts stay text
    graded = read_pairs_file(write(tmp_path / "g.tsv", "a\tb\tlabel\nx\ty\t0.5\nz\tw\t1\n"))
    assert graded["label"] == [0.5, 1.0]
    named = read_pairs_file(write(tmp_path / "n.csv", "a,b,label\nx,y,entailment\nz,w,2\n"))
    assert named["label"] == ["entailment", "2"]  # not all numbers: string labels, as before


def test_tsv_with_header_and_quoted_fields(tmp_path: Path) -> None:
    # Like the derived NLI TSVs: written with csv.QUOTE_MINIMAL, so read with default quoting.
    text = 'source\tpremise\thypothesis\tlabel\nsnli\t"He said ""hi"""\tHe spoke.\tentailment\n'
    ds = read_pairs_file(write(tmp_path / "nli_pairs.tsv", text), columns={"s1": "premise", "label": "label"})
    assert ds.column_names == ["s1", "label"]
    assert ds[0] == {"s1": 'He said "hi"', "label": "entailment"}


def test_csv_row_with_wrong_field_count(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError) as info:
        read_pairs_file(write(tmp_path / "p.tsv", "a\tb\nx\ty\nonly-one\n"))
    assert info.value.line == 3 and "only-one" in str(info.value)


def test_csv_bad_score_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "s1,s2,score\na,b,1\nc,d,high\n")
    with pytest.raises(DataFormatError) as info:
        read_pairs_file(path)
    assert info.value.line == 3 and "'high'" in str(info.value)


def test_jsonl_with_mapping(tmp_path: Path) -> None:
    lines = [
        json.dumps({"q": "How do I boil pasta?", "a": "Boil it ten minutes.", "s": 4}),
        "",
        json.dumps({"q": 'Quote " inside', "a": "x", "s": 0.5, "extra": True}),
    ]
    ds = read_pairs_file(
        write(tmp_path / "p.jsonl", "\n".join(lines) + "\n"),
        columns={"sentence1": "q", "sentence2": "a", "score": "s"},
    )
    assert len(ds) == 2
    assert ds[1] == {"sentence1": 'Quote " inside', "sentence2": "x", "score": 0.5}
    assert list(ds["score"]) == [4.0, 0.5]


def test_json_array(tmp_path: Path) -> None:
    rows = [
        {"sentence1": "a", "sentence2": "b", "score": 1.0},
        {"sentence1": "c", "sentence2": "d", "score": 2},
    ]
    ds = read_pairs_file(write(tmp_path / "p.json", json.dumps(rows, indent=2)))
    assert len(ds) == 2 and list(ds["score"]) == [1.0, 2.0]


def test_json_file_holding_json_lines(tmp_path: Path) -> None:
    ds = read_pairs_file(write(tmp_path / "p.json", '{"a": "x"}\n{"a": "y"}\n'))
    assert list(ds["a"]) == ["x", "y"]


def test_bad_json_line_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path / "p.jsonl", '{"a": "x"}\n{"a": "y"}\n{"a": oops}\n')
    with pytest.raises(DataFormatError) as info:
        read_pairs_file(path)
    assert info.value.line == 3 and "line 3" in str(info.value) and "oops" in str(info.value)


def test_jsonl_missing_requested_key_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path / "p.jsonl", '{"a": "x", "b": "y"}\n{"a": "z"}\n')
    with pytest.raises(DataFormatError) as info:
        read_pairs_file(path, columns={"sentence1": "a", "sentence2": "b"})
    assert info.value.line == 2 and "'b'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "text"),
    [("p.csv", "premise,hypothesis\na,b\n"), ("p.jsonl", '{"premise": "a", "hypothesis": "b"}\n')],
)
def test_unknown_column_lists_available_columns(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(DataFormatError) as info:
        read_pairs_file(path, columns={"sentence1": "sentence_a"})
    message = str(info.value)
    assert str(path) in message and "'sentence_a'" in message
    assert "'premise'" in message and "'hypothesis'" in message


@pytest.mark.parametrize("name", ["p.csv", "p.tsv", "p.jsonl", "p.json"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, "\n")
    with pytest.raises(DataFormatError) as info:
        read_pairs_file(path)
    assert str(path) in str(info.value) and "empty" in str(info.value)


def test_header_without_rows(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="no data rows"):
        read_pairs_file(write(tmp_path / "p.csv", "sentence1,sentence2\n"))


def test_missing_file_names_path(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "pairs.tsv"
    with pytest.raises(FileNotFoundError, match="pairs.tsv"):
        read_pairs_file(path)
    with pytest.raises(FileNotFoundError, match="pairs.tsv"):
        load_pairs(str(path))


def test_unknown_suffix_needs_format(tmp_path: Path) -> None:
    path = write(tmp_path / "pairs.txt", "a\tb\nx\ty\n")
    with pytest.raises(DataFormatError, match="format="):
        read_pairs_file(path)
    assert len(read_pairs_file(path, format="tsv")) == 1


def test_sts_file_detected_by_sniffing(sts_file: Path) -> None:
    ds = read_pairs_file(sts_file)
    assert len(ds) == len(STS_LINES) and ds.column_names == ["sentence1", "sentence2", "score"]
    renamed = read_pairs_file(sts_file, columns={"text": "sentence1", "label": "score"})
    assert renamed.column_names == ["text", "label"] and renamed[0]["label"] == 5.0


def test_headed_tsv_is_not_mistaken_for_sts(tmp_path: Path) -> None:
    text = "a\tb\tc\td\tscore\ts1\ts2\n" + "x\tx\tx\tx\t1.0\tone\ttwo\n"
    ds = read_pairs_file(write(tmp_path / "p.tsv", text))
    assert ds.column_names == ["a", "b", "c", "d", "score", "s1", "s2"] and ds[0]["score"] == 1.0


# --------------------------------------------------------------------------------------------------------
# load_pairs


def test_load_pairs_local_file_and_directory(tmp_path: Path, sts_file: Path) -> None:
    tsv = write(tmp_path / "train.tsv", "premise\thypothesis\tscore\na\tb\t3\n")
    ds = load_pairs(tsv, columns={"sentence1": "premise", "sentence2": "hypothesis", "score": "score"})
    assert ds[0] == {"sentence1": "a", "sentence2": "b", "score": 3.0}
    assert len(load_pairs(str(tmp_path), split="train")) == 1
    assert len(load_pairs(tmp_path, split="dev")) == len(STS_LINES)  # sts-dev.csv
    with pytest.raises(DataFormatError, match="split"):
        load_pairs(tmp_path)
    with pytest.raises(DataFormatError, match="test"):
        load_pairs(tmp_path, split="test")


def test_load_pairs_hub_failure_names_the_id(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(DatasetLoadError) as info:
        load_pairs("someone/some-pairs", split="train")
    assert "'someone/some-pairs'" in str(info.value) and "no network" in str(info.value)
    assert isinstance(info.value.__cause__, ConnectionError)


def test_load_pairs_hub_renames_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    table = datasets.Dataset.from_dict({"premise": ["a"], "hypothesis": ["b"], "sim": [0.7], "idx": [0]})

    def fake(path: str, split: str | None = None, **kwargs: object) -> object:
        calls.append((path, split, kwargs))
        return table if split else datasets.DatasetDict({"train": table, "test": table})

    monkeypatch.setattr(datasets, "load_dataset", fake)
    ds = load_pairs("someone/pairs", split="train", columns={"sentence2": "hypothesis", "sentence1": "premise"})
    assert ds.column_names == ["sentence2", "sentence1"] and ds[0] == {"sentence2": "b", "sentence1": "a"}
    load_pairs("someone/pairs", split="test", name="cfg")
    assert calls[-1] == ("someone/pairs", "test", {"name": "cfg"})
    with pytest.raises(DataFormatError) as info:
        load_pairs("someone/pairs", split="train", columns={"sentence1": "text"})
    assert "someone/pairs" in str(info.value) and "'premise'" in str(info.value)
    with pytest.raises(DatasetLoadError, match="split"):
        load_pairs("someone/pairs")


# --------------------------------------------------------------------------------------------------------
# demo dataset


def test_demo_dataset() -> None:
    demo = load_demo_dataset()
    assert isinstance(demo, datasets.DatasetDict) and set(demo) == {"train", "dev"}
    assert 400 <= len(demo["train"]) <= 600 and 100 <= len(demo["dev"]) <= 150
    pairs = {}
    for split, ds in demo.items():
        assert ds.column_names == ["sentence1", "sentence2", "score"]
        scores = list(ds["score"])
        assert all(0.0 <= s <= 5.0 for s in scores)
        # graded over the whole range, not a binary label
        assert min(scores) <= 0.5 and max(scores) >= 4.5 and len(set(scores)) >= 5
        pairs[split] = {frozenset((r["sentence1"], r["sentence2"])) for r in ds}
        assert len(pairs[split]) == len(ds)  # no duplicate pair inside a split
        assert not any("\t" in r["sentence1"] + r["sentence2"] for r in ds)
    assert not pairs["train"] & pairs["dev"]
    train_sentences = {s for pair in pairs["train"] for s in pair}
    assert not train_sentences & {s for pair in pairs["dev"] for s in pair}


def test_demo_files_match_generator() -> None:
    generator = Path(__file__).resolve().parents[2] / "tools" / "make_demo_data.py"  # in the repository only
    if not generator.is_file():
        pytest.skip("tools/make_demo_data.py is not beside these tests")
    spec = importlib.util.spec_from_file_location("make_demo_data", generator)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for split, rows in module.build_splits().items():
        assert (DEMO_DIR / f"{split}.tsv").read_bytes() == module.render(rows).encode("utf-8")


# --------------------------------------------------------------------------------------------------------
# real files (optional)

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared data folder not present")


@needs_shared
@pytest.mark.parametrize(("split", "rows"), [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_real_sts_benchmark(split: str, rows: int) -> None:
    path = SHARED / "stsb" / f"sts-{split}.csv"
    ds = read_sts_benchmark(path)
    assert len(ds) == rows
    assert all(0.0 <= s <= 5.0 for s in ds["score"])
    assert len(read_pairs_file(path)) == rows  # sniffed as STS Benchmark


@needs_shared
@pytest.mark.parametrize(
    ("path", "rows"),
    [
        ("snli/snli_1.0_dev.csv", 9842),
        ("snli/snli_1.0_test.csv", 9824),
        ("multinli/multinli_1.0_dev_matched.csv", 9815),
        ("multinli/multinli_1.0_dev_mismatched.csv", 9832),
    ],
)
def test_real_nli(path: str, rows: int) -> None:
    ds = read_nli_csv(SHARED / "nli" / path)
    assert len(ds) == rows
    assert set(ds["label"]) == {"entailment", "neutral", "contradiction"}


@needs_shared
def test_real_derived_nli_pairs() -> None:
    ds = read_pairs_file(
        SHARED / "nli" / "derived" / "nli_pairs_labelled.tsv",
        columns={"sentence1": "premise", "sentence2": "hypothesis", "label": "label"},
    )
    assert len(ds) == 39313
