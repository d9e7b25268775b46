"""Where a Milvus index lives (`MilvusLocation`: the one parse of `milvus://HOST:PORT/COLLECTION`, `milvuss://...`
and `milvus-lite:PATH/TO/FILE.db#COLLECTION`, the scheme in any case) and what its engine offers: connecting (a Milvus
Lite database made only by a build, never by a search; a path that is not one refused at once, naming it), and the
dense index types it builds (`dense_index_types`, asked of Milvus Lite itself). `milvus.py` searches a collection.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...index.parts import require_modules

INSTALL = "pip install 'hf-siamese[milvus]'"
CONNECT_TIMEOUT = 10.0  # seconds: an unreachable server is one line within this, not a hang
_COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
# The indexes a Milvus server builds over float vectors (a server refuses others itself, but only once the corpus is
# embedded); Milvus Lite builds fewer (`dense_index_types`).
SERVER_DENSE_INDEXES = (
    "FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "IVF_RABITQ", "HNSW", "HNSW_SQ", "HNSW_PQ", "HNSW_PRQ", "DISKANN",
    "SCANN", "AUTOINDEX", "GPU_IVF_FLAT", "GPU_IVF_PQ", "GPU_CAGRA", "GPU_BRUTE_FORCE",
)  # fmt: skip

ENGINE_SCHEMES = ("milvus://", "milvuss://", "milvus-lite:")
# What users mean for an engine: a scheme starting "milvus" in any case (a misspelt one, refused by the engine's
# parse, rather than taken for a folder named "milvus-lite:..." and created in the working directory)
_ENGINE_LIKE = re.compile(r"milvus[a-z0-9+.-]*:", re.IGNORECASE)


def is_engine_location(location: Any) -> bool:
    """Whether `location` names a search engine's collection (`milvus://HOST:PORT/COLLECTION`, `milvuss://...`,
    `milvus-lite:FILE.db#COLLECTION`, the scheme in any case) rather than an index folder."""
    return isinstance(location, str) and _ENGINE_LIKE.match(location) is not None


def engine_scheme(location: str) -> tuple[str | None, str]:
    """(the scheme of `ENGINE_SCHEMES` that `location` starts with, in lower case, or None; the rest): the one place
    that reads an engine location's scheme, in any case."""
    for scheme in ENGINE_SCHEMES:
        if location[: len(scheme)].lower() == scheme:
            return scheme, location[len(scheme) :]
    return None, location


def require_milvus(lite: bool = False) -> None:
    """Raise `ImportError` naming the install command unless pymilvus (and, for Lite, milvus-lite) import."""
    needed = {"pymilvus": "pymilvus", "milvus_lite": "milvus-lite"} if lite else {"pymilvus": "pymilvus"}
    require_modules(needed, "Milvus indexes need pymilvus and milvus-lite", INSTALL)


