"""`replace_file`: a file finished elsewhere put in place by one rename, the old one kept where that fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_siamese.storage import replace_file, staging_folder


def test_the_finished_file_takes_the_place_of_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "texts.arrow"
    target.write_text("old")
    finished = tmp_path / "texts.arrow.tmp"
    finished.write_text("new")
    assert replace_file(finished, target) == target
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["texts.arrow"]
    stage = staging_folder(tmp_path / "model", "save")  # from a staging folder beside, into a folder of it
    (stage / "weights.bin").write_text("weights")
    (stage / "sub").mkdir()
    replace_file(str(stage / "weights.bin"), stage / "sub" / "weights.bin")
    assert (stage / "sub" / "weights.bin").read_text() == "weights" and not (stage / "weights.bin").exists()


def test_a_failed_move_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_file(tmp_path / "missing.tmp", target)
    assert target.read_text() == "old"
    (tmp_path / "folder").mkdir()
    (tmp_path / "new.tmp").write_text("new")
    with pytest.raises(IsADirectoryError):
        replace_file(tmp_path / "new.tmp", tmp_path / "folder")
    assert (tmp_path / "new.tmp").read_text() == "new" and (tmp_path / "folder").is_dir()


def test_read_json_object_reads_an_object_and_nothing_else(tmp_path: Path) -> None:
    from hf_siamese.storage import read_json_object

    (tmp_path / "good.json").write_text('{"a": 1}', encoding="utf-8")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    (tmp_path / "cut.json").write_text('{"a": ', encoding="utf-8")
    assert read_json_object(tmp_path / "good.json") == {"a": 1}
    assert read_json_object(tmp_path / "list.json") is None
    assert read_json_object(tmp_path / "cut.json") is None
    assert read_json_object(tmp_path / "missing.json") is None
