"""Learning curve on STS Benchmark: STSb test Spearman after fine-tuning on the first N train pairs, for

* `best`: hf-siamese from all-MiniLM-L6-v2 with a dev-selected recipe of bench_sts_recipes.py (`--best-recipe`,
  default cosine-4ep-lr5e-5-avg-wise: the CLI's `--recipe best`), choosing on the first min(N, `--dev-pairs`) STSb dev
  pairs (shuffled per seed): a user with N labelled pairs labels as many again to choose with (STSb dev's 1,500 at
  most; the whole dev split, as in the recipe study, from 1,500 pairs on);
* `ours`: hf-siamese from all-MiniLM-L6-v2 with a recipe of bench_sts_recipes.py (`--recipe`, default cosine-1ep);
* `st`: sentence-transformers from all-MiniLM-L6-v2 with CosineSimilarityLoss (its public API: SentenceTransformer +
  SentenceTransformerTrainer) and the batch size, learning rate, schedule and warmup of `--st-recipe` (a cosine
  recipe, default cosine-1ep);
* `random`: hf-siamese with `--recipe`, but from a randomly initialised small BERT (hidden 256, 4 layers, 4 heads,
  intermediate 1024) with MiniLM's tokenizer, at learning rate `--random-lr` (what the pretrained start is worth).

Rows: STSb train shuffled once per seed, first N pairs (so one seed's sizes are nested); every arm gets the same rows.
Steps: a size trains `max(--min-steps, epochs x ceil(N / batch size))` optimizer steps (the rows are passed over again,
reshuffled, until then), so the smallest sizes still get enough updates to mean something; warmup and schedule follow
that step count. `best` evaluates on its selection pairs at the end of each of the recipe's epochs (or, when the step
floor stretches the run, of each of that many equal stretches of it) and ends as the recipe does; the other arms take
their final weights (no dev selection) and are scored once on STSb test. With `--stage-cache` (the recipe study's), a
`best` run on the whole dev split reuses the study's selected model of the same rows and seed. Each (arm, size, seed) is
a fresh child process and one JSON line in `--out`: a rerun skips what is there with the same settings, so an
interrupted curve resumes.

    python benchmarks/bench_learning_curve.py                                # 7 sizes x 3 seeds x 4 arms
    python benchmarks/bench_learning_curve.py --recipe cosent+angle-4ep      # ours with another recipe of the study
    python benchmarks/bench_learning_curve.py --report-only                  # the table of the points run so far
    python benchmarks/bench_learning_curve.py --sizes 16,32 --seeds 42 --min-steps 2 --threads 1 \\
        --out /tmp/curve.jsonl --png /tmp/curve.png --no-write                # smoke test

Prints the table (size x arm, mean ± std over seeds), draws `--png` with `hf_siamese.plots.plot_learning_curve`, and
writes both into benchmarks/RESULTS.md between `<!-- learning_curve:start -->` and `<!-- learning_curve:end -->`.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import ZERO_SHOT_PUBLISHED, versions
from bench_sts_recipes import BASELINE, RECIPES
from children import add_child_arguments, exit_if_failed, run_child, run_if_child
from results_file import write_section
from sts_runs import (
    RESULTS_DIR,
    STSB_DEV_ROWS,
    STSB_TRAIN_ROWS,
    append_row,
    finished,
    load_rows,
    mean_std,
    pretrained_path,
    stsb_dev_rows,
    stsb_test_x100,
    stsb_train_rows,
    train_sentence_transformers,
    train_siamese,
)

SIZES = (50, 100, 350, 700, 1400, 2800, STSB_TRAIN_ROWS)
ARMS = ("best", "ours", "st", "random")
BEST_RECIPE = "cosine-4ep-lr5e-5-avg-wise"
RANDOM_ENCODER = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}
REPOSITORY = Path(__file__).resolve().parent.parent


def natural_steps(size: int, settings: dict[str, Any]) -> int:
    """Optimizer steps of the recipe's epochs over `size` rows."""
    return settings["epochs"] * math.ceil(size / settings["batch_size"])


