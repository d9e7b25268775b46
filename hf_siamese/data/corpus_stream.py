"""Reading a corpus as a stream of `(id or None, text)` rows, never a whole list: a `datasets.Dataset` or
`IterableDataset`, an iterable of strings, files (`.txt` one text per line, `.jsonl`, `.csv` / `.tsv` with a header,
`.parquet`; a glob reads the matching files in sorted order), or a Hub dataset id (streamed). Bad rows are
`DataFormatError`s naming the file and line (or the row of a dataset).

`open_corpus` is the one corpus reader: `encode_corpus`, the vector index, mining, similar pairs and clusters, and
every command that takes a corpus (index, embed, search --corpus, mine --corpus, similar, cluster) read through it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .files import delimited_rows, json_object
from .readers import DataFormatError, DatasetLoadError, text_lines

SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv", ".parquet")
_READ_BATCH = 1024  # rows per Arrow batch read from a Dataset or a Parquet file


class _Rows:
    """Checks each row's text and id where it is read, so that an error names the file and line (or row)."""

    def __init__(self, text_column: str, id_column: str | None, table: bool = True) -> None:
        self.text_column, self.id_column, self.id_type = text_column, id_column, None
        self.columns = [c for c in (text_column, id_column) if c is not None]
        self.text = f"the text (column {text_column!r})" if table else "the text"

    def check(self, where: str, text: Any, doc_id: Any, line: int | None = None, row: int | None = None) -> tuple:
        """(id or None, text); a `DataFormatError` names `line` of a file or `row` (0-based) of a dataset / Parquet."""
        at = "" if row is None else f"row {row}: "
        if not isinstance(text, str):
            raise DataFormatError(where, f"{at}{self.text} is {type(text).__name__}", line=line, value=text)
        if self.id_column is None:
            return None, text
        doc_id = doc_id.item() if isinstance(doc_id, np.generic) else doc_id
        # One id type for the whole run: every shard's `id` column must have the same Parquet type.
        if isinstance(doc_id, bool) or not isinstance(doc_id, int | str) or self.id_type not in (None, type(doc_id)):
            problem, expected = (
                f"{at}the id (column {self.id_column!r}) is {type(doc_id).__name__}",
                "all str or all int",
            )
            raise DataFormatError(where, problem, line=line, value=doc_id, expected=expected)
        self.id_type = type(doc_id)
        return doc_id, text

    def need_columns(self, where: str, seen: Iterable[str], line: int | None = None) -> None:
        if not set(self.columns) <= set(seen):
            problem = "has no column " + ", ".join(repr(c) for c in self.columns if c not in seen)
            raise DataFormatError(where, problem, line=line, value=list(seen), expected="text_column / id_column")


def _read_lines(path: Path, rows: _Rows, jsonl: bool) -> Iterator[tuple]:
    """A .txt (one text per line, stripped, blank lines skipped, as `read_text_lines`) or .jsonl file, one line in
    memory at a time; only "\\n" ends a line (a text may hold U+2028), and a bad byte or line names its line."""
    where = os.fspath(path)
    for number, line in text_lines(path):
        if not jsonl:
            yield rows.check(where, line, None, line=number)
            continue
        record = json_object(path, line, number)
        rows.need_columns(where, record, line=number)
        yield rows.check(where, record[rows.text_column], record.get(rows.id_column), line=number)


def _read_delimited(path: Path, rows: _Rows, delimiter: str) -> Iterator[tuple]:
    where = os.fspath(path)
    with open(path, encoding="utf-8-sig", newline="") as file:
        records = delimited_rows(path, file, delimiter)
        first = next(records, None)
        if first is None:
            return  # an empty file: reported by the caller
        header = first[1]
        rows.need_columns(where, header, line=1)
        text_at = header.index(rows.text_column)
        id_at = header.index(rows.id_column) if rows.id_column else None
        for line, fields in records:
            yield rows.check(where, fields[text_at], None if id_at is None else fields[id_at], line=line)


def _read_parquet(path: Path, rows: _Rows) -> Iterator[tuple]:
    try:
        file = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as err:
        raise DataFormatError(path, f"is not a readable Parquet file ({err})") from None
    rows.need_columns(os.fspath(path), file.schema_arrow.names)
    offset = 0
    for batch in file.iter_batches(batch_size=_READ_BATCH, columns=rows.columns):
        texts = batch.column(rows.text_column).to_pylist()
        ids = batch.column(rows.id_column).to_pylist() if rows.id_column else [None] * len(texts)
        for row, (text, doc_id) in enumerate(zip(texts, ids, strict=True), offset):
            yield rows.check(os.fspath(path), text, doc_id, row=row)
        offset += len(texts)


def _read_files(paths: list[Path], rows: _Rows) -> Iterator[tuple]:
    for path in paths:
        suffix = path.suffix.lower()
        if suffix in (".txt", ".jsonl"):
            records = _read_lines(path, rows, jsonl=suffix == ".jsonl")
        elif suffix == ".parquet":
            records = _read_parquet(path, rows)
        else:
            records = _read_delimited(path, rows, "," if suffix == ".csv" else "\t")
        empty = True
        for record in records:
            empty = False
            yield record
        if empty:
            problem = "is empty" if path.stat().st_size == 0 else "has no rows"
            raise DataFormatError(path, problem, expected="at least one text")


