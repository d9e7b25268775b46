"""`hf-siamese rerank`: rank each query's candidate documents (a JSONL file of `{"query": str, "documents": [str, ...],
"ids": [...], "scores": [...]}` rows, "ids" and the first stage's "scores" optional) with a cross-encoder, every
query's pairs in one `predict` call
(`hf_siamese.retrieval.fusion.rerank.rerank_hits`); prints the hits as `search` does, or writes them to a JSONL file."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from .arguments import add_command, add_first_stage_weight, positive_int
from .common import load_cross_encoder
from .progress import progress_wanted
from .search_options import print_hits

ROW_HELP = '{"query": str, "documents": [str, ...]} (optionally "ids" and "scores": [one per document])'


def register(commands: Any) -> None:
    """Add `rerank` to the `hf-siamese` subparsers."""
    add_command(
        commands, "rerank", run_rerank, add_arguments,
        summary="rank each query's candidate documents with a cross-encoder",
        description='Read a JSONL file of rows {"query": str, "documents": [str, ...]} (optionally "ids": one '
        "per document, and \"scores\": the first stage's score of each, which the cross-encoder's saved "
        "--first-stage-weight then fuses in) and rank each row's documents by a cross-encoder's score, all rows' "
        "pairs in one call; "
        "prints 'rank. score  [id] text  (first stage: #position)' per document, or writes "
        '{"query", "hits": [{"rank", "score", "id", "text", "first_stage_rank"}]} rows to --output.',
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `rerank`: the candidates file, the cross-encoder, the output, how many hits, the fusion weight."""
    parser.add_argument("candidates", metavar="CANDIDATES_FILE", help="JSONL: one query and its documents per line")
    parser.add_argument("--model", required=True, metavar="CE_DIR", help="the cross-encoder (folder or Hub id)")
    parser.add_argument("-o", "--output", metavar="OUT.jsonl", help="write the ranked rows here instead of printing")
    parser.add_argument("--top-k", type=positive_int, help="documents kept per query (default: all)")
    add_first_stage_weight(parser)
    parser.add_argument(
        "--batch-size", type=positive_int, default=32, help="pairs per forward pass (default: %(default)s)"
    )
    parser.add_argument(
        "--device", default="auto", help="where the model runs: auto (default), cpu, cuda, cuda:N or mps"
    )


def read_candidates(path: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(query, candidate hits `{"id", "text", "rank"}`, plus `"score"` from "scores") per non-blank line of `path`; a
    bad line is named with its number. A hit's id is its "ids" entry, else its 0-based position in "documents"; its
    rank, its position + 1."""
    from ..data.readers import json_lines

    rows = []
    for number, row in json_lines(path):
        where = f"{os.fspath(path)}, line {number}"
        if "query" not in row or "documents" not in row:
            found = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{where}: expected {ROW_HELP}, got {found}")
        query, documents, ids = row["query"], row["documents"], row.get("ids")
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f'{where}: "query" is {query!r:.60}; expected a non-empty string')
        if not isinstance(documents, list):
            raise ValueError(f'{where}: "documents" is {type(documents).__name__}; expected a list of strings')
        if not documents:
            raise ValueError(f"{where}: the query {query!r:.60} has no documents to rank")
        bad = next((i for i, text in enumerate(documents) if not isinstance(text, str)), None)
        if bad is not None:
            raise ValueError(f"{where}: documents[{bad}] is {documents[bad]!r:.60}; expected a string")
        if ids is not None and (not isinstance(ids, list) or len(ids) != len(documents)):
            count = len(ids) if isinstance(ids, list) else type(ids).__name__
            raise ValueError(f'{where}: "ids" has {count} entries for {len(documents)} documents; give one each')
        scores = row.get("scores")
        if scores is not None and (
            not isinstance(scores, list)
            or len(scores) != len(documents)
            or any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) for v in scores)
        ):
            raise ValueError(
                f'{where}: "scores" must hold one finite number per document ({len(documents)}), got {scores!r:.80}'
            )
        ids = list(range(len(documents))) if ids is None else ids
        hits = [
            {"id": i, "text": text, "rank": rank} for rank, (i, text) in enumerate(zip(ids, documents, strict=True), 1)
        ]
        for hit, score in zip(hits, scores or [], strict=False):
            hit["score"] = float(score)
        rows.append((query, hits))
    if not rows:
        raise ValueError(f"{os.fspath(path)}: no rows; expected one JSON object per line: {ROW_HELP}")
    return rows


def run_rerank(args: argparse.Namespace) -> int:
    """Rank every row's documents by the cross-encoder's score; print them, or write `{"query", "hits": [{"rank",
    "score", "id", "text", "first_stage_rank"}]}` per row to --output."""
    from ..retrieval.fusion.rerank import rerank_hits

    output = Path(args.output) if args.output else None
    if output is not None and output.suffix.lower() != ".jsonl":
        raise ValueError(f"--output {args.output!r}: the file name must end in .jsonl")
    rows = read_candidates(args.candidates)
    reranker = load_cross_encoder(args.model, args.device, option="--model")
    queries = [query for query, _ in rows]
    scored = all("score" in hit for _, hits in rows for hit in hits)
    weight = args.first_stage_weight
    if weight and not scored:
        raise ValueError(
            f'--first-stage-weight {weight} fuses the first stage\'s scores: give every row "scores" (one per '
            "document) in the candidates file"
        )
    if weight is None and not scored:
        weight = 0.0  # no first-stage scores to fuse: the reranker alone
    results = rerank_hits(
        reranker, queries, [hits for _, hits in rows], args.top_k, args.batch_size,
        show_progress_bar=progress_wanted(), first_stage_weight=weight,
    )  # fmt: skip
    if output is None:
        print_hits(queries, results)
        return 0
    from ..storage import write_rows

    ranked = [{"query": query, "hits": hits} for query, hits in zip(queries, results, strict=True)]
    write_rows(output, ranked, columns=["query", "hits"])  # whole or not at all
    pairs = sum(len(hits) for _, hits in rows)
    print(f"reranked {len(rows)} queries ({pairs} pairs) with {args.model} -> {output}")
    return 0
