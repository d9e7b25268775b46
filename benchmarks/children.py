"""Run one benchmark measurement in a fresh child process (its own peak RSS, no warm caches from earlier runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


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
