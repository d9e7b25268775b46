"""Teacher scores of many pairs (or a teacher's embeddings of many texts), streamed to disk and resumable: the items
are scored `chunk_size` at a time, each chunk's values written to `FOLDER/scores-NNNNN.npy` (a temporary name, then
renamed: a killed run leaves no half chunk), so calling again with the same items and teacher scores only the chunks
that are missing.

`FOLDER/manifest.json` names what the folder holds (a fingerprint of the items and of the teacher, the chunk size);
another set of items or another teacher in the same folder is refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .files import write_atomic

MANIFEST = "manifest.json"


def pairs_fingerprint(items: Sequence[tuple[str, ...] | str]) -> str:
    """A sha256 of the items (pairs of texts, or texts), in order."""
    digest = hashlib.sha256()
    for item in items:
        for text in (item,) if isinstance(item, str) else item:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
        digest.update(b"\x01")
    return digest.hexdigest()


def teacher_id(teacher: Any) -> str:
    """How a run's manifest and settings name a teacher: its path or Hub id (as given, or as the model was loaded
    from), else its class."""
    if isinstance(teacher, str | os.PathLike):
        return os.fspath(teacher)
    return getattr(getattr(teacher, "config", None), "_name_or_path", None) or type(teacher).__name__


def _check_manifest(folder: Path, manifest: dict) -> None:
    path = folder / MANIFEST
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda p: p.write_text(json.dumps(manifest, indent=1), encoding="utf-8"))
        return
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        found = None
    if found != manifest:
        differs = [key for key in manifest if not isinstance(found, dict) or found.get(key) != manifest[key]]
        raise ValueError(
            f"{folder}: holds scores of other pairs or another teacher (differs in {differs}); give an empty folder, "
            "or delete this one to score again"
        )


def stored_scores(
    score: Callable[[list[Any]], np.ndarray],
    pairs: Sequence[Any],
    folder: str | os.PathLike,
    *,
    teacher_id: str,
    chunk_size: int = 20_000,
    show_progress: Callable[[str], None] | None = None,
) -> np.ndarray:
    """float32 `(len(pairs), ...)` values of `pairs` by `score(chunk) -> values` (one row per item: a score, or a
    vector), each chunk kept in `folder`.

    Args:
        score: scores one list of items (e.g. a cross-encoder's `predict` on pairs, a bi-encoder's `encode` on texts).
        pairs: every item (a pair of texts, or a text), in a fixed order.
        folder: where the chunks are kept; a stopped run resumes from it.
        teacher_id: names the teacher (its path or Hub id and settings): part of the folder's fingerprint.
        chunk_size: pairs per chunk file.
        show_progress: called with a line after each chunk (e.g. `print`).
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size!r}: expected a positive int (pairs per chunk file)")
    pairs = list(pairs)
    folder = Path(folder)
    manifest = {
        "pairs": len(pairs), "fingerprint": pairs_fingerprint(pairs), "teacher": teacher_id, "chunk_size": chunk_size
    }  # fmt: skip
    _check_manifest(folder, manifest)
    chunks = []
    count = -(-len(pairs) // chunk_size)
    for index in range(count):
        part = pairs[index * chunk_size : (index + 1) * chunk_size]
        path = folder / f"scores-{index:05d}.npy"
        values = _load_chunk(path, len(part))
        if values is None:
            values = np.asarray(score(part), dtype=np.float32)
            if values.ndim == 0 or values.shape[0] != len(part):
                raise ValueError(f"stored_scores: the teacher gave shape {values.shape} for {len(part)} items")
            write_atomic(path, lambda p, v=values: _save(p, v))
            if show_progress is not None:
                show_progress(f"scored chunk {index + 1}/{count} ({len(part)} pairs) -> {path}")
        chunks.append(values)
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


def _save(path: Path, values: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, values, allow_pickle=False)


def _load_chunk(path: Path, size: int) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None  # unreadable: scored again
    return values if values.ndim and values.shape[0] == size and values.dtype == np.float32 else None


__all__ = ["pairs_fingerprint", "stored_scores", "teacher_id"]
