"""Recipe study on STS Benchmark: which loss, epochs, learning rate, schedule, batch size and pooling fine-tune
all-MiniLM-L6-v2 best with hf-siamese (zero-shot: 82.03 STSb test; the 1-epoch cosine recipe of training.py:
85.00).

Protocol. Every (recipe, seed) trains from all-MiniLM-L6-v2 in a fresh child process on the STSb train pairs (all
5,749, shuffled with the seed; `--max-train N` keeps the first N), scores scaled to [0, 1]. After every epoch the
model is evaluated on STSb dev (Spearman of cosine) and the best epoch's weights are kept (transformers'
`load_best_model_at_end`); STSb test is computed once, on that selected model. Model selection never sees test.
A recipe with an NLI stage first trains 1 epoch of MNR on NLI (anchor, entailment, contradiction) triplets, then STSb;
the stage's weights are kept per (stage settings, seed) under `--stage-cache`, so recipes that differ only in their
STSb stage train it once per seed; so is the dev-selected model, so recipes that differ only in `interpolate` (WiSE-FT
weight interpolation with all-MiniLM-L6-v2, alpha chosen on STSb dev) train once per seed.
`--scifact` also saves the selected model (under `--models-dir`) and scores SciFact test nDCG@10 on the saved folder
with bench_scifact's evaluation (zero-shot all-MiniLM-L6-v2: 64.51).

Each finished (recipe, seed) is one JSON line in `--out`; a rerun skips the pairs already there with the same
settings (so an interrupted study resumes), `--force` runs them again (the newest line counts).

    python benchmarks/run.py sts-recipes                                  # every recipe, seeds 42,43,44
    python benchmarks/run.py sts-recipes --recipes cosent-4ep,cosent+angle-4ep --scifact cosent+angle-4ep
    python benchmarks/run.py sts-recipes --recipes cosine-1ep --seeds 42 --max-train 32 --threads 1 \\
        --out /tmp/sts_recipes.jsonl --no-write                             # smoke test
    python benchmarks/run.py sts-recipes --list                           # the recipes and their settings

The table (all rows of `--out` whose recipe settings are still the ones below) is printed and written to
benchmarks/RESULTS.md between `<!-- sts_recipes:start -->` and `<!-- sts_recipes:end -->`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import time
from pathlib import Path
from typing import Any

from common import (
    REPO,
    RESULTS_DIR,
    add_child_arguments,
    append_row,
    exit_if_failed,
    finished,
    fmt,
    load_rows,
    mean_std,
    peak_rss_mib,
    run_child,
    run_if_child,
    versions,
    write_section,
)
from sts_runs import (
    STSB_TRAIN_ROWS,
    pretrained_path,
    recipe_settings,
    stsb_test_x100,
    stsb_train_rows,
    train_siamese,
)

# name -> the settings that differ from DEFAULT_SETTINGS (cosine loss, 1 epoch, lr 2e-5, linear schedule, 10% warmup,
# batch 16, mean pooling, no NLI stage).
RECIPE_CHANGES: dict[str, dict[str, Any]] = {
    "cosine-1ep": {},  # training.py's cosine recipe: 85.00 STSb test at seed 42
    "cosine-4ep": {"epochs": 4},
    "cosent-4ep": {"loss": "cosent", "epochs": 4},
    "angle-4ep": {"loss": "angle", "epochs": 4},
    "cosent+angle-4ep": {"loss": "cosent+angle", "epochs": 4},
    "cosent-4ep-lr5e-5": {"loss": "cosent", "epochs": 4, "learning_rate": 5e-5},
    "cosent+angle-4ep-lr5e-5": {"loss": "cosent+angle", "epochs": 4, "learning_rate": 5e-5},
    "cosent+angle-4ep-bs32": {"loss": "cosent+angle", "epochs": 4, "batch_size": 32},
    "cosent+angle-4ep-cosine-schedule": {"loss": "cosent+angle", "epochs": 4, "scheduler": "cosine"},
    "nli-mnr-then-cosent+angle-4ep": {"loss": "cosent+angle", "epochs": 4, "nli_stage": {"rows": 6400}},
    # One-epoch screens of cosine-based recipes (one epoch of CoSENT alone lowers STSb dev below zero-shot). The
    # ranking terms are weighted ~1/100: Adam makes a loss's own scale irrelevant, but inside a sum the gradient of a
    # scale-20 log-sum-exp term is about 100x that of the cosine MSE.
    "nli-mnr-then-cosine-1ep": {"nli_stage": {"rows": 6400}},
    "nli-mnr-all-then-cosine-1ep": {"nli_stage": {"rows": 13158}},
    "cosine+0.01*cosent-1ep": {"loss": "cosine+0.01*cosent"},
    "cosine+0.01*scored_mnr-1ep": {"loss": "cosine+0.01*scored_mnr", "loss_kwargs": {"threshold": 0.8}},
    "cosine-1ep-lr5e-5": {"learning_rate": 5e-5},
    "cosine-1ep-bs8": {"batch_size": 8},
    # The screens' leader (an MNR stage on all NLI triplets first) with the 4 dev-selected STSb epochs of cosine-4ep.
    "nli-mnr-all-then-cosine-4ep": {"epochs": 4, "nli_stage": {"rows": 13158}},
    # Its STSb stage at the best one-epoch screen's learning rate (cosine-1ep-lr5e-5).
    "nli-mnr-all-then-cosine-4ep-lr5e-5": {"epochs": 4, "learning_rate": 5e-5, "nli_stage": {"rows": 13158}},
    # The same two recipes ending with the mean of their 4 epoch-end weights where that scores higher on STSb dev.
    "nli-mnr-all-then-cosine-4ep-avg": {"epochs": 4, "average": {"start_epoch": 1}, "nli_stage": {"rows": 13158}},
    "nli-mnr-all-then-cosine-4ep-lr5e-5-avg": {
        "epochs": 4,
        "learning_rate": 5e-5,
        "average": {"start_epoch": 1},
        "nli_stage": {"rows": 13158},
    },
    # The leader moved part of the way back to all-MiniLM-L6-v2 (WiSE-FT): the alpha with the best STSb dev is kept.
    "nli-mnr-all-then-cosine-4ep-lr5e-5-avg-wise": {
        "epochs": 4,
        "learning_rate": 5e-5,
        "average": {"start_epoch": 1},
        "interpolate": {"alphas": [0.6, 0.7, 0.8, 0.9]},
        "nli_stage": {"rows": 13158},
    },
    # The same with a finer alpha grid (steps of 0.05), and with the NLI stage's weights as the start instead.
    "nli-mnr-all-then-cosine-4ep-lr5e-5-avg-wise-fine": {
        "epochs": 4,
        "learning_rate": 5e-5,
        "average": {"start_epoch": 1},
        "interpolate": {"alphas": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]},
        "nli_stage": {"rows": 13158},
    },
    "nli-mnr-all-then-cosine-4ep-lr5e-5-avg-wise-nli": {
        "epochs": 4,
        "learning_rate": 5e-5,
        "average": {"start_epoch": 1},
        "interpolate": {"alphas": [0.5, 0.6, 0.7, 0.8, 0.9], "start": "nli_stage"},
        "nli_stage": {"rows": 13158},
    },
    # The leader's STSb stage alone (no NLI data): what the CLI could run on scored pairs with an eval set.
    "cosine-4ep-lr5e-5-avg-wise": {
        "epochs": 4,
        "learning_rate": 5e-5,
        "average": {"start_epoch": 1},
        "interpolate": {"alphas": [0.5, 0.6, 0.7, 0.8, 0.9]},
    },
}
RECIPES: dict[str, dict[str, Any]] = {name: recipe_settings(change) for name, change in RECIPE_CHANGES.items()}
BASELINE = "cosine-1ep"
DEFAULT_OUT = RESULTS_DIR / "sts_recipes.jsonl"
SCRIPT = "python benchmarks/run.py sts-recipes"


def describe(settings: dict[str, Any]) -> str:
    text = (
        f"loss `{settings['loss']}`, {settings['epochs']} epoch(s), lr {settings['learning_rate']:g}, "
        f"{settings['scheduler']} schedule, warmup {settings['warmup_ratio']:g}, batch {settings['batch_size']}, "
        f"{settings['pooling']} pooling"
    )
    if settings.get("average"):
        text += f", weights averaged from epoch {settings['average'].get('start_epoch', 1)} on (if better on dev)"
    if settings.get("interpolate"):
        alphas = "/".join(f"{a:g}" for a in settings["interpolate"]["alphas"])
        start = "the NLI stage's weights" if settings["interpolate"].get("start") == "nli_stage" else "all-MiniLM-L6-v2"
        text += f", then interpolated with {start} (alpha {alphas} or 1, best on dev)"
    if settings.get("loss_kwargs"):
        text += ", loss keywords " + ", ".join(f"{k}={v}" for k, v in settings["loss_kwargs"].items())
    stage = settings.get("nli_stage")
    if stage:
        text = (
            f"first {stage['epochs']} epoch(s) of `{stage['loss']}` on {stage['rows']} NLI triplets (batch "
            f"{stage['batch_size']}, lr {stage['learning_rate']:g}), then " + text
        )
    return text


# ------------------------------------------------------------------------------------------------------ child


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One (recipe, seed): train with dev selection, STSb test once on the selected model, SciFact if asked."""

    import torch
    from transformers import AutoTokenizer, set_seed

    from hf_siamese import SiameseBertModel

    torch.set_num_threads(spec["threads"])
    path, settings, seed = pretrained_path(), spec["settings"], spec["seed"]
    set_seed(seed)
    model = SiameseBertModel.from_encoder(path, pooling=settings["pooling"], normalize=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    train = stsb_train_rows(seed, spec["max_train"])
    cache = Path(spec["stage_cache"]) if spec.get("stage_cache") else None
    result = train_siamese(model, tokenizer, settings, train, seed, select_on_dev=True, stage_cache=cache)

    start = time.perf_counter()
    result["stsb_test"] = stsb_test_x100(
        lambda texts: model.encode(texts, tokenizer=tokenizer, batch_size=32, convert_to_numpy=True)
    )
    result["test_seconds"] = time.perf_counter() - start
    if spec.get("model_dir"):
        from retrieval import evaluate_ours

        model.save_pretrained(spec["model_dir"], tokenizer=tokenizer)
        start = time.perf_counter()
        saved = SiameseBertModel.from_pretrained(spec["model_dir"])  # scored as a model folder, tokenizer included
        result.update({f"scifact_{k}": v for k, v in evaluate_ours(saved).items()})
        result["scifact_seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = peak_rss_mib()
    return result


# ------------------------------------------------------------------------------------------------------ parent


def check_losses(names: list[str]) -> None:
    """Stop before any training if a recipe names a loss this hf-siamese does not know."""
    from hf_siamese.losses import get_loss

    problems = []
    for name in names:
        stage = RECIPES[name].get("nli_stage") or {}
        for loss, kwargs in ((RECIPES[name]["loss"], RECIPES[name].get("loss_kwargs", {})), (stage.get("loss"), {})):
            if not loss:
                continue
            try:
                get_loss(loss, **kwargs)
            except ValueError as err:
                problems.append(f"{name}: {err}")
    if problems:
        raise SystemExit("recipes with a loss this hf-siamese cannot build:\n  " + "\n  ".join(problems))


def current_rows(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
    """(recipe, train rows) -> seed -> the newest successful row whose settings are still the recipe's."""
    groups: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for row in rows:
        config = row.get("config", {})
        name = config.get("recipe")
        if "error" in row or name not in RECIPES or config.get("settings") != RECIPES[name]:
            continue
        groups.setdefault((name, config["max_train"]), {})[config["seed"]] = row
    order = list(RECIPES)
    return dict(sorted(groups.items(), key=lambda item: (order.index(item[0][0]), -item[0][1])))


def rerun_command(name: str, max_train: int, seeds: list[int], scifact: bool, out: Path) -> str:
    parts = ["--recipes", name, "--seeds", ",".join(map(str, seeds))]
    if max_train != STSB_TRAIN_ROWS:
        parts += ["--max-train", str(max_train)]
    if scifact:
        parts += ["--scifact", name]
    if out.resolve() != DEFAULT_OUT.resolve():
        parts += ["--out", str(out)]
    return f"{SCRIPT} {shlex.join(parts)} --force"


def averaged(row: dict[str, Any]) -> str:
    """The STSb dev score of the averaged weights, for recipes that compare them with the best epoch, and the
    interpolation chosen on dev, for recipes that try one."""
    dev = row.get("stsb_dev_average")
    text = "" if dev is None else f"; mean of epoch weights: dev {dev:.2f}"
    if row.get("alpha") is not None:
        text += f"; alpha {row['alpha']:g}, dev {row['stsb_dev']:.2f}"
    return text


def table(rows: list[dict[str, Any]], out: Path) -> tuple[str, list[str]]:
    header = (
        "| recipe | command (reruns the row) | seeds | STSb dev | STSb test | test per seed (best epoch) "
        "| SciFact nDCG@10 | train min/seed | load avg |"
    )
    lines = [header, "|" + "---|" * 9]
    shown = []
    for (name, max_train), by_seed in current_rows(rows).items():
        seeds = sorted(by_seed)
        runs = [by_seed[s] for s in seeds]
        tests = [r["stsb_test"] for r in runs]
        scifact = [r["scifact_ndcg@10"] for r in runs if r.get("scifact_ndcg@10") is not None]
        per_seed = ", ".join(f"{r['stsb_test']:.2f} ({fmt(r.get('best_epoch'), 0)}{averaged(r)})" for r in runs)
        loads = [r["load_average"] for r in runs if r.get("load_average") is not None]
        label = name if max_train == STSB_TRAIN_ROWS else f"{name} ({max_train} rows)"
        command = rerun_command(name, max_train, seeds, bool(scifact), out)
        lines.append(
            f"| {label} | `{command}` | {','.join(map(str, seeds))} "
            f"| {mean_std([r['stsb_dev'] for r in runs if 'stsb_dev' in r])} | {mean_std(tests)} | {per_seed} "
            f"| {mean_std(scifact)}{f' ({len(scifact)})' if len(scifact) > 1 else ''} "
            f"| {statistics.mean(r['train_seconds'] for r in runs) / 60:.1f} "
            f"| {fmt(statistics.mean(loads) if loads else None, 1)} |"
        )
        shown.append(name)
    return "\n".join(lines), list(dict.fromkeys(shown))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated recipe names (see --list)")
    parser.add_argument("--seeds", default="42,43,44", help="comma-separated seeds")
    parser.add_argument("--max-train", type=int, default=STSB_TRAIN_ROWS, help="STSb train pairs (first N)")
    parser.add_argument(
        "--scifact", default="", help="recipes (comma-separated, or 'all') whose selected models are saved and scored"
    )
    parser.add_argument("--models-dir", type=Path, default=RESULTS_DIR / "models", help="where --scifact saves")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSONL results file (resumable)")
    parser.add_argument(
        "--stage-cache",
        type=Path,
        default=RESULTS_DIR / "models" / "nli-stages",
        help="where NLI stages are kept per (stage settings, seed) and reused by recipes that share them",
    )
    parser.add_argument("--no-stage-cache", action="store_true", help="train every NLI stage afresh")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every run")
    parser.add_argument("--force", action="store_true", help="rerun (recipe, seed) pairs already in --out")
    parser.add_argument("--no-write", action="store_true", help="do not update benchmarks/RESULTS.md")
    parser.add_argument("--list", action="store_true", help="print the recipes and exit")
    add_child_arguments(parser)
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    if args.list:
        for name, settings in RECIPES.items():
            print(f"{name}: {describe(settings)}")
        return

    names = [r for r in args.recipes.split(",") if r]
    unknown = [r for r in names if r not in RECIPES]
    scifact = set(names if args.scifact == "all" else [r for r in args.scifact.split(",") if r])
    if unknown or scifact - set(names):
        bad = unknown or sorted(scifact - set(names))
        raise SystemExit(f"unknown or unselected recipe(s) {bad}; --recipes choose from {list(RECIPES)}")
    if not 1 <= args.max_train <= STSB_TRAIN_ROWS:
        raise SystemExit(f"--max-train must be between 1 and {STSB_TRAIN_ROWS}, got {args.max_train}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    check_losses(names)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    started = time.time()
    failed = []
    todo = [(seed, name) for seed in seeds for name in names]  # seed outermost: one seed of every recipe first
    for index, (seed, name) in enumerate(todo, start=1):
        config = {"recipe": name, "settings": RECIPES[name], "seed": seed, "max_train": args.max_train}
        done = None if args.force else finished(load_rows(args.out), config)
        if done is not None and (name not in scifact or done.get("scifact_ndcg@10") is not None):
            print(f"[{index}/{len(todo)}] {name} seed {seed}: already in {args.out} (test {done['stsb_test']:.2f})")
            continue
        print(f"[{index}/{len(todo)}] {name} seed {seed}: {describe(RECIPES[name])}", flush=True)
        spec = {**config, "threads": args.threads}
        if not args.no_stage_cache:
            spec["stage_cache"] = str(args.stage_cache)
        if name in scifact:
            spec["model_dir"] = str(args.models_dir / f"{name}-seed{seed}")
        result = run_child(__file__, spec)
        row = {k: v for k, v in result.items() if k not in config and k != "settings"}
        row.update(config=config, finished_at=datetime.datetime.now().isoformat(timespec="seconds"))
        row["versions"] = versions()
        append_row(args.out, row)
        if "error" in row:
            failed.append(f"{name} seed {seed}: {row['error']}")

    rendered, shown = table(load_rows(args.out), args.out)
    elapsed = (time.time() - started) / 60
    legend = [f"- `{name}`: {describe(RECIPES[name])}" for name in shown]
    print("\n" + rendered + "\n\n" + "\n".join(legend))
    print(f"\n{elapsed:.0f} min; results in {args.out}")
    if not args.no_write:
        body = [
            "## STSb recipe study (`benchmarks/run.py sts-recipes`)",
            "",
            f"Updated {datetime.datetime.now():%Y-%m-%d %H:%M}: {os.cpu_count()} CPU cores "
            f"({platform.processor() or platform.machine()}), torch threads {args.threads}; {versions()}. "
            f"Rows from `{os.path.relpath(args.out, REPO)}`.",
            "",
            "hf-siamese fine-tunes all-MiniLM-L6-v2 (zero-shot STSb test 82.03, SciFact nDCG@10 64.51) on the STSb "
            "train pairs shuffled with each seed. After every epoch the model is scored on STSb dev and the best "
            "epoch's weights are kept; STSb test (Spearman of cosine x100) is computed once, on that model. "
            "STSb dev/test: mean ± standard deviation over the seeds; per seed: test (best epoch; for -avg recipes "
            "also the STSb dev of the mean of the epoch-end weights, kept instead of the best epoch only where it "
            "is higher). SciFact: test "
            "nDCG@10 x100 of the saved selected model (mean over the seeds that ran it, count in parentheses). "
            "Train time includes the dev evaluations; load avg is the machine's mean 1-minute load during training "
            "(above the thread count means other work shared the cores).",
            "",
            rendered,
            "",
            "Recipes:",
            "",
            *legend,
        ]
        write_section("sts_recipes", "\n".join(body))
        print("updated benchmarks/RESULTS.md")
    exit_if_failed(failed)


if __name__ == "__main__":
    main()
