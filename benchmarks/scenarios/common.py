"""What the benchmark scenarios share, once: the data paths (../shared/data, with a clear error when a file is
absent), the seeded training rows of the recipes, STSb Spearman of embeddings, the machine's load during a run, the
CPU and library versions for a results header, peak memory, timing of interleaved rounds, markdown tables, a fresh
child process per measurement, and the sections of `benchmarks/RESULTS.md` each scenario owns.

Imports only the standard library at module level: `st_serving_row.py` reads it from the sentence-transformers venv.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

SCENARIOS = Path(__file__).resolve().parent
BENCHMARKS = SCENARIOS.parent
REPO = BENCHMARKS.parent
RESULTS_MD = BENCHMARKS / "RESULTS.md"
RESULTS_DIR = BENCHMARKS / "results"
DATA = Path(os.environ.get("HF_SIAMESE_DATA", REPO.parent / "shared" / "data"))
STSB = DATA / "stsb"
SCIFACT = DATA / "retrieval" / "scifact"
NLI_PAIRS = DATA / "nli" / "derived" / "nli_pairs_labelled.tsv"
NLI_TRIPLETS = DATA / "nli" / "derived" / "nli_triplets.tsv"
T = TypeVar("T")

SEED = 42
LABEL2ID = {"entailment": 0, "neutral": 1, "contradiction": 2}
ZERO_SHOT_PUBLISHED = 82.03  # all-MiniLM-L6-v2's published STSb test Spearman x100


# ------------------------------------------------------------------------------------------------------ rows


def require(path: Path | str, what: str = "benchmark data") -> Path:
    """`path` if it exists; otherwise exit with a message naming it and how to point the benchmarks elsewhere."""
    path = Path(path)
    if not path.exists():
        raise SystemExit(
            f"{what} not found at {path}: the benchmarks read ../shared/data next to the repository "
            f"(set HF_SIAMESE_DATA to another copy of the shared data folder)"
        )
    return path


def seeded_order(n: int, seed: int = SEED) -> list[int]:
    """0..n-1 shuffled with `seed` (the same order for both libraries)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


def read_tsv(path: Path) -> list[dict[str, str]]:
    """The rows of a tab-separated file with a header line (a clear error when the file is absent)."""
    # The derived NLI files are written with csv.QUOTE_MINIMAL: default quoting reads them back exactly.
    with open(require(path), encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def stsb_split(split: str) -> dict[str, list]:
    from hf_siamese.data import read_sts_benchmark

    dataset = read_sts_benchmark(require(STSB / f"sts-{split}.csv", "STS Benchmark"))
    return {name: list(dataset[name]) for name in ("sentence1", "sentence2", "score")}


def read_scifact(split: str) -> Any:
    """BEIR SciFact's corpus, queries and qrels of `split` (a clear error when the folder is absent)."""
    from hf_siamese.data import read_beir

    return read_beir(require(SCIFACT, "BEIR SciFact"), split=split)


def stsb_rows(split: str, size: int, seed: int = SEED) -> dict[str, list]:
    """The first `size` pairs of an STSb split after a shuffle with `seed` (scores 0-5; one seed's sizes are nested)."""
    table = stsb_split(split)
    order = seeded_order(len(table["score"]), seed)[:size]
    return {name: [values[i] for i in order] for name, values in table.items()}


def train_rows(recipe: str, max_train: int, nli_heldout: int) -> tuple[dict[str, list], dict[str, list] | None]:
    """Columns of the training rows of a recipe (identical for both libraries) and, for `softmax`, the held-out
    NLI pairs used for the classifier's accuracy."""
    if recipe == "cosine":
        return stsb_rows("train", max_train), None
    if recipe == "mnr":
        rows = read_tsv(NLI_TRIPLETS)
        order = seeded_order(len(rows))[:max_train]
        return {k: [rows[i][k] for i in order] for k in ("anchor", "positive", "negative")}, None
    if recipe == "softmax":
        rows = read_tsv(NLI_PAIRS)
        order = seeded_order(len(rows))
        heldout, pool = order[len(order) - nli_heldout :], order[: len(order) - nli_heldout]
        if max_train > len(pool):
            raise SystemExit(f"softmax: --max-train {max_train} > {len(pool)} pairs left after {nli_heldout} held out")

        def columns(indices: list[int]) -> dict[str, list]:
            return {
                # sentence1/sentence2: both libraries read these as a pair (ST warns on premise/hypothesis).
                "sentence1": [rows[i]["premise"] for i in indices],
                "sentence2": [rows[i]["hypothesis"] for i in indices],
                "label": [LABEL2ID[rows[i]["label"]] for i in indices],
            }

        return columns(pool[:max_train]), columns(heldout)
    raise ValueError(recipe)


# ------------------------------------------------------------------------------------------------------ measuring


def spearman_x100(a: Any, b: Any, gold: Any) -> float:
    """Spearman x100 of the cosine similarities of row pairs (a[i], b[i]) against the gold scores."""
    import numpy as np
    from scipy.stats import spearmanr

    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(spearmanr((a * b).sum(axis=1), gold).statistic * 100)


def encode_unique(encode: Any, texts: list[str]) -> Any:
    """Embed each distinct text once (NLI premises and STSb sentences repeat), in the order of `texts`."""
    unique = list(dict.fromkeys(texts))
    position = {text: i for i, text in enumerate(unique)}
    return encode(unique)[[position[t] for t in texts]]


class LoadSampler:
    """Mean 1-minute load average of the machine while the block runs (sampled every 2 s): 2 means the run had the
    2 cores to itself; more means other work shared them, which slows this run's rows/s."""

    def __init__(self, interval: float = 2.0) -> None:
        import threading

        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def versions() -> str:
    """The versions of torch, transformers, sentence-transformers and hf-siamese, for a results header."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package in ("torch", "transformers", "sentence-transformers", "hf-siamese"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)


def cpu_flags() -> str:
    """The CPU model, core count and the vector flags that decide matmul speed (avx2 ... amx), from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if f in flags]
    return f"CPU {model}, {os.cpu_count()} cores, flags {' '.join(wanted) or 'none of avx2/avx512/amx'}"


