"""The output folder of a training run (`hf-siamese train --output-dir OUT`): resumed, protected, or replaced.

A run records its settings in `OUT/train_settings.json` before it trains and marks them finished once the model is
saved. The same command again resumes from the newest complete checkpoint (`trainer_state.json`, written last, and the
weights and optimizer state); half-written ones (a kill mid-save) are deleted, never loaded. Anything else in OUT is
refused in one line naming it: a run with other settings (naming them), the model this run already saved, a model or
checkpoints from elsewhere, a vector index, other files. `overwrite` deletes a run, a model, checkpoints or an index
(once training starts: a bad command line deletes nothing), never other files; `replace_runs` (the demo's own default
folder) replaces an earlier run or model unasked. What is a run's own (`_owned`): its settings file, its checkpoints
and the entries it wrote, which a finished run records (`files`); a folder without that record (a model or an index
from elsewhere, a run saved before the record existed) owns the files such a model or index consists of. Under
`accelerate launch` / torchrun the main process decides and writes, and every process gets its decision:

    run = open_run_folder(training_args, run_settings(options, train_data=data_fingerprint(rows)))
    trainer.train(resume_from_checkpoint=run.start()); trainer.save_model(OUT); run.finish()
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.digest import TextDigest
from ..storage import read_json_object, write_text_atomic

SETTINGS_FILE = "train_settings.json"
RUN_FORMAT = "hf-siamese-train-run"
_OVERWRITE = "--overwrite starts afresh"


def data_fingerprint(rows: Any) -> str:
    """`"N rows, sha256 <16 hex>"` over the column names and every value of a `datasets.Dataset`, in order."""
    digest = TextDigest()
    digest.add(*rows.column_names)
    for batch in rows.iter(batch_size=4096):
        for values in zip(*batch.values(), strict=True):
            digest.add(*values)
    return f"{len(rows)} rows, sha256 {digest.hexdigest()[:16]}"


def run_settings(options: Mapping[str, Any], **resolved: Any) -> dict[str, Any]:
    """What a run folder records: `options` with `resolved` values on top, as they read back from JSON."""
    return json.loads(json.dumps({**options, **resolved}, default=str))


@dataclass
class RunFolder:
    """What `open_run_folder` decided for `path`: the checkpoint to resume from, what to delete first, what to say."""

    path: Path
    settings: dict[str, Any]
    resume_from: str | None = None
    remove: list[str] = field(default_factory=list)  # entries of `path` deleted by `start`
    note: str | None = None  # one line for the user (resuming, replacing), or None
    main_process: bool = True
    others: list[str] = field(default_factory=list)  # entries that are not the run's: never deleted nor recorded

    def start(self) -> str | None:
        """Delete what the decision said, record the settings (main process); the checkpoint to resume from."""
        failure = None
        if self.main_process:
            try:
                for name in self.remove:
                    entry = self.path / name
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)
                self._record(finished=False)
            except OSError as error:  # told to every process, which would otherwise wait for the main one
                failure = f"--output-dir {self.path}: {error}"
        resume_from, failure = _agree((self.resume_from, failure))  # also the barrier: the folder is ready
        if failure:
            raise ValueError(failure)
        return resume_from

    def finish(self) -> None:
        """Mark the run finished (the model is saved): the same command again is refused, not retrained. The record
        names the entries the run wrote (all but `others`), which alone a later `overwrite` deletes."""
        if self.main_process:
            kept = {SETTINGS_FILE, *self.others}
            written = sorted(p.name for p in self.path.iterdir() if p.name not in kept and not p.name.startswith("."))
            self._record(finished=True, files=written)

    def _record(self, finished: bool, files: list[str] | None = None) -> None:
        record: dict[str, Any] = {"format": RUN_FORMAT, "finished": finished, "settings": self.settings}
        if files is not None:
            record["files"] = files
        write_text_atomic(self.path / SETTINGS_FILE, json.dumps(record, indent=1))


def open_run_folder(
    training_args: Any, settings: dict[str, Any], *, overwrite: bool = False, replace_runs: bool = False
) -> RunFolder:
    """Decide what `training_args.output_dir` becomes for a run of `settings` (nothing is written yet: `start`).
    Raises ValueError (on every process) naming what is there and why it is not touched."""
    path = Path(training_args.output_dir)
    main_process = training_args.process_index == 0
    decision: RunFolder | str | None = None
    if main_process:
        try:
            decision = _decide(path, settings, overwrite, replace_runs)
        except (ValueError, OSError) as error:  # every process raises it, none waits for the main one
            decision = str(error) if isinstance(error, ValueError) else f"--output-dir {path}: {error}"
    decision = _agree(decision)
    if isinstance(decision, str):
        raise ValueError(decision)
    decision.main_process = main_process
    return decision


def _decide(path: Path, settings: dict[str, Any], overwrite: bool, replace_runs: bool) -> RunFolder:
    where = f"--output-dir {path}"
    if path.exists() and not path.is_dir():
        raise ValueError(f"{where}: exists and is not a folder; give a folder")
    entries = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    shown = [name for name in entries if not name.startswith(".")]
    if not shown:
        return RunFolder(path, settings, others=entries)
    record = read_json_object(path / SETTINGS_FILE)
    ours = record is not None and record.get("format") == RUN_FORMAT
    owned = _owned(path, entries, record if ours else None)
    others = [name for name in entries if name not in owned]
    # What `overwrite` deletes: the run's own entries (its settings file is rewritten, not deleted).
    replaced = [name for name in entries if name in owned and name != SETTINGS_FILE]
    if not ours or record is None:
        what, replaceable = _foreign(path, shown)
        if what is None:  # only checkpoint folders a stopped save left empty: nothing to load, nothing to protect
            return RunFolder(path, settings, others=others)
        if not replaceable:
            raise ValueError(
                f"{where} holds {what}, not a training run; give an empty or new folder (--overwrite replaces only "
                "a run, a model, checkpoints or a vector index)"
            )
        if overwrite or replace_runs:
            note = f"replacing {what} in {path}{_keeping(others)}"
            return RunFolder(path, settings, remove=replaced, note=note, others=others)
        raise ValueError(f"{where} holds {what}; --overwrite replaces it, or give another folder")
    kept, finished = record.get("settings") or {}, bool(record.get("finished"))
    checkpoints = _checkpoints(path)
    resumable = [c for c in checkpoints if _resumable(c)]
    if overwrite or (replace_runs and (finished or kept != settings)):
        note = f"starting afresh: deleting the earlier run in {path}{_keeping(others)}"
        return RunFolder(path, settings, remove=replaced, note=note, others=others)
    differs = sorted(key for key in kept.keys() | settings.keys() if kept.get(key) != settings.get(key))
    if differs and (finished or resumable):
        changes = ", ".join(
            f"{key} ({_short(kept.get(key))} there, {_short(settings.get(key))} now)" for key in differs
        )
        saved = "the model and checkpoints" if finished else "the checkpoints"
        raise ValueError(
            f"{where} holds {saved} of a run with other settings: {changes}; {_OVERWRITE} (deletes them), or give "
            "another folder"
        )
    if finished and not differs:
        raise ValueError(
            f"{where} holds the model this same run already saved ({SETTINGS_FILE}: finished); --overwrite trains it "
            "again and replaces it"
        )
    # Unfinished: resume from the newest resumable checkpoint; those that cannot resume (half-written by a kill,
    # weights only) go, never loaded. A run with other settings that left nothing to resume from starts afresh.
    last = resumable[-1] if resumable and not differs else None
    remove = [c.name for c in checkpoints if c not in resumable or differs]
    note = None
    if last is not None:
        state = read_json_object(last / "trainer_state.json") or {}
        steps = f"step {state.get('global_step')} of {state.get('max_steps')}"
        note = f"resuming from {last} ({steps}); {_OVERWRITE}"
    elif remove:
        note = f"starting again: {path} holds no complete checkpoint to resume from ({', '.join(remove)} deleted)"
    resume_from = str(last) if last else None
    return RunFolder(path, settings, resume_from=resume_from, remove=remove, note=note, others=others)


# The entries a saved model consists of (transformers', sentence-transformers' and hf-siamese's files; its remote
# code: `_code_files`): what `overwrite` deletes of a folder that records no list of its own.
_MODEL_ENTRY = re.compile(
    r"(config|generation_config|config_sentence_transformers|modules|sentence_bert_config|tokenizer|tokenizer_config"
    r"|special_tokens_map|added_tokens|vocab|preprocessor_config)\.json"
    r"|(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)|(model\.safetensors|pytorch_model\.bin)\.index\.json"
    r"|training_args\.bin|vocab\.txt|merges\.txt|(sentencepiece\.bpe|spiece|spm|tokenizer)\.model|README\.md"
    r"|\d+_[A-Za-z]+"  # sentence-transformers' module folders (1_Pooling, ...)
)


def _owned(path: Path, names: list[str], record: dict[str, Any] | None) -> set[str]:
    """The entries of `path` that are the run's own, which `overwrite` may delete: its settings file, its checkpoints
    and what the run `record` says it wrote (`files`, recorded when it finished). Without that list (a model,
    checkpoints or an index from elsewhere, a run that has not finished), the entries that make up a saved model or a
    vector index. Hidden entries and anything else are never the run's."""
    owned = {SETTINGS_FILE, *(c.name for c in _checkpoints(path))}
    files = (record or {}).get("files")
    if isinstance(files, list):
        owned.update(name for name in files if isinstance(name, str))
    else:
        code = _code_files(path)
        owned.update(name for name in names if _MODEL_ENTRY.fullmatch(name) or name in code)
        owned.update(_index_entries(path))
    return {name for name in names if name in owned and not name.startswith(".")}


