"""Naming a damaged weights file. safetensors refuses a truncated or corrupt file with a bare message ("invalid header
length", "incomplete metadata, file not fully covered") that names no file, and transformers passes it on as it is;
`naming_damaged_weights` turns it into a `DamagedWeightsError` that names each such file of the checkpoint and what is
wrong with it, read from the file's header and size alone (the tensors are never read).

Part of the remote-code set (see `modeling/__init__.py`): public libraries only.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

# What locates a checkpoint's files on the Hub, besides its id.
HUB_KEYS = ("subfolder", "revision", "token", "cache_dir", "local_files_only")


class DamagedWeightsError(OSError):
    """A safetensors weights file that cannot be read (truncated or corrupt); the message names the file."""


def safetensors_damage(path: str | os.PathLike) -> str | None:
    """What is wrong with the safetensors file at `path` ("truncated (...)" or "corrupt (...)"), or None when its
    header and size agree: the layout safetensors checks on opening (8 bytes giving the header's length, a JSON
    header of tensors with their byte ranges, then exactly those bytes)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return f"truncated ({size} bytes, fewer than the 8 that give its header's length)"
            length = int.from_bytes(prefix, "little")
            if 8 + length > size:
                return f"truncated (its first 8 bytes announce a {length:,}-byte header; the file has {size:,} bytes)"
            header = json.loads(handle.read(length))
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"]
    except OSError as error:
        return f"unreadable ({error})"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return "corrupt (its header is not the JSON table of tensors safetensors writes)"
    expected = 8 + length + max(ends, default=0)
    if expected > size:
        return f"truncated (its tensors end at byte {expected:,}, but the file has {size:,} bytes)"
    if expected < size:
        return f"corrupt ({size - expected:,} bytes follow its last tensor)"
    return None


def _local_folder(source: str | os.PathLike | None, hub_kwargs: dict[str, Any]) -> Path | None:
    """The folder holding `source`'s files on this machine: the folder itself, or the Hub cache's snapshot."""
    if source is None:
        return None
    subfolder = hub_kwargs.get("subfolder") or ""
    if os.path.isdir(source):
        return Path(source, subfolder)
    try:
        from transformers.utils import cached_file

        config = cached_file(
            str(source),
            "config.json",
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **{k: v for k, v in hub_kwargs.items() if k in HUB_KEYS},
        )
    except Exception:  # noqa: BLE001 - only the error message is at stake; it then names the source
        return None
    return Path(config).parent if config else None


@contextlib.contextmanager
def naming_damaged_weights(source: str | os.PathLike | None, **hub_kwargs: Any) -> Iterator[None]:
    """Run the body (a load of `source`, a folder or Hub id; `hub_kwargs` as for `from_pretrained`); a
    `SafetensorError` it raises becomes a `DamagedWeightsError` naming the damaged `.safetensors` files of `source`."""
    try:
        yield
    except SafetensorError as error:
        folder = _local_folder(source, hub_kwargs)
        damaged = []
        for path in sorted(folder.rglob("*.safetensors")) if folder is not None and folder.is_dir() else ():
            why = safetensors_damage(path)
            if why is not None:
                damaged.append(f"{path}: the weights file is {why}")
        if not damaged:
            damaged = [f"{source}: a safetensors weights file of this model is truncated or corrupt ({error})"]
        raise DamagedWeightsError(f"{'; '.join(damaged)}; save or download the model again.") from error


__all__ = ["DamagedWeightsError", "naming_damaged_weights", "safetensors_damage"]