def steps_for(size: int, settings: dict[str, Any], min_steps: int) -> int:
    """Optimizer steps of a training size: at least `min_steps`, else the recipe's epochs over the rows."""
    return max(min_steps, natural_steps(size, settings))


def random_model(tokenizer: Any, pooling: str) -> Any:
    """A SiameseBertModel around a freshly initialised BERT of RANDOM_ENCODER's shape, sized to `tokenizer`."""
    from transformers import BertConfig

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    encoder = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=512, **RANDOM_ENCODER)
    config = SiameseBertConfig(encoder_config=encoder, pooling=pooling, normalize=True, max_seq_length=256)
    return SiameseBertModel(config)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One (arm, size, seed): train for `steps` on the first `size` pairs, then STSb test once."""
    import resource

    import torch
    from transformers import AutoTokenizer, set_seed

    torch.set_num_threads(spec["threads"])
    path, settings, seed = pretrained_path(), spec["settings"], spec["seed"]
    train = stsb_train_rows(seed, spec["size"])
    set_seed(seed)  # before the model: the random arm's initial weights depend on the seed
    if spec["arm"] == "st":
        model, result = train_sentence_transformers(path, settings, train, seed, max_steps=spec["steps"])

        def encode(texts: list[str]) -> Any:
            return model.encode(texts, batch_size=32, convert_to_numpy=True)

    else:
        from hf_siamese import SiameseBertModel

        tokenizer = AutoTokenizer.from_pretrained(path)
        if spec["arm"] == "random":
            model = random_model(tokenizer, settings["pooling"])
        else:
            model = SiameseBertModel.from_encoder(path, pooling=settings["pooling"], normalize=True)
        if spec["arm"] == "best":
            # The whole dev split is passed as None: the recipe study's selection, whose cached model it may reuse.
            dev = stsb_dev_rows(seed, spec["dev_pairs"]) if spec["dev_pairs"] < STSB_DEV_ROWS else None
            stretched = spec["steps"] if spec["steps"] > natural_steps(spec["size"], settings) else None
            cache = Path(spec["stage_cache"]) if spec.get("stage_cache") else None
            result = train_siamese(
                model, tokenizer, settings, train, seed, True, max_steps=stretched, stage_cache=cache, dev=dev
            )
        else:
            result = train_siamese(model, tokenizer, settings, train, seed, max_steps=spec["steps"])

        def encode(texts: list[str]) -> Any:
            return model.encode(texts, tokenizer=tokenizer, batch_size=32, convert_to_numpy=True)

    result["trained_steps"] = result.pop("steps")  # `steps` is the planned count, in the run's config
    start = time.perf_counter()
    result["stsb_test"] = stsb_test_x100(encode)
    result["test_seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def arm_settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    st = RECIPES[args.st_recipe]
    if st["loss"] != "cosine" or st["nli_stage"] or st["pooling"] != "mean":
        raise SystemExit(
            f"--st-recipe {args.st_recipe!r}: sentence-transformers runs CosineSimilarityLoss on all-MiniLM-L6-v2's "
            "mean pooling with no NLI stage; pick a recipe with loss 'cosine', mean pooling and no nli_stage"
        )
    best = RECIPES[args.best_recipe]
    if best["nli_stage"]:
        raise SystemExit(f"--best-recipe {args.best_recipe!r}: pick a recipe without an NLI stage (STSb pairs only)")
    return {
        "best": best,
        "ours": RECIPES[args.recipe],
        "st": st,
        "random": {**RECIPES[args.recipe], "learning_rate": args.random_lr},
    }


def arm_names(args: argparse.Namespace) -> dict[str, str]:
    shape = RANDOM_ENCODER
    return {
        "best": f"hf-siamese, {args.best_recipe} (dev-selected on min(N, {args.dev_pairs}) STSb dev pairs)",
        "ours": f"hf-siamese, {args.recipe}",
        "st": f"sentence-transformers, CosineSimilarityLoss ({args.st_recipe} settings)",
        "random": f"hf-siamese, random init ({shape['num_hidden_layers']}x{shape['hidden_size']} BERT), {args.recipe}, "
        f"lr {args.random_lr:g}",
    }


def configs(args: argparse.Namespace, sizes: list[int], seeds: list[int], arms: list[str]) -> list[dict[str, Any]]:
    """The run configurations in run order: seed, then size, then arm (so the arms of a point run side by side)."""
    settings = arm_settings(args)
    runs = []
    for seed in seeds:
        for size in sizes:
            for arm in arms:
                config = {"arm": arm, "size": size, "seed": seed, "settings": settings[arm]}
                config["steps"] = steps_for(size, settings[arm], args.min_steps)
                if arm == "random":
                    config["encoder"] = RANDOM_ENCODER
                if arm == "best":
                    config["dev_pairs"] = min(size, args.dev_pairs)
                runs.append(config)
    return runs


def parse_ints(text: str, name: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"{name}: expected comma-separated integers, got {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=BASELINE, help=f"ours' recipe, one of {list(RECIPES)}")
    parser.add_argument("--best-recipe", default=BEST_RECIPE, help="best's dev-selected recipe (no NLI stage)")
    parser.add_argument(
        "--dev-pairs", type=int, default=STSB_DEV_ROWS, help="best chooses on min(N, this) STSb dev pairs"
    )
    parser.add_argument(
        "--stage-cache",
        type=Path,
        default=RESULTS_DIR / "models" / "nli-stages",
        help="the recipe study's --stage-cache (same default): best's whole-dev points reuse its selected models",
    )
    parser.add_argument("--st-recipe", default=BASELINE, help="settings of the sentence-transformers arm")
    parser.add_argument("--random-lr", type=float, default=1e-4, help="learning rate of the random-init arm")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated: best, ours, st, random")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="training sizes, increasing")
    parser.add_argument("--seeds", default="42,43,44")
    parser.add_argument("--min-steps", type=int, default=100, help="fewest optimizer steps a size trains")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "learning_curve.jsonl")
    parser.add_argument("--png", type=Path, default=RESULTS_DIR / "learning_curve.png")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every run")
    parser.add_argument("--force", action="store_true", help="rerun points already in --out")
    parser.add_argument("--no-write", action="store_true", help="do not update benchmarks/RESULTS.md")
    parser.add_argument(
        "--report-only", action="store_true", help="train nothing: tabulate (and plot, write) the points in --out"
    )
    add_child_arguments(parser)
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    if not 1 <= args.dev_pairs <= STSB_DEV_ROWS:
        raise SystemExit(f"--dev-pairs {args.dev_pairs}: choose between 1 and {STSB_DEV_ROWS} (STSb dev's size)")
    for name in (args.recipe, args.st_recipe, args.best_recipe):
        if name not in RECIPES:
            raise SystemExit(f"unknown recipe {name!r}; choose from {list(RECIPES)}")
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        raise SystemExit(f"--arms: choose from {list(ARMS)}, got {args.arms!r}")
    sizes, seeds = parse_ints(args.sizes, "--sizes"), parse_ints(args.seeds, "--seeds")
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 1 or sizes[-1] > STSB_TRAIN_ROWS:
        raise SystemExit(f"--sizes must increase, between 1 and {STSB_TRAIN_ROWS}; got {args.sizes!r}")
    if {"best", "ours", "random"} & set(arms):
        from bench_sts_recipes import check_losses

        check_losses([args.recipe, args.best_recipe])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    started = time.time()
    runs = configs(args, sizes, seeds, arms)
    failed = []
    for index, config in enumerate([] if args.report_only else runs, start=1):
        label = f"[{index}/{len(runs)}] {config['arm']} size {config['size']} seed {config['seed']}"
        done = None if args.force else finished(load_rows(args.out), config)
        if done is not None:
            print(f"{label}: already in {args.out} (test {done['stsb_test']:.2f})")
            continue
        print(f"{label}: {config['steps']} steps", flush=True)
        cache = {"stage_cache": str(args.stage_cache)} if args.stage_cache else {}
        result = run_child(__file__, {**config, "threads": args.threads, **cache})
        row = {k: v for k, v in result.items() if k not in config}
        row.update(config=config, finished_at=datetime.datetime.now().isoformat(timespec="seconds"))
        row["versions"] = versions()
        append_row(args.out, row)
        if "error" in row:
            failed.append(f"{label}: {row['error']}")

    rows = load_rows(args.out)
    scores: dict[str, list[list[float]]] = {arm: [[] for _ in sizes] for arm in arms}
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    threads: set[int] = set()
    for config in runs:
        done = finished(rows, config)
        if done is not None:
            scores[config["arm"]][sizes.index(config["size"])].append(done["stsb_test"])
            seconds[config["arm"]].append(done["train_seconds"])
            threads.add(done.get("threads", args.threads))
    names = arm_names(args)
    settings = arm_settings(args)
    lines = ["| train pairs | steps | " + " | ".join(arms) + " |", "|" + "---|" * (2 + len(arms))]
    for i, size in enumerate(sizes):
        steps = "/".join(dict.fromkeys(str(steps_for(size, settings[a], args.min_steps)) for a in arms))
        cells = [mean_std(scores[a][i]) + (f" (n={len(scores[a][i])})" if 0 < len(scores[a][i]) < len(seeds) else "")
                 for a in arms]  # fmt: skip
        lines.append(f"| {size} | {steps} | " + " | ".join(cells) + " |")
    rendered = "\n".join(lines)
    legend = [f"- `{arm}`: {names[arm]}" for arm in arms]
    totals = ", ".join(f"{a} {sum(seconds[a]) / 60:.0f}" for a in arms)
    print("\n" + rendered + "\n\n" + "\n".join(legend) + f"\n\ntraining minutes (all points): {totals}")

    picture = None
    if any(s for per_size in scores.values() for s in per_size):
        from hf_siamese.plots import plot_learning_curve

        curves = {names[a]: scores[a] for a in arms}
        title = f"STS Benchmark test after fine-tuning on N train pairs (seeds: {', '.join(map(str, seeds))})"
        picture = plot_learning_curve(
            sizes, curves, args.png, title=title, ylabel="STSb test Spearman x100",
            baselines={"zero-shot all-MiniLM-L6-v2": ZERO_SHOT_PUBLISHED},
        )  # fmt: skip
        print(f"wrote {picture}")
    print(f"{(time.time() - started) / 60:.0f} min; results in {args.out}")

    if not args.no_write:
        command = "python benchmarks/bench_learning_curve.py " + shlex.join(sys.argv[1:])
        body = [
            "## STSb learning curve (`benchmarks/bench_learning_curve.py`)",
            "",
            f"Updated {datetime.datetime.now():%Y-%m-%d %H:%M}: {os.cpu_count()} CPU cores "
            f"({platform.processor() or platform.machine()}), torch threads per run "
            f"{' or '.join(map(str, sorted(threads))) or args.threads} (as each point was run)"
            f"; {versions()}.",
            "",
            "```bash",
            command.strip(),
            "```",
            "",
            "STSb test Spearman (cosine, x100) after fine-tuning on the first N STSb train pairs (shuffled once per "
            "seed, so the sizes of a seed are nested; every arm gets the same rows), mean ± standard deviation "
            f"over seeds {', '.join(map(str, seeds))}. Each size trains max({args.min_steps}, epochs x ceil(N / "
            "batch)) optimizer steps, the rows passed over again until then. `best` chooses as its recipe does, on "
            f"min(N, {args.dev_pairs}) STSb dev pairs; the other arms take their final weights, no dev selection. "
            f"Zero-shot all-MiniLM-L6-v2: {ZERO_SHOT_PUBLISHED}. Training minutes over all points: {totals}.",
            "",
            rendered,
            "",
            *legend,
        ]
        if picture:
            link = os.path.relpath(picture, REPOSITORY / "benchmarks")
            body += ["", f"![STSb learning curve]({link})"]
        write_section("learning_curve", "\n".join(body))
        print("updated benchmarks/RESULTS.md")
    exit_if_failed(failed)


if __name__ == "__main__":
    main()
