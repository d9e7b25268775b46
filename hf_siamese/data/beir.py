"""Retrieval sets in the BEIR layout: queries, a corpus and graded relevance judgements (`corpus.jsonl`,
`queries.jsonl`, `qrels/<split>.tsv`), read into a `RetrievalDataset`.

What a model scores on one is in `hf_siamese.evaluation.retrieval`; this module only reads files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import delimited_rows

DEFAULT_K_VALUES = (1, 3, 5, 10, 100)
# What `read_beir` reads as qrels, for its errors.
QRELS_LAYOUTS = (
    "BEIR 'query-id<TAB>corpus-id<TAB>score' (header line optional) or TREC 'query-id iteration corpus-id relevance' "
    "(tab- or space-separated), the score an int"
)


@dataclass
class RetrievalDataset:
    """A retrieval evaluation set.

    Attributes:
        queries: query id -> text (only the queries to evaluate).
        corpus: document id -> text.
        qrels: query id -> {document id: graded relevance}; relevance > 0 means relevant.
        name: a label for messages and reports.
        k_values: the cut-offs the metrics are reported at.
        query_prompt / corpus_prompt: texts put before queries / documents; by default the model's `query` prompt
            for queries and its `document` (or `passage`) prompt for documents when it has them, else none.

    Raises:
        ValueError: an empty corpus or query set, qrels naming unknown query or document ids (with how many), a
            negative relevance, a text that is not a string.
    """

    queries: dict[str, str]
    corpus: dict[str, str]
    qrels: dict[str, dict[str, int]]
    name: str = "retrieval"
    k_values: Sequence[int] = DEFAULT_K_VALUES
    query_prompt: str | None = None
    corpus_prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"RetrievalDataset {self.name!r}"
        if not self.corpus:
            raise ValueError(f"{where}: the corpus is empty; it needs at least one document.")
        if not self.queries:
            raise ValueError(f"{where}: there are no queries to evaluate.")
        for kind, texts in (("query", self.queries), ("document", self.corpus)):
            bad = next(((i, t) for i, t in texts.items() if not isinstance(t, str)), None)
            if bad is not None:
                raise ValueError(f"{where}: {kind} {bad[0]!r} holds {bad[1]!r}; expected a string.")
        unknown_queries = sorted(set(self.qrels) - set(self.queries))
        unknown_docs = sorted({d for judged in self.qrels.values() for d in judged} - set(self.corpus))
        for kind, unknown in (("query", unknown_queries), ("document", unknown_docs)):
            if unknown:
                raise ValueError(
                    f"{where}: qrels name {len(unknown)} {kind} id(s) that are not in the {kind} set, e.g. "
                    f"{unknown[:3]}."
                )
        for query, judged in self.qrels.items():
            for doc, relevance in judged.items():
                if isinstance(relevance, bool) or not isinstance(relevance, int) or relevance < 0:
                    raise ValueError(
                        f"{where}: qrels[{query!r}][{doc!r}] = {relevance!r}; relevance must be an int >= 0."
                    )
        if any(isinstance(k, bool) or not isinstance(k, int) or k <= 0 for k in self.k_values):
            raise ValueError(f"{where}: k_values={list(self.k_values)!r} must be positive ints.")

    def __len__(self) -> int:
        return len(self.queries)


def read_beir(
    folder: str | os.PathLike, split: str = "test", *, name: str | None = None, title_separator: str = " "
) -> RetrievalDataset:
    """Read a dataset in the BEIR layout: `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`)
    and `qrels/{split}.tsv`.

    The qrels file holds one judgement a line, in either layout (CRLF endings are fine):
    - BEIR: `query-id<TAB>corpus-id<TAB>score`, with or without its header line `query-id<TAB>corpus-id<TAB>score`;
    - TREC: `query-id iteration corpus-id relevance` (the iteration, usually `0` or `Q0`, is ignored), separated by
      tabs or by spaces.
    The first line is a header only when its score field is not a number: a headerless file loses no judgement.
    Scores are ints (graded relevance).

    Documents are `title + title_separator + text` (the MTEB convention; just `text` when there is no title). Only
    the queries judged in the split are kept.

    Raises:
        FileNotFoundError: a missing file, naming it and the layout expected.
        ValueError: an unreadable line (file and line number; for qrels, the layouts accepted), or ids the qrels name
            but the files lack.
    """
    folder = Path(folder)
    files = {
        "corpus": folder / "corpus.jsonl",
        "queries": folder / "queries.jsonl",
        "qrels": folder / "qrels" / f"{split}.tsv",
    }
    for kind, path in files.items():
        if not path.is_file():
            available = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if kind == "qrels" else None
            hint = f" (splits found: {available})" if available else ""
            raise FileNotFoundError(
                2,
                f"read_beir: {path} not found{hint}; a BEIR folder holds corpus.jsonl, queries.jsonl and "
                "qrels/<split>.tsv",
                str(path),
            )
    corpus = read_corpus(folder, title_separator)
    qrels = _read_qrels(files["qrels"])
    queries = {
        str(row["_id"]): row.get("text", "") for row in _read_jsonl(files["queries"]) if str(row["_id"]) in qrels
    }
    return RetrievalDataset(
        queries=queries, corpus=corpus, qrels=qrels, name=name or f"{folder.name}/{split}", metadata={"split": split}
    )


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {document id: relevance} of a qrels file in the BEIR or TREC layout (see `read_beir`), read through
    the package's one delimited reader; a header is told from data by its score field, not by its position."""
    qrels: dict[str, dict[str, int]] = {}
    first = True
    with open(path, encoding="utf-8", newline="") as handle:
        for number, row in delimited_rows(path, handle, "\t", header=False):
            fields = [field.strip() for field in row]
            if len(fields) not in (3, 4):
                fields = "\t".join(row).split()  # space-separated (as TREC files often are), or a stray tab
            if len(fields) not in (3, 4):
                raise ValueError(
                    f"read_beir: {path} line {number}: {row!r} has {len(fields)} field(s), not 3 or 4; accepted: "
                    f"{QRELS_LAYOUTS}"
                )
            # BEIR: query, doc, score; TREC: query, iteration, doc, relevance
            query, doc, score = fields[0], fields[-2], fields[-1]
            is_header, first = first and not _is_number(score), False
            if is_header:
                continue  # query-id, corpus-id, score (a first line whose score is a number is a judgement)
            try:
                relevance = int(score)
            except ValueError:
                raise ValueError(
                    f"read_beir: {path} line {number}: {row!r} is not query-id, corpus-id, int score ({score!r} is "
                    f"not an int); accepted: {QRELS_LAYOUTS}"
                ) from None
            if not query or not doc:
                raise ValueError(
                    f"read_beir: {path} line {number}: an empty query or document id in {row!r}; accepted: "
                    f"{QRELS_LAYOUTS}"
                )
            qrels.setdefault(query, {})[doc] = relevance
    return qrels


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_corpus(folder: str | os.PathLike, title_separator: str = " ") -> dict[str, str]:
    """Document id -> text of a BEIR folder's `corpus.jsonl` (`title + title_separator + text`), as `read_beir` reads
    it: what `hf-siamese index BEIR_DIR` indexes, so that an evaluation through the index ranks the same documents."""
    corpus = {}
    for row in _read_jsonl(Path(folder) / "corpus.jsonl"):
        title = (row.get("title") or "").strip()
        corpus[str(row["_id"])] = title + title_separator + row.get("text", "") if title else row.get("text", "")
    return corpus


def is_beir_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder in the BEIR layout (`corpus.jsonl`, `queries.jsonl`, `qrels/`)."""
    folder = Path(path)
    return (folder / "corpus.jsonl").is_file() and (folder / "queries.jsonl").is_file() and (folder / "qrels").is_dir()


def beir_split(folder: str | os.PathLike, preferred: Sequence[str]) -> str:
    """The first of `preferred` that the BEIR folder has qrels for (else the first, for read_beir's error)."""
    return next((s for s in preferred if (Path(folder) / "qrels" / f"{s}.tsv").is_file()), preferred[0])


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a BEIR .jsonl file, each with an `_id` seen once (a repeated id is named with both lines)."""
    from .readers import json_lines

    rows = []
    seen: dict[str, int] = {}
    for number, row in json_lines(path):
        if "_id" not in row:
            raise ValueError(f"read_beir: {path} line {number} has no '_id'.")
        key = str(row["_id"])
        if key in seen:
            raise ValueError(
                f"read_beir: {path} lines {seen[key]} and {number} have the same _id {key!r}; ids must be unique"
            )
        seen[key] = number
        rows.append(row)
    return rows
