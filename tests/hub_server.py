"""A small fake Hugging Face Hub HTTP server for tests.

Only the server is fake: tests point the real ``huggingface_hub`` / ``transformers`` clients at it (see
``conftest_hub.fake_hub``) so that ``create_repo``, ``push_to_hub``, ``hf_hub_download``,
``snapshot_download`` and ``from_pretrained("user/repo", revision=...)`` run their genuine code paths
against 127.0.0.1.

What the clients (huggingface_hub 2.4, transformers 5.x) were seen to need, and which this server answers:

* ``POST /api/repos/create``, ``DELETE /api/repos/delete``, ``GET /api/whoami-v2``,
  ``POST /api/validate-yaml``
* ``GET /api/{type}s/{repo}`` and ``.../revision/{rev}`` (repo info with ``sha``, ``siblings``, ``private``)
* ``GET .../tree/{rev}[/{path}]`` (``recursive``), ``GET .../refs`` (``include_prs``),
  ``GET .../commits/{rev}``
* ``POST .../paths-info/{rev}``, ``POST .../preupload/{rev}``, ``POST .../commit/{rev}`` (NDJSON,
  ``create_pr``)
* ``POST|DELETE .../branch/{name}``, ``POST .../tag/{rev}``
* ``HEAD|GET /{repo}/resolve/{rev}/{path}`` with ``X-Repo-Commit``, ``ETag``, ``Content-Length`` (and Range)
* ``POST /{repo}.git/info/lfs/objects/batch`` plus a "basic" upload/verify target, only used when
  ``lfs_threshold`` asks the client to upload some files through LFS (by default every file is "regular", so
  no LFS/Xet at all).

Revisions are URL-quoted with ``safe=""`` by the client (``refs/pr/1`` -> ``refs%2Fpr%2F1``), so paths are
split on ``/`` *before* unquoting each segment.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_TYPE_FROM_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
# Web (non-API) URLs of non-model repos carry this prefix, e.g. /datasets/alice/data/resolve/main/x.csv
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_SHA_RE = re.compile(r"[0-9a-f]{7,40}")
_PR_RE = re.compile(r"refs/pr/(\d+)")

# hf_raise_for_status maps a 401 to RepositoryNotFoundError unless this exact message is sent (Hub wording).
_BAD_TOKEN_MESSAGE = "Invalid credentials in Authorization header"
_NO_TOKEN_MESSAGE = "Invalid username or password."


def _now() -> str:
    # huggingface_hub's parse_datetime only accepts '%Y-%m-%dT%H:%M:%S.%fZ'.
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def git_blob_oid(data: bytes) -> str:
    """Git blob sha1, what the Hub uses as ETag / oid of regular files (and the client as `_local_oid`)."""
    return hashlib.sha1(b"blob " + str(len(data)).encode() + b"\0" + data).hexdigest()


@dataclass(frozen=True)
class _Blob:
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
class _Commit:
    sha: str
    parent: str | None
    files: dict[str, _Blob]
    title: str
    message: str
    date: str


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: str
    commits: dict[str, _Commit] = field(default_factory=dict)
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
class _Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> _Response:
    return _Response(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})


@dataclass
class _FailRule:
    remaining: int
    status: int
    method: str | None
    path_contains: str | None


class FakeHub:
    """In-memory fake of the Hugging Face Hub, served over HTTP on 127.0.0.1 from a background thread.

    Args:
        required_token: when set, write endpoints (and reads of private repos, and whoami) answer 401 unless
            the request carries ``Authorization: Bearer <required_token>``. When ``None``, auth is not checked
            at all.
        user: the account that owns the token (namespace for ``create_repo("name")`` without a namespace).
        lfs_threshold: files of at least this many bytes are answered ``uploadMode: "lfs"`` by preupload, so
            the client goes through the LFS batch + basic PUT path. ``None`` (default): all files "regular".
        host / port: where to listen; port 0 lets the OS pick a free port.
    """

    def __init__(
        self,
        *,
        required_token: str | None = None,
        user: str = "alice",
        lfs_threshold: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.required_token = required_token
        self.user = user
        self.lfs_threshold = lfs_threshold
        self.host = host
        self.port = port
        # While True every request is answered 503 (Hub down); see also `fail_next`.
        self.refuse = False
        self.requests: list[RequestRecord] = []
        # Env vars a client process needs to use this server; filled by the `fake_hub` fixture.
        self.env: dict[str, str] = {}
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._lfs_objects: dict[str, bytes] = {}
        self._fail_rules: list[_FailRule] = []
        self._counter = itertools.count(1)
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeHub:
        if self._server is not None:
            return self
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        server = ThreadingHTTPServer((self.host, self.port), Handler)
        # Handler threads may sit in keep-alive reads; they must never keep the test process alive.
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        # A short poll interval keeps `stop()` (hence every fixture teardown) fast.
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeHub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeHub is not started")
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ failure injection & log

    def fail_next(
        self, n: int = 1, status: int = 500, *, method: str | None = None, path_contains: str | None = None
    ) -> None:
        """Answer the next ``n`` matching requests with ``status`` (after reading their body)."""
        with self._lock:
            self._fail_rules.append(_FailRule(n, status, method.upper() if method else None, path_contains))

    def clear_failures(self) -> None:
        with self._lock:
            self._fail_rules.clear()
            self.refuse = False

    def find_requests(self, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method.upper()) and (path_contains is None or path_contains in r.path)
            ]

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # ------------------------------------------------------------------ direct store access (no HTTP)

    def create_repo(self, repo_id: str, *, private: bool = False, repo_type: str = "model") -> str:
        """Create a repo with the usual initial commit (``.gitattributes``); returns that commit sha."""
        with self._lock:
            key = (repo_type, repo_id)
            if key in self._repos:
                raise ValueError(f"{repo_type} {repo_id} already exists")
            repo = _Repo(repo_type=repo_type, repo_id=repo_id, private=private, created_at=_now())
            self._repos[key] = repo
            gitattributes = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
            sha = self._new_commit(repo, None, {".gitattributes": _Blob(gitattributes)}, "initial commit", "")
            repo.branches["main"] = sha
            return sha

    def commit(
        self,
        repo_id: str,
        files: Mapping[str, bytes | str],
        *,
        branch: str = "main",
        message: str = "Commit from test",
        delete: Iterable[str] = (),
        repo_type: str = "model",
    ) -> str:
        """Commit files directly to a branch (created from main if missing); returns the new commit sha."""
        with self._lock:
            repo = self._get_repo(repo_type, repo_id)
            base = repo.branches.get(branch, repo.branches["main"])
            tree = dict(repo.commits[base].files)
            for path in delete:
                tree.pop(path, None)
            for path, content in files.items():
                data = content.encode() if isinstance(content, str) else content
                tree[path] = _Blob(data, lfs=self._is_lfs_size(len(data)))
            sha = self._new_commit(repo, base, tree, message, "")
            repo.branches[branch] = sha
            return sha

    def repo_exists(self, repo_id: str, repo_type: str = "model") -> bool:
        with self._lock:
            return (repo_type, repo_id) in self._repos

    def is_private(self, repo_id: str, repo_type: str = "model") -> bool:
        with self._lock:
            return self._get_repo(repo_type, repo_id).private

    def resolve(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> str | None:
        """Commit sha of a branch / tag / ``refs/pr/N`` / (short) sha, or None."""
        with self._lock:
            return self._resolve(self._get_repo(repo_type, repo_id), revision)

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        with self._lock:
            repo = self._get_repo(repo_type, repo_id)
            sha = self._resolve_or_raise(repo, revision)
            return {path: blob.content for path, blob in repo.commits[sha].files.items()}

    def history(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> list[str]:
        """Commit shas reachable from ``revision``, newest first (the initial commit is last)."""
        with self._lock:
            repo = self._get_repo(repo_type, repo_id)
            return [c.sha for c in self._walk(repo, self._resolve_or_raise(repo, revision))]

    def commit_title(self, repo_id: str, sha: str, repo_type: str = "model") -> str:
        with self._lock:
            return self._get_repo(repo_type, repo_id).commits[sha].title

    def branches(self, repo_id: str, repo_type: str = "model") -> dict[str, str]:
        with self._lock:
            return dict(self._get_repo(repo_type, repo_id).branches)

    def pull_requests(self, repo_id: str, repo_type: str = "model") -> dict[int, str]:
        with self._lock:
            return dict(self._get_repo(repo_type, repo_id).prs)

    def lfs_objects(self) -> dict[str, int]:
        """sha256 -> size of every object uploaded through the LFS path."""
        with self._lock:
            return {oid: len(data) for oid, data in self._lfs_objects.items()}

    # ------------------------------------------------------------------ store internals (call with lock held)

    def _is_lfs_size(self, size: int) -> bool:
        # Empty files are always regular: the client itself refuses to send them through LFS.
        return self.lfs_threshold is not None and size > 0 and size >= self.lfs_threshold

    def _get_repo(self, repo_type: str, repo_id: str) -> _Repo:
        repo = self._repos.get((repo_type, repo_id))
        if repo is None:
            raise HubHTTPError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        return repo

    def _new_commit(self, repo: _Repo, parent: str | None, files: dict[str, _Blob], title: str, message: str) -> str:
        seed = f"{repo.repo_type}/{repo.repo_id}:{parent}:{next(self._counter)}:{_now()}"
        digest = hashlib.sha1(seed.encode())
        for path in sorted(files):
            digest.update(f"{path}:{files[path].oid}".encode())
        sha = digest.hexdigest()
        repo.commits[sha] = _Commit(sha, parent, files, title, message, _now())
        return sha

    def _resolve(self, repo: _Repo, revision: str) -> str | None:
        if revision in repo.branches:
            return repo.branches[revision]
        if revision.startswith("refs/heads/"):
            return repo.branches.get(revision.removeprefix("refs/heads/"))
        if revision in repo.tags:
            return repo.tags[revision]
        if revision.startswith("refs/tags/"):
            return repo.tags.get(revision.removeprefix("refs/tags/"))
        if match := _PR_RE.fullmatch(revision):
            return repo.prs.get(int(match[1]))
        if _SHA_RE.fullmatch(revision):
            found = [sha for sha in repo.commits if sha.startswith(revision)]
            if len(found) == 1:
                return found[0]
        return None

    def _resolve_or_raise(self, repo: _Repo, revision: str) -> str:
        sha = self._resolve(repo, revision)
        if sha is None:
            raise HubHTTPError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha

    def _walk(self, repo: _Repo, sha: str | None) -> list[_Commit]:
        out = []
        while sha is not None:
            commit = repo.commits[sha]
            out.append(commit)
            sha = commit.parent
        return out

    def _repo_url(self, repo: _Repo) -> str:
        return f"{self.url}/{_URL_PREFIX[repo.repo_type]}{repo.repo_id}"

    # ------------------------------------------------------------------ auth

    def _auth(self, headers: Mapping[str, str]) -> str:
        """'missing', 'invalid' or 'valid' (any token is valid when no `required_token` is configured)."""
        value = headers.get("authorization", "")
        if not value.lower().startswith("bearer ") or not value[7:].strip():
            return "missing"
        if self.required_token is None or value[7:].strip() == self.required_token:
            return "valid"
        return "invalid"

    def _require_write(self, req: _Request) -> None:
        if self.required_token is None:
            return
        state = self._auth(req.headers)
        if state != "valid":
            raise HubHTTPError(401, _BAD_TOKEN_MESSAGE if state == "invalid" else _NO_TOKEN_MESSAGE)

    def _readable_repo(self, req: _Request, repo_type: str, repo_id: str) -> _Repo:
        repo = self._get_repo(repo_type, repo_id)
        if repo.private and self.required_token is not None:
            state = self._auth(req.headers)
            if state == "invalid":
                raise HubHTTPError(401, _BAD_TOKEN_MESSAGE)
            if state == "missing":
                # Like the Hub: do not reveal that a private repo exists.
                raise HubHTTPError(401, _NO_TOKEN_MESSAGE, "RepoNotFound")
        return repo

    # ------------------------------------------------------------------ routing

    def _handle(self, req: _Request) -> _Response:
        with self._lock:
            if self.refuse:
                raise HubHTTPError(503, "Service Unavailable (FakeHub.refuse)")
            for rule in self._fail_rules:
                if (
                    rule.remaining > 0
                    and (rule.method is None or rule.method == req.method)
                    and (rule.path_contains is None or rule.path_contains in req.path)
                ):
                    rule.remaining -= 1
                    raise HubHTTPError(rule.status, f"Injected failure (FakeHub.fail_next, {rule.status})")
            self._fail_rules = [r for r in self._fail_rules if r.remaining > 0]

            segments = req.path.lstrip("/").split("/")
            if segments[0] == "api":
                return self._api(req, segments[1:])
            if segments[:2] == ["_fakehub", "lfs"] and len(segments) >= 3:
                return self._lfs_object(req, unquote(segments[2]), segments[3:])
            return self._web(req, segments)

    def _api(self, req: _Request, seg: list[str]) -> _Response:
        head = seg[0] if seg else ""
        if head == "whoami-v2" and req.method == "GET":
            return self._whoami(req)
        if head == "validate-yaml" and req.method == "POST":
            return _json({"errors": [], "warnings": []})
        if head == "telemetry":
            return _json({})
        if head == "repos" and seg[1:] == ["create"] and req.method == "POST":
            return self._create_repo(req)
        if head == "repos" and seg[1:] == ["delete"] and req.method == "DELETE":
            return self._delete_repo(req)
        if head in _TYPE_FROM_PLURAL and len(seg) >= 3:
            repo_type = _TYPE_FROM_PLURAL[head]
            repo_id = f"{unquote(seg[1])}/{unquote(seg[2])}"
            return self._repo_api(req, repo_type, repo_id, seg[3:])
        raise HubHTTPError(404, f"FakeHub: no route for {req.method} {req.path}")

    def _repo_api(self, req: _Request, repo_type: str, repo_id: str, rest: list[str]) -> _Response:
        action = rest[0] if rest else ""
        arg = unquote(rest[1]) if len(rest) > 1 else None
        if req.method == "GET" and not rest:
            return self._info(req, repo_type, repo_id, "main")
        if req.method == "GET" and action == "revision" and arg is not None:
            return self._info(req, repo_type, repo_id, arg)
        if req.method == "GET" and action == "tree" and arg is not None:
            sub = "/".join(unquote(s) for s in rest[2:]).strip("/")
            return self._tree(req, repo_type, repo_id, arg, sub)
        if req.method == "GET" and action == "refs":
            return self._refs(req, repo_type, repo_id)
        if req.method == "GET" and action == "commits" and arg is not None:
            return self._commits(req, repo_type, repo_id, arg)
        if req.method == "POST" and action == "paths-info" and arg is not None:
            return self._paths_info(req, repo_type, repo_id, arg)
        if req.method == "POST" and action == "preupload" and arg is not None:
            return self._preupload(req, repo_type, repo_id, arg)
        if req.method == "POST" and action == "commit" and arg is not None:
            return self._commit(req, repo_type, repo_id, arg)
        if action == "branch" and arg is not None and req.method in ("POST", "DELETE"):
            return self._branch(req, repo_type, repo_id, arg)
        if req.method == "POST" and action == "tag" and arg is not None:
            return self._tag(req, repo_type, repo_id, arg)
        raise HubHTTPError(404, f"FakeHub: no route for {req.method} {req.path}")

    def _web(self, req: _Request, seg: list[str]) -> _Response:
        repo_type = "model"
        if seg and seg[0] in ("datasets", "spaces"):
            repo_type = _TYPE_FROM_PLURAL[seg[0]]
            seg = seg[1:]
        if len(seg) >= 5 and seg[2] == "resolve" and req.method in ("GET", "HEAD"):
            repo_id = f"{unquote(seg[0])}/{unquote(seg[1])}"
            path = "/".join(unquote(s) for s in seg[4:])
            return self._resolve_file(req, repo_type, repo_id, unquote(seg[3]), path)
        if (
            len(seg) == 6
            and seg[1].endswith(".git")
            and seg[2:] == ["info", "lfs", "objects", "batch"]
            and req.method == "POST"
        ):
            return self._lfs_batch(req, repo_type, f"{unquote(seg[0])}/{unquote(seg[1])[:-4]}")
        raise HubHTTPError(404, f"FakeHub: no route for {req.method} {req.path}")

    # ------------------------------------------------------------------ endpoints

    def _whoami(self, req: _Request) -> _Response:
        state = self._auth(req.headers)
        if state != "valid":
            raise HubHTTPError(401, _BAD_TOKEN_MESSAGE if state == "invalid" else _NO_TOKEN_MESSAGE)
        return _json(
            {
                "type": "user",
                "id": hashlib.sha1(self.user.encode()).hexdigest()[:24],
                "name": self.user,
                "fullname": self.user,
                "email": f"{self.user}@example.com",
                "emailVerified": True,
                "isPro": False,
                "canPay": False,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "fake-hub", "role": "write"}},
            }
        )

    def _create_repo(self, req: _Request) -> _Response:
        self._require_write(req)
        body = req.json()
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise HubHTTPError(400, "Missing repo name")
        repo_type = body.get("type") or "model"
        if repo_type not in _URL_PREFIX:
            raise HubHTTPError(400, f"Invalid repo type: {repo_type}")
        repo_id = f"{body.get('organization') or self.user}/{name}"
        private = bool(body.get("private")) or body.get("visibility") == "private"
        existing = self._repos.get((repo_type, repo_id))
        if existing is not None:
            # create_repo(exist_ok=True) swallows exactly this 409; `url` mirrors the Hub's payload.
            return _json({"error": "You already created this repo", "url": self._repo_url(existing)}, status=409)
        self.create_repo(repo_id, private=private, repo_type=repo_type)
        repo = self._repos[(repo_type, repo_id)]
        return _json({"url": self._repo_url(repo), "name": repo_id, "id": repo_id})

    def _delete_repo(self, req: _Request) -> _Response:
        self._require_write(req)
        body = req.json()
        repo_id = f"{body.get('organization') or self.user}/{body.get('name')}"
        key = (body.get("type") or "model", repo_id)
        if key not in self._repos:
            raise HubHTTPError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        del self._repos[key]
        return _json({})

    def _info(self, req: _Request, repo_type: str, repo_id: str, revision: str) -> _Response:
        repo = self._readable_repo(req, repo_type, repo_id)
        sha = self._resolve_or_raise(repo, revision)
        commit = repo.commits[sha]
        siblings = []
        for path, blob in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path, "size": len(blob.content), "blobId": blob.oid}
            if blob.lfs:
                sibling["lfs"] = {
                    "size": len(blob.content),
                    "sha256": blob.sha256,
                    "pointerSize": len(blob.pointer),
                }
            siblings.append(sibling)
        return _json(
            {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": sha,
                "private": repo.private,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "createdAt": repo.created_at,
                "lastModified": commit.date,
                "siblings": siblings,
            }
        )

    def _tree(self, req: _Request, repo_type: str, repo_id: str, revision: str, sub: str) -> _Response:
        repo = self._readable_repo(req, repo_type, repo_id)
        files = repo.commits[self._resolve_or_raise(repo, revision)].files
        recursive = req.query.get("recursive", ["false"])[-1].lower() in ("1", "true")
        prefix = f"{sub}/" if sub else ""
        below = {path: blob for path, blob in files.items() if path.startswith(prefix)}
        if sub and not below:
            raise HubHTTPError(404, f"Entry not found: {sub}", "EntryNotFound")
        entries: dict[str, dict[str, Any]] = {}
        for path, blob in sorted(below.items()):
            parts = path[len(prefix) :].split("/")
            # Each folder is listed once, even when several files live below it.
            for depth in range(1, len(parts)):
                folder = prefix + "/".join(parts[:depth])
                if folder not in entries:
                    entries[folder] = {
                        "type": "directory",
                        "path": folder,
                        "oid": git_blob_oid(folder.encode()),
                    }
                if not recursive:
                    break
            if recursive or len(parts) == 1:
                entries[path] = blob.tree_entry(path)
        # Like the Hub: directories first, then files, each sorted by path.
        return _json(sorted(entries.values(), key=lambda e: (e["type"] != "directory", e["path"])))

    def _paths_info(self, req: _Request, repo_type: str, repo_id: str, revision: str) -> _Response:
        repo = self._readable_repo(req, repo_type, repo_id)
        files = repo.commits[self._resolve_or_raise(repo, revision)].files
        form = req.form()
        out = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in files:
                out.append(files[path].tree_entry(path))
            elif any(p.startswith(path + "/") for p in files):
                out.append({"type": "directory", "path": path, "oid": git_blob_oid(path.encode())})
        return _json(out)

    def _refs(self, req: _Request, repo_type: str, repo_id: str) -> _Response:
        repo = self._readable_repo(req, repo_type, repo_id)

        def ref(name: str, full: str, sha: str) -> dict[str, str]:
            return {"name": name, "ref": full, "targetCommit": sha}

        data: dict[str, Any] = {
            "branches": [ref(name, f"refs/heads/{name}", sha) for name, sha in repo.branches.items()],
            "converts": [],
            "tags": [ref(name, f"refs/tags/{name}", sha) for name, sha in repo.tags.items()],
        }
        if req.query.get("include_prs"):
            data["pullRequests"] = [ref(f"refs/pr/{n}", f"refs/pr/{n}", sha) for n, sha in repo.prs.items()]
        return _json(data)

    def _commits(self, req: _Request, repo_type: str, repo_id: str, revision: str) -> _Response:
        repo = self._readable_repo(req, repo_type, repo_id)
        commits = self._walk(repo, self._resolve_or_raise(repo, revision))
        return _json(
            [
                {
                    "id": c.sha,
                    "title": c.title,
                    "message": c.message,
                    "date": c.date,
                    "authors": [{"user": self.user}],
                }
                for c in commits
            ]
        )

    def _preupload(self, req: _Request, repo_type: str, repo_id: str, revision: str) -> _Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        files = repo.commits[self._resolve_or_raise(repo, revision)].files
        out = []
        for item in req.json().get("files", []):
            path, size = item["path"], int(item["size"])
            info: dict[str, Any] = {
                "path": path,
                "uploadMode": "lfs" if self._is_lfs_size(size) else "regular",
                "shouldIgnore": False,
            }
            if path in files:
                # The client skips unchanged files: it compares this with its sha1 (regular) / sha256 (LFS).
                info["oid"] = files[path].sha256 if files[path].lfs else git_blob_oid(files[path].content)
            out.append(info)
        return _json({"files": out, "commitOid": repo.branches.get(revision)})

    def _commit(self, req: _Request, repo_type: str, repo_id: str, revision: str) -> _Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        create_pr = req.query.get("create_pr", ["0"])[-1].lower() in ("1", "true")
        pr_match = _PR_RE.fullmatch(revision)
        branch = revision.removeprefix("refs/heads/")
        if not create_pr and pr_match is None and branch not in repo.branches:
            # The Hub never creates a branch on commit: transformers/create_branch must have created it first.
            raise HubHTTPError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        base = self._resolve_or_raise(repo, revision)

        lines = [json.loads(line) for line in req.body.splitlines() if line.strip()]
        header = next((line["value"] for line in lines if line.get("key") == "header"), {})
        parent = header.get("parentCommit")
        if parent is not None and parent != base:
            raise HubHTTPError(412, "A commit has happened since. Please refresh and try again.")
        tree = dict(repo.commits[base].files)
        for line in lines:
            key, value = line.get("key"), line.get("value", {})
            if key == "file":
                data = base64.b64decode(value["content"]) if value.get("encoding") == "base64" else value["content"]
                tree[value["path"]] = _Blob(data if isinstance(data, bytes) else data.encode())
            elif key == "lfsFile":
                content = self._lfs_objects.get(value["oid"])
                if content is None:
                    raise HubHTTPError(400, f"LFS object {value['oid']} was not uploaded")
                tree[value["path"]] = _Blob(content, lfs=True)
            elif key == "deletedFile":
                if tree.pop(value["path"], None) is None:
                    raise HubHTTPError(404, "A file with this name doesn't exist", "EntryNotFound")
            elif key == "deletedFolder":
                folder = value["path"].rstrip("/") + "/"
                for path in [p for p in tree if p.startswith(folder)]:
                    del tree[path]
            elif key != "header":
                raise HubHTTPError(400, f"Unknown commit operation: {key}")

        sha = self._new_commit(repo, base, tree, header.get("summary", ""), header.get("description", ""))
        commit_url = f"{self._repo_url(repo)}/commit/{sha}"
        result: dict[str, Any] = {
            "success": True,
            "commitOid": sha,
            "commitUrl": commit_url,
            "hookOutput": "",
        }
        if create_pr:
            num = max([*repo.prs, *(0,)]) + 1
            repo.prs[num] = sha
            result["pullRequestUrl"] = f"{self._repo_url(repo)}/discussions/{num}"
        elif pr_match is not None:
            repo.prs[int(pr_match[1])] = sha
        else:
            repo.branches[branch] = sha
        return _json(result)

    def _branch(self, req: _Request, repo_type: str, repo_id: str, name: str) -> _Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        if req.method == "DELETE":
            if name not in repo.branches:
                raise HubHTTPError(404, f"Invalid rev id: {name}", "RevisionNotFound")
            if name == "main":
                raise HubHTTPError(403, "Cannot delete the default branch")
            del repo.branches[name]
            return _json({})
        if name.startswith("refs/") or not name:
            raise HubHTTPError(400, f"Invalid reference for a branch: {name}")
        if name in repo.branches:
            raise HubHTTPError(409, f"Branch {name} already exists")
        start = req.json().get("startingPoint") or "main"
        repo.branches[name] = self._resolve_or_raise(repo, start)
        return _json({})

    def _tag(self, req: _Request, repo_type: str, repo_id: str, revision: str) -> _Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        tag = req.json().get("tag")
        if not isinstance(tag, str) or not tag:
            raise HubHTTPError(400, "Missing tag name")
        if tag in repo.tags:
            raise HubHTTPError(409, f"Tag {tag} already exists")
        repo.tags[tag] = self._resolve_or_raise(repo, revision)
        return _json({})

    def _resolve_file(self, req: _Request, repo_type: str, repo_id: str, revision: str, path: str) -> _Response:
        repo = self._readable_repo(req, repo_type, repo_id)
        sha = self._resolve_or_raise(repo, revision)
        blob = repo.commits[sha].files.get(path)
        if blob is None:
            # X-Repo-Commit lets the client cache the non-existence of the file (`.no_exist/<sha>/<path>`).
            raise HubHTTPError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{blob.etag}"',
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
        }
        if blob.lfs:
            # Real Hub: LFS files are a redirect to a CDN carrying these; we serve the bytes directly instead.
            headers["X-Linked-Etag"] = f'"{blob.sha256}"'
            headers["X-Linked-Size"] = str(len(blob.content))
        data, status = blob.content, 200
        range_header = req.headers.get("range")
        if range_header and (match := re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())):
            start = int(match[1])
            end = int(match[2]) if match[2] else len(data) - 1
            if start >= len(data):
                raise HubHTTPError(
                    416, "Requested range not satisfiable", headers={"Content-Range": f"bytes */{len(data)}"}
                )
            headers["Content-Range"] = f"bytes {start}-{min(end, len(data) - 1)}/{len(data)}"
            data, status = data[start : end + 1], 206
        return _Response(status, data, headers)

    def _lfs_batch(self, req: _Request, repo_type: str, repo_id: str) -> _Response:
        self._require_write(req)
        self._get_repo(repo_type, repo_id)
        body = req.json()
        if body.get("operation") != "upload":
            raise HubHTTPError(400, "FakeHub only supports LFS uploads")
        objects = []
        for obj in body.get("objects", []):
            oid, size = obj["oid"], int(obj["size"])
            entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if oid not in self._lfs_objects:
                # "basic" transfer only: no `header.chunk_size`, so the client does one PUT (no multipart).
                entry["actions"] = {
                    "upload": {"href": f"{self.url}/_fakehub/lfs/{oid}"},
                    "verify": {"href": f"{self.url}/_fakehub/lfs/{oid}/verify"},
                }
            objects.append(entry)
        return _json(
            {"transfer": "basic", "objects": objects},
            headers={"Content-Type": "application/vnd.git-lfs+json"},
        )

    def _lfs_object(self, req: _Request, oid: str, rest: list[str]) -> _Response:
        # Stands in for the presigned S3 URL: the client sends no Authorization header here.
        if req.method == "PUT" and not rest:
            if hashlib.sha256(req.body).hexdigest() != oid:
                raise HubHTTPError(400, "LFS upload does not match its oid")
            self._lfs_objects[oid] = req.body
            return _Response(200, b"", {"ETag": f'"{oid}"'})
        if req.method == "POST" and rest == ["verify"]:
            body = req.json()
            stored = self._lfs_objects.get(oid)
            if stored is None or len(stored) != int(body.get("size", -1)):
                raise HubHTTPError(404, "LFS object not found", "EntryNotFound")
            return _json({})
        raise HubHTTPError(404, f"FakeHub: no route for {req.method} {req.path}")


@dataclass
class _Request:
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


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    # HTTP/1.1 keep-alive, like the real Hub: every response carries a Content-Length.
    protocol_version = "HTTP/1.1"
    # Idle keep-alive connections of the client's pooled session must not pin handler threads forever.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass  # keep pytest output clean; the hub keeps its own request log

    def _read_body(self) -> bytes:
        # httpx streams file objects (LFS PUT) with chunked transfer encoding; http.server doesn't decode it.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        req = _Request(self.command, split.path, parse_qs(split.query, keep_blank_values=True), headers, body)
        record = RequestRecord(
            method=self.command,
            path=split.path,
            query=req.query,
            headers={k: v for k, v in self.headers.items() if k.lower() != "authorization"},
            has_token="authorization" in headers,
        )
        with self.hub._lock:
            self.hub.requests.append(record)
        try:
            response = self.hub._handle(req)
        except HubHTTPError as e:
            err_headers = {"X-Error-Message": e.message, **e.headers}
            if e.code is not None:
                err_headers["X-Error-Code"] = e.code
            response = _json({"error": e.message}, status=e.status, headers=err_headers)
        except Exception as e:  # a bug in the fake must surface as a 500, not a dropped connection
            response = _json({"error": f"FakeHub internal error: {e!r}"}, status=500)
        record.status = response.status
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch
