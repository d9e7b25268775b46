"""Readers for local sentence-pair datasets, a Hub fallback, and the built-in demo dataset.

Every reader returns a :class:`datasets.Dataset` so that local files and Hub datasets flow through the same
training and evaluation code. Problems in a file are reported as :class:`DataFormatError`, whose message
names the file, the 1-based line (as an editor shows it) when the problem is about a row, the offending
value and what would have been accepted: a user fixing a 5000-line TSV needs all four.

Formats:

* STS Benchmark (``sts-train.csv`` ...): tab-separated, no header, 7 or 9 fields per line
  (genre, file, year, id, score, sentence1, sentence2 [, licence1, licence2]). Sentences contain unbalanced
  ``"`` characters, so the file must be read without quote processing (``csv.QUOTE_NONE``); with default
  quoting, csv silently merges lines and loses rows.
* NLI CSV (SNLI / MultiNLI exports): header ``pairID,sentence1,sentence2,label``, RFC-4180 quoting,
  label ``-`` (no annotator majority) marks rows to drop.
* Generic CSV / TSV with a header, JSON Lines, or a JSON array of objects, with named columns.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import datasets

from .retrieval import RetrievalDataset, read_beir  # the BEIR layout: retrieval sets live with their metrics

__all__ = [
    "RetrievalDataset",
    "read_beir",
    "DataFormatError",
    "DatasetLoadError",
    "load_demo_dataset",
    "load_pairs",
    "read_nli_csv",
    "read_pairs_file",
    "read_sts_benchmark",
]

PathLike = str | os.PathLike

# Scores of the STS Benchmark (and of the demo set) are on the 0..5 scale of the SemEval annotation guide.
STS_SCORE_RANGE = (0.0, 5.0)
_STS_FIELD_COUNTS = (7, 9)
_NLI_DROP_LABEL = "-"
# Suffix -> format, used when the caller does not say which format a file has.
_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "json"}
_FORMAT_ALIASES = {
    "csv": "csv",
    "tsv": "tsv",
    "jsonl": "jsonl",
    "json": "json",
    "sts": "sts",
    "stsb": "sts",
    "sts-benchmark": "sts",
}
_MISSING = object()


class DataFormatError(ValueError):
    """A data file (or dataset) does not have the expected layout or contents.

    Attributes mirror the message so callers can react programmatically: ``path`` (the file or dataset id),
    ``line`` (1-based line number, or ``None`` when the problem is not about one row), ``value`` (the
    offending value) and ``expected`` (what would have been accepted).
    """

    def __init__(
        self,
        path: PathLike,
        problem: str,
        *,
        line: int | None = None,
        value: Any = _MISSING,
        expected: str | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        self.line = line
        self.value = None if value is _MISSING else value
        self.expected = expected
        where = self.path if line is None else f"{self.path}, line {line}"
        message = f"{where}: {problem}"
        if value is not _MISSING:
            message += f" (got {_show(value)})"
        if expected:
            message += f"; expected {expected}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only constructor would break default exception pickling, which multiprocessing
        # (e.g. datasets.map(num_proc=...)) relies on to send errors back to the parent process.
        return (_rebuild_error, (type(self), self.path, self.problem, self.line, self.value, self.expected))


def _rebuild_error(
    cls: type[DataFormatError], path: str, problem: str, line: int | None, value: Any, expected: str | None
) -> DataFormatError:
    return cls(path, problem, line=line, value=value, expected=expected)


class DatasetLoadError(RuntimeError):
    """A ``source`` given to :func:`load_pairs` is neither a local file nor a loadable Hub dataset."""


def _show(value: Any, limit: int = 120) -> str:
    """repr() of a value, shortened so one huge cell does not flood the terminal.

    The middle is cut, not the end: for a row with too many fields, the surplus is at the end of the line.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[: limit - tail - 5] + " ... " + text[-tail:]


# --------------------------------------------------------------------------------------------------------
# low-level helpers


def _read_text(path: PathLike) -> str:
    """Read a whole file as text, turning the usual failures into errors that name the file.

    Bytes are decoded as UTF-8 (a leading BOM, as written by spreadsheet programs, is dropped so the first
    header name is not corrupted). Line endings are kept as they are: the csv module copes with LF and CRLF,
    and nothing inside a sentence is altered.
    """
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(2, f"data file not found: {os.fspath(path)!r}", os.fspath(path))
    if file.is_dir():
        raise DataFormatError(path, "is a directory", expected="a data file (.csv, .tsv, .jsonl or .json)")
    raw = file.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataFormatError(
            path,
            "is not valid UTF-8 text",
            line=line,
            value=raw[err.start : err.end + 8],
            expected="a UTF-8 encoded text file",
        ) from err


