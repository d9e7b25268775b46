"""The recipes' run folder: a kept run with other settings is refused only when it produced something."""

from __future__ import annotations

import json

import pytest

from hf_siamese.recipes.stages import SETTINGS_FILE, check_settings


def test_a_failed_run_that_produced_nothing_does_not_block_its_fix(tmp_path) -> None:
    folder = tmp_path / "run"
    check_settings(folder, {"negatives": 100})  # the run then failed before writing anything
    check_settings(folder, {"negatives": 3})  # its fix, same folder: starts afresh
    assert json.loads((folder / SETTINGS_FILE).read_text()) == {"negatives": 3}
    (folder / "pairs.jsonl").write_text("{}\n")  # a stage finished: that run is protected
    with pytest.raises(ValueError, match=r"other settings is kept here \(differs in \['negatives'\]\)"):
        check_settings(folder, {"negatives": 5})
    check_settings(folder, {"negatives": 3})  # the same settings resume


def test_a_half_written_checkpoint_is_set_aside_and_the_complete_one_resumes(tmp_path) -> None:
    from hf_siamese.recipes.stages import last_checkpoint

    folder = tmp_path / "checkpoints"
    for step, files in ((2, {"trainer_state.json": "{}", "model.safetensors": "w"}), (4, {"model.safetensors": "w"})):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        for name, text in files.items():
            (folder / f"checkpoint-{step}" / name).write_text(text)
    (folder / "checkpoint-6").mkdir()
    (folder / "checkpoint-6" / "trainer_state.json").write_text('{"global_st')  # killed while writing it
    assert last_checkpoint(folder) == str(folder / "checkpoint-2")
    assert sorted(p.name for p in folder.iterdir()) == [
        ".checkpoint-4.incomplete", ".checkpoint-6.incomplete", "checkpoint-2"
    ]  # fmt: skip
    assert last_checkpoint(folder) == str(folder / "checkpoint-2")  # again: the same answer
    assert last_checkpoint(tmp_path / "none") is None
