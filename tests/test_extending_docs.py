"""docs/extending.md runs: its first code block (the tiny model) and then each section's block, in a fresh namespace
per section, with the registries (losses, stores, model kinds, commands) put back afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hf_siamese import losses
from hf_siamese.cli import parser
from hf_siamese.modeling import kinds
from hf_siamese.retrieval import stores

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
SECTIONS = ("A loss", "An evaluator", "A vector store", "A command", "A model kind")


def _blocks() -> tuple[str, dict[str, str]]:
    """(the setup block, section title -> its one python block)."""
    text = PAGE.read_text(encoding="utf-8")
    head, *parts = re.split(r"^## ", text, flags=re.MULTILINE)
    code = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
    (setup,) = code.findall(head)
    sections = {}
    for part in parts:
        title = part.splitlines()[0].strip()
        (sections[title],) = code.findall(part)
    return setup, sections


def test_the_page_has_the_five_sections() -> None:
    _, sections = _blocks()
    assert tuple(sections) == SECTIONS


@pytest.mark.parametrize("title", SECTIONS)
def test_each_example_runs(title: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))
    monkeypatch.setattr(stores, "_STORES", dict(stores._STORES))
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    monkeypatch.setattr(parser, "_ADDED", list(parser._ADDED))
    setup, sections = _blocks()
    namespace: dict = {"__name__": f"extending_{title.replace(' ', '_')}"}
    exec(compile(setup, f"{PAGE.name}:setup", "exec"), namespace)
    exec(compile(sections[title], f"{PAGE.name}:{title}", "exec"), namespace)
    assert capsys.readouterr().out.strip()  # each example prints what it made