def _code_files(path: Path) -> set[str]:
    """The remote code of the model saved in `path`: the modules its config.json's `auto_map` names, and for
    hf-siamese's model the sibling modules `save_pretrained` copies with them."""
    auto_map = (read_json_object(path / "config.json") or {}).get("auto_map")
    references = auto_map.values() if isinstance(auto_map, dict) else []
    names = set()
    for reference in references:
        for item in reference if isinstance(reference, list) else [reference]:
            if isinstance(item, str) and "." in item:
                names.add(item.split("--")[-1].rsplit(".", 1)[0] + ".py")
    if "modeling_siamese.py" in names:
        modeling = Path(__file__).resolve().parent.parent / "modeling"
        names.update(p.name for p in modeling.glob("*.py") if p.name != "__init__.py")
    return names


def _index_entries(path: Path) -> set[str]:
    """The entries of the vector index saved in `path`, or none when it holds none."""
    from ..retrieval.index.lexical import LEXICAL_DIR
    from ..retrieval.stores.folder import EMBEDDINGS_DIR, FORMAT_NAME, INDEX_FILE, TEXTS_FILE

    if (read_json_object(path / INDEX_FILE) or {}).get("format") != FORMAT_NAME:
        return set()
    return {INDEX_FILE, TEXTS_FILE, EMBEDDINGS_DIR, LEXICAL_DIR}


