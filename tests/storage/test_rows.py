"""The one row-file writer: every row of a generator is written, its first one included (its keys name the columns)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hf_siamese.storage import write_rows


def _rows():
    for i in range(3):
        yield {"id": i, "text": f"row {i}"}


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.tsv", "rows.csv"])
def test_a_generator_keeps_its_first_row(tmp_path: Path, name: str) -> None:
    path = write_rows(tmp_path / name, _rows())
    if name.endswith(".jsonl"):
        found = [json.loads(line) for line in path.read_text().splitlines()]
    else:
        delimiter = "\t" if name.endswith(".tsv") else ","
        found = [{"id": int(r["id"]), "text": r["text"]} for r in csv.DictReader(path.open(), delimiter=delimiter)]
    assert found == list(_rows())


def test_an_empty_generator_writes_an_empty_file(tmp_path: Path) -> None:
    assert write_rows(tmp_path / "rows.jsonl", iter([])).read_text() == ""