def _check_not_empty(path: PathLike, text: str) -> None:
    if not text.strip():
        raise DataFormatError(path, "is empty", value=text[:20], expected="a header line and at least one row")


def _parse_score(path: PathLike, raw: Any, line: int | None, *, check_range: bool) -> float:
    """Parse one similarity score; reject non-numbers, NaN/inf and (optionally) values outside 0..5."""
    low, high = STS_SCORE_RANGE
    expected = f"a number between {low:g} and {high:g}" if check_range else "a finite number"
    # bool is an int subclass; a JSON true/false in a score column is a data error, not 1.0/0.0.
    if isinstance(raw, bool) or raw is None:
        raise DataFormatError(path, "bad score", line=line, value=raw, expected=expected)
    try:
        score = float(raw)
    except (TypeError, ValueError):
        raise DataFormatError(path, "score is not a number", line=line, value=raw, expected=expected) from None
    if not math.isfinite(score) or (check_range and not low <= score <= high):
        raise DataFormatError(path, "score out of range", line=line, value=raw, expected=expected)
    return score


def _pairs_dataset(sentence1: list[str], sentence2: list[str], score: list[float]) -> datasets.Dataset:
    features = datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "score": datasets.Value("float64"),
        }
    )
    return datasets.Dataset.from_dict(
        {"sentence1": sentence1, "sentence2": sentence2, "score": score}, features=features
    )


def _resolve_columns(source: PathLike, columns: Mapping[str, str] | None, available: list[str]) -> dict[str, str]:
    """Validate a ``{wanted_name: name_in_file}`` mapping against the columns a file or dataset has.

    ``None`` means "keep every column under its own name".
    """
    if columns is None:
        return {name: name for name in available}
    if not isinstance(columns, Mapping) or not columns:
        raise TypeError(f"columns must be a non-empty mapping {{wanted_name: column_in_file}}, got {_show(columns)}")
    seen: dict[str, str] = {}
    for wanted, found in columns.items():
        if not isinstance(wanted, str) or not isinstance(found, str):
            raise TypeError(f"columns must map str to str, got {_show(wanted)}: {_show(found)}")
        if found not in available:
            raise DataFormatError(
                source,
                f"unknown column for {wanted!r}",
                value=found,
                expected=f"one of the columns it has: {', '.join(map(repr, available))}",
            )
        if found in seen:
            # Reusing one source column twice is almost always a typo in the mapping.
            raise DataFormatError(
                source,
                f"column {found!r} is mapped twice (to {seen[found]!r} and {wanted!r})",
                value=found,
                expected="each column of the file used at most once",
            )
        seen[found] = wanted
    return dict(columns)


def _normalise_format(format: str | None, path: PathLike) -> str:
    if format is not None:
        key = format.lower().lstrip(".")
        if key not in _FORMAT_ALIASES:
            raise ValueError(
                f"unknown format {format!r} for {os.fspath(path)!r}; "
                f"expected one of {', '.join(sorted(set(_FORMAT_ALIASES)))}"
            )
        return _FORMAT_ALIASES[key]
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIX_FORMATS:
        raise DataFormatError(
            path,
            "cannot tell the file format from its name",
            value=suffix or "(no suffix)",
            expected=f"a name ending in {', '.join(_SUFFIX_FORMATS)}, or format='csv'/'tsv'/'jsonl'/'json'",
        )
    return _SUFFIX_FORMATS[suffix]


def _looks_like_sts_benchmark(text: str) -> bool:
    """True when the first line has the STS Benchmark layout: 7 or 9 tab fields and a number in field 5.

    A headed CSV/TSV never passes: its fifth field (if any) is a column name, not a number.
    """
    first = text.split("\n", 1)[0].rstrip("\r")
    fields = first.split("\t")
    if len(fields) not in _STS_FIELD_COUNTS:
        return False
    try:
        float(fields[4])
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------------------
# readers