@dataclass(frozen=True)
class MilvusLocation:
    """A parsed `milvus://` / `milvus-lite:` location: the client's `uri`, the `collection`, and the text given."""

    uri: str
    collection: str
    text: str
    lite: bool

    @classmethod
    def parse(cls, text: str) -> MilvusLocation:
        """The location `text` (the scheme in any case); a `ValueError` naming it and the accepted forms."""
        form = "milvus://HOST:PORT/COLLECTION or milvus-lite:PATH/TO/FILE.db#COLLECTION"
        scheme, rest = engine_scheme(text)
        if scheme == "milvus-lite:":
            path, _, collection = rest.partition("#")
            if not path.endswith(".db"):
                raise ValueError(f"{text!r}: Milvus Lite keeps a collection in a file named *.db; expected {form}")
            uri, lite = os.path.abspath(path), True
        elif scheme is not None:
            address, _, collection = rest.partition("/")
            if not re.fullmatch(r"[^/:]+:\d+", address):
                raise ValueError(f"{text!r}: expected {form} (a host and a port)")
            uri, lite = ("https://" if scheme == "milvuss://" else "http://") + address, False
        else:
            raise ValueError(f"{text!r} is not a Milvus location; expected {form}")
        if not _COLLECTION_NAME.fullmatch(collection):
            raise ValueError(
                f"{text!r}: collection name {collection!r}; expected letters, digits and '_', not starting with a digit"
            )
        return cls(uri, collection, text, lite)

    @classmethod
    def of(cls, location: str | MilvusLocation) -> MilvusLocation:
        """`location` parsed (`parse`), or as it is where it was parsed already (`stores.parse_location`)."""
        return location if isinstance(location, cls) else cls.parse(location)

    def connect(self, create: bool = False) -> Any:
        """A `MilvusClient` of this location, within `CONNECT_TIMEOUT`, on a channel of its own (`_own_channel`: closed
        by its `close()`, and not closed by Milvus Lite for "too many pings" while idle). A Milvus Lite database is
        made only with `create` (what an export does; a search never does). Errors name the location and what to
        check: a `FileNotFoundError` (no database there), a `ValueError` (a path that is not a Milvus Lite database),
        a `ConnectionError` (it cannot be opened or reached)."""
        require_milvus(self.lite)
        from pymilvus import MilvusClient

        if self.lite:
            self._check_lite_path(create)
            os.makedirs(os.path.dirname(self.uri) or ".", exist_ok=True)
            _wait_for_lock(self)  # an export's engine process that is ending (`milvus_lite_process.py`)
            # Milvus Lite's in-process gRPC server logs calls it does not implement (AllocTimestamp) as errors
            logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
        try:
            return MilvusClient(
                self.uri, token=os.environ.get("MILVUS_TOKEN", ""), timeout=CONNECT_TIMEOUT, **_own_channel(self.lite)
            )
        except Exception as error:  # pymilvus raises its own MilvusException kinds
            what = "open the Milvus Lite database" if self.lite else "reach the Milvus server"
            check = "check it runs and the port"
            if self.lite:
                check = "check it is not open in another process"
                if _held_elsewhere(os.path.join(self.uri, "LOCK")):
                    check = "another process has it open (its LOCK is held): stop that process, or give another path"
            raise ConnectionError(
                f"{self.text}: could not {what} at {self.uri} within {CONNECT_TIMEOUT:g} s ({_one_line(error)}); "
                + check
            ) from None

    def _check_lite_path(self, create: bool) -> None:
        """Refuse, before Milvus Lite sees it, a path it would fail on slowly or write into: none there (unless
        `create`), a file where this Milvus Lite keeps a folder (or the reverse), a folder that is not a database."""
        where, version = self.uri, _lite_version()
        if not os.path.exists(where):
            if create:
                return
            raise FileNotFoundError(
                2, f"{self.text}: no Milvus Lite database at {where}; build one with 'hf-siamese index CORPUS -o "
                f"{self.text}' (a search never creates one)", where,
            )  # fmt: skip
        folders = version is None or int(version.split(".")[0]) >= 3  # Milvus Lite 2 kept one file, 3 a folder
        if folders and not os.path.isdir(where):
            raise ValueError(
                f"{self.text}: {where} is a file, not a Milvus Lite database (Milvus Lite {version} keeps a database "
                "in a folder named *.db); give the path of a database, or a path that does not exist yet"
            )
        if (
            folders
            and os.listdir(where)
            and not any(os.path.exists(os.path.join(where, part)) for part in ("LOCK", "collections", "databases"))
        ):
            raise ValueError(
                f"{self.text}: the folder {where} is not a Milvus Lite database (no LOCK, collections/ or databases/ "
                "in it); give the path of a database, or a path that does not exist yet"
            )
        if not folders and os.path.isdir(where):
            raise ValueError(
                f"{self.text}: {where} is a folder, not a Milvus Lite database (Milvus Lite {version} keeps a "
                "database in one file named *.db); give the path of a database, or a path that does not exist yet"
            )


def _lite_version() -> str | None:
    try:
        return importlib.metadata.version("milvus-lite")
    except importlib.metadata.PackageNotFoundError:
        return None


