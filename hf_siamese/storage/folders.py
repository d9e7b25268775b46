"""Staging folders and the swap that puts a finished one in place.

A run writes its output in a staging folder beside it, `.NAME.PURPOSE-PID-XXXXXXXX` (same file system, so renames are
atomic), then `replace_folder` swaps it in: an existing output is renamed to `.NAME.replaced`, the staging folder to
NAME, and the old copy deleted. A kill can stop this anywhere, and `recover_output` (called by `staging_folder`, i.e.
at the start of every run that writes NAME) mends each state it can leave:

- NAME missing, `.NAME.replaced` there (killed between the two renames): the old output is renamed back;
- NAME there and `.NAME.replaced` there (killed before the old copy was deleted): the old copy is deleted;
- `.NAME.PURPOSE-PID-...` of a process that no longer runs (killed while writing): deleted.

`replace_folder` is the one folder swap: every output that replaces a folder (an index, its approximate or lexical
part, a recipe's final model) stages it beside and swaps it in, so a kill leaves the old or the new folder complete,
and the old content is removed only once the new is in place. A folder that other outputs share (a model saved into
a training run's folder, beside its checkpoints) cannot be swapped whole: `move_files_into` moves a staged set of
files into it instead, each by one atomic rename, and removes what the new set leaves stale only after.

A folder of work files that is never put in place (a trainer's files, a graph's intermediate form) is a
`work_folder`: made beside the output it serves under the staging name (so a kill's leftover is removed by the next
run, as above) and removed when its block ends, however it ends. Scratch that serves no output (files staged for an
upload, an index searched once) is a `temporary_folder`, in the system's temporary folder, removed the same way.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)


def _aside(output: Path) -> Path:
    return output.with_name(f".{output.name}.replaced")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)


def recover_output(output: str | os.PathLike) -> None:
    """Mend what a killed run left beside `output` (see the module docstring); a no-op when nothing was left."""
    output = Path(output)
    aside = _aside(output)
    if aside.exists() or aside.is_symlink():
        if output.exists():
            logger.info("removing %s, the old copy a finished swap had not yet deleted", aside)
            _remove(aside)
        else:
            logger.warning("restoring %s from %s: a run was killed while swapping it", output, aside)
            os.replace(aside, output)
    if not output.parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(output.name)}\.[\w-]+?-(\d+)-[0-9a-f]{{8}}$")
    for entry in output.parent.iterdir():
        found = pattern.match(entry.name)
        if found and not _pid_alive(int(found.group(1))):
            logger.info("removing %s, left by a run that was stopped (process %s)", entry, found.group(1))
            _remove(entry)


def _check_purpose(purpose: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", purpose):
        raise ValueError(f"purpose={purpose!r}: expected lower-case letters, digits and '_'")


def _new_staging(output: Path, purpose: str, mode: int) -> Path:
    _check_purpose(purpose)
    output.parent.mkdir(parents=True, exist_ok=True)
    recover_output(output)
    staging = output.with_name(f".{output.name}.{purpose}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    staging.mkdir(mode=mode)
    return staging


def staging_folder(output: str | os.PathLike, purpose: str) -> Path:
    """A new, empty staging folder beside `output` for this process (after `recover_output` mended what earlier runs
    left), with the permissions of an ordinary folder."""
    return _new_staging(Path(output), purpose, 0o777)


@contextmanager
def work_folder(output: str | os.PathLike, purpose: str) -> Iterator[Path]:
    """A new, empty folder for the work files of a run that writes `output`, removed with all it holds when the block
    ends, however it ends (an error or Ctrl-C included). It lies beside `output`, named as `staging_folder` names it
    (after `recover_output` mended what earlier runs left): on the output's file system, so a file renamed from it
    into place moves whole, and the folder of a killed run is removed by the next run that writes `output`. Readable
    by this user only, as `tempfile.mkdtemp` makes it."""
    folder = _new_staging(Path(output), purpose, 0o700)
    try:
        yield folder
    finally:
        _remove(folder)


@contextmanager
def temporary_folder(purpose: str) -> Iterator[Path]:
    """A new, empty folder in the system's temporary folder (`hf_siamese_PURPOSE_*`, readable by this user only), for
    scratch that serves no output, removed with all it holds when the block ends, however it ends (an error or Ctrl-C
    included); one a killed process leaves is the system's to clear, as any temporary file."""
    _check_purpose(purpose)
    folder = Path(tempfile.mkdtemp(prefix=f"hf_siamese_{purpose}_"))
    try:
        yield folder
    finally:
        _remove(folder)


def replace_folder(staging: str | os.PathLike, output: str | os.PathLike) -> None:
    """Move the finished `staging` folder to `output`. An existing `output` (an empty folder is simply removed) is
    renamed aside first and deleted last; if the second rename fails, it is renamed back. A kill between the two
    renames is mended by the next `recover_output`."""
    staging, output = Path(staging), Path(output)
    aside = _aside(output)
    if aside.exists():  # left by an earlier run: mend it before moving anything
        recover_output(output)
    moved = False
    if output.is_dir() and not output.is_symlink() and not any(output.iterdir()):
        output.rmdir()
    elif output.exists() or output.is_symlink():
        os.replace(output, aside)
        moved = True
    try:
        os.replace(staging, output)
    except BaseException:
        if moved:
            os.replace(aside, output)
        raise
    if moved:
        _remove(aside)


def move_files_into(
    staging: str | os.PathLike, target: str | os.PathLike, stale: Callable[[Path], bool] | None = None
) -> set[Path]:
    """Move every file of the finished `staging` folder into `target` (a folder other outputs share), each by one
    atomic rename, sub-folders made as needed; only then remove the entries of `target` that `stale(entry)` picks and
    the new files did not replace (a stale sub-folder keeps the new files moved into it). `staging` goes last.
    Returns the moved files' paths relative to `target`."""
    staging, target = Path(staging), Path(target)
    written: set[Path] = set()
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        relative = path.relative_to(staging)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target / relative)
        written.add(relative)
    for entry in sorted(target.iterdir()) if stale is not None else ():
        if entry == staging or not stale(entry):
            continue
        kept = {path for path in written if path.parts[0] == entry.name}
        if not kept:
            _remove(entry)
            continue
        for path in sorted(entry.rglob("*"), reverse=True):  # what the new files left of a stale sub-folder
            if path.is_file() and path.relative_to(target) not in kept:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    _remove(staging)
    return written


__all__ = ["move_files_into", "recover_output", "replace_folder", "staging_folder", "temporary_folder", "work_folder"]
