"""Parsing sentence-pair data files into columns, for the readers in `data.py`: the error type every reader raises,
text decoding, headed CSV/TSV, JSON Lines and JSON arrays, score parsing, column mapping and format detection.
Each helper names the file, the 1-based line, the offending value and what would have been accepted when it fails.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import datasets

PathLike = str | os.PathLike

# Scores of the STS Benchmark (and of the demo set) are on the 0..5 scale of the SemEval annotation guide.
STS_SCORE_RANGE = (0.0, 5.0)
STS_FIELD_COUNTS = (7, 9)
# Suffix -> format, used when the caller does not say which format a file has.
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "json"}
FORMAT_ALIASES = {
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


def _show(value: Any, limit: int = 120) -> str:
    """repr() of a value, shortened so one huge cell does not flood the terminal.

    The middle is cut, not the end: for a row with too many fields, the surplus is at the end of the line.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[: limit - tail - 5] + " ... " + text[-tail:]


def read_text(path: PathLike) -> str:
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


def check_not_empty(path: PathLike, text: str) -> None:
    if not text.strip():
        raise DataFormatError(path, "is empty", value=text[:20], expected="a header line and at least one row")


def parse_score(path: PathLike, raw: Any, line: int | None, *, check_range: bool) -> float:
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


def pairs_dataset(sentence1: list[str], sentence2: list[str], score: list[float]) -> datasets.Dataset:
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


def resolve_columns(source: PathLike, columns: Mapping[str, str] | None, available: list[str]) -> dict[str, str]:
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


def normalise_format(format: str | None, path: PathLike) -> str:
    if format is not None:
        key = format.lower().lstrip(".")
        if key not in FORMAT_ALIASES:
            raise ValueError(
                f"unknown format {format!r} for {os.fspath(path)!r}; "
                f"expected one of {', '.join(sorted(set(FORMAT_ALIASES)))}"
            )
        return FORMAT_ALIASES[key]
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIX_FORMATS:
        raise DataFormatError(
            path,
            "cannot tell the file format from its name",
            value=suffix or "(no suffix)",
            expected=f"a name ending in {', '.join(SUFFIX_FORMATS)}, or format='csv'/'tsv'/'jsonl'/'json'",
        )
    return SUFFIX_FORMATS[suffix]


def looks_like_sts_benchmark(text: str) -> bool:
    """True when the first line has the STS Benchmark layout: 7 or 9 tab fields and a number in field 5.

    A headed CSV/TSV never passes: its fifth field (if any) is a column name, not a number.
    """
    first = text.split("\n", 1)[0].rstrip("\r")
    fields = first.split("\t")
    if len(fields) not in STS_FIELD_COUNTS:
        return False
    try:
        float(fields[4])
    except ValueError:
        return False
    return True


def delimited_rows(
    path: PathLike, lines: Iterable[str], delimiter: str, *, header: bool = True
) -> Iterator[tuple[int, list[str]]]:
    """The one reader of headed CSV/TSV (RFC-4180 quoting), one row in memory at a time: yields (1, the header), then
    (1-based line, fields) of each non-blank row; nothing for an empty file. `lines` is an open text file (newline="")
    or a `io.StringIO`. A duplicate or empty column name, a row whose field count differs from the header's, a quoting
    error or a byte that is not UTF-8 raises a `DataFormatError` naming the file and line.

    `header=False` reads a file whose first line may be data (qrels): every non-blank row is yielded as it is, with
    no header checks and no field count compared; the caller checks each row's fields."""
    reader = csv.reader(lines, delimiter=delimiter)
    warned, line = False, 1
    names: list[str] | None = None
    try:
        if header:
            first = next(reader, None)
            if first is None:
                return
            names = [name.strip() for name in first]
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates or any(not name for name in names):
                raise DataFormatError(
                    path,
                    "header has duplicate or empty column names",
                    line=1,
                    value=delimiter.join(names),
                    expected="unique, non-empty column names in the first line",
                )
            yield 1, names
        while True:
            line = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                raise DataFormatError(
                    path, f"CSV syntax error: {err}", line=line, value=None, expected="RFC-4180 quoting"
                ) from err
            if not fields:
                continue
            if names is not None and len(fields) != len(names):
                raise DataFormatError(
                    path,
                    f"row has {len(fields)} fields but the header has {len(names)}",
                    line=line,
                    value=delimiter.join(fields),
                    expected=f"{len(names)} fields: {delimiter.join(names)}",
                )
            if not warned and reader.line_num > line and delimiter == "\t":
                # Legal in quoted TSV, but far more often a sign of an unquoted file with a stray '"' that made csv
                # swallow the following lines (the STS Benchmark pitfall). Say so once.
                warnings.warn(
                    f"{os.fspath(path)}, line {line}: a row spans lines {line}-{reader.line_num}; if the file "
                    "does not quote fields, a stray '\"' may have merged rows",
                    stacklevel=4,
                )
                warned = True
            yield line, fields
    except UnicodeDecodeError:
        raise DataFormatError(path, "is not valid UTF-8 text", line=line, expected="a UTF-8 text file") from None