def header(*parts: str) -> str:
    """A results header line: today, the CPU flags, the library versions and any `parts` of the scenario."""
    return "; ".join([datetime.date.today().isoformat(), cpu_flags(), versions(), *parts])


# ------------------------------------------------------------------------------------------------------ memory, time


def memory_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process, in MiB, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def round_order(rows: Sequence[T], round_: int) -> list[T]:
    """The rows in the order of round `round_` of interleaved rounds: as given on even rounds, reversed on odd ones,
    so that no row always runs first or last (machine warm-up and drift fall on every row alike)."""
    return list(rows) if round_ % 2 == 0 else list(rows)[::-1]


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """`call()`'s result and its wall time in seconds."""
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A markdown table: a header of `columns`, then one line per row (cells written with str()). `align` has one
    letter per column, `l` or `r` (numbers read best right-aligned); columns it does not cover are left-aligned."""
    if set(align) - {"l", "r"} or len(align) > len(columns):
        raise ValueError(f"align {align!r}: one letter l or r per column, at most {len(columns)}")
    rule = ["---:" if side == "r" else "---" for side in align.ljust(len(columns), "l")]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- results files and table cells


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The results so far, one dict per line; a line cut short by an interrupted write is skipped."""
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"{path}:{number}: skipping a line that is not JSON (an interrupted write?)")
    return rows


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Add one row to a resumable JSONL results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")


def finished(rows: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any] | None:
    """The latest successful row run with exactly this `config` (run settings included), or None."""
    matches = [r for r in rows if r.get("config") == config and "error" not in r]
    return matches[-1] if matches else None


def mean_std(values: list[float], digits: int = 2) -> str:
    """`mean ± std` of the values (the value alone for one, `-` for none)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: `-` for None, a float with `digits` decimals, anything else as str()."""
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


# ------------------------------------------------------------------------------------------------------ children


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


def run_child(
    script: str | Path,
    spec: dict[str, Any],
    *,
    timeout: float | None = None,
    quiet: bool = False,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `python script --child SPEC_JSON --result-file FILE` in a fresh process (its own peak RSS, no warm caches)
    and return `{**spec, **result}` (or `{**spec, "error": ...}` when the child fails or runs past `timeout`
    seconds). The script's `--child` mode writes its result as JSON to FILE. `quiet`: the child's output is kept, not
    shown, and the end of it goes into the error; `env`: variables set for the child besides HF_HUB_OFFLINE."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
        result_file = handle.name
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    command = [sys.executable, str(Path(script).resolve()), "--child", json.dumps(spec), "--result-file", result_file]
    if not quiet:
        print(f"\n===== {spec}", flush=True)
    try:
        completed = subprocess.run(command, env=environment, timeout=timeout, capture_output=quiet, text=True)
        if completed.returncode != 0:
            said = (completed.stderr or completed.stdout or "")[-1500:] if quiet else ""
            return {**spec, "error": f"exit {completed.returncode}" + (f": {said}" if said else "")}
        with open(result_file, encoding="utf-8") as handle:
            result = {**spec, **json.load(handle)}
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timeout {timeout:.0f} s"}
    finally:
        os.unlink(result_file)
    if not quiet:
        print(f"===== done: {json.dumps(result)}", flush=True)
    return result


def exit_if_failed(failed: list[str]) -> None:
    """After a resumable study: list the runs that failed on stderr and exit non-zero, if any did."""
    if failed:
        print(
            "failed runs (their output is above; the lines in --out say 'error'):", *failed, sep="\n  ", file=sys.stderr
        )
        raise SystemExit(1)


# ------------------------------------------------------------------------------------------------------ RESULTS.md


def suite_command(scenario: str, arguments: Sequence[str] | None = None) -> str:
    """The command that reproduces a run: `python benchmarks/run.py SCENARIO` and the run's arguments (by default
    this process's own)."""
    return shlex.join(["python", "benchmarks/run.py", scenario, *(sys.argv[1:] if arguments is None else arguments)])


def publish(section: str, title: str, scenario: str, body: str, write: bool = True, command: str = "") -> None:
    """Print a scenario's `body`; when `write`, also make it the RESULTS.md section `section`, its heading `title`
    and the scenario's name, with `command` (by default `suite_command(scenario)`) above the body."""
    print("\n" + body)
    if write:
        update_results(section, f"{title} (`benchmarks/run.py {scenario}`)", command or suite_command(scenario), body)


def update_results(name: str, title: str, command: str, body: str) -> None:
    """Write a section with a title, the command that made it and its body (see `write_section`)."""
    stamp = datetime.date.today().isoformat()
    write_section(name, f"## {title}\n\nCommand ({stamp}):\n\n```bash\n{command}\n```\n\n{body}")


def write_section(name: str, section: str) -> None:
    """Replace (or append) the section `<!-- {name}:start -->` ... `<!-- {name}:end -->` of RESULTS.md, atomically
    (other benchmarks update their own sections of the same file)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{section.strip()}\n{end}"
    text = RESULTS_MD.read_text(encoding="utf-8") if RESULTS_MD.exists() else "# Benchmark results\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    temporary = RESULTS_MD.with_suffix(f".md.{name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, RESULTS_MD)
