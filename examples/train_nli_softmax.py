"""The Sentence-BERT NLI recipe: a classifier over (u, v, |u - v|) learns entailment / neutral / contradiction.

BERT with mean pooling, softmax loss, batch 16, learning rate 2e-5, 10% warmup, one epoch (Reimers & Gurevych 2019,
section 3.1). The classifier head is only a training device: the sentence embeddings are what is kept, so the
script reports STS Benchmark dev Spearman (cosine similarity, x100) before and after training.

    python examples/train_nli_softmax.py            # Hub: bert-base-uncased on sentence-transformers/all-nli
    python examples/train_nli_softmax.py --model PATH --train ../shared/data/nli/derived/nli_pairs_labelled.tsv \\
        --sts-dev ../shared/data/stsb/sts-dev.csv --max-train 64
    accelerate launch examples/train_nli_softmax.py ...
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import AutoTokenizer, TrainingArguments

from hf_siamese import SiameseBertModel, SiameseTrainer, distributed, load_pairs
from hf_siamese.losses import SoftmaxLoss

# Class ids of sentence-transformers/all-nli (pair-class); string labels of local files are mapped through it.
LABEL2ID = {"entailment": 0, "neutral": 1, "contradiction": 2}
COLUMNS = {"premise": "premise", "hypothesis": "hypothesis", "label": "label"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="google-bert/bert-base-uncased", help="base encoder: Hub id or folder")
    parser.add_argument("--train", default="sentence-transformers/all-nli", help="Hub dataset id or local file")
    parser.add_argument("--sts-dev", default="sentence-transformers/stsb", help="STSb dev: Hub id or local file")
    parser.add_argument("--max-train", type=int, default=None, help="train on N random pairs only (quick runs)")
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--output-dir", default="runs/nli-softmax")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # On the Hub the labelled pairs are the "pair-class" subset; a local file is read as it is.
    hub_subset = {} if os.path.exists(args.train) else {"name": "pair-class"}
    train = load_pairs(args.train, split="train", columns=COLUMNS, **hub_subset)
    if args.max_train:
        # NLI files are grouped by premise and source; sample so a small run still sees all three labels.
        train = train.shuffle(seed=42).select(range(min(args.max_train, len(train))))
    sts_dev = load_pairs(args.sts_dev, split="validation")

    model = SiameseBertModel.from_encoder(args.model, pooling="mean", label2id=LABEL2ID)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        use_cpu=not torch.cuda.is_available(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=0.1,
        save_strategy="no",
        logging_steps=100,
        report_to="none",
    )
    trainer = SiameseTrainer(
        model=model, args=training_args, train_dataset=train, processing_class=tokenizer, loss=SoftmaxLoss()
    )
    # sts_metrics, not evaluate(): evaluate() would also compute the softmax loss, and STS pairs have no classes.
    before = trainer.sts_metrics(sts_dev)
    trainer.train()
    after = trainer.sts_metrics(sts_dev)
    trainer.save_model(args.output_dir)

    if trainer.is_world_process_zero():
        print(
            f"STSb dev Spearman (cosine) x100: {100 * before['spearman_cosine']:.2f} before, "
            f"{100 * after['spearman_cosine']:.2f} after training on {len(train)} NLI pairs"
        )
        print(f"Saved to {args.output_dir} (with its classifier head; the embeddings ignore it)")
    getattr(distributed, "shutdown_process_group", lambda: None)()  # clean exit under accelerate launch


if __name__ == "__main__":
    main()
