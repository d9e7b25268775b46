"""Checks an installed hf-siamese (run by .ci/installed with the fresh virtual environment's python, outside the source
tree). Prints one line per check and exits 1 on the first failure.

    python .ci/check_installed.py --source CHECKOUT --dist DIST_FOLDER
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

BIN = Path(sys.executable).parent


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        sys.exit(1)


def run(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def package_files(source: Path) -> set[str]:
    return {
        p.relative_to(source).as_posix()
        for p in (source / "hf_siamese").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", type=Path, required=True, help="the source checkout the dist was built from")
    parser.add_argument("--dist", type=Path, required=True, help="the folder with the built sdist and wheel")
    args = parser.parse_args()
    expected = package_files(args.source)

    import hf_siamese

    location = Path(hf_siamese.__file__).resolve()
    check("imported from the installed wheel", args.source.resolve() not in location.parents, str(location))
    version = importlib.metadata.version("hf-siamese")
    check("__version__ matches the metadata", hf_siamese.__version__ == version, version)

    (wheel,) = args.dist.glob("hf_siamese-*.whl")
    (sdist,) = args.dist.glob("hf_siamese-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    missing = sorted(expected - in_wheel)
    check(f"the wheel holds all {len(expected)} package files", not missing, ", ".join(missing[:10]))
    check("LICENSE in the wheel", any(n.endswith(".dist-info/licenses/LICENSE") for n in in_wheel))
    with tarfile.open(sdist) as archive:
        in_sdist = {name.partition("/")[2] for name in archive.getnames()}
    missing = sorted(expected - in_sdist)
    check(f"the sdist holds all {len(expected)} package files", not missing, ", ".join(missing[:10]))
    check("LICENSE in the sdist", "LICENSE" in in_sdist)
    installed = {str(f) for f in importlib.metadata.files("hf-siamese") or ()}
    missing = sorted(expected - installed)
    check("pip installed every package file", not missing, ", ".join(missing[:10]))

    modules = [
        m.name
        for m in pkgutil.walk_packages(hf_siamese.__path__, "hf_siamese.")
        if not m.name.endswith("__main__")  # running it is the command line itself, checked below
    ]
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - report every module that does not import
            failed.append(f"{name}: {type(error).__name__}: {error}")
    check(f"all {len(modules)} modules import", not failed, "; ".join(failed))
    for name in ("CrossEncoder", "CrossEncoderTrainer", "teacher_scores", "augmented_sbert", "adapt", "build_index"):
        check(f"hf_siamese.{name}", callable(getattr(hf_siamese, name)))

    cli = str(BIN / "hf-siamese")
    done = run([cli, "--version"])
    check("hf-siamese --version", done.returncode == 0 and done.stdout.strip() == f"hf-siamese {version}", done.stdout)
    from hf_siamese.cli import build_parser

    (commands,) = (a for a in build_parser()._actions if a.dest == "command")
    for name in ["", *sorted(commands.choices)]:
        done = run([cli, *([name] if name else []), "--help"])
        check(
            f"hf-siamese {name} --help".replace("  ", " "),
            done.returncode == 0 and "usage:" in done.stdout,
            done.stderr[-300:],
        )

    start = time.perf_counter()
    done = run([cli, "train", "--output-dir", "demo-model"])
    seconds = time.perf_counter() - start
    ok = done.returncode == 0 and (Path("demo-model") / "config.json").is_file()
    check(f"hf-siamese train (the demo, {seconds:.0f} s)", ok, "" if ok else (done.stdout + done.stderr)[-800:])
    print("\n".join("     " + line for line in done.stdout.strip().splitlines()[-4:]))
    Path("texts.txt").write_text("A man plays a guitar.\nSomeone plays music.\nThe sky is blue.\n", encoding="utf-8")
    done = run([cli, "encode", "texts.txt", "--model", "demo-model", "-o", "emb.npy"])
    import numpy as np

    ok = done.returncode == 0 and Path("emb.npy").is_file()
    shape = np.load("emb.npy").shape if ok else None
    check("hf-siamese encode with the trained model", ok and shape == (3, 384), f"{shape} {done.stderr[-500:]}")
    done = run([cli, "encode", "missing.txt", "-o", "x.npy"])
    one_line = done.returncode == 1 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    check("a bad input is one line", one_line, done.stderr.strip())


if __name__ == "__main__":
    main()
