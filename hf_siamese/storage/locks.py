"""One writer at a time for an output: an exclusive lock on a small file beside it, `.NAME.lock`.

The lock is the operating system's (`fcntl.flock`), held by an open file: it goes with the process that holds it,
however that process ends (a kill included), so a stopped run never blocks the next one. A second run that finds it
held is refused at once, naming the process that holds it, rather than writing into the same staging files. The
lock file itself is removed by the run that held it, when it is done.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputBusyError(OSError):
    """Another process is writing the same output (it holds its lock)."""


def lock_path(output: str | os.PathLike) -> Path:
    """The lock file of `output`: `.NAME.lock` beside it."""
    output = Path(output)
    return output.with_name(f".{output.name}.lock")


@contextmanager
def exclusive_output(output: str | os.PathLike, what: str = "a run") -> Iterator[None]:
    """Hold the lock of `output` while the block runs; `OutputBusyError` naming the holder's process where another
    run holds it. `what` names the run in that message ("a build of this index")."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): one writer at a time is then the user's to keep
        yield
        return
    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115  (held open: the lock lives as long as it)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise OutputBusyError(
                f"{os.fspath(output)!r}: {what} is running into it already (process {holder}); wait for it to end, "
                "or stop it (a stopped run leaves nothing that blocks the next)"
            ) from None
        try:
            same = os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:  # removed by the run that held it just before: take the new file
            same = False
        if same:
            break
        handle.close()
    try:
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        path.unlink(missing_ok=True)  # while held: a run waiting on this file sees it gone and takes a new one
        handle.close()


__all__ = ["OutputBusyError", "exclusive_output", "lock_path"]
