"""One content fingerprint of texts: what a kept run records of its data (the recipes' settings, the corpus shards),
so that other data of the same size is never taken for the data a stage was done on."""

from __future__ import annotations

import hashlib
from typing import Any


class TextDigest:
    """sha256 over a stream of parts (texts, or values given by their `repr`), each length-prefixed, so that no two
    different streams hash alike by concatenation; `count` says how many times `add` was called."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.count = 0

    def add(self, *parts: Any) -> None:
        """One row: its parts in order (a str as it is, anything else by its `repr`)."""
        for part in parts:
            raw = (part if isinstance(part, str) else repr(part)).encode("utf-8", "surrogatepass")
            self._hash.update(b"%d:" % len(raw) + raw)
        self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def describe(self, what: str) -> str:
        """`"N <what>, sha256 <16 hex digits>"`: the line a kept settings file records."""
        return f"{self.count} {what}, sha256 {self.hexdigest()[:16]}"


__all__ = ["TextDigest"]