def _read_dataset(data: datasets.Dataset | datasets.IterableDataset, rows: _Rows) -> Iterator[tuple]:
    name = f"dataset {data.info.dataset_name!r}" if data.info.dataset_name else f"the {type(data).__name__}"
    if isinstance(data, datasets.Dataset):
        rows.need_columns(name, data.column_names)
        batches = data.with_format(None).select_columns(rows.columns).iter(batch_size=_READ_BATCH)
        records = (
            dict(zip(batch, values, strict=True)) for batch in batches for values in zip(*batch.values(), strict=True)
        )
    else:
        records = iter(data)
    for row, record in enumerate(records):
        rows.need_columns(name, record)
        yield rows.check(name, record[rows.text_column], record.get(rows.id_column), row=row)


def _source_paths(source: str | os.PathLike) -> list[Path]:
    """The files of a path or glob (matches in sorted order), each checked to exist and to have a known suffix."""
    text = os.fspath(source)
    if glob.has_magic(text):
        paths = [Path(p) for p in sorted(glob.glob(text, recursive=True)) if Path(p).is_file()]
        if not paths:
            raise FileNotFoundError(2, f"no corpus file matches {text!r}", text)
    elif not Path(text).exists():
        raise FileNotFoundError(2, f"corpus file not found: {text!r}", text)
    elif Path(text).is_dir():
        raise DataFormatError(text, "is a directory", expected=f"a file, or a glob such as '{text}/*.jsonl'")
    else:
        paths = [Path(text)]
    for path in paths:
        if path.suffix.lower() not in SUFFIXES:
            raise ValueError(f"corpus file {os.fspath(path)!r}: expected a name ending in {', '.join(SUFFIXES)}")
    return paths


def is_local_source(source: str | os.PathLike) -> bool:
    """Whether a corpus string names local files rather than a Hub dataset id: a path object, a glob, an existing
    path, a name ending in a corpus suffix, or an absolute or ./ relative path."""
    if not isinstance(source, str):
        return True
    return (
        glob.has_magic(source)
        or Path(source).exists()
        or Path(source).suffix.lower() in SUFFIXES
        or os.path.isabs(source)
        or source.startswith((".", "~"))
    )


def resolve_corpus(source: Any, *, split: str | None = None, config: str | None = None) -> Any:
    """`source` as `open_corpus` reads it, with a Hub dataset id (a string that names no local file, see
    `is_local_source`) opened once as a streamed `IterableDataset` of `split` (default train) and `config`. Commands
    call it once and pass the result on, so that the dataset is resolved once however often the corpus is read.

    Raises:
        DatasetLoadError: the id could not be loaded (no such dataset, split or config; offline), with the reason.
        ValueError: `split` / `config` given for a source that is not a Hub id.
    """
    if not isinstance(source, str) or is_local_source(source):
        if split is not None or config is not None:
            given = ", ".join(f"{name}={value!r}" for name, value in (("split", split), ("config", config)) if value)
            raise ValueError(f"{given} applies to a Hub dataset id; {_describe(source)} is not one")
        return source
    try:
        return datasets.load_dataset(source, name=config, split=split or "train", streaming=True)
    except Exception as err:  # any failure of the Hub route means: not a file, not a loadable dataset
        raise DatasetLoadError(
            f"corpus {source!r} is not a local file or glob, and loading it as a Hub dataset (split "
            f"{split or 'train'!r}{f', config {config!r}' if config else ''}) failed: {err}"
        ) from None


def _describe(source: Any) -> str:
    if isinstance(source, str | os.PathLike):
        return f"the local corpus {os.fspath(source)!r}"
    return f"a corpus given as {type(source).__name__}"


def open_corpus(
    source: Any,
    text_column: str = "text",
    id_column: str | None = None,
    *,
    split: str | None = None,
    config: str | None = None,
) -> Iterator[tuple]:
    """(id or None, text) of every row of a corpus, lazily: the one reader of every command that takes a corpus.

    `source`: a `datasets.Dataset` or `IterableDataset` (columns `text_column`, optional `id_column`), an iterable of
    `str` (ids: the positions), a path or glob of `.txt` (one text per line, blank lines skipped: no columns),
    `.jsonl`, `.csv` / `.tsv` (with a header) or `.parquet` files (matches in sorted order), or a Hub dataset id
    (streamed, `split` default train, `config`; see `resolve_corpus`). Paths and Hub ids are checked here, before the
    first row is read; a bad row is a `DataFormatError` naming the file and line (or the dataset's row).
    """
    source = resolve_corpus(source, split=split, config=config)
    if isinstance(source, datasets.Dataset | datasets.IterableDataset):
        return _read_dataset(source, _Rows(text_column, id_column))
    if isinstance(source, str | os.PathLike):
        paths = _source_paths(source)
        if (text_column != "text" or id_column) and any(p.suffix.lower() == ".txt" for p in paths):
            raise ValueError(
                f"text_column / id_column (--text-column / --id-column) apply to tables and datasets, not to .txt "
                f"(one text per line; its ids are the positions of the non-blank lines): {os.fspath(source)!r}"
            )
        return _read_files(paths, _Rows(text_column, id_column))
    if isinstance(source, bytes | dict) or not isinstance(source, Iterable):
        kinds = (
            f"a Dataset, an IterableDataset, an iterable of str, a path or glob of {', '.join(SUFFIXES)} files, or a "
            "Hub dataset id"
        )
        raise TypeError(f"source is {type(source).__name__}; expected {kinds}")
    if id_column:
        raise ValueError("id_column applies to files and datasets; the ids of an iterable of str are its positions")
    rows = _Rows(text_column, None, table=False)
    return (rows.check("the corpus", text, None, row=row) for row, text in enumerate(source))


__all__ = ["SUFFIXES", "is_local_source", "open_corpus", "resolve_corpus"]
