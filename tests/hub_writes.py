"""The write side of the fake Hub, mixed into `hub_server.FakeHub`: repo creation and deletion, preupload, commits
(NDJSON, pull requests), branches, tags and the LFS batch / basic transfer."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from hub_objects import (
    PR_RE,
    URL_PREFIX,
    Blob,
    HubHTTPError,
    Request,
    Response,
    git_blob_oid,
    json_response,
)


class HubWrites:
    """Write endpoints of FakeHub (a mixin: the store, auth checks and settings are FakeHub's)."""

    def _create_repo(self, req: Request) -> Response:
        self._require_write(req)
        body = req.json()
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise HubHTTPError(400, "Missing repo name")
        repo_type = body.get("type") or "model"
        if repo_type not in URL_PREFIX:
            raise HubHTTPError(400, f"Invalid repo type: {repo_type}")
        repo_id = f"{body.get('organization') or self.user}/{name}"
        private = bool(body.get("private")) or body.get("visibility") == "private"
        existing = self._repos.get((repo_type, repo_id))
        if existing is not None:
            # create_repo(exist_ok=True) swallows exactly this 409; `url` mirrors the Hub's payload.
            return json_response(
                {"error": "You already created this repo", "url": self._repo_url(existing)}, status=409
            )
        self.create_repo(repo_id, private=private, repo_type=repo_type)
        repo = self._repos[(repo_type, repo_id)]
        return json_response({"url": self._repo_url(repo), "name": repo_id, "id": repo_id})

    def _delete_repo(self, req: Request) -> Response:
        self._require_write(req)
        body = req.json()
        repo_id = f"{body.get('organization') or self.user}/{body.get('name')}"
        key = (body.get("type") or "model", repo_id)
        if key not in self._repos:
            raise HubHTTPError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        del self._repos[key]
        return json_response({})

    def _preupload(self, req: Request, repo_type: str, repo_id: str, revision: str) -> Response:
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
        return json_response({"files": out, "commitOid": repo.branches.get(revision)})

    def _commit(self, req: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        create_pr = req.query.get("create_pr", ["0"])[-1].lower() in ("1", "true")
        pr_match = PR_RE.fullmatch(revision)
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
                tree[value["path"]] = Blob(data if isinstance(data, bytes) else data.encode())
            elif key == "lfsFile":
                content = self._lfs_objects.get(value["oid"])
                if content is None:
                    raise HubHTTPError(400, f"LFS object {value['oid']} was not uploaded")
                tree[value["path"]] = Blob(content, lfs=True)
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
        return json_response(result)

    def _branch(self, req: Request, repo_type: str, repo_id: str, name: str) -> Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        if req.method == "DELETE":
            if name not in repo.branches:
                raise HubHTTPError(404, f"Invalid rev id: {name}", "RevisionNotFound")
            if name == "main":
                raise HubHTTPError(403, "Cannot delete the default branch")
            del repo.branches[name]
            return json_response({})
        if name.startswith("refs/") or not name:
            raise HubHTTPError(400, f"Invalid reference for a branch: {name}")
        if name in repo.branches:
            raise HubHTTPError(409, f"Branch {name} already exists")
        start = req.json().get("startingPoint") or "main"
        repo.branches[name] = self._resolve_or_raise(repo, start)
        return json_response({})

    def _tag(self, req: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        self._require_write(req)
        repo = self._get_repo(repo_type, repo_id)
        tag = req.json().get("tag")
        if not isinstance(tag, str) or not tag:
            raise HubHTTPError(400, "Missing tag name")
        if tag in repo.tags:
            raise HubHTTPError(409, f"Tag {tag} already exists")
        repo.tags[tag] = self._resolve_or_raise(repo, revision)
        return json_response({})

    def _lfs_batch(self, req: Request, repo_type: str, repo_id: str) -> Response:
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
        return json_response(
            {"transfer": "basic", "objects": objects},
            headers={"Content-Type": "application/vnd.git-lfs+json"},
        )

    def _lfs_object(self, req: Request, oid: str, rest: list[str]) -> Response:
        # Stands in for the presigned S3 URL: the client sends no Authorization header here.
        if req.method == "PUT" and not rest:
            if hashlib.sha256(req.body).hexdigest() != oid:
                raise HubHTTPError(400, "LFS upload does not match its oid")
            self._lfs_objects[oid] = req.body
            return Response(200, b"", {"ETag": f'"{oid}"'})
        if req.method == "POST" and rest == ["verify"]:
            body = req.json()
            stored = self._lfs_objects.get(oid)
            if stored is None or len(stored) != int(body.get("size", -1)):
                raise HubHTTPError(404, "LFS object not found", "EntryNotFound")
            return json_response({})
        raise HubHTTPError(404, f"FakeHub: no route for {req.method} {req.path}")