def _own_channel(lite: bool) -> dict[str, Any]:
    """`MilvusClient`'s keywords, where this pymilvus shares channels (3.x), for a channel of its own, closed by the
    client's `close()` (a shared one stays open after it); to Milvus Lite, one that sends no keepalive ping while no
    call runs. pymilvus pings every 10 s, idle or not; Milvus Lite's gRPC server counts each ping without a call as a
    strike and, at the third (about 2 minutes idle: the embedding of a corpus), closes the channel ("too many
    pings"), which pymilvus then fails to recover ("Connection recovery failed") now and then."""
    try:
        from pymilvus.client.connection_manager import ConnectionManager  # noqa: F401
    except ImportError:
        return {}
    if not lite:  # a Milvus server allows pings without calls (and they keep idle connections through proxies)
        return {"dedicated": True}
    return {"dedicated": True, "grpc_options": {"grpc.keepalive_permit_without_calls": 0}}


def served_here(where: MilvusLocation) -> bool:
    """Whether this process serves the Milvus Lite database of `where` in-process (pymilvus started its server)."""
    if not where.lite:
        return False
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:
        return False
    return os.path.abspath(where.uri) in getattr(server_manager_instance, "_servers", {})


def _wait_for_lock(where: MilvusLocation, seconds: float = CONNECT_TIMEOUT) -> None:
    """Wait, up to `seconds`, while another process holds the lock of the Milvus Lite database of `where` (an
    export's engine process closing it); returns at once where this process serves it or none holds it."""
    lock = os.path.join(where.uri, "LOCK")
    if not os.path.exists(lock) or served_here(where):
        return
    deadline = time.monotonic() + seconds
    while _held_elsewhere(lock) and time.monotonic() < deadline:
        time.sleep(0.1)


def _held_elsewhere(lock: str) -> bool:
    """Whether another process holds Milvus Lite's advisory lock file `lock` (False where it cannot be told)."""
    try:
        import fcntl

        with open(lock, "rb") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(file.fileno(), fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except (OSError, ImportError):
        return False
    return False


@functools.cache
def dense_index_types(lite: bool) -> tuple[str, ...]:
    """The dense indexes the engine builds: a server's (`SERVER_DENSE_INDEXES`), or those this Milvus Lite builds,
    asked of it (Milvus Lite 3 builds HNSW and IVF kinds where faiss is installed; Milvus Lite 2 builds FLAT and
    IVF_FLAT, and serves any other type as FLAT)."""
    if not lite:
        return SERVER_DENSE_INDEXES
    try:
        from milvus_lite.index import factory
        from milvus_lite.index.spec import IndexSpec
    except ImportError:
        return ("FLAT", "IVF_FLAT")
    offered = []
    for name in SERVER_DENSE_INDEXES:
        try:  # the engine's own dispatch: an unknown, not-yet-built or faiss-less type raises before any work
            factory.build_index_from_spec(IndexSpec("dense", name, "L2", {}), np.zeros((0, 2), dtype=np.float32))
        except Exception as error:
            if isinstance(error, NotImplementedError | ImportError) or "unknown index_type" in str(error):
                continue
            if type(error).__name__ == "IndexBackendUnavailableError":  # faiss missing
                continue
        offered.append(name)
    return tuple(offered)


def check_dense_index(index_type: str, location: MilvusLocation) -> str:
    """`index_type` in upper case where the engine at `location` builds it; else a `ValueError` naming it and what
    that engine builds (before any work: the engine itself would accept the collection and fail later)."""
    offered = dense_index_types(location.lite)
    name = str(index_type).upper()
    if name not in offered:
        engine = f"Milvus Lite {_lite_version() or ''}".strip() if location.lite else "a Milvus server"
        raise ValueError(
            f"dense index {index_type!r} (--dense-index): {engine} does not build it; accepted: {', '.join(offered)}"
        )
    return name


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__


__all__ = [
    "CONNECT_TIMEOUT", "INSTALL", "SERVER_DENSE_INDEXES", "MilvusLocation", "check_dense_index", "dense_index_types",
    "require_milvus", "served_here",
]  # fmt: skip
