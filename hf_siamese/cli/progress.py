"""Progress a log keeps: where stderr is a file or a pipe (a log, CI, `nohup`), the progress bars of every stage
(encoding, mining, the Trainer's steps, a reranker's scoring, `datasets` maps) end each update with a newline instead
of a carriage return, at most every `INTERVAL` seconds a bar, so the log says where a long run is (the stage's name,
step N of M, the time left) rather than holding one line of overwritten bars. A terminal keeps its live bars."""

from __future__ import annotations

import io
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERVAL = "30"  # seconds between two lines of one bar (tqdm's mininterval, through its TQDM_ environment)


BAR = re.compile(r"^(?P<stage>[^\n]*?):?\s*(?P<percent>\d+)%\|")  # a tqdm bar's line: "Stage:  42%|###  | 5/12"


class LogLines(io.TextIOBase):
    """A text stream that turns carriage returns into line ends (and drops the empty lines that makes), and keeps at
    most one line every `interval` seconds of each bar (its first and its 100% line always): tqdm reads
    `TQDM_MININTERVAL` when it is imported, which may be before a command sets it."""

    def __init__(self, stream: io.TextIOBase, interval: float = float(INTERVAL), clock: Any = time.monotonic) -> None:
        self.stream, self.last = stream, "\n"
        self.interval, self.clock = interval, clock
        self.shown: dict[str, float] = {}  # bar (its stage) -> when its last line was written

    def write(self, text: str) -> int:
        lines = re.sub(r"\n{2,}", "\n", text.replace("\r\n", "\n").replace("\r", "\n"))
        lines = "".join(part for part in lines.splitlines(keepends=True) if self._keep(part))
        if lines.startswith("\n") and self.last == "\n":
            lines = lines[1:]
        if lines:
            self.stream.write(lines)
            self.last = lines[-1]
        return len(text)

    def _keep(self, line: str) -> bool:
        found = BAR.match(line)
        if found is None or not line.strip():
            return True
        now, stage = self.clock(), found.group("stage").strip()
        if stage in self.shown and now - self.shown[stage] < self.interval and found.group("percent") != "100":
            return False
        self.shown[stage] = now
        return True

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


def _is_log(stream: object) -> bool:
    """A real file or pipe that is not a terminal (a test's captured stream, without a file descriptor, is not)."""
    try:
        descriptor = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
    return not os.isatty(descriptor)


@contextmanager
def log_friendly_stderr() -> Iterator[None]:
    """While a command runs: stderr as `LogLines` where it is a log (see the module docstring)."""
    if not _is_log(sys.stderr) or os.environ.get("HF_SIAMESE_RAW_PROGRESS"):
        yield
        return
    saved = sys.stderr
    os.environ.setdefault("TQDM_MININTERVAL", INTERVAL)
    sys.stderr = LogLines(saved)
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = saved


def progress_wanted() -> bool:
    """Whether to show progress: on a terminal (live bars) and in a log (lines, `LogLines`)."""
    return isinstance(sys.stderr, LogLines) or sys.stderr.isatty()


__all__ = ["LogLines", "log_friendly_stderr", "progress_wanted"]
