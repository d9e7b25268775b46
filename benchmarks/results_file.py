"""Keep `benchmarks/RESULTS.md` up to date: each benchmark owns the section between its two markers."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def update_results(name: str, title: str, command: str, body: str) -> None:
    """Write a section with a title, the command that made it and its body (see `write_section`)."""
    stamp = datetime.date.today().isoformat()
    write_section(name, f"## {title}\n\nCommand ({stamp}):\n\n```bash\n{command}\n```\n\n{body}")


def write_section(name: str, section: str) -> None:
    """Replace (or append) the section `<!-- {name}:start -->` ... `<!-- {name}:end -->` of RESULTS.md, atomically
    (other benchmarks update their own sections of the same file)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{section.strip()}\n{end}"
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    temporary = RESULTS.with_suffix(f".md.{name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, RESULTS)
