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
