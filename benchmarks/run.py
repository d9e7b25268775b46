"""The benchmark suite: one runner, named scenarios, each a script under `benchmarks/` that prints its table (side by
side with sentence-transformers where the scenario compares libraries) and, unless told `--no-write` (or the like),
rewrites its own section of `benchmarks/RESULTS.md`.

    python benchmarks/run.py --list                      # the scenarios, one line each
    python benchmarks/run.py SCENARIO --help             # that scenario's options
    python benchmarks/run.py train-step --device cpu --runs cpu-minilm-cosine --steps 5 --warmup 2 --orders ours,st
    python benchmarks/run.py training --recipes cosine --max-train 64 --no-write      # a smoke run of minutes

Everything after the scenario's name goes to its script unchanged. The scenarios read the shared data from
../shared/data next to the repository (or HF_SIAMESE_DATA) and stop with a clear message when a file is absent; the
helpers they share (data paths, CPU flags header, peak RSS, interleaved rounds, child processes, tables, RESULTS.md
sections) are in `benchmarks/scenarios/common.py`. The GPU scripts (`bench_train_step.py`, `gpu_routes.py`,
`gpu_check.py`, `gpu_train_step.sh`) and `bench_rerank_hybrid.py` stay at their own paths; the runner calls them.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Scenario:
    """A named benchmark: the script (relative to `benchmarks/`) that runs it and one line on what it measures."""

    script: str
    summary: str


SCENARIOS: dict[str, Scenario] = {
    "train-step": Scenario(
        "bench_train_step.py", "training rows/s, MFU and a step's time by kind, GPU or CPU (--device cpu|cuda), vs ST"
    ),
    "training": Scenario(
        "scenarios/training.py", "recipes (cosine, MNR, softmax) trained by both libraries: quality, speed, RSS"
    ),
    "sts-recipes": Scenario("scenarios/sts_recipes.py", "STSb recipe study (loss, epochs, lr, NLI stage, averaging)"),
    "encode": Scenario("scenarios/encode.py", "inference: encode sentences/s and STSb quality, hf-siamese vs ST"),
    "serving": Scenario(
        "scenarios/serving.py", "serving backends (torch, ONNX, OpenVINO; fp32/bf16/int8), hf-siamese vs ST"
    ),
    "corpus-encode": Scenario(
        "scenarios/corpus_encode.py", "encode_corpus to Parquet shards vs encode(list) and ST: texts/s, peak RSS"
    ),
    "interop": Scenario("scenarios/interop.py", "the same embedding both ways between hf-siamese and ST folders"),
    "index": Scenario("scenarios/index_build.py", "`hf-siamese index`: build memory, time, size; exact-search speed"),
    "ann": Scenario("scenarios/ann.py", "the approximate index against exact search: build, open, queries/s, recall"),
    "similar": Scenario(
        "scenarios/similar.py", "similar pairs and communities vs ST's paraphrase mining / community detection"
    ),
    "milvus": Scenario("scenarios/milvus_store.py", "the index exported to Milvus Lite: quality, latency, scale"),
    "retrieval": Scenario(
        "scenarios/retrieval.py", "SciFact nDCG@10: zero-shot, MNR, cached MNR, mined negatives, hf-siamese vs ST"
    ),
    "index-retrieval": Scenario(
        "scenarios/index_retrieval.py", "SciFact through the index path (exact and a forced IVF index)"
    ),
    "hybrid": Scenario("scenarios/hybrid.py", "SciFact first stages: BM25, dense, their fusions, alone and reranked"),
    "rerank-hybrid": Scenario(
        "bench_rerank_hybrid.py", "a trained reranker over the hybrid first stage, fusion chosen on train claims"
    ),
    "cross-encoder": Scenario(
        "scenarios/cross_encoder.py", "reranking speed: CrossEncoder.predict pairs/s, hf-siamese vs ST"
    ),
    "cross-encoder-sts": Scenario(
        "scenarios/cross_encoder_sts.py", "cross-encoder regression on STSb, both libraries' trainers"
    ),
    "two-stage": Scenario(
        "scenarios/two_stage.py", "SciFact: cross-encoders trained by both libraries reranking a bi-encoder's top 100"
    ),
    "gpu-check": Scenario("gpu_check.py", "checks on an NVIDIA GPU (parity, bf16, a training step): a PASS/FAIL table"),
    "gpu-routes": Scenario("gpu_routes.py", "each packed attention route against padded SDPA on a GPU"),
}


def command(name: str, arguments: list[str]) -> list[str]:
    """The command line that runs scenario `name` with `arguments` (a KeyError names an unknown scenario)."""
    return [sys.executable, str(BENCHMARKS / SCENARIOS[name].script), *arguments]


def listing() -> str:
    """One line per scenario: its name and what it measures."""
    width = max(len(name) for name in SCENARIOS)
    return "\n".join(f"{name:<{width}}  {scenario.summary}" for name, scenario in SCENARIOS.items())


def main(argv: list[str] | None = None) -> int:
    """Run the scenario named by the first argument with the rest; `--list` lists them, `-h` explains the runner."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), "\nScenarios:\n", listing(), sep="\n")
        return 0 if argv else 2
    if argv[0] == "--list":
        print(listing())
        return 0
    if argv[0] not in SCENARIOS:
        print(f"unknown scenario {argv[0]!r}; the scenarios are:\n{listing()}", file=sys.stderr)
        return 2
    return subprocess.call(command(argv[0], argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