def read_sts_benchmark(path: PathLike) -> datasets.Dataset:
    """Read an STS Benchmark file (``sts-train.csv``, ``sts-dev.csv``, ``sts-test.csv``).

    The file is tab-separated with no header; each line has 7 fields (genre, source file, year, id,
    score, sentence1, sentence2) or 9 (plus two licence fields, ignored). It is read with
    ``csv.QUOTE_NONE`` because sentences contain unbalanced quote characters, which default CSV quoting
    would treat as the start of a multi-line field. Sentences are kept byte-exact (trailing spaces too).
    Completely blank lines are skipped.

    Returns:
        A dataset with columns ``sentence1`` (str), ``sentence2`` (str) and ``score`` (float, 0..5).

    Raises:
        FileNotFoundError: the file does not exist.
        DataFormatError: a line has another number of fields, a score is not a number in 0..5, or the
            file has no rows.
    """
    text = _read_text(path)
    _check_not_empty(path, text)
    sentence1: list[str] = []
    sentence2: list[str] = []
    scores: list[float] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    for fields in reader:
        line = reader.line_num  # QUOTE_NONE: one record per physical line, so this is exact
        if not fields:
            continue
        if len(fields) not in _STS_FIELD_COUNTS:
            raise DataFormatError(
                path,
                f"STS Benchmark line has {len(fields)} tab-separated fields",
                line=line,
                value="\t".join(fields),
                expected="7 fields (genre, file, year, id, score, sentence1, sentence2) or 9 (+2 licences)",
            )
        scores.append(_parse_score(path, fields[4], line, check_range=True))
        sentence1.append(fields[5])
        sentence2.append(fields[6])
    if not scores:
        raise DataFormatError(path, "has no rows", value="", expected="at least one STS Benchmark line")
    return _pairs_dataset(sentence1, sentence2, scores)


def read_nli_csv(path: PathLike) -> datasets.Dataset:
    """Read an NLI file with a header (SNLI / MultiNLI exports): ``pairID,sentence1,sentence2,label``.

    Default CSV quoting is used (sentences contain ``"`` escaped as ``""``). Rows whose label is ``-``
    (no annotator majority) are dropped, as is standard for training and evaluation. The label column may
    also be called ``gold_label`` (the name in the official distributions). Files ending in ``.tsv`` or
    ``.txt`` are read as tab-separated. Extra columns are ignored; sentences are kept exactly as written.

    Returns:
        A dataset with columns ``sentence1``, ``sentence2`` and ``label`` (all str).

    Raises:
        FileNotFoundError: the file does not exist.
        DataFormatError: no header, a required column is missing, a row has the wrong number of fields or
            an empty label, or no labelled row is left.
    """
    text = _read_text(path)
    _check_not_empty(path, text)
    delimiter = "\t" if Path(path).suffix.lower() in (".tsv", ".txt") else ","
    header, columns, lines = _read_delimited(path, text, delimiter)
    label_name = "label" if "label" in header else "gold_label"
    missing = [name for name in ("sentence1", "sentence2", label_name) if name not in header]
    if missing:
        raise DataFormatError(
            path,
            f"NLI header lacks column(s) {', '.join(map(repr, missing))}",
            line=1,
            value=delimiter.join(header),
            expected="a header with sentence1, sentence2 and label (e.g. pairID,sentence1,sentence2,label)",
        )
    first, second, gold = (columns[header.index(name)] for name in ("sentence1", "sentence2", label_name))
    sentence1: list[str] = []
    sentence2: list[str] = []
    labels: list[str] = []
    for line, text1, text2, raw_label in zip(lines, first, second, gold, strict=True):
        label = raw_label.strip()
        if label == _NLI_DROP_LABEL:
            continue
        if not label:
            raise DataFormatError(
                path,
                "empty label",
                line=line,
                value=raw_label,
                expected="a label such as entailment, neutral or contradiction ('-' marks rows to drop)",
            )
        sentence1.append(text1)
        sentence2.append(text2)
        labels.append(label)
    if not labels:
        raise DataFormatError(path, "has no labelled rows", value="", expected="rows whose label is not '-'")
    features = datasets.Features({name: datasets.Value("string") for name in ("sentence1", "sentence2", "label")})
    return datasets.Dataset.from_dict(
        {"sentence1": sentence1, "sentence2": sentence2, "label": labels}, features=features
    )


