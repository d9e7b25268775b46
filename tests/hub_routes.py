"""The read side of the fake Hub, mixed into `hub_server.FakeHub`: auth checks, routing of every request to its
endpoint, and the endpoints that only read (whoami, repo info, tree, paths-info, refs, commits, file downloads).
The write endpoints are in `hub_writes.py`; the store they all use (`_repos`, `_lock`, `_resolve`, ...) is FakeHub's."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from hub_objects import (
    BAD_TOKEN_MESSAGE,
    NO_TOKEN_MESSAGE,
    TYPE_FROM_PLURAL,
    HubHTTPError,
    Repo,
    Request,
    Response,
    git_blob_oid,
    json_response,
)


class HubRoutes:
    """Auth, routing and read endpoints of FakeHub (a mixin: the store and settings are FakeHub's)."""

    # ------------------------------------------------------------------ auth

    def _auth(self, headers: Mapping[str, str]) -> str:
        """'missing', 'invalid' or 'valid' (any token is valid when no `required_token` is configured)."""
        value = headers.get("authorization", "")
        if not value.lower().startswith("bearer ") or not value[7:].strip():
            return "missing"
        if self.required_token is None or value[7:].strip() == self.required_token:
            return "valid"
        return "invalid"

    def _require_write(self, req: Request) -> None:
        if self.required_token is None:
            return
        state = self._auth(req.headers)
        if state != "valid":
            raise HubHTTPError(401, BAD_TOKEN_MESSAGE if state == "invalid" else NO_TOKEN_MESSAGE)

    def _readable_repo(self, req: Request, repo_type: str, repo_id: str) -> Repo:
        repo = self._get_repo(repo_type, repo_id)
        if repo.private and self.required_token is not None:
            state = self._auth(req.headers)
            if state == "invalid":
                raise HubHTTPError(401, BAD_TOKEN_MESSAGE)
            if state == "missing":
                # Like the Hub: do not reveal that a private repo exists.
                raise HubHTTPError(401, NO_TOKEN_MESSAGE, "RepoNotFound")
        return repo

    # ------------------------------------------------------------------ routing

    def _handle(self, req: Request) -> Response:
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

    def _api(self, req: Request, seg: list[str]) -> Response:
        head = seg[0] if seg else ""
        if head == "whoami-v2" and req.method == "GET":
            return self._whoami(req)
        if head == "validate-yaml" and req.method == "POST":
            return json_response({"errors": [], "warnings": []})
        if head == "telemetry":
            return json_response({})
        if head == "repos" and seg[1:] == ["create"] and req.method == "POST":
            return self._create_repo(req)
        if head == "repos" and seg[1:] == ["delete"] and req.method == "DELETE":
            return self._delete_repo(req)
        if head in TYPE_FROM_PLURAL and len(seg) >= 3:
            repo_type = TYPE_FROM_PLURAL[head]
            repo_id = f"{unquote(seg[1])}/{unquote(seg[2])}"
            return self._repo_api(req, repo_type, repo_id, seg[3:])
        raise HubHTTPError(404, f"FakeHub: no route for {req.method} {req.path}")

    def _repo_api(self, req: Request, repo_type: str, repo_id: str, rest: list[str]) -> Response:
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

    def _web(self, req: Request, seg: list[str]) -> Response:
        repo_type = "model"
        if seg and seg[0] in ("datasets", "spaces"):
            repo_type = TYPE_FROM_PLURAL[seg[0]]
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

    # ------------------------------------------------------------------ read endpoints

    def _whoami(self, req: Request) -> Response:
        state = self._auth(req.headers)
        if state != "valid":
            raise HubHTTPError(401, BAD_TOKEN_MESSAGE if state == "invalid" else NO_TOKEN_MESSAGE)
        return json_response(
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

    def _info(self, req: Request, repo_type: str, repo_id: str, revision: str) -> Response:
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
        return json_response(
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

    def _tree(self, req: Request, repo_type: str, repo_id: str, revision: str, sub: str) -> Response:
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
        return json_response(sorted(entries.values(), key=lambda e: (e["type"] != "directory", e["path"])))

    def _paths_info(self, req: Request, repo_type: str, repo_id: str, revision: str) -> Response:
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
        return json_response(out)

    def _refs(self, req: Request, repo_type: str, repo_id: str) -> Response:
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
        return json_response(data)

    def _commits(self, req: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._readable_repo(req, repo_type, repo_id)
        commits = self._walk(repo, self._resolve_or_raise(repo, revision))
        return json_response(
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

    def _resolve_file(self, req: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
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
        return Response(status, data, headers)
