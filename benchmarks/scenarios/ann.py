"""The ANN index (`hf_siamese.retrieval.index.ann`) against exact flat search: build time, size on disk, peak RSS to
build and to open, open time, batched queries/s and recall@10, on synthetic clustered vectors of dim 384 (the size of
all-MiniLM-L6-v2's embeddings), cosine similarity.

    python benchmarks/run.py ann [--sizes 100000,1000000] [--noise 2.2] [--workdir DIR] [--keep]

Data: 1,000 topic centres ~ N(0, I), 10 sub-topics per topic offset by N(0, 0.5^2 I), each vector = centre + offset +
N(0, noise^2 I). With noise 2.2 the nearest neighbours mostly, not always, share a sub-topic: at 100k the measured
recall@10 climbs from 0.70 at nprobe 1 to 0.95 at nprobe 32, a long tail as with real embeddings (well separated
clusters would give 0.99 at nprobe 1 and flatter the index). The vectors are written to .npy chunks of 100k rows first
and the build reads them back one at a time (np.load with mmap_mode="r"), as it would read embedding shards.

Each step runs in its own child process (common.run_child), so VmHWM (peak RSS) is that step's own; RSS is reported
above the child's RSS after its imports (torch etc., through hf_siamese). Queries: 1,000 fresh vectors from the same
distribution, one batch of 1,000, top-10, timed 3 times after one warm-up batch (median); the page cache is warm (the
index was just written). Exact: faiss IndexFlatIP over the same unit vectors, same batch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from common import add_child_arguments, cpu_flags, memory_mb, run_child, run_if_child, timed  # noqa: E402

DIM, TOPICS, SUBTOPICS, SUBTOPIC_SPREAD, CHUNK_ROWS, QUERIES = 384, 1000, 10, 0.5, 100_000, 1000
TARGETS = {"recall": 0.95, "speedup": 10.0, "open_s": 2.0, "at": 1_000_000}


def vectors(n: int, seed: int, noise: float) -> np.ndarray:
    model = np.random.default_rng(12345)  # the same topics for every size and for the queries
    centres = model.standard_normal((TOPICS, DIM), dtype=np.float32)
    offsets = SUBTOPIC_SPREAD * model.standard_normal((TOPICS, SUBTOPICS, DIM), dtype=np.float32)
    rng = np.random.default_rng(seed)
    topic, subtopic = rng.integers(0, TOPICS, n), rng.integers(0, SUBTOPICS, n)
    return centres[topic] + offsets[topic, subtopic] + noise * rng.standard_normal((n, DIM), dtype=np.float32)


def write_data(folder: Path, n: int, noise: float) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for number, start in enumerate(range(0, n, CHUNK_ROWS)):
        file = folder / f"chunk-{number:04d}.npy"
        if not file.exists():  # one chunk in memory at a time; a per-chunk seed keeps sizes' data independent of n
            np.save(file, vectors(min(CHUNK_ROWS, n - start), seed=1000 + number, noise=noise))
        files.append(str(file))
    return files


# ------------------------------------------------------------------------------------------------ children


def timed_batches(search: Any, queries: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(first batch seconds, median of 3 later batches, ids of the last)."""
    ids, first = timed(lambda: search(queries))
    times = []
    for _ in range(3):
        ids, seconds = timed(lambda: search(queries))
        times.append(seconds)
    return first, statistics.median(times), ids


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import faiss

    from hf_siamese.retrieval.index.ann import load_ann_index
    from hf_siamese.retrieval.index.ann_build import build_ann_index

    base_rss = memory_mb("VmRSS")
    files, out, queries = spec["files"], spec["index"], np.load(spec["queries"])
    if spec["step"] == "build":
        start = time.perf_counter()
        index = build_ann_index(lambda: (np.load(f, mmap_mode="r") for f in files), out, overwrite=True)
        seconds = time.perf_counter() - start
        return {"build_s": seconds, "info": index.info, "peak_mb": memory_mb("VmHWM") - base_rss, "base_mb": base_rss}
    if spec["step"] == "open":
        index, open_s = timed(lambda: load_ann_index(out))
        open_rss, open_peak = memory_mb("VmRSS") - base_rss, memory_mb("VmHWM") - base_rss
        first, batch, ids = timed_batches(lambda q: index.search(q, 10)[1], queries)
        np.save(spec["ids_out"], ids)
        return {
            "open_s": open_s,
            "open_rss_mb": open_rss,
            "open_peak_mb": open_peak,
            "io": index.io,
            "first_batch_s": first,
            "batch_s": batch,
            "rss_after_search_mb": memory_mb("VmRSS") - base_rss,
        }
    flat = faiss.IndexFlatIP(DIM)  # exact: every unit vector in RAM
    start = time.perf_counter()
    for file in files:
        chunk = np.load(file)
        flat.add(chunk / np.linalg.norm(chunk, axis=1, keepdims=True))
    load_s = time.perf_counter() - start
    unit = np.ascontiguousarray(queries / np.linalg.norm(queries, axis=1, keepdims=True))
    first, batch, ids = timed_batches(lambda q: flat.search(q, 10)[1], unit)
    np.save(spec["ids_out"], ids)
    return {"load_s": load_s, "batch_s": batch, "peak_mb": memory_mb("VmHWM") - base_rss}


