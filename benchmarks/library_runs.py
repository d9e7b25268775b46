"""What the benchmarks that set hf-siamese beside sentence-transformers process by process share (`bench_sparse.py`,
`bench_multivector.py`, `bench_kind_training.py`): each library's runs in the order given, each in a child process
of its own (`scenarios/common.run_child`, quiet, with a timeout), and each library's rows of the table."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "scenarios"))
from common import add_child_arguments, run_child, run_if_child  # noqa: E402

CHILD_ENV = {"TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true")}


def run_libraries(
    script: str | Path,
    base: dict[str, Any],
    orders: str,
    files: Callable[[int, str], dict[str, str]],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    digits: int = 2,
) -> list[dict[str, Any]]:
    """One child process of `script` a library named in `orders` ("ours,st,st,ours"), in that order, each given
    `base` plus its library and its own files (`files(position, library)`); prints each result on a line as it
    comes (the spec's own keys left out) and returns them all."""
    results = []
    for position, library in enumerate(name for name in orders.split(",") if name):
        own = files(position, library)
        result = run_child(
            script, {**base, "library": library, **own}, timeout=timeout, quiet=True, env={**CHILD_ENV, **(env or {})}
        )
        results.append(result)
        shown = {k: v for k, v in result.items() if k not in base and k not in own}
        print(json.dumps({k: round(v, digits) if isinstance(v, float) else v for k, v in shown.items()}), flush=True)
    return results


def library_rows(results: list[dict[str, Any]], columns: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each library's good runs, in the order the libraries first ran; after them, a row of `columns` cells for each
    of its runs that failed (the end of what it said)."""
    for library in dict.fromkeys(r["library"] for r in results):
        rows = [r for r in results if r["library"] == library]
        good = [r for r in rows if "error" not in r]
        if good:
            yield library, good
        for failed in (r for r in rows if "error" in r):
            print(f"| {library} | error: {failed['error'][-300:]!r} |" + " |" * (columns - 2))


def timed_encodes(
    spec: dict[str, Any], texts: dict[str, list[str]], encode: Callable[[list[str], str], Any],
    measure: Callable[[str, list[str], Any], tuple[dict[str, float], Any]], result: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """A child's encoding measurement, the same for every library: for documents then queries, one warm-up batch,
    then `encode(items, task)` timed (`{task}_per_s`); `measure(task, items, vectors)` gives the task's size figures
    and the vectors kept for the comparison, saved to `spec["vectors"]`; `result` gets the peak RSS and threads."""
    import resource
    import time

    import torch

    check = {}
    for task in ("document", "query"):
        items = texts["documents" if task == "document" else "queries"]
        encode(items[: spec["batch_size"]], task)  # warm-up: one batch
        start = time.perf_counter()
        vectors = encode(items, task)
        result[f"{task}_per_s"] = len(items) / (time.perf_counter() - start)
        sizes, check[task] = measure(task, items, vectors)
        result.update(sizes)
    torch.save(check, spec["vectors"])
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["threads"] = torch.get_num_threads()
    return result


def first_vectors(results: list[dict[str, Any]]) -> tuple[Any, Any] | None:
    """(ours, theirs): the vectors `timed_encodes` saved in the first good process of each library; None where a
    library has no good process."""
    import torch

    first = {}
    for r in results:
        if "error" not in r:
            first.setdefault(r["library"], torch.load(r["vectors"], weights_only=True))
    return (first["ours"], first["st"]) if len(first) == 2 else None


def add_encode_arguments(parser: argparse.ArgumentParser, data: Path) -> None:
    """The options of an encode benchmark (`bench_sparse.py`, `bench_multivector.py`): the texts, the batch, the
    threads, the processes' order, the vectors compared, the timeout, and the hidden child options."""
    parser.add_argument("--data", type=Path, default=data, help="SciFact corpus.jsonl (queries.jsonl beside)")
    parser.add_argument("--docs", type=int, default=512)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--orders", default="ours,st,st,ours", help="the processes, in order: ours and st")
    parser.add_argument("--check", type=int, default=8, help="vectors of each task compared across the libraries")
    parser.add_argument("--timeout", type=float, default=900)
    add_child_arguments(parser)


def print_encode_table(results: list[dict[str, Any]], size: tuple[str, str, str], target: str = "") -> None:
    """The encode table: documents/s and queries/s of each process, the vectors' size (`size`: its column's title,
    the result key's suffix, e.g. "tokens" for `document_tokens`, and its format), peak RSS, load time, and the
    ratio of the libraries' means (`target`: what the ratio is held to, shown beside it)."""
    title, key, form = size
    print(f"\n| library | docs/s (each process) | queries/s (each process) | {title} | peak RSS MiB | load s |")
    print("|---|---|---|---|---|---|")
    means: dict[str, dict[str, float]] = {}
    for library, good in library_rows(results, 6):
        docs, queries = ([r[f"{task}_per_s"] for r in good] for task in ("document", "query"))
        means[library] = {"docs": sum(docs) / len(docs), "queries": sum(queries) / len(queries)}
        sizes = f"{good[0][f'document_{key}']:{form}} / {good[0][f'query_{key}']:{form}}"
        rss = " / ".join(f"{r['peak_rss_mib']:.0f}" for r in good)
        print(
            f"| {library} | {' / '.join(f'{s:.1f}' for s in docs)} | {' / '.join(f'{s:.0f}' for s in queries)} "
            f"| {sizes} | {rss} | {max(r['load_s'] for r in good):.1f} |"
        )
    if "ours" in means and "st" in means:
        ratio = {k: means["ours"][k] / means["st"][k] for k in ("docs", "queries")}
        shown = f" ({target})" if target else ""
        print(f"| **ratio ours / st**{shown} | **{ratio['docs']:.2f}x** | **{ratio['queries']:.2f}x** | | | |")


__all__ = [
    "CHILD_ENV", "add_child_arguments", "add_encode_arguments", "library_rows", "print_encode_table", "run_if_child",
    "run_libraries",
]  # fmt: skip