def _read_delimited(path: PathLike, text: str, delimiter: str) -> tuple[list[str], list[list[Any]], list[int]]:
    """Parse a headed CSV/TSV into (header, column-wise values, 1-based line of each row)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = [name.strip() for name in next(reader)]
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates or any(not name for name in header):
        raise DataFormatError(
            path,
            "header has duplicate or empty column names",
            line=1,
            value=delimiter.join(header),
            expected="unique, non-empty column names in the first line",
        )
    values: list[list[Any]] = [[] for _ in header]
    lines: list[int] = []
    warned = False
    while True:
        line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise DataFormatError(
                path, f"CSV syntax error: {err}", line=line, value=None, expected="RFC-4180 quoting"
            ) from err
        if not fields:
            continue
        if len(fields) != len(header):
            raise DataFormatError(
                path,
                f"row has {len(fields)} fields but the header has {len(header)}",
                line=line,
                value=delimiter.join(fields),
                expected=f"{len(header)} fields: {delimiter.join(header)}",
            )
        if not warned and reader.line_num > line and delimiter == "\t":
            # Legal in quoted TSV, but far more often a sign of an unquoted file with a stray '"' that
            # made csv swallow the following lines (the STS Benchmark pitfall). Say so once.
            warnings.warn(
                f"{os.fspath(path)}, line {line}: a row spans lines {line}-{reader.line_num}; if the file "
                "does not quote fields, a stray '\"' may have merged rows",
                stacklevel=3,
            )
            warned = True
        for column, field in zip(values, fields, strict=True):
            column.append(field)
        lines.append(line)
    return header, values, lines


def _read_json_lines(path: PathLike, text: str) -> tuple[list[str], list[list[Any]], list[int]]:
    """Parse JSON Lines (one object per line) into (keys, column-wise values, line of each row)."""
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    # split("\n"), not splitlines(): JSON strings may legally hold U+2028 and other characters that
    # splitlines() treats as line breaks, which would cut objects apart and shift the line numbers.
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as err:
            raise DataFormatError(
                path, f"invalid JSON ({err.msg})", line=number, value=raw, expected="one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise DataFormatError(
                path,
                "line is not a JSON object",
                line=number,
                value=raw,
                expected='an object like {"a": ...}',
            )
        rows.append(row)
        lines.append(number)
    return _rows_to_columns(rows, lines)


def _read_json_array(path: PathLike, text: str) -> tuple[list[str], list[list[Any]], list[int | None]]:
    """Parse a JSON document holding a list of objects; rows carry no line number (JSON has none per item)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        bad_line = (text.split("\n")[err.lineno - 1 :] or [""])[0]
        raise DataFormatError(
            path,
            f"invalid JSON ({err.msg})",
            line=err.lineno,
            value=bad_line,
            expected="a JSON array of objects, or JSON Lines",
        ) from None
    if not isinstance(document, list) or not all(isinstance(item, dict) for item in document):
        raise DataFormatError(
            path,
            "JSON document is not a list of objects",
            value=type(document).__name__,
            expected='[{"sentence1": ..., "sentence2": ...}, ...] or one object per line (JSON Lines)',
        )
    return _rows_to_columns(document, [None] * len(document))


def _rows_to_columns(rows: list[dict[str, Any]], lines: list[Any]) -> tuple[list[str], list[list[Any]], list[Any]]:
    names: dict[str, None] = {}  # ordered union of keys, in order of first appearance
    for row in rows:
        names.update(dict.fromkeys(row))
    header = list(names)
    # A missing key is marked _MISSING here; _collect() reports it if that column is actually requested.
    values = [[row.get(name, _MISSING) for row in rows] for name in header]
    return header, values, lines


def _collect(
    path: PathLike,
    header: list[str],
    values: list[list[Any]],
    lines: list[Any],
    columns: Mapping[str, str] | None,
    *,
    strings: bool,
) -> datasets.Dataset:
    """Select/rename columns, convert a ``score`` column to float, and build the dataset."""
    if not lines:
        raise DataFormatError(path, "has no data rows", value="", expected="at least one row after the header")
    mapping = _resolve_columns(path, columns, header)
    out: dict[str, list[Any]] = {}
    for wanted, found in mapping.items():
        column = values[header.index(found)]
        for i, value in enumerate(column):
            if value is _MISSING:
                if columns is None:
                    column[i] = None  # unrequested sparse keys are allowed and become null
                    continue
                raise DataFormatError(
                    path,
                    f"row has no key {found!r}",
                    line=lines[i],
                    value=None,
                    expected=f"every row to have {found!r}",
                )
        if wanted == "score":
            # "score" is the library's name for a graded similarity label; CSV gives it as text.
            column = [_parse_score(path, value, lines[i], check_range=False) for i, value in enumerate(column)]
        out[wanted] = column
    if strings:
        features = datasets.Features({name: datasets.Value("float64" if name == "score" else "string") for name in out})
        return datasets.Dataset.from_dict(out, features=features)
    try:
        return datasets.Dataset.from_dict(out)
    except (TypeError, ValueError, ArithmeticError) as err:  # pyarrow errors derive from these
        raise DataFormatError(
            path,
            f"cannot build a table from the JSON values ({err})",
            value=None,
            expected="each column to hold values of one type",
        ) from err