def _foreign(path: Path, names: list[str]) -> tuple[str | None, bool]:
    """What an unrecorded folder holds, in words (None: only empty checkpoint folders), and whether --overwrite may
    delete it."""
    from ..retrieval.stores.folder import FORMAT_NAME, INDEX_FILE

    if (read_json_object(path / INDEX_FILE) or {}).get("format") == FORMAT_NAME:
        return f"a vector index ({INDEX_FILE})", True
    if (path / "config.json").is_file():
        return "a model (config.json) saved by another run", True
    checkpoints = _checkpoints(path)
    if complete := [c.name for c in checkpoints if _complete(c)]:
        return f"checkpoints of a run whose settings were not recorded ({', '.join(complete)})", True
    if not (others := [name for name in names if name not in {c.name for c in checkpoints}]):
        return None, True
    return f"{len(others)} other entr{'y' if len(others) == 1 else 'ies'} ({_listed(others)})", False


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _keeping(others: list[str]) -> str:
    """The end of a note that says which entries stay (not the run's), or "" when none would show."""
    shown = [name for name in others if not name.startswith(".")]
    return f"; keeping what is not its own: {_listed(shown)}" if shown else ""


def _checkpoints(path: Path) -> list[Path]:
    """The `checkpoint-N` folders in `path`, oldest first."""
    found = [p for p in path.glob("checkpoint-*") if p.is_dir() and p.name.removeprefix("checkpoint-").isdigit()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("checkpoint-")))


def _complete(checkpoint: Path) -> bool:
    """The Trainer writes `trainer_state.json` last: readable, with weights there, the checkpoint was saved whole."""
    if read_json_object(checkpoint / "trainer_state.json") is None:
        return False
    return any(checkpoint.rglob("*.safetensors")) or (checkpoint / "pytorch_model.bin").is_file()


def _resumable(checkpoint: Path) -> bool:
    """Complete and with the optimizer's state (a best-recipe selection checkpoint holds only the weights)."""
    return _complete(checkpoint) and any(checkpoint.glob("optimizer*"))


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:20]}...{text[-37:]}"  # paths differ at the end


def _agree(value: Any) -> Any:
    """The main process's `value` on every process (a barrier too); `value` itself without a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


__all__ = ["RUN_FORMAT", "SETTINGS_FILE", "RunFolder", "data_fingerprint", "open_run_folder", "run_settings"]
