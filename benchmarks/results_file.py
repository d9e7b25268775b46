"""Keep `benchmarks/RESULTS.md` up to date: each benchmark owns the section between its two markers."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def update_results(name: str, title: str, command: str, body: str) -> None:
    """Replace (or append) the section `<!-- {name}:start -->` ... `<!-- {name}:end -->` of RESULTS.md."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    stamp = datetime.date.today().isoformat()
    section = f"{start}\n## {title}\n\nCommand ({stamp}):\n\n```bash\n{command}\n```\n\n{body}\n{end}"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + section + after
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    temporary = RESULTS.with_suffix(".md.tmp")
    temporary.write_text(text)
    os.replace(temporary, RESULTS)