def read_pairs_file(
    path: PathLike, columns: Mapping[str, str] | None = None, format: str | None = None
) -> datasets.Dataset:
    """Read a local file of sentence pairs with named columns.

    Args:
        path: a ``.csv`` / ``.tsv`` file with a header line, a ``.jsonl`` file (one JSON object per line)
            or a ``.json`` file (a JSON array of objects, or JSON Lines). A header-less STS Benchmark file
            (``sts-*.csv``: 7 or 9 tab-separated fields with a number in field 5) is recognised from its first
            line and read with :func:`read_sts_benchmark`.
        columns: ``{wanted_name: name_in_file}``, e.g. ``{"sentence1": "premise", "sentence2": "hypothesis",
            "label": "label"}``. The result holds exactly these columns, in this order; map a name to
            itself to keep a column unchanged. ``None`` keeps every column of the file.
        format: ``"csv"``, ``"tsv"``, ``"jsonl"``, ``"json"`` or ``"sts"``; guessed from the suffix when
            omitted.

    CSV/TSV values are strings, except a resulting column named ``score``, which is parsed as float (its
    range is not checked: not every dataset uses 0..5). JSON values keep their JSON types.

    Raises:
        FileNotFoundError: the file does not exist.
        DataFormatError: empty file, unknown column (the message lists the columns the file has), a row
            with the wrong number of fields, an unreadable JSON line, a bad score; with the line number.
    """
    text = _read_text(path)  # first: "no such file" / "is a directory" beat any complaint about the name
    kind = _normalise_format(format, path)
    _check_not_empty(path, text)
    if kind == "sts" or (kind in ("csv", "tsv") and _looks_like_sts_benchmark(text)):
        dataset = read_sts_benchmark(path)
        if columns is None:
            return dataset
        return _select_dataset_columns(dataset, columns, path)
    if kind in ("csv", "tsv"):
        header, values, lines = _read_delimited(path, text, "," if kind == "csv" else "\t")
        return _collect(path, header, values, lines, columns, strings=True)
    if kind == "json" and text.lstrip().startswith("["):
        header, values, lines = _read_json_array(path, text)
    else:
        header, values, lines = _read_json_lines(path, text)
    return _collect(path, header, values, lines, columns, strings=False)


def _select_dataset_columns(
    dataset: datasets.Dataset, columns: Mapping[str, str] | None, source: PathLike
) -> datasets.Dataset:
    """Apply a ``{wanted: existing}`` mapping to an already built dataset (Hub datasets, STSb files)."""
    if columns is None:
        return dataset
    available = list(dataset.column_names or [])
    mapping = _resolve_columns(source, columns, available)
    dataset = dataset.select_columns(list(mapping.values()))
    renames = {found: wanted for wanted, found in mapping.items() if found != wanted}
    if renames:
        dataset = dataset.rename_columns(renames)
    # select_columns keeps the file's order; the documented contract is the mapping's order.
    return dataset.select_columns(list(mapping))


# --------------------------------------------------------------------------------------------------------
# load_pairs: local path or Hub id

# Names tried, in order, when load_pairs() is given a directory and a split.
_SPLIT_FILE_PATTERNS = ("{split}.tsv", "{split}.csv", "{split}.jsonl", "{split}.json", "sts-{split}.csv")


def _looks_like_local_path(source: str) -> bool:
    """Hub ids are ``name`` or ``owner/name``; anything with a file suffix or path syntax is meant locally."""
    return (
        source.startswith((".", "/", "~"))
        or "\\" in source
        or Path(source).suffix.lower() in _SUFFIX_FORMATS
        or source.count("/") > 1
    )


def _split_file(directory: Path, split: str | None) -> Path:
    candidates = sorted(p.name for p in directory.iterdir() if p.suffix.lower() in _SUFFIX_FORMATS)
    if split is None:
        raise DataFormatError(
            directory,
            "is a directory; cannot tell which file to read",
            value=None,
            expected=f"split=... naming one of its files: {', '.join(candidates) or '(no data files)'}",
        )
    for pattern in _SPLIT_FILE_PATTERNS:
        file = directory / pattern.format(split=split)
        if file.is_file():
            return file
    raise DataFormatError(
        directory,
        f"has no file for split {split!r}",
        value=split,
        expected=f"one of {', '.join(p.format(split=split) for p in _SPLIT_FILE_PATTERNS)} "
        f"(it has: {', '.join(candidates) or 'no data files'})",
    )


