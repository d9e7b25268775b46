"""Local filesystem paths in text bound for the Hub (model cards, commit messages): telling them from Hub ids, and
scrubbing them out, so a card never tells the world where its author's files live.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePath, PureWindowsPath
from typing import Any

LOCAL_PATH_REPLACEMENT = "<local path>"

_DRIVE_RE = re.compile(r"^[A-Za-z]:[\\/]")
# A candidate absolute path inside free text: POSIX (/a/b) or Windows (C:\a\b). Checked against the filesystem.
_PATH_IN_TEXT_RE = re.compile(r"(?<![\w.~-])(?:[A-Za-z]:[\\/]|/)[^\s\"'`<>|()\[\]{},;*?]*")


def _home_dir() -> str | None:
    home = os.path.expanduser("~").rstrip("/\\")
    return home if home and home != "~" and len(home) > 1 else None


def _home_pattern() -> re.Pattern[str] | None:
    """The home directory as a whole path component (`/root` matches `/root/x`, not `/rootfs` or `x.org/root`)."""
    home = _home_dir()
    if home is None:
        return None
    return re.compile(r"(?<![\w.~-])" + re.escape(home) + r"(?![^\s/\\\"'`<>|()\[\]{},;:])")


def looks_like_local_path(value: str, *, min_depth: int = 1) -> bool:
    """Whether `value` names a place on this machine: under the home directory, `~...`, or an absolute path (POSIX
    or Windows drive) that exists, or whose ancestor at least `min_depth` levels below the root exists."""
    if not isinstance(value, str) or not value:
        return False
    home = _home_pattern()
    if home is not None and home.search(value):
        return True
    if value.startswith("~"):
        return True
    if not (value.startswith("/") or _DRIVE_RE.match(value)):
        return False
    pure = PureWindowsPath(value) if _DRIVE_RE.match(value) else PurePath(value)
    parts = pure.parts
    for depth in range(len(parts), min_depth, -1):
        try:
            if os.path.exists(os.path.join(*parts[:depth])):
                return True
        except (OSError, ValueError):
            continue
    return False


def scrub_local_paths(text: str, replacement: str = LOCAL_PATH_REPLACEMENT) -> str:
    """Replace every local filesystem path in `text` (see `looks_like_local_path`; free text needs two levels,
    e.g. `/tmp/x`, so that a lone `/` or `/api` is left alone) and every mention of the home directory."""

    def replace(match: re.Match[str]) -> str:
        candidate = match.group(0).rstrip(".:")
        trailing = match.group(0)[len(candidate) :]
        return replacement + trailing if looks_like_local_path(candidate, min_depth=2) else match.group(0)

    text = _PATH_IN_TEXT_RE.sub(replace, text)
    home = _home_pattern()
    return home.sub(replacement, text) if home is not None else text


def is_hub_id(value: Any) -> bool:
    """Whether `value` can be a Hub repo id and is not a local path (existing folders shadow Hub ids on load)."""
    if not isinstance(value, str) or not value or looks_like_local_path(value) or os.path.exists(value):
        return False
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return not value.startswith((".", "-"))
