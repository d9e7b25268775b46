"""MkDocs hooks of the documentation build (named in mkdocs.yml; excluded from the site).

- The benchmark results page includes `benchmarks/RESULTS.md` as it is (pymdownx.snippets); the images that file links
  to (`results/*.png`, relative to benchmarks/) are added to the site at the same relative place, so the included
  page's links resolve without a copy of the file in docs/.
- Every name in the `__all__` of `hf_siamese/__init__.py` and of each subpackage's `__init__.py` must have an entry
  (a `::: dotted.path` line ending in that name) in docs/reference/*.md; a missing one is a warning, which fails the
  strict build.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.hf_siamese_docs")

RESULTS = Path("benchmarks") / "RESULTS.md"
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
ENTRY = re.compile(r"^:::\s+([\w.]+)", re.MULTILINE)


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, config) -> Files:
    """Add the images benchmarks/RESULTS.md links to, at their path relative to that file."""
    root = _root(config)
    for target in IMAGE_LINK.findall((root / RESULTS).read_text(encoding="utf-8")):
        source = (root / RESULTS.parent / target).resolve()
        if "://" in target or not source.is_file():
            continue
        files.append(File.generated(config, target, abs_src_path=str(source)))
    return files


def _exports(init: Path) -> list[str]:
    """The names of a module's `__all__`: string items, and the string tuples it unpacks (`*_NAMES`)."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    constants: dict[str, list[str]] = {}
    names: list[str] = []
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            continue
        if not isinstance(node.value, (ast.List, ast.Tuple)):
            continue
        items: list[str] = []
        for item in node.value.elts:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                items.append(item.value)
            elif isinstance(item, ast.Starred) and isinstance(item.value, ast.Name):
                items.extend(constants.get(item.value.id, []))
        constants[node.targets[0].id] = items
        if node.targets[0].id == "__all__":
            names = items
    return names


def on_pre_build(config) -> None:
    """Warn about every exported name that has no reference entry."""
    root = _root(config)
    reference = Path(config.docs_dir) / "reference"
    documented = {
        path.rsplit(".", 1)[-1] for page in reference.glob("*.md") for path in ENTRY.findall(page.read_text("utf-8"))
    }
    for init in sorted((root / "hf_siamese").rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(root).parts)
        for name in _exports(init):
            if name not in documented:
                log.warning("%s exports %s, which has no entry (::: ...%s) in docs/reference/", package, name, name)
