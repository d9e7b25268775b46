"""The pieces of the fake Hub (`hub_server.FakeHub`): its stored objects (blobs, commits, repos), the request and
response it handles, the request log and the Hub's error answers."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs

TYPE_FROM_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
# Web (non-API) URLs of non-model repos carry this prefix, e.g. /datasets/alice/data/resolve/main/x.csv
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
SHA_RE = re.compile(r"[0-9a-f]{7,40}")
PR_RE = re.compile(r"refs/pr/(\d+)")

# hf_raise_for_status maps a 401 to RepositoryNotFoundError unless this exact message is sent (Hub wording).
BAD_TOKEN_MESSAGE = "Invalid credentials in Authorization header"
NO_TOKEN_MESSAGE = "Invalid username or password."


def now_iso() -> str:
    # huggingface_hub's parse_datetime only accepts '%Y-%m-%dT%H:%M:%S.%fZ'.
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def git_blob_oid(data: bytes) -> str:
    """Git blob sha1, what the Hub uses as ETag / oid of regular files (and the client as `_local_oid`)."""
    return hashlib.sha1(b"blob " + str(len(data)).encode() + b"\0" + data).hexdigest()


@dataclass(frozen=True)
class Blob:
    content: bytes
    lfs: bool = False

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @property
    def pointer(self) -> bytes:
        spec = "version https://git-lfs.github.com/spec/v1"
        return f"{spec}\noid sha256:{self.sha256}\nsize {len(self.content)}\n".encode()

    @property
    def oid(self) -> str:
        # In git, an LFS file is stored as its pointer: the tree oid is the pointer's blob sha1.
        return git_blob_oid(self.pointer if self.lfs else self.content)

    @property
    def etag(self) -> str:
        # The Hub serves LFS files with their sha256 as (linked) ETag; the client names cache blobs after it.
        return self.sha256 if self.lfs else git_blob_oid(self.content)

    def tree_entry(self, path: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "path": path, "size": len(self.content), "oid": self.oid}
        if self.lfs:
            entry["lfs"] = {"oid": self.sha256, "size": len(self.content), "pointerSize": len(self.pointer)}
        return entry


@dataclass
class Commit:
    sha: str
    parent: str | None
    files: dict[str, Blob]
    title: str
    message: str
    date: str


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    prs: dict[int, str] = field(default_factory=dict)


@dataclass
class RequestRecord:
    """One request seen by the server. ``headers`` never contains the Authorization value."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    has_token: bool
    status: int = 0


class HubHTTPError(Exception):
    """Raised inside handlers to answer an error the way the Hub does (status + X-Error-Code/Message)."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})


@dataclass
class FailRule:
    remaining: int
    status: int
    method: str | None
    path_contains: str | None


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> dict[str, Any]:
        if not self.body:
            return {}
        try:
            data = json.loads(self.body)
        except ValueError as e:
            raise HubHTTPError(400, f"Invalid JSON body: {e}") from e
        return data if isinstance(data, dict) else {}

    def form(self) -> dict[str, list[str]]:
        return parse_qs(self.body.decode(), keep_blank_values=True)
