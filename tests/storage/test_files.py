"""The one atomic file write: whole or not at all, a folder refused, nothing left behind on failure."""

from __future__ import annotations

import pytest

from hf_siamese.storage import write_atomic, write_text_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path) -> None:
    target = tmp_path / "out.jsonl"
    write_text_atomic(target, "old\n")

    def broken(temporary):
        temporary.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomic(target, broken)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
    write_text_atomic(tmp_path / "new" / "deeper.txt", "made")  # parent folders are made
    assert (tmp_path / "new" / "deeper.txt").read_text() == "made"


def test_a_folder_is_refused_by_name(tmp_path) -> None:
    (tmp_path / "x.jsonl").mkdir()
    with pytest.raises(IsADirectoryError, match=r"x\.jsonl' is a folder; give a file path"):
        write_text_atomic(tmp_path / "x.jsonl", "rows")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.jsonl"]  # no stray .partial
