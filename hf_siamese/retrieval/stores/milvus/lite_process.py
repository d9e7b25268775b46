"""Milvus Lite's engine in a process of its own while a large export writes to it (`export_index`).

Milvus Lite 3 runs in the process that connects to it (pymilvus starts its gRPC server in a thread) and keeps every
flushed segment of an open collection in memory: the rows as an Arrow table, the vectors again as an array, the primary
keys as a list and a dict, and each segment's dense index. An export through it grew the exporting process by about
700 MiB a million rows (and more while it uploaded: the background segment index builds, the compactions). From
`PROCESS_FROM` rows an export therefore starts the engine in a child process (`EngineProcess`: the same server, the
same database folder) and talks to it over gRPC as it would to the in-process one; the child holds the collection
while the export runs and ends, closing the database (flushed, its lock released), when the export is done.

The index the export returns connects on its first use (`ClientOnUse`): the process that searches holds the
collection then, as any process that opens it does; one that only exports never does.

A database this process already serves in-process (opened before the export) is exported through that server, as
before: Milvus Lite lets one process at a time hold a database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

from .location import CONNECT_TIMEOUT, MilvusLocation, _own_channel, require_milvus, served_here

PROCESS_FROM = 20_000  # rows: smaller exports keep the engine in-process (a child costs a second or two to start)

# The child: Milvus Lite's own server on a free port (printed), until its stdin closes (the export is done, or the
# exporting process ended: its pipe closes with it), then the database closed (flushed, its lock released).
_SERVE = r"""
import sys, time
from milvus_lite.adapter.grpc.server import start_server_in_thread
deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        server, db, port = start_server_in_thread(data_dir=sys.argv[1], host="127.0.0.1", port=0)
        break
    except Exception:  # the database's lock, still held by a process that is ending
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
print(port, flush=True)
try:
    sys.stdin.read()
finally:
    server.stop(grace=None)
    db.close()
"""


def release_here(where: MilvusLocation) -> None:
    """Stop this process's in-process server of the database of `where` (its collections closed, its lock
    released); nothing where none runs."""
    if served_here(where):
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(where.uri)


def wants_process(where: MilvusLocation, rows: int) -> bool:
    """Whether an export of `rows` rows to `where` runs the engine in a child process (see the module docstring)."""
    return where.lite and rows >= PROCESS_FROM and not served_here(where) and _serves_apart()


def _serves_apart() -> bool:
    """Whether the installed Milvus Lite can serve a database from another process (its pure-Python server, 3.x);
    an older one keeps the engine in-process."""
    import importlib.util

    try:
        return importlib.util.find_spec("milvus_lite.adapter.grpc.server") is not None
    except ImportError:  # no milvus_lite.adapter package
        return False


class EngineProcess:
    """Milvus Lite's server for the database of `where`, in a child process; `client()` connects to it, `stop()`
    closes the database and waits for the child to end."""

    def __init__(self, where: MilvusLocation) -> None:
        require_milvus(lite=True)
        self.where = where
        self._process: subprocess.Popen | None = None
        self._client: Any = None

    def client(self) -> Any:
        """A `MilvusClient` of the child's server (started on the first call), on a channel of its own."""
        if self._client is not None:
            return self._client
        from pymilvus import MilvusClient

        self.where._check_lite_path(create=True)
        os.makedirs(os.path.dirname(self.where.uri) or ".", exist_ok=True)
        errors = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, self.where.uri, str(CONNECT_TIMEOUT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
        )  # fmt: skip
        port = self._process.stdout.readline().strip() if self._process.stdout is not None else ""
        if not port.isdigit():
            self._process.wait()
            errors.seek(0)
            said = " ".join(errors.read().decode("utf-8", "replace").split()[-40:])
            errors.close()
            raise ConnectionError(
                f"{self.where.text}: could not open the Milvus Lite database at {self.where.uri} in the engine's "
                f"process ({said or 'it ended'}); check it is not open in another process"
            )
        errors.close()
        try:
            self._client = MilvusClient(
                f"http://127.0.0.1:{port}", timeout=CONNECT_TIMEOUT, **_own_channel(True)
            )  # a Lite server: no token, no pings while idle
        except BaseException:
            self.stop()
            raise
        return self._client

    def stop(self) -> None:
        """Close the client, then the child's database (flushed, its lock released); returns once the child ended."""
        if self._client is not None:
            self._client.close()
            self._client = None
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
            process.wait()
        except BaseException:  # interrupted while it closes: ended now (the database's WAL recovers what it held)
            process.kill()
            process.wait()
            raise
        finally:
            if process.stdout is not None:
                process.stdout.close()


class ClientOnUse:
    """A `MilvusClient` of `where` connected (and its collection loaded) on first use: an index returned by an export
    that ran the engine in a child process loads the collection into the process that searches it, when it does."""

    def __init__(self, where: MilvusLocation) -> None:
        self._where, self._client = where, None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._client is None:
            client = self._where.connect()
            try:
                client.load_collection(self._where.collection)
            except BaseException:
                client.close()
                raise
            self._client = client
        return getattr(self._client, name)

    def close(self) -> None:
        """Close the channel where one was opened (a later call opens another)."""
        if self._client is not None:
            self._client.close()
            self._client = None


__all__ = ["PROCESS_FROM", "ClientOnUse", "EngineProcess", "release_here", "served_here", "wants_process"]
