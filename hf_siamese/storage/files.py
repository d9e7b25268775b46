"""One atomic file write for the whole package: a file is written whole or not at all.

`write_atomic(path, write)` has `write` fill a temporary file beside `path` (a unique name, so processes writing the
same file at once never share one), then renames it onto `path` (`replace_file`, atomic on one file system). A failed
or killed write leaves `path` as it was; the temporary goes on failure (a kill leaves a hidden `.NAME.*.partial` that
nothing reads). A folder at `path` is refused, naming it, before anything is written.

`replace_file(source, target)` is that rename alone, for a file finished elsewhere on the same file system (in a
staging folder, or under a name of its own beside `target`): the one place a finished file is put in place.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def replace_file(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Move the finished file `source` onto `target` by one rename; returns `target`. `target` then holds the new file
    whole or, where the rename fails or the process is killed, what it held before: never a mix of the two. `source`
    must be on the same file system (beside `target`, or in a staging folder beside its output)."""
    target = Path(target)
    os.replace(source, target)
    return target


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Fill a temporary file beside `path` with `write(temporary)`, then move it onto `path`; returns `path`."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, f"{os.fspath(path)!r} is a folder; give a file path to write", os.fspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    try:
        write(temporary)
        replace_file(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """`text` (UTF-8) written to `path` whole or not at all."""
    return write_atomic(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def read_json_object(path: str | os.PathLike) -> dict | None:
    """The JSON object in the file at `path`, or None where there is none to read: no file, unreadable, not JSON, or
    JSON but not an object (what a stopped or foreign write may leave; the caller decides what that means)."""
    import json

    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


__all__ = ["read_json_object", "replace_file", "write_atomic", "write_text_atomic"]