def read_delimited(path: PathLike, text: str, delimiter: str) -> tuple[list[str], list[list[Any]], list[int]]:
    """Parse a headed CSV/TSV held in `text` into (header, column-wise values, 1-based line of each row)."""
    rows = delimited_rows(path, io.StringIO(text, newline=""), delimiter)
    _, header = next(rows)
    values: list[list[Any]] = [[] for _ in header]
    lines: list[int] = []
    for line, fields in rows:
        for column, field in zip(values, fields, strict=True):
            column.append(field)
        lines.append(line)
    return header, values, lines


def json_object(path: PathLike, raw: str, line: int) -> dict[str, Any]:
    """One line of a JSON Lines file as its object, or a `DataFormatError` naming the file and line (every JSON Lines
    reader of the package parses its lines here)."""
    try:
        row = json.loads(raw)
    except ValueError as err:
        raise DataFormatError(
            path, f"is not JSON Lines ({err})", line=line, value=raw, expected="one JSON object per line"
        ) from None
    if not isinstance(row, dict):
        raise DataFormatError(
            path, "has a line that is not a JSON object", line=line, value=raw, expected='an object like {"a": ...}'
        )
    return row


def read_json_lines(path: PathLike, text: str) -> tuple[list[str], list[list[Any]], list[int]]:
    """Parse JSON Lines (one object per line) into (keys, column-wise values, line of each row)."""
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    # split("\n"), not splitlines(): JSON strings may legally hold U+2028 and other characters that
    # splitlines() treats as line breaks, which would cut objects apart and shift the line numbers.
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        rows.append(json_object(path, raw, number))
        lines.append(number)
    return rows_to_columns(rows, lines)


def read_json_array(path: PathLike, text: str) -> tuple[list[str], list[list[Any]], list[int | None]]:
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
    return rows_to_columns(document, [None] * len(document))


def rows_to_columns(rows: list[dict[str, Any]], lines: list[Any]) -> tuple[list[str], list[list[Any]], list[Any]]:
    names: dict[str, None] = {}  # ordered union of keys, in order of first appearance
    for row in rows:
        names.update(dict.fromkeys(row))
    header = list(names)
    # A missing key is marked _MISSING here; collect() reports it if that column is actually requested.
    values = [[row.get(name, _MISSING) for row in rows] for name in header]
    return header, values, lines


# Label columns of CSV / TSV files that hold numbers when every value is one (class ids 0/1/2, 0/1 relevance, graded
# scores); "entailment"-style labels stay strings.
NUMERIC_LABEL_COLUMNS = ("label", "labels", "similarity")


def numeric_labels(column: list[Any]) -> list[Any]:
    """`column` (text from a CSV / TSV) as ints when every value is a whole number, as floats when every value is a
    finite number, else unchanged (string labels)."""
    try:
        numbers = [float(value) for value in column]
    except (TypeError, ValueError):
        return column
    if not all(math.isfinite(n) for n in numbers):
        return column
    if all(str(value).strip().lstrip("+-").isdigit() for value in column):
        return [int(value) for value in column]
    return numbers


def _value_type(column: list[Any]) -> str:
    if column and all(isinstance(v, int) for v in column):
        return "int64"
    if column and all(isinstance(v, float) for v in column):
        return "float64"
    return "string"


def collect(
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
    mapping = resolve_columns(path, columns, header)
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
            column = [parse_score(path, value, lines[i], check_range=False) for i, value in enumerate(column)]
        elif strings and wanted in NUMERIC_LABEL_COLUMNS:
            column = numeric_labels(column)
        out[wanted] = column
    if strings:
        kinds = {name: _value_type(out[name]) if name in NUMERIC_LABEL_COLUMNS else "string" for name in out}
        kinds["score"] = "float64"
        features = datasets.Features({name: datasets.Value(kinds[name]) for name in out})
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
