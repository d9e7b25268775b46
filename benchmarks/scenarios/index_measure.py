"""The measurements of the `index` scenario (index_build.py) that run in processes of their own: one new build
traced phase by phase (peak and resident memory at each phase's start and end), and the exact-search servers that
answer interleaved timed rounds, with the driver side of each."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO, SCENARIOS, LoadSampler, memory_mb, round_order
from index_build import BUILDS, QUERIES, SEARCHES, SEED, TOP_K, code_env, load_now, run_measured, text_lines, wait_quiet

DRIVER = SCENARIOS / "index_build.py"  # its --trace-child and --search-child options run the children below


def trace_child(spec: dict[str, Any]) -> None:
    """Build an index in this process with its phases wrapped. At each event (a phase starting or ending) one JSON
    line: the peak resident set since the previous event (VmHWM, then reset to the current RSS through
    /proc/self/clear_refs, so every interval has its own peak; this also resets the process' ru_maxrss) and the
    resident set now, split into anonymous memory and mapped file pages (e.g. the memory-mapped index files)."""
    import torch
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel, build_index
    from hf_siamese.retrieval.index import ann_build
    from hf_siamese.retrieval.index import build as index_build

    last = {"event": "start", "time": time.perf_counter()}

    def event(name: str) -> None:
        now = time.perf_counter()
        line = {"interval": f"{last['event']} -> {name}", "peak": memory_mb("VmHWM"), "rss": memory_mb("VmRSS")}
        line.update(anon=memory_mb("RssAnon"), file=memory_mb("RssFile"), seconds=now - last["time"])
        print("TRACE " + json.dumps(line), flush=True)
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        last.update(event=name, time=now)

    def wrap(module: Any, name: str) -> None:
        inner = getattr(module, name)

        def traced(*a: Any, **k: Any) -> Any:
            event(f"{name} starts")
            try:
                return inner(*a, **k)
            finally:
                event(f"{name} ends")

        setattr(module, name, traced)

    torch.set_num_threads(spec["threads"])
    model = SiameseBertModel.from_pretrained(spec["model"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    event("model loaded")
    for name in ("encode_corpus", "corpus_matrix", "neighbour_search"):
        wrap(index_build, name)
    for name in ("_reservoir_sample", "_add_pass", "_measure_recall"):
        wrap(ann_build, name)
    build_index(model, spec["texts"], spec["out"], tokenizer=tokenizer, show_progress_bar=False, overwrite=True)
    event("build_index returned")


def trace_row(n: int, texts: Path, model: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    out = work / f"index-trace-{n}"
    spec = {"model": str(model), "texts": str(texts), "out": str(out), "threads": os.cpu_count()}
    command = [sys.executable, str(DRIVER), "--trace-child", json.dumps(spec)]
    rc, seconds, peak = run_measured(command, code_env("new", args.old_tree), work / f"log-trace-{n}.txt")
    lines = (work / f"log-trace-{n}.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    phases = [json.loads(line[6:]) for line in lines if line.startswith("TRACE ")]
    peak = max((p["peak"] for p in phases), default=peak)  # clear_refs resets ru_maxrss too: the intervals' highest
    shutil.rmtree(out, ignore_errors=True)
    return {"key": "trace", "n": n, "rc": rc, "seconds": seconds, "peak_mib": peak, "phases": phases}


def search_child(spec: dict[str, Any]) -> None:
    """Load an index once, search once (warm-up; its hits saved), then one timed round per 'round' line on stdin,
    each answered with a JSON line on stdout."""
    import numpy as np
    import torch

    torch.set_num_threads(spec["threads"])
    from hf_siamese import load_index

    index = load_index(spec["index"])
    queries = np.load(spec["queries"])
    hits = index.search_embeddings(queries, top_k=TOP_K)
    ids = np.array([[h["id"] for h in row] for row in hits])
    scores = np.array([[h["score"] for h in row] for row in hits], dtype=np.float64)
    np.savez(spec["hits"], ids=ids, scores=scores)
    import hf_siamese

    print(json.dumps({"ready": True, "backend": index.backend, "file": hf_siamese.__file__}), flush=True)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        calls, start = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - start < spec["round_seconds"]:
            index.search_embeddings(queries, top_k=TOP_K)
            calls += 1
        seconds = time.perf_counter() - start
        print(json.dumps({"qps": calls * len(queries) / seconds, "calls": calls, "seconds": seconds}), flush=True)


def make_queries(model: Path, words: list[str], path: Path) -> None:
    """QUERIES query vectors: other random texts (another seed) embedded by the model, saved once."""
    if path.exists():
        return
    import numpy as np
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel

    encoder = SiameseBertModel.from_pretrained(model).eval()
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = list(text_lines(words, QUERIES, SEED + 1))
    np.save(path, encoder.encode(texts, tokenizer=tokenizer, convert_to_numpy=True).astype(np.float32))


def search_rows(work: Path, args: argparse.Namespace, n: int) -> dict[str, Any]:
    import numpy as np

    quiet, load_before = wait_quiet(args.wait_quiet, "search") if args.wait_quiet else (None, load_now())
    workers: dict[str, subprocess.Popen] = {}
    info: dict[str, Any] = {}
    try:
        for key, (build, _) in SEARCHES.items():
            spec = {
                "index": str(work / f"index-{build}-{n}"),
                "queries": str(work / "queries.npy"),
                "hits": str(work / f"hits-{key}.npz"),
                "threads": os.cpu_count(),
                "round_seconds": args.round_seconds,
            }
            code = BUILDS[build][0]
            command = [sys.executable, str(DRIVER), "--search-child", json.dumps(spec)]
            workers[key] = subprocess.Popen(
                command,
                env=code_env(code, args.old_tree),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=work,
            )
            info[key] = json.loads(workers[key].stdout.readline())
            root = (args.old_tree if code == "old" else REPO).resolve()
            if not Path(info[key]["file"]).resolve().is_relative_to(root):
                raise SystemExit(f"search {key}: its hf_siamese is {info[key]['file']}, not from {root}")
            print(f"search {key}: {info[key]}", flush=True)
        rates: dict[str, list[float]] = {key: [] for key in workers}
        order = list(workers)
        with LoadSampler() as sampler:
            for round_ in range(args.rounds):
                turn = order[round_ % len(order) :] + order[: round_ % len(order)]
                for key in round_order(turn, round_):
                    workers[key].stdin.write("round\n")
                    workers[key].stdin.flush()
                    rates[key].append(json.loads(workers[key].stdout.readline())["qps"])
                print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()), flush=True)
    finally:
        for process in workers.values():
            if process.stdin and not process.stdin.closed:
                process.stdin.close()
            process.wait()
    hits = {key: np.load(work / f"hits-{key}.npz") for key in SEARCHES}

    def agreement(a: str, b: str) -> dict[str, Any]:
        """Same ids and scores (rank by rank)? Where the ids differ, the largest gap between the scores of two
        documents that swapped places (b's scores; a's where the document left b's top k): a near-tie if tiny."""
        ids_a, ids_b, scores_a, scores_b = hits[a]["ids"], hits[b]["ids"], hits[a]["scores"], hits[b]["scores"]
        gap = 0.0
        for q, p in zip(*np.nonzero(ids_a != ids_b), strict=True):
            where = np.flatnonzero(ids_b[q] == ids_a[q, p])
            other = scores_b[q, where[0]] if len(where) else scores_a[q, p]
            gap = max(gap, float(abs(other - scores_b[q, p])))
        return {
            "same_ids": bool((ids_a == ids_b).all()),
            "max_score_diff": float(np.abs(scores_a - scores_b).max()),
            "rows_differing": int((ids_a != ids_b).any(1).sum()),
            "swap_gap": gap,
            "median_step": float(np.median(-np.diff(scores_a, axis=1))),
        }

    return {
        "key": "search",
        "n": n,
        "rates": rates,
        "backends": {key: value["backend"] for key, value in info.items()},
        "vs_old_exact": agreement("new", "old-exact"),
        "vs_old_faiss": agreement("new", "old-faiss"),
        "load_before": load_before,
        "load": sampler.mean if sampler.mean is not None else load_now(),
        "quiet": quiet,
        "when": datetime.datetime.now().isoformat(timespec="minutes"),
    }
