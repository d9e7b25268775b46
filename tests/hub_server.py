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

import hashlib
import itertools
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from hub_objects import (
    PR_RE,
    SHA_RE,
    URL_PREFIX,
    Blob,
    Commit,
    FailRule,
    HubHTTPError,
    Repo,
    Request,
    RequestRecord,
    json_response,
    now_iso,
)
from hub_routes import HubRoutes
from hub_writes import HubWrites


class FakeHub(HubRoutes, HubWrites):
    """In-memory fake of the Hugging Face Hub, served over HTTP on 127.0.0.1 from a background thread.

    Args:
        required_token: when set, write endpoints (and reads of private repos, and whoami) answer 401 unless
            the request carries ``Authorization: Bearer <required_token>``. When ``None``, auth is not checked
            at all.
        user: the account that owns the token (namespace for ``create_repo("name")`` without a namespace).
        lfs_threshold: files of at least this many bytes are answered ``uploadMode: "lfs"`` by preupload, so
            the client goes through the LFS batch + basic PUT path. ``None`` (default): all files "regular".
        host / port: where to listen; port 0 lets the OS pick a free port.

    This class holds the store (repos, commits, LFS objects, under `_lock`), the test-facing API (direct store
    access, failure injection, the request log) and the server's lifecycle; the HTTP endpoints come from the
    `HubRoutes` (auth, routing, reads: `hub_routes.py`) and `HubWrites` (`hub_writes.py`) mixins.
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
        self._repos: dict[tuple[str, str], Repo] = {}
        self._lfs_objects: dict[str, bytes] = {}
        self._fail_rules: list[FailRule] = []
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
            self._fail_rules.append(FailRule(n, status, method.upper() if method else None, path_contains))

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
            repo = Repo(repo_type=repo_type, repo_id=repo_id, private=private, created_at=now_iso())
            self._repos[key] = repo
            gitattributes = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
            sha = self._new_commit(repo, None, {".gitattributes": Blob(gitattributes)}, "initial commit", "")
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
                tree[path] = Blob(data, lfs=self._is_lfs_size(len(data)))
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

    def _get_repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self._repos.get((repo_type, repo_id))
        if repo is None:
            raise HubHTTPError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        return repo

    def _new_commit(self, repo: Repo, parent: str | None, files: dict[str, Blob], title: str, message: str) -> str:
        seed = f"{repo.repo_type}/{repo.repo_id}:{parent}:{next(self._counter)}:{now_iso()}"
        digest = hashlib.sha1(seed.encode())
        for path in sorted(files):
            digest.update(f"{path}:{files[path].oid}".encode())
        sha = digest.hexdigest()
        repo.commits[sha] = Commit(sha, parent, files, title, message, now_iso())
        return sha

    def _resolve(self, repo: Repo, revision: str) -> str | None:
        if revision in repo.branches:
            return repo.branches[revision]
        if revision.startswith("refs/heads/"):
            return repo.branches.get(revision.removeprefix("refs/heads/"))
        if revision in repo.tags:
            return repo.tags[revision]
        if revision.startswith("refs/tags/"):
            return repo.tags.get(revision.removeprefix("refs/tags/"))
        if match := PR_RE.fullmatch(revision):
            return repo.prs.get(int(match[1]))
        if SHA_RE.fullmatch(revision):
            found = [sha for sha in repo.commits if sha.startswith(revision)]
            if len(found) == 1:
                return found[0]
        return None

    def _resolve_or_raise(self, repo: Repo, revision: str) -> str:
        sha = self._resolve(repo, revision)
        if sha is None:
            raise HubHTTPError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha

    def _walk(self, repo: Repo, sha: str | None) -> list[Commit]:
        out = []
        while sha is not None:
            commit = repo.commits[sha]
            out.append(commit)
            sha = commit.parent
        return out

    def _repo_url(self, repo: Repo) -> str:
        return f"{self.url}/{URL_PREFIX[repo.repo_type]}{repo.repo_id}"


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
        req = Request(self.command, split.path, parse_qs(split.query, keep_blank_values=True), headers, body)
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
            response = json_response({"error": e.message}, status=e.status, headers=err_headers)
        except Exception as e:  # a bug in the fake must surface as a 500, not a dropped connection
            response = json_response({"error": f"FakeHub internal error: {e!r}"}, status=500)
        record.status = response.status
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch
