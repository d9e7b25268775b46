"""Progress a log keeps (issue 53): with stderr a file, the bars of a long command end in line breaks, not carriage
returns, so the log says where the run is; on a terminal (or a test's captured stream) nothing changes."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from conftest import make_tiny_model

from hf_siamese.cli.progress import LogLines


def test_log_lines_turn_carriage_returns_into_lines() -> None:
    sink = io.StringIO()
    stream = LogLines(sink, interval=0)  # every update kept: only the line ends change
    for text in ("\r  0%|     | 0/4", "\r 50%|##   | 2/4", "\r100%|#####| 4/4", "\n", "hf-siamese: done\n"):
        stream.write(text)
    assert sink.getvalue() == "  0%|     | 0/4\n 50%|##   | 2/4\n100%|#####| 4/4\nhf-siamese: done\n"


def test_log_lines_keep_one_line_of_a_bar_per_interval() -> None:
    sink, now = io.StringIO(), [0.0]
    stream = LogLines(sink, interval=30, clock=lambda: now[0])
    for second, text in (
        (0, "\rScoring:  10%|#  | 1/10"),
        (5, "\rScoring:  20%|## | 2/10"),
        (31, "\rScoring:  30%|###| 3/10"),
    ):
        now[0] = second
        stream.write(text)
    now[0] = 32
    stream.write("\rScoring: 100%|###| 10/10\nsaved\n")
    lines = sink.getvalue().splitlines()
    assert lines == ["Scoring:  10%|#  | 1/10", "Scoring:  30%|###| 3/10", "Scoring: 100%|###| 10/10", "saved"]


def test_a_command_logged_to_a_file_keeps_its_progress_as_lines(tmp_path: Path, tiny_tokenizer) -> None:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "corpus.txt").write_text("".join(f"a man plays music {i}\n" for i in range(50)))
    command = [
        sys.executable,
        "-m",
        "hf_siamese",
        "index",
        str(tmp_path / "corpus.txt"),
        "--model",
        str(tmp_path / "model"),
    ]
    with open(tmp_path / "log.txt", "w") as log:
        done = subprocess.run(
            [*command, "-o", str(tmp_path / "idx"), "--batch-size", "8"], stderr=log, stdout=subprocess.PIPE,
            env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300,
        )  # fmt: skip
    text = (tmp_path / "log.txt").read_text()
    assert done.returncode == 0, text
    assert "\r" not in text
    assert any(line.startswith("Embedding corpus: 50text") for line in text.splitlines()), text  # the stage, its count
