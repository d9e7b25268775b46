"""What the multi-stage training recipes (`augmented_sbert`, `adapt`) share: a run folder whose settings file
refuses a second run with other settings, reading back the rows `storage.write_rows` kept as JSON lines, the last
checkpoint of a stopped training, and the final model moved into place whole."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from ..storage import replace_folder, staging_folder, write_text_atomic

SETTINGS_FILE = "settings.json"
logger = logging.getLogger(__name__)


def check_training_numbers(**values: Any) -> None:
    """Refuse training numbers that are not positive (`epochs=-1`, `save_steps=0`, ...), naming the value: the
    Trainer would accept some of them and silently train nothing."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value == float("inf"):
            raise ValueError(f"{name}={value!r}: expected a positive number")
        if name.endswith(("steps", "batch_size")) and not isinstance(value, int):
            raise ValueError(f"{name}={value!r}: expected a positive whole number")


def check_settings(folder: Path, settings: dict[str, Any]) -> None:
    """Start `folder` with `settings`, or check that the run kept there had the same ones (a `ValueError` naming
    the settings that differ)."""
    path = folder / SETTINGS_FILE
    if path.is_file():
        found = json.loads(path.read_text(encoding="utf-8"))
        differs = sorted(key for key in settings.keys() | found.keys() if found.get(key) != settings.get(key))
        produced = [p.name for p in folder.iterdir() if p.name != SETTINGS_FILE and not p.name.startswith(".")]
        if differs and not produced:  # the kept run failed before producing anything: nothing to protect
            logger.warning("%s: the run kept here produced nothing; starting afresh with the new settings", folder)
        elif differs:
            raise ValueError(
                f"{folder}: a run with other settings is kept here (differs in {differs}); give another output "
                "folder, or delete this one to start over"
            )
        else:
            return
    write_text_atomic(path, json.dumps(settings, indent=1))


def read_jsonl(path: Path) -> Any:
    """A `datasets.Dataset` of the rows `storage.write_rows` wrote to a .jsonl file (columns: the first row's)."""
    from datasets import Dataset

    from ..data.readers import json_lines

    rows = [row for _, row in json_lines(path)]
    names = list(rows[0]) if rows else []
    return Dataset.from_dict({name: [row[name] for row in rows] for name in names})


def save_final_model(trainer: Any, tokenizer: Any, folder: Path, data_source: str, eval_results: Any = None) -> Path:
    """The trained model, its tokenizer and a model card saying where its rows came from, written to a staging folder
    beside `folder/model` and swapped into place whole (`storage.replace_folder`); the run's checkpoints go after it."""
    out = folder / "model"
    staging = staging_folder(out, "save")  # also mends what a killed earlier save left
    try:
        trainer.args.output_dir = str(staging)
        trainer.save_model(str(staging))
        tokenizer.save_pretrained(str(staging))
        trainer.create_model_card(data_source=data_source, eval_results=eval_results)
        replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    return out


def last_checkpoint(folder: Path) -> str | None:
    """The newest complete `checkpoint-N` in `folder`, or None. A checkpoint counts once the Trainer wrote its last
    file (`trainer_state.json`, readable JSON) and its weights; a newer, half-written one (a kill mid-save) is set
    aside as `.checkpoint-N.incomplete` with a warning, so the run resumes from the last complete one instead of
    failing on it every time."""
    if not folder.is_dir():
        return None
    found = []
    for path in folder.iterdir():
        step = path.name.removeprefix("checkpoint-")
        if path.is_dir() and path.name.startswith("checkpoint-") and step.isdigit():
            found.append((int(step), path))
    for _, path in sorted(found, reverse=True):
        if _complete(path):
            return str(path)
        aside = folder / f".{path.name}.incomplete"
        replace_folder(path, aside)  # an earlier one set aside under that name goes
        logger.warning("%s is incomplete (a run stopped while saving it): set aside as %s", path, aside.name)
    return None


def _complete(checkpoint: Path) -> bool:
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any(checkpoint.rglob("*.safetensors")) or (checkpoint / "pytorch_model.bin").is_file()


__all__ = ["check_settings", "last_checkpoint", "read_jsonl", "save_final_model"]
