"""Where a training step's time goes, by kind: `bench_train_step.py --profile` runs torch.profiler over the measured
steps of each (run, library) process and sorts every operator (CPU) or kernel (GPU) into one kind.

On a GPU the kinds share the device's busy time (self device time of each kernel) and "host gaps" is the wall time the
device sat idle (wall - busy: launches, Python, data). On the CPU the kinds share the operators' self time on the main
thread and "host gaps" is the rest of the wall time (Python, the Trainer's own bookkeeping).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

# kind -> substrings of operator / kernel names (lower case), tried in this order; the first match wins.
KINDS: dict[str, tuple[str, ...]] = {
    "optimizer": ("adam", "multi_tensor", "foreach", "_fused_", "clip_grad"),
    "loss": ("cross_entropy", "log_softmax", "nll_loss", "cosine_similarity", "mse_loss", "logsumexp"),
    "attention": ("scaled_dot_product", "flash", "fmha", "attention", "varlen", "softmax"),
    "matrix products": ("gemm", "aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "cutlass",
                        "xmma", "nvjet", "cublas", "mkldnn_", "onednn"),
    "normalization": ("layer_norm", "layernorm", "batch_norm", "normalize"),
    "dropout": ("bernoulli", "dropout", "fused_dropout"),
    "casts and copies": ("copy_", "_to_copy", "aten::to", "memcpy", "cast"),
    "embedding gradient and zeroing": ("embedding", "index_add", "index_select", "fill_", "zero_", "memset"),
    "other elementwise": ("gelu", "add", "mul", "div", "sub", "tanh", "where", "elementwise", "pow", "sqrt", "sum",
                          "mean", "reduce", "exp", "clamp", "neg", "rsqrt"),
}  # fmt: skip
ORDER = (*KINDS, "other", "host gaps")


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, parts in KINDS.items():
        if any(part in lowered for part in parts):
            return kind
    return "other"


def summarize(profiler: Any, wall_seconds: float, steps: int, cuda: bool) -> dict[str, Any]:
    """ms a step by kind (and "host gaps"), and the top operators / kernels, from a finished `torch.profiler`."""
    kinds: dict[str, float] = defaultdict(float)
    tops: list[tuple[str, float]] = []
    busy = 0.0
    for event in profiler.key_averages():
        if cuda:
            micros = getattr(event, "self_device_time_total", 0.0) or 0.0
        else:
            micros = event.self_cpu_time_total
        if micros <= 0:
            continue
        # On a GPU only kernels carry self device time; CPU-side operators carry none and are skipped.
        kinds[kind_of(event.key)] += micros
        tops.append((event.key, micros))
        busy += micros
    wall = wall_seconds * 1e6
    kinds["host gaps"] = max(wall - busy, 0.0)
    per_step = {kind: kinds.get(kind, 0.0) / 1000 / steps for kind in ORDER}
    top = sorted(tops, key=lambda item: -item[1])[:6]
    return {
        "ms_per_step": per_step,
        "wall_ms_per_step": wall / 1000 / steps,
        "top": [(name[:60], micros / 1000 / steps) for name, micros in top],
    }


def print_profiles(results: list[dict[str, Any]]) -> None:
    """One table per run: ms a step and share of the step by kind, each library a column pair."""
    profiled = [r for r in results if isinstance(r.get("profile"), dict)]
    runs: dict[str, list[dict[str, Any]]] = {}
    for result in profiled:
        runs.setdefault(result["run"], []).append(result)
    for run, rows in runs.items():
        names = [r["library"] for r in rows]
        print(f"\n### Profile: {run} (ms a step, share of the step)\n")
        print("| kind | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for kind in ORDER:
            cells = []
            for r in rows:
                ms, wall = r["profile"]["ms_per_step"][kind], r["profile"]["wall_ms_per_step"]
                cells.append(f"{ms:.1f} ({100 * ms / wall:.0f}%)")
            print(f"| {kind} | " + " | ".join(cells) + " |")
        print("| **step (wall)** | " + " | ".join(f"**{r['profile']['wall_ms_per_step']:.1f}**" for r in rows) + " |")
        tops = [", ".join(f"{name} {ms:.1f}" for name, ms in r["profile"]["top"][:4]) for r in rows]
        print("| top (ms) | " + " | ".join(tops) + " |")
