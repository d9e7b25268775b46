"""Multiple-negatives ranking loss with hard negatives on NLI triplets (anchor, entailed, contradicted).

Each anchor must pick its own entailed sentence among every positive and hard negative of the batch, so larger
batches give more negatives (a batch never holds the same text twice: repeats would be false negatives). Under
`accelerate launch`, --gather-across-processes scores against the negatives of all processes.

    python examples/train_nli_mnr.py                 # Hub: bert-base-uncased on sentence-transformers/all-nli
    python examples/train_nli_mnr.py --model PATH --train ../shared/data/nli/derived/nli_triplets.tsv \\
        --sts-dev ../shared/data/stsb/sts-dev.csv --max-train 64
    accelerate launch examples/train_nli_mnr.py --gather-across-processes ...
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import AutoTokenizer, TrainingArguments

from hf_siamese import SiameseBertModel, SiameseTrainer, distributed, load_pairs
from hf_siamese.losses import MultipleNegativesRankingLoss

COLUMNS = {"anchor": "anchor", "positive": "positive", "negative": "negative"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="google-bert/bert-base-uncased", help="base encoder: Hub id or folder")
    parser.add_argument("--train", default="sentence-transformers/all-nli", help="Hub dataset id or local file")
    parser.add_argument("--sts-dev", default="sentence-transformers/stsb", help="STSb dev: Hub id or local file")
    parser.add_argument("--max-train", type=int, default=None, help="train on N random triplets only (quick runs)")
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--batch-size", type=int, default=32, help="per process; more rows = more negatives")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--gather-across-processes", action="store_true")
    parser.add_argument("--output-dir", default="runs/nli-mnr")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    hub_subset = {} if os.path.exists(args.train) else {"name": "triplet"}
    train = load_pairs(args.train, split="train", columns=COLUMNS, **hub_subset)
    if args.max_train:
        train = train.shuffle(seed=42).select(range(min(args.max_train, len(train))))
    sts_dev = load_pairs(args.sts_dev, split="validation")

    model = SiameseBertModel.from_encoder(args.model, pooling="mean")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        use_cpu=not torch.cuda.is_available(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        learning_rate=args.lr,
        warmup_steps=0.1,
        save_strategy="no",
        logging_steps=100,
        report_to="none",
    )
    trainer = SiameseTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=sts_dev,  # STS pairs: the eval loop reports eval_spearman_cosine next to the loss
        processing_class=tokenizer,
        loss=MultipleNegativesRankingLoss(gather_across_processes=args.gather_across_processes),
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    trainer.save_model(args.output_dir)

    if trainer.is_world_process_zero():
        print(
            f"STSb dev Spearman (cosine) x100: {100 * before['eval_spearman_cosine']:.2f} before, "
            f"{100 * after['eval_spearman_cosine']:.2f} after training on {len(train)} triplets"
        )
        print(f"Saved to {args.output_dir}")
    getattr(distributed, "shutdown_process_group", lambda: None)()  # clean exit under accelerate launch


if __name__ == "__main__":
    main()