def load_pairs(
    source: PathLike,
    split: str | None = None,
    columns: Mapping[str, str] | None = None,
    *,
    format: str | None = None,
    **load_dataset_kwargs: Any,
) -> datasets.Dataset:
    """Load a pair dataset from a local file/directory or from the Hugging Face Hub.

    Args:
        source: an existing local file (read with :func:`read_pairs_file`), an existing directory (the
            file for ``split`` is looked up: ``{split}.tsv``, ``.csv``, ``.jsonl``, ``.json`` or
            ``sts-{split}.csv``), or a Hub dataset id such as ``"sentence-transformers/stsb"``, passed to
            :func:`datasets.load_dataset`.
        split: the split to return. For a Hub dataset with several splits it is required.
            Ignored for a single local file.
        columns: ``{wanted_name: existing_name}``; the result holds exactly these columns in this order.
        format: file format for a local file (see :func:`read_pairs_file`).
        **load_dataset_kwargs: passed to :func:`datasets.load_dataset` (e.g. ``name=``, ``revision=``);
            not accepted for local files.

    Raises:
        FileNotFoundError: ``source`` looks like a local path (suffix, ``./``, ``/``) but does not exist.
        DataFormatError: bad file contents or unknown columns (see :func:`read_pairs_file`).
        DatasetLoadError: loading from the Hub failed (no network, unknown id, ...); the message names the id.
    """
    path = Path(source)
    if path.exists():
        if load_dataset_kwargs:
            raise TypeError(
                f"{os.fspath(source)!r} is a local path; these arguments only apply to Hub datasets: "
                f"{', '.join(sorted(load_dataset_kwargs))}"
            )
        file = _split_file(path, split) if path.is_dir() else path
        return read_pairs_file(file, columns=columns, format=format)
    if not isinstance(source, str) or _looks_like_local_path(source):
        raise FileNotFoundError(2, f"data file not found: {os.fspath(source)!r}", os.fspath(source))
    if format is not None:
        raise TypeError(f"format= only applies to local files, and {source!r} is not one")
    try:
        loaded = datasets.load_dataset(source, split=split, **load_dataset_kwargs)
    except Exception as err:  # any failure gets the same explanation; the original stays chained
        raise DatasetLoadError(
            f"could not load {source!r}: it is not an existing local path, and loading it as a Hugging Face "
            f"Hub dataset failed ({type(err).__name__}: {err}). Check the dataset id and split, your network "
            "connection (and HF_HUB_OFFLINE / HF_DATASETS_OFFLINE), or pass the path of a local file."
        ) from err
    if isinstance(loaded, datasets.DatasetDict | datasets.IterableDatasetDict):
        if len(loaded) != 1:
            raise DatasetLoadError(f"{source!r} has several splits ({', '.join(loaded)}); pass split=... to choose one")
        loaded = next(iter(loaded.values()))
    return _select_dataset_columns(loaded, columns, source)


# --------------------------------------------------------------------------------------------------------
# demo dataset

_DEMO_SPLITS = ("train", "dev")


def load_demo_dataset() -> datasets.DatasetDict:
    """Load the small built-in demo dataset of scored sentence pairs shipped with the package.

    The pairs were written for this project (see ``hf_siamese/demo_data/README.md``): several everyday
    topics, scores 0..5 on the STS scale (paraphrases near 5, same topic but a different event near 2,
    unrelated near 0, and pairs that share most words but disagree in meaning scored low). It needs no
    network and is meant for quick examples and smoke tests of fine-tuning.

    Returns:
        A ``DatasetDict`` with splits ``"train"`` and ``"dev"``, columns ``sentence1``, ``sentence2``
        (str) and ``score`` (float, 0..5).
    """
    root = resources.files("hf_siamese").joinpath("demo_data")
    splits = {}
    for split in _DEMO_SPLITS:
        # as_file() gives a real path even when the package is imported from a zip archive.
        with resources.as_file(root.joinpath(f"{split}.tsv")) as file:
            dataset = read_pairs_file(file, format="tsv")
            for line, score in enumerate(dataset["score"], start=2):
                # The generic reader does not check the range; the demo set promises 0..5.
                _parse_score(file, score, line, check_range=True)
        splits[split] = dataset
    return datasets.DatasetDict(splits)
