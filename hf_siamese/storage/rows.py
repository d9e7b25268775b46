"""The one writer of row files: a `datasets.Dataset` or a list of dicts as CSV / TSV (with a header) or JSON lines
(`.jsonl`, `.json`), by the file's suffix, written whole or not at all (`write_atomic`). What it writes, the readers
of `hf_siamese.data` read back: list values (a teacher's score lists) are refused in CSV / TSV, naming `.jsonl`."""

from __future__ import annotations

import csv
import itertools
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .files import write_atomic

ROW_FILE_FORMATS = {".jsonl": "json", ".json": "json", ".tsv": "tsv", ".csv": "csv"}


def row_file_kind(output: str | os.PathLike, option: str = "--output") -> str:
    """`json`, `tsv` or `csv` by the suffix of a rows file to write, or a `ValueError` naming the accepted ones."""
    kind = ROW_FILE_FORMATS.get(Path(output).suffix.lower())
    if kind is None:
        accepted = ", ".join(sorted(ROW_FILE_FORMATS))
        raise ValueError(f"{option} {os.fspath(output)!r}: the file name must end in one of {accepted}")
    return kind


def write_rows(output: str | os.PathLike, rows: Any, columns: Sequence[str] | None = None) -> Path:
    """Write `rows` (a `datasets.Dataset`, or dicts) to `output`; `columns` picks and orders them (default: the
    dataset's columns, or the first row's keys). Returns the path."""
    path = Path(output)
    kind = row_file_kind(path)
    rows, found = _with_columns(rows)
    names = list(columns) if columns is not None else found
    records: Iterable[dict[str, Any]] = rows
    if kind != "json":
        features = getattr(rows, "features", None)
        if features is not None:  # a Dataset: its column types say it, without reading the rows
            listed = [name for name in names if not hasattr(features[name], "dtype")]  # List, Sequence
        else:
            records = rows = list(rows)
            listed = [name for name in names if any(isinstance(row[name], list | tuple) for row in rows)]
        if listed:
            raise ValueError(
                f"{os.fspath(path)}: column(s) {listed} hold lists, which CSV / TSV cannot keep: write a .jsonl file"
            )

    def write(temporary: Path) -> None:
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            if kind == "json":
                for row in records:
                    handle.write(json.dumps({name: row[name] for name in names}, ensure_ascii=False) + "\n")
                return
            writer = csv.DictWriter(handle, fieldnames=names, delimiter="\t" if kind == "tsv" else ",")
            writer.writeheader()
            writer.writerows({name: row[name] for name in names} for row in records)

    return write_atomic(path, write)


def _with_columns(rows: Any) -> tuple[Any, list[str]]:
    """(the rows, their columns): a dataset's column names, or the first row's keys; a generator's first row is read
    and put back in front, never lost."""
    if hasattr(rows, "column_names"):
        return rows, list(rows.column_names)
    if isinstance(rows, Sequence):
        return rows, list(rows[0]) if len(rows) else []
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return [], []
    return itertools.chain([first], iterator), list(first)


__all__ = ["ROW_FILE_FORMATS", "row_file_kind", "write_rows"]
