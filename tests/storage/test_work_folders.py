"""`work_folder` (beside an output) and `temporary_folder` (scratch for no output): removed however the block ends,
and a killed run's work folder removed by the next run that writes the same output."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hf_siamese.storage import staging_folder, temporary_folder, work_folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_work_folder_lies_beside_its_output_and_goes_however_the_block_ends(tmp_path: Path) -> None:
    output = tmp_path / "run" / "teacher"
    with work_folder(output, "train") as folder:
        assert folder.parent == output.parent and folder.name.startswith(".teacher.train-") and folder.is_dir()
        assert folder.stat().st_mode & 0o777 == 0o700 and not any(folder.iterdir())
        (folder / "nested").mkdir()
        (folder / "nested" / "state.bin").write_text("work")
    assert not folder.exists() and sorted(p.name for p in output.parent.iterdir()) == []
    for stop in (RuntimeError("out of memory"), KeyboardInterrupt()):
        with pytest.raises(type(stop)), work_folder(output, "train") as folder:
            (folder / "state.bin").write_text("half")
            raise stop
        assert not folder.exists()
    with work_folder(output, "train") as folder:  # moved away by its user: nothing left to remove, no error
        folder.rename(tmp_path / "kept")
    assert (tmp_path / "kept").is_dir()


def test_a_killed_runs_work_folder_goes_with_the_next_run(tmp_path: Path) -> None:
    output = tmp_path / "model.onnx"
    killed = tmp_path / f".model.onnx.quantize-{_dead_pid()}-0123abcd"
    killed.mkdir()
    (killed / "prepared.onnx").write_text("left by a kill")
    running = staging_folder(output, "export")  # this process's own: kept
    with work_folder(output, "quantize") as folder:
        assert not killed.exists() and running.is_dir() and folder.is_dir()
    with pytest.raises(ValueError, match="purpose='Quantize'"), work_folder(output, "Quantize"):
        pass


def test_a_temporary_folder_is_in_the_systems_temporary_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with temporary_folder("push") as folder:
        assert folder.parent == tmp_path and folder.name.startswith("hf_siamese_push_") and folder.is_dir()
        assert folder.stat().st_mode & 0o777 == 0o700
        (folder / "model.safetensors").write_text("weights")
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="refused"), temporary_folder("push") as folder:
        raise RuntimeError("refused")
    assert not folder.exists() and not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="purpose='a b'"), temporary_folder("a b"):
        pass
    assert not any(tmp_path.iterdir())


def test_a_temporary_folder_handed_on_goes_when_its_new_holder_is_done(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with contextlib.ExitStack() as staged:
        folder = staged.enter_context(temporary_folder("push"))
        removal = staged.pop_all()
    assert folder.is_dir()  # as `push_to_hub` hands it to the upload, which may run in another thread
    with removal:
        assert folder.is_dir()
    assert not folder.exists()
