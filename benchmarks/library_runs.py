"""What the benchmarks that set hf-siamese beside sentence-transformers process by process share (`bench_sparse.py`,
`bench_multivector.py`, `bench_kind_training.py`): each library's runs in the order given, each in a child process
of its own (`scenarios/common.run_child`, quiet, with a timeout), and each library's rows of the table."""

from __future__ import annotations

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


__all__ = ["CHILD_ENV", "add_child_arguments", "library_rows", "run_if_child", "run_libraries"]
