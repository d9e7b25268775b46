"""The remote-code set as saved: `save_pretrained` copies exactly the modules tests/test_layout.py checks
(REMOTE_CODE: the model's file and, transitively, every sibling it imports), each small enough to read."""

from __future__ import annotations

from pathlib import Path

from conftest import make_tiny_model
from test_layout import PACKAGE, REMOTE_CODE


def test_save_pretrained_copies_exactly_the_remote_code_set(tmp_path: Path, tiny_tokenizer) -> None:
    make_tiny_model().save_pretrained(tmp_path, tokenizer=tiny_tokenizer)
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted(REMOTE_CODE)
    for name in REMOTE_CODE:  # copies, byte for byte, of the package's files
        assert (tmp_path / f"{name}.py").read_bytes() == (PACKAGE / "modeling" / f"{name}.py").read_bytes(), name


def test_every_remote_code_module_is_under_400_lines() -> None:
    lengths = {name: len((PACKAGE / "modeling" / f"{name}.py").read_text().splitlines()) for name in REMOTE_CODE}
    assert max(lengths.values()) <= 400, lengths
