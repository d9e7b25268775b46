"""hf_siamese.storage: staging folders, the swap into place, and the recovery of every state a kill can leave."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_siamese.storage import move_files_into, recover_output, replace_folder, staging_folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "file.txt").write_text(text)
    return path


def test_replace_swaps_and_deletes_the_old_copy(tmp_path: Path) -> None:
    output = _folder(tmp_path / "out", "old")
    staging = staging_folder(output, "build")
    assert staging.parent == tmp_path and staging.name.startswith(".out.build-") and staging.is_dir()
    (staging / "file.txt").write_text("new")
    replace_folder(staging, output)
    assert (output / "file.txt").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    empty = tmp_path / "empty"
    empty.mkdir()
    replace_folder(_folder(tmp_path / "s", "x"), empty)  # an empty folder is simply replaced
    assert (empty / "file.txt").read_text() == "x"


def test_a_failed_second_rename_puts_the_old_output_back(tmp_path: Path) -> None:
    output = _folder(tmp_path / "out", "old")
    with pytest.raises(OSError):
        replace_folder(tmp_path / "missing-staging", output)
    assert (output / "file.txt").read_text() == "old" and not (tmp_path / ".out.replaced").exists()


def test_recover_mends_what_a_kill_leaves(tmp_path: Path) -> None:
    output = tmp_path / "out"
    # killed between the two renames: the output is missing, the old copy aside
    _folder(tmp_path / ".out.replaced", "old")
    recover_output(output)
    assert (output / "file.txt").read_text() == "old" and not (tmp_path / ".out.replaced").exists()
    # killed after the second rename: the old copy is left beside the new output
    _folder(tmp_path / ".out.replaced", "older")
    recover_output(output)
    assert (output / "file.txt").read_text() == "old" and not (tmp_path / ".out.replaced").exists()
    # killed while writing: a dead process's staging folder goes, a running one's (this process) stays
    dead = _folder(tmp_path / f".out.export-{_dead_pid()}-0123abcd", "partial")
    alive = staging_folder(output, "export")
    other = _folder(tmp_path / f".other.export-{_dead_pid()}-0123abcd", "another output's")
    recover_output(output)
    assert not dead.exists() and alive.is_dir() and other.is_dir()
    # and a swap finds the mess already mended before it moves anything
    _folder(tmp_path / ".out.replaced", "stale")
    (alive / "file.txt").write_text("new")
    replace_folder(alive, output)
    assert (output / "file.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "out"]


def test_bad_purpose(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="purpose='a b'"):
        staging_folder(tmp_path / "out", "a b")


def test_move_files_into_a_shared_folder_removes_stale_entries_only_after(tmp_path: Path) -> None:
    target = tmp_path / "run"
    (target / "checkpoint-1").mkdir(parents=True)
    (target / "checkpoint-1" / "state.json").write_text("kept: not ours")
    (target / "1_Pooling").mkdir()
    (target / "1_Pooling" / "old.json").write_text("stale")
    (target / "2_Dense").mkdir()
    (target / "2_Dense" / "config.json").write_text("stale module")
    (target / "model.safetensors").write_text("stale weights")
    staging = staging_folder(target / "saved_model", "save")
    (staging / "1_Pooling").mkdir()
    (staging / "1_Pooling" / "config.json").write_text("new")
    (staging / "config.json").write_text("new root")
    seen = []

    def stale(entry: Path) -> bool:
        seen.append((entry.name, (target / "config.json").is_file()))  # asked only once the new files are in
        return entry.name in {"1_Pooling", "2_Dense", "model.safetensors"}

    written = move_files_into(staging, target, stale=stale)
    assert written == {Path("1_Pooling/config.json"), Path("config.json")} and all(new for _, new in seen)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        "1_Pooling/config.json",
        "checkpoint-1/state.json",
        "config.json",
    ]
    assert not staging.exists() and not (target / "2_Dense").exists()