# ------------------------------------------------------------------------------------------------ report


def header() -> str:
    import faiss

    return (
        f"dim {DIM} (like all-MiniLM-L6-v2), cosine; {cpu_flags()}; "
        f"faiss {faiss.__version__} ({faiss.get_compile_options().strip()}), {faiss.omp_get_max_threads()} threads"
    )


def mark(ok: bool, applies: bool) -> str:
    return (" ✓" if ok else " ✗") if applies else ""


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| vectors | factory | nprobe | build s | index MB | build peak RSS MB | open s | open RSS MB | ANN q/s "
        "| exact q/s | speed-up | recall@10 (build's own) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        at, own = r["n"] >= TARGETS["at"], r["build"]["info"]["recall"]["value"]
        ann_qps, exact_qps = QUERIES / r["open"]["batch_s"], QUERIES / r["exact"]["batch_s"]
        lines.append(
            f"| {r['n']:,} | {r['build']['info']['factory']} | {r['build']['info']['nprobe']} "
            f"| {r['build']['build_s']:.0f} | {r['size_mb']:.0f} | {r['build']['peak_mb']:.0f} "
            f"| {r['open']['open_s']:.3f}{mark(r['open']['open_s'] < TARGETS['open_s'], at)} "
            f"| {r['open']['open_rss_mb']:.0f} | {ann_qps:,.0f} | {exact_qps:,.0f} "
            f"| {ann_qps / exact_qps:.1f}x{mark(ann_qps / exact_qps >= TARGETS['speedup'], at)} "
            f"| {r['recall']:.3f}{mark(r['recall'] >= TARGETS['recall'], at)} ({own:.3f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated corpus sizes")
    parser.add_argument("--noise", type=float, default=2.2, help="per-dimension noise around the sub-topic centre")
    parser.add_argument("--workdir", help="where the chunks and indexes go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir")
    add_child_arguments(parser)
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-ann-"))
    work.mkdir(parents=True, exist_ok=True)
    started, rows = time.perf_counter(), []
    try:
        np.save(work / "queries.npy", vectors(QUERIES, seed=999, noise=args.noise))
        for n in (int(s) for s in args.sizes.split(",")):
            start = time.perf_counter()
            files = write_data(work / f"data-{n}", n, args.noise)
            print(f"{n:,} vectors written in {time.perf_counter() - start:.0f} s", flush=True)
            spec = {"files": files, "index": str(work / f"ann-{n}"), "queries": str(work / "queries.npy")}
            build = run_child(__file__, {**spec, "step": "build"})
            opened = run_child(__file__, {**spec, "step": "open", "ids_out": str(work / f"ann-ids-{n}.npy")})
            exact = run_child(__file__, {**spec, "step": "exact", "ids_out": str(work / f"exact-ids-{n}.npy")})
            if any("error" in r for r in (build, opened, exact)):
                raise SystemExit(f"a step failed for {n:,} vectors; its output is above")
            found, truth = np.load(work / f"ann-ids-{n}.npy"), np.load(work / f"exact-ids-{n}.npy")
            recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth, strict=True)]))
            size_mb = sum(f.stat().st_size for f in Path(spec["index"]).iterdir()) / 2**20
            rows.append({"n": n, "build": build, "open": opened, "exact": exact, "recall": recall, "size_mb": size_mb})
            print(f"{n:,} done; {time.perf_counter() - started:.0f} s so far", flush=True)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{header()}; data noise {args.noise}; RSS above each child's {rows[0]['build']['base_mb']:.0f} MB "
        f"after imports; {time.perf_counter() - started:.0f} s in all"
    )
    print(
        f"targets (✓/✗) at {TARGETS['at']:,}: recall@10 >= {TARGETS['recall']}, >= {TARGETS['speedup']:.0f}x the "
        f"exact queries/s, open < {TARGETS['open_s']} s\n"
    )
    print(table(rows))
    for r in rows:
        print(
            f"{r['n']:,}: nprobe -> recall@10 while building: {r['build']['info']['recall']['by_nprobe']}; open: "
            f"io={r['open']['io']}, peak {r['open']['open_peak_mb']:.0f} MB, RSS after the searches "
            f"{r['open']['rss_after_search_mb']:.0f} MB, first batch {r['open']['first_batch_s']:.2f} s; exact: "
            f"{r['exact']['load_s']:.0f} s to load, peak {r['exact']['peak_mb']:.0f} MB"
        )


if __name__ == "__main__":
    main()
