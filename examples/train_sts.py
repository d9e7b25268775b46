"""Fine-tune a sentence encoder on STS Benchmark with the cosine-similarity loss (Sentence-BERT, section 4.2).

Each pair's cosine similarity is regressed onto its gold score (rescaled to 0..1); the dev split is evaluated after
every epoch. The model ends with whichever scores higher on dev of the best epoch's weights and the mean of the
epoch-end weights (`WeightAveragingCallback`), then moves back toward the weights it started from by the alpha that
scores best on dev (WiSE-FT, `choose_interpolation`; `--interpolate 1` turns it off). The test split is scored once at
the end (Spearman x100 of cosine similarity, the usual STSb number). This is the STSb stage of the best recipe of
benchmarks/bench_sts_recipes.py (README, "Which recipe"): for its first stage, train on NLI triplets with
examples/train_nli_mnr.py and pass that model here with --model runs/nli-mnr: the interpolation then moves back toward
the NLI stage's weights, as the best recipe does (`--interpolate-with <the base model>` moves toward the base instead).

    python examples/train_sts.py                     # Hub: google-bert/bert-base-uncased on sentence-transformers/stsb
    python examples/train_sts.py --model PATH --train ../shared/data/stsb/sts-train.csv \\
        --dev ../shared/data/stsb/sts-dev.csv --test ../shared/data/stsb/sts-test.csv --max-train 64
    accelerate launch examples/train_sts.py ...      # same script on several processes / GPUs
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import AutoTokenizer, TrainingArguments

from hf_siamese import (
    SiameseBertModel,
    SiameseTrainer,
    WeightAveragingCallback,
    choose_interpolation,
    distributed,
    interpolate_toward,
    keep_average_if_better,
    load_pairs,
    parse_interpolation,
)
from hf_siamese.losses import CosineSimilarityLoss


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="google-bert/bert-base-uncased", help="base encoder: Hub id or folder")
    parser.add_argument("--train", default="sentence-transformers/stsb", help="Hub dataset id or local file")
    parser.add_argument("--dev", default=None, help="local dev file (default: the Hub dataset's validation split)")
    parser.add_argument("--test", default=None, help="local test file (default: the Hub dataset's test split)")
    parser.add_argument("--max-train", type=int, default=None, help="train on the first N pairs only (quick runs)")
    parser.add_argument("--epochs", type=float, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--no-average", action="store_true", help="keep the best epoch, never the mean of the epochs")
    parser.add_argument(
        "--interpolate",
        default="auto",
        help="weights (1-ALPHA) * start + ALPHA * fine-tuned: a number in (0, 1] (1: off) or auto (best on dev)",
    )
    parser.add_argument(
        "--interpolate-with", default=None, help="the start weights to interpolate with (default: --model)"
    )
    parser.add_argument("--output-dir", default="runs/sts")
    args = parser.parse_args()
    try:
        args.interpolate = parse_interpolation(args.interpolate)
    except ValueError as error:
        parser.error(f"--interpolate: {error}")
    return args


def dev_spearman(trainer: SiameseTrainer) -> float:
    return trainer.evaluate()["eval_spearman_cosine"]


def main() -> None:
    args = parse_args()
    # A Hub dataset has all three splits; a local --train file needs --dev and --test files next to it.
    if os.path.exists(args.train) and not (args.dev and args.test):
        raise SystemExit("train_sts.py: a local --train file needs --dev and --test files too")
    train = load_pairs(args.train, split="train")
    dev = load_pairs(args.dev or args.train, split="validation")
    test = load_pairs(args.test or args.train, split="test")
    if args.max_train:
        train = train.select(range(min(args.max_train, len(train))))
    # STSb files score 0..5; the Hub copy is already rescaled to 0..1.
    score_range = (0.0, 5.0) if max(train["score"]) > 1 else (0.0, 1.0)

    model = SiameseBertModel.from_encoder(args.model, pooling="mean")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    start_model = model
    if args.interpolate_with:
        start_model = SiameseBertModel.from_encoder(args.interpolate_with, pooling="mean")
    start = {name: value.detach().clone() for name, value in start_model.named_parameters()}
    averaging = None if args.no_average else WeightAveragingCallback(load_at_end=False)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        use_cpu=not torch.cuda.is_available(),  # the same script runs on a laptop, a GPU or under accelerate
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        learning_rate=args.lr,
        warmup_steps=0.1,  # a float below 1 is a fraction of the training steps
        eval_strategy="epoch",
        # Keep the best dev epoch (STSb overfits after 1-3 epochs from a trained encoder): one model-only checkpoint.
        save_strategy="epoch",
        save_only_model=True,
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="spearman_cosine",
        logging_steps=50,
        report_to="none",
    )
    trainer = SiameseTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=dev,
        processing_class=tokenizer,
        loss=CosineSimilarityLoss(score_range=score_range),
        callbacks=[averaging] if averaging else None,
    )
    before = trainer.evaluate(test, metric_key_prefix="test")
    trainer.train()
    # The Trainer has loaded the best epoch; the mean of the epoch-end weights replaces it where it is better on dev.
    kept = "mean of the epoch-end weights" if averaging and keep_average_if_better(trainer, averaging) else "best epoch"
    if args.interpolate == "auto":
        alpha, _ = choose_interpolation(trainer.model, start, lambda: dev_spearman(trainer))
    else:
        alpha = args.interpolate
        interpolate_toward(trainer.model, start, alpha)
    after = trainer.evaluate(test, metric_key_prefix="test")
    trainer.save_model(args.output_dir)

    if trainer.is_world_process_zero():
        print(
            f"STSb test Spearman (cosine) x100: {100 * before['test_spearman_cosine']:.2f} before, "
            f"{100 * after['test_spearman_cosine']:.2f} after training on {len(train)} pairs"
        )
        mix = f"(1 - {alpha:g}) * start + {alpha:g} * fine-tuned"
        print(f"Kept the {kept}; weights {mix} (--interpolate {args.interpolate})")
        print(f"Saved to {args.output_dir}; load with AutoModel.from_pretrained({args.output_dir!r})")
    # Leaves the process group cleanly under accelerate launch; a no-op in a single process.
    getattr(distributed, "shutdown_process_group", lambda: None)()


if __name__ == "__main__":
    main()
