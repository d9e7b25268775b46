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
import os
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import datasets

from .files import (
    STS_FIELD_COUNTS,
    SUFFIX_FORMATS,
    DataFormatError,
    PathLike,
    check_not_empty,
    collect,
    json_object,
    looks_like_sts_benchmark,
    normalise_format,
    pairs_dataset,
    parse_score,
    read_delimited,
    read_json_array,
    read_json_lines,
    read_text,
    resolve_columns,
)

__all__ = [
    "DataFormatError",
    "DatasetLoadError",
    "load_demo_dataset",
    "load_pairs",
    "read_text_lines",
    "read_nli_csv",
    "read_pairs_file",
    "read_sts_benchmark",
]


class DatasetLoadError(RuntimeError):
    """A ``source`` given to :func:`load_pairs` is neither a local file nor a loadable Hub dataset."""


# Rows whose NLI label is this (no annotator majority) are dropped.
_NLI_DROP_LABEL = "-"

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
    text = read_text(path)
    check_not_empty(path, text)
    sentence1: list[str] = []
    sentence2: list[str] = []
    scores: list[float] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    for fields in reader:
        line = reader.line_num  # QUOTE_NONE: one record per physical line, so this is exact
        if not fields:
            continue
        if len(fields) not in STS_FIELD_COUNTS:
            raise DataFormatError(
                path,
                f"STS Benchmark line has {len(fields)} tab-separated fields",
                line=line,
                value="\t".join(fields),
                expected="7 fields (genre, file, year, id, score, sentence1, sentence2) or 9 (+2 licences)",
            )
        scores.append(parse_score(path, fields[4], line, check_range=True))
        sentence1.append(fields[5])
        sentence2.append(fields[6])
    if not scores:
        raise DataFormatError(path, "has no rows", value="", expected="at least one STS Benchmark line")
    return pairs_dataset(sentence1, sentence2, scores)


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
    text = read_text(path)
    check_not_empty(path, text)
    delimiter = "\t" if Path(path).suffix.lower() in (".tsv", ".txt") else ","
    header, columns, lines = read_delimited(path, text, delimiter)
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
    text = read_text(path)  # first: "no such file" / "is a directory" beat any complaint about the name
    kind = normalise_format(format, path)
    check_not_empty(path, text)
    if kind == "sts" or (kind in ("csv", "tsv") and looks_like_sts_benchmark(text)):
        dataset = read_sts_benchmark(path)
        if columns is None:
            return dataset
        return _select_dataset_columns(dataset, columns, path)
    if kind in ("csv", "tsv"):
        header, values, lines = read_delimited(path, text, "," if kind == "csv" else "\t")
        return collect(path, header, values, lines, columns, strings=True)
    if kind == "json" and text.lstrip().startswith("["):
        header, values, lines = read_json_array(path, text)
    else:
        header, values, lines = read_json_lines(path, text)
    return collect(path, header, values, lines, columns, strings=False)


def _select_dataset_columns(
    dataset: datasets.Dataset, columns: Mapping[str, str] | None, source: PathLike
) -> datasets.Dataset:
    """Apply a ``{wanted: existing}`` mapping to an already built dataset (Hub datasets, STSb files)."""
    if columns is None:
        return dataset
    available = list(dataset.column_names or [])
    mapping = resolve_columns(source, columns, available)
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
        or Path(source).suffix.lower() in SUFFIX_FORMATS
        or source.count("/") > 1
    )


def _split_file(directory: Path, split: str | None) -> Path:
    candidates = sorted(p.name for p in directory.iterdir() if p.suffix.lower() in SUFFIX_FORMATS)
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


def text_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line of a UTF-8 file, stripped, one line in memory at a time. Only "\n"
    ends a line: a text may hold U+2028 and similar characters, which are not line ends here."""
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
            except UnicodeDecodeError:
                raise DataFormatError(
                    path, "is not valid UTF-8 text", line=number, expected="a UTF-8 text file"
                ) from None
            if line:
                yield number, line


def json_lines(path: PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line of a JSON Lines file, one line in memory at a time; a line that
    is not a JSON object is named with its file and number (`files.json_object`)."""
    for number, line in text_lines(path):
        yield number, json_object(path, line, number)


def read_text_lines(path: str) -> list[str]:
    """Texts of a UTF-8 file, one per line; blank lines are skipped, surrounding whitespace is dropped."""
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(2, f"text file not found: {path!r}", path)
    if file.is_dir():
        raise DataFormatError(path, "is a directory", expected="a text file with one text per line")
    texts = [line for _, line in text_lines(file)]
    if not texts:
        raise DataFormatError(path, "has no text", expected="one text per line")
    return texts


_DEMO_SPLITS = ("train", "dev")


def load_demo_dataset() -> datasets.DatasetDict:
    """Load the small built-in demo dataset of scored sentence pairs shipped with the package.

    The pairs were written for this project (see ``hf_siamese/data/demo_data/README.md``): several everyday
    topics, scores 0..5 on the STS scale (paraphrases near 5, same topic but a different event near 2,
    unrelated near 0, and pairs that share most words but disagree in meaning scored low). It needs no
    network and is meant for quick examples and smoke tests of fine-tuning.

    Returns:
        A ``DatasetDict`` with splits ``"train"`` and ``"dev"``, columns ``sentence1``, ``sentence2``
        (str) and ``score`` (float, 0..5).
    """
    root = resources.files("hf_siamese.data").joinpath("demo_data")
    splits = {}
    for split in _DEMO_SPLITS:
        # as_file() gives a real path even when the package is imported from a zip archive.
        with resources.as_file(root.joinpath(f"{split}.tsv")) as file:
            dataset = read_pairs_file(file, format="tsv")
            for line, score in enumerate(dataset["score"], start=2):
                # The generic reader does not check the range; the demo set promises 0..5.
                parse_score(file, score, line, check_range=True)
        splits[split] = dataset
    return datasets.DatasetDict(splits)
