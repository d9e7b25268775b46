"""Run one benchmark measurement in a fresh child process (its own peak RSS, no warm caches from earlier runs)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_child_arguments(parser: argparse.ArgumentParser) -> None:
    """The hidden options `run_child` passes to the script it starts."""
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)


def run_if_child(args: argparse.Namespace, child: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """In a child started by `run_child`: run `child(spec)`, write its result, and return True."""
    if not args.child:
        return False
    Path(args.result_file).write_text(json.dumps(child(json.loads(args.child))))
    return True


def run_child(script: str | Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Run `python script --child SPEC_JSON --result-file FILE` and return `{**spec, **result}` (or `{**spec,
    "error": ...}` when the child fails). The script's `--child` mode writes its result as JSON to FILE."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
        result_file = handle.name
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(Path(script).resolve()), "--child", json.dumps(spec), "--result-file", result_file]
    print(f"\n===== {spec}", flush=True)
    completed = subprocess.run(command, env=env)
    try:
        if completed.returncode != 0:
            return {**spec, "error": f"exit {completed.returncode}"}
        with open(result_file, encoding="utf-8") as handle:
            result = {**spec, **json.load(handle)}
    finally:
        os.unlink(result_file)
    print(f"===== done: {json.dumps(result)}", flush=True)
    return result


def exit_if_failed(failed: list[str]) -> None:
    """After a resumable study: list the runs that failed on stderr and exit non-zero, if any did."""
    if failed:
        print(
            "failed runs (their output is above; the lines in --out say 'error'):", *failed, sep="\n  ", file=sys.stderr
        )
        raise SystemExit(1)
