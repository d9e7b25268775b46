"""read_beir's qrels: the BEIR layout with or without its header (told by content, not position), the TREC layout
(`query iteration doc relevance`, tabs or spaces), and one-line errors naming the file, the line and the layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_siamese.data.beir import read_beir

DOCS = {"d1": "a cat", "d2": "a dog", "0": "zero", "7": "seven"}
QUERIES = {"q1": "cats", "q2": "dogs", "1": "numbers"}


def _folder(tmp_path: Path, qrels: str) -> Path:
    (tmp_path / "qrels").mkdir(exist_ok=True)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in DOCS.items()))
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in QUERIES.items())
    )
    (tmp_path / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8", newline="")
    return tmp_path


@pytest.mark.parametrize(
    "qrels",
    ["q1\td1\t1\nq2\td2\t2\n", "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq2\td2\t2\r\n"],
    ids=["headerless", "headed-crlf"],
)
def test_Q1_headerless_qrels_keep_their_first_judgement(tmp_path: Path, qrels: str) -> None:
    assert read_beir(_folder(tmp_path, qrels)).qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}


def test_Q1_headerless_first_row_with_repeated_values_is_data(tmp_path: Path) -> None:
    # "7 7 7"-like first rows would be a header with duplicate names to a headed reader
    data = read_beir(_folder(tmp_path, "1\t7\t7\nq1\td1\t1\n"))
    assert data.qrels == {"1": {"7": 7}, "q1": {"d1": 1}}


@pytest.mark.parametrize(
    "qrels",
    [
        "q1 0 d1 1\nq1 0 0 0\nq2 Q0 d2 2\n",  # TREC, spaces
        "q1\t0\td1\t1\nq1\t0\t0\t0\nq2\tQ0\td2\t2\n",  # TREC, tabs (duplicate values in the first row)
        "q1  0 \td1   1\r\nq1 0 0 0\r\n\r\nq2 Q0\td2 2\r\n",  # runs of spaces and tabs, CRLF, a blank line
    ],
    ids=["spaces", "tabs", "mixed"],
)
def test_Q2_trec_qrels_are_read_by_layout(tmp_path: Path, qrels: str) -> None:
    data = read_beir(_folder(tmp_path, qrels))
    assert data.qrels == {"q1": {"d1": 1, "0": 0}, "q2": {"d2": 2}}


@pytest.mark.parametrize(
    ("qrels", "line", "problem"),
    [
        ("q1 0 d1 1\nq1 d1\n", 2, r"'q1 d1'\] has 2 field\(s\), not 3 or 4"),
        ("q1\t0\td1\t1\nq1\t0\td2\t1\textra\n", 2, r"has 5 field\(s\), not 3 or 4"),
        ("q1 0 d1 1\nq1 0 d2 high\n", 2, r"'high' is not an int"),
        ("q1\td1\t1.5\n", 1, r"'1\.5' is not an int"),  # a number, so data (not a header), and not an int
    ],
    ids=["too-few", "too-many", "word-score", "float-score"],
)
def test_Q2_other_rows_are_refused_naming_file_line_and_layouts(
    tmp_path: Path, qrels: str, line: int, problem: str
) -> None:
    with pytest.raises(ValueError, match=rf"test\.tsv line {line}: .*{problem}.*accepted: BEIR .* or TREC ") as caught:
        read_beir(_folder(tmp_path, qrels))
    assert "\n" not in str(caught.value)
