"""Train the same recipes with hf-siamese and with sentence-transformers and compare quality, speed and memory.

Both libraries start from all-MiniLM-L6-v2 (mean pooling, L2-normalized, max_seq_length 256) and get the same rows
(the first N after a seeded shuffle), seed, batch size, learning rate, warmup (10%), schedule (linear) and epochs.

Recipes:

* `cosine`: STSb train, cosine-similarity MSE against score/5, batch 16, lr 2e-5.
* `mnr`: NLI (anchor, entailment, contradiction) triplets, multiple-negatives ranking loss (scale 20, cosine),
  batch 64, no-duplicates batches, lr 2e-5.
* `softmax`: NLI labelled pairs, softmax loss over (u, v, |u-v|), batch 16, lr 2e-5; the classifier's accuracy is
  measured on held-out NLI pairs that are never trained on.

Every run reports STSb dev/test Spearman (cosine, x100), training rows/s (rows / wall time of the training call only)
and the peak RSS of its own process: each (library, recipe) runs in a fresh child process, and the libraries are
interleaved per recipe so that slow drift of the machine hits both. A zero-shot row per library checks the loaders
and the metric against the public STSb test score of all-MiniLM-L6-v2 (82.03).

    pip install -r benchmarks/requirements.txt
    python benchmarks/run.py training                           # all recipes, both libraries (~45 min, 2 cores)
    python benchmarks/run.py training --recipes cosine --max-train 64 --no-write   # smoke test

The table is printed and written to benchmarks/RESULTS.md, between the markers of this benchmark's section.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from typing import Any

from common import (
    RESULTS_MD,
    SEED,
    ZERO_SHOT_PUBLISHED,
    add_child_arguments,
    fmt,
    run_child,
    run_if_child,
    suite_command,
    versions,
    write_section,
)
from training_child import RECIPES, SETTINGS, child

LIBRARIES = tuple(SETTINGS)
LIBRARY_NAMES = {
    "st": "sentence-transformers",
    "st-bf16": "sentence-transformers bf16",
    "ours": "hf-siamese (default: packed)",
    "ours-bf16": "hf-siamese bf16 (default: packed)",
    "ours-unpacked": "hf-siamese packing off (so grouped by length)",
    "ours-grouped": "hf-siamese packed + group_by_length=True",
}
# The row each row's speed is compared with.
BASELINE = {"st-bf16": "st-bf16", "ours-bf16": "st-bf16"}


# ------------------------------------------------------------------------------------------------------ parent


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (recipe, library): speeds and training times as medians over repeats, quality as the mean (the
    runs are seeded, so repeats normally agree exactly), peak RSS as the maximum; `speeds` keeps every repeat."""
    import statistics

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["recipe"], r["library"]), []).append(r)
    rows = []
    for (recipe, library), runs in groups.items():
        good = [r for r in runs if "error" not in r]
        if not good:
            rows.append(runs[0])
            continue
        row: dict[str, Any] = {"recipe": recipe, "library": library, "train_rows": good[0]["train_rows"]}
        row["repeats"], row["errors"] = len(good), len(runs) - len(good)
        for key in ("stsb_dev", "stsb_test", "nli_accuracy", "load_average", "padding_executed", "padding_per_column"):
            values = [r[key] for r in good if r.get(key) is not None]
            row[key] = statistics.mean(values) if values else None
        for key in ("rows_per_second", "train_seconds"):
            values = [r[key] for r in good if r.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        row["speeds"] = [r["rows_per_second"] for r in good if r.get("rows_per_second") is not None]
        row["peak_rss_mib"] = max(r["peak_rss_mib"] for r in good)
        row["grouped"] = good[0].get("grouped")
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    speed = {(r["recipe"], r["library"]): r.get("rows_per_second") for r in rows}
    header = (
        "| recipe | setting | train rows | STSb dev | STSb test | NLI acc | train s | rows/s | vs ST fp32 | vs ST bf16 "
        "| padding | load avg | peak RSS MiB |"
    )
    lines = [header, "|" + "---|" * (header.count(" | ") + 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['recipe']} | {LIBRARY_NAMES[r['library']]} | {r['error']} |" + " |" * 10)
            continue
        own = r.get("rows_per_second")
        ratios = []
        for base in ("st", "st-bf16"):
            other = speed.get((r["recipe"], base))
            ratios.append(fmt(own / other) if own and other and base != r["library"] else "-")
        shown = fmt(own, 1)
        if len(r.get("speeds", [])) > 1:
            shown += " (" + ", ".join(f"{v:.1f}" for v in r["speeds"]) + ")"
        padding = r.get("padding_executed")
        padding = f"{100 * padding:.0f}%" if padding is not None else "-"
        lines.append(
            f"| {r['recipe']} | {LIBRARY_NAMES[r['library']]} | {r['train_rows']} | {fmt(r.get('stsb_dev'))} "
            f"| {fmt(r.get('stsb_test'))} | {fmt(r.get('nli_accuracy'), 1)} | {fmt(r.get('train_seconds'), 0)} "
            f"| {shown} | {ratios[0]} | {ratios[1]} | {padding} | {fmt(r.get('load_average'), 1)} "
            f"| {fmt(r.get('peak_rss_mib'), 0)} |"
        )
    return "\n".join(lines)


def targets(results: list[dict[str, Any]]) -> list[str]:
    """The speed issue's targets, checked on this run's rows: hf-siamese's default >= 1.5x sentence-transformers in
    fp32 and >= 1.3x in bf16, each within 0.2 STSb test of sentence-transformers on the same recipe (or better);
    grouping (the default where packing is off) within 0.2 of random batches."""
    by = {(r["recipe"], r["library"]): r for r in results if "error" not in r}
    notes = []
    for recipe in RECIPES:
        for ours_row, st_row, needed in (("ours", "st", 1.5), ("ours-bf16", "st-bf16", 1.3)):
            ours, st = by.get((recipe, ours_row)), by.get((recipe, st_row))
            if not (ours and st):
                continue
            ratio = ours["rows_per_second"] / st["rows_per_second"]
            gap = ours["stsb_test"] - st["stsb_test"]
            verdict = "met" if ratio >= needed and gap >= -0.2 else "NOT met"
            notes.append(
                f"{recipe}, {LIBRARY_NAMES[ours_row]} vs {LIBRARY_NAMES[st_row]}: {ratio:.2f}x rows/s, STSb test "
                f"{gap:+.2f} ({verdict}: >= {needed}x, within 0.2 or better)"
            )
        ours, unpacked = by.get((recipe, "ours")), by.get((recipe, "ours-unpacked"))
        if ours and unpacked and unpacked.get("grouped"):
            gap = unpacked["stsb_test"] - ours["stsb_test"]
            notes.append(
                f"{recipe}, length-grouped batches (packing off) vs random batches (packed; packing is exact, so "
                f"these are random-batch results): STSb test {gap:+.2f} ({'met' if abs(gap) <= 0.2 else 'NOT met'}: "
                "within 0.2)"
            )
        if ours and ours.get("padding_per_column") is not None:
            notes.append(
                f"{recipe}: padding in the encoder input of hf-siamese's default run: "
                f"{100 * ours['padding_executed']:.0f}% packed vs {100 * ours['padding_per_column']:.0f}% for the same "
                "batches padded per column"
            )
        loads = [r.get("load_average") for (rec, _), r in by.items() if rec == recipe and r.get("load_average")]
        if loads and max(loads) - min(loads) > 1.0:
            notes.append(
                f"{recipe}: the machine's load differed between these runs ({', '.join(f'{x:.1f}' for x in loads)}): "
                "the speed ratios are distorted by other work"
            )
    for library in ("st", "ours"):
        zero = by.get(("zero-shot", library))
        if zero:
            ok = abs(zero["stsb_test"] - ZERO_SHOT_PUBLISHED) < 0.05
            notes.append(
                f"zero-shot {LIBRARY_NAMES[library]}: STSb test {zero['stsb_test']:.2f} "
                f"({'matches' if ok else 'DIFFERS from'} the published {ZERO_SHOT_PUBLISHED})"
            )
    return notes


def write_results(section: str) -> None:
    write_section("bench_training", section)


def parse_max_train(text: str | None, recipes: list[str]) -> dict[str, int]:
    """`N` (every recipe) or `recipe=N,recipe=N`; recipes not named keep their defaults."""
    chosen = {r: RECIPES[r]["max_train"] for r in recipes}
    if not text:
        return chosen
    if "=" not in text:
        return dict.fromkeys(recipes, int(text))
    for item in text.split(","):
        name, value = item.split("=")
        if name not in RECIPES:
            raise SystemExit(f"--max-train: unknown recipe {name!r}")
        chosen[name] = int(value)
    return chosen


def parse_args() -> argparse.Namespace:
    """The command line of the training scenario."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="cosine,mnr,softmax", help="comma-separated: cosine, mnr, softmax")
    parser.add_argument(
        "--libraries",
        default="st,st-bf16,ours,ours-bf16,ours-unpacked",
        help="comma-separated settings: " + ", ".join(f"{k} ({v})" for k, v in LIBRARY_NAMES.items()),
    )
    parser.add_argument(
        "--max-train",
        default=None,
        help="training rows: N for every recipe, or recipe=N,...; default "
        + ", ".join(f"{r}={s['max_train']}" for r, s in RECIPES.items()),
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="train every (recipe, library) this many times, interleaved; rows/s is the median",
    )
    parser.add_argument("--nli-heldout", type=int, default=1000, help="NLI pairs held out for the softmax accuracy")
    parser.add_argument("--no-zero-shot", action="store_true", help="skip the zero-shot rows")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every run")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {RESULTS_MD.name}")
    add_child_arguments(parser)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if run_if_child(args, child):
        return

    recipes = [r for r in args.recipes.split(",") if r]
    libraries = [lib for lib in args.libraries.split(",") if lib]
    for name in recipes:
        if name not in RECIPES:
            raise SystemExit(f"unknown recipe {name!r}; choose from {list(RECIPES)}")
    for name in libraries:
        if name not in LIBRARIES:
            raise SystemExit(f"unknown library {name!r}; choose from {list(LIBRARIES)}")
    max_train = parse_max_train(args.max_train, recipes)
    base = {"threads": args.threads, "epochs": args.epochs, "nli_heldout": args.nli_heldout}

    runs: list[dict[str, Any]] = []
    if not args.no_zero_shot:
        runs += [
            {**base, "recipe": "zero-shot", "library": SETTINGS[lib]["library"], "row": lib, "max_train": 0}
            for lib in libraries
            if lib in ("st", "ours")
        ]
    for index, recipe in enumerate(recipes):
        order = []
        for repeat in range(args.repeats):
            # Alternate the order, so that drift of the machine's load does not favour one setting.
            order += libraries[::-1] if (index + repeat) % 2 else libraries
        for row in order:
            runs.append(
                {
                    **base,
                    "recipe": recipe,
                    "library": SETTINGS[row]["library"],
                    "row": row,
                    "max_train": max_train[recipe],
                }
            )

    command = suite_command("training")
    started = datetime.datetime.now()
    results = []
    for i, spec in enumerate(runs):
        print(f"\n[run {i + 1}/{len(runs)}]", flush=True)
        # The child reports its library (st / ours); the rows are keyed by the setting it ran.
        results.append({**run_child(__file__, spec), "library": spec["row"]})
    elapsed = (datetime.datetime.now() - started).total_seconds() / 60

    rows = aggregate(results)
    rendered = table(rows)
    notes = targets(rows)
    print("\n" + rendered + "\n")
    for note in notes:
        print("- " + note)
    print(f"\n{command}  ({elapsed:.0f} min)")

    if not args.no_write:
        section = "\n".join(
            [
                "## Training: hf-siamese vs sentence-transformers (`benchmarks/run.py training`)",
                "",
                f"Run {started:%Y-%m-%d %H:%M}, {elapsed:.0f} min, {os.cpu_count()} CPU cores "
                f"({platform.processor() or platform.machine()}), torch threads {args.threads}; {versions()}.",
                "",
                "```bash",
                command,
                "```",
                "",
                "Both libraries start from all-MiniLM-L6-v2 (mean pooling, normalized, max_seq_length 256) with the "
                f"same rows (first N after a shuffle with seed {SEED}), seed, batch size, lr 2e-5, 10% linear warmup "
                f"and {args.epochs} epoch(s): cosine = STSb train, cosine loss on score/5, batch 16; mnr = NLI "
                "triplets, MNR scale 20, batch 64, no-duplicates batches; softmax = NLI labelled pairs, softmax loss "
                f"on (u, v, |u-v|), batch 16 (NLI acc on {args.nli_heldout} held-out pairs). STSb = Spearman of "
                "cosine x100; rows/s = training rows / wall time of the training call (median over repeats, each "
                "repeat in parentheses); load avg = mean 1-min load average of the machine during training (2 = "
                "the run had both cores to itself; higher means other work slowed it); peak RSS per run (each run "
                "is its own process; libraries interleaved). Timings on a shared 2-core machine vary ~15% run to "
                "run: read speed as the ratio, and only between rows of similar load.",
                "",
                rendered,
                "",
                *("- " + note for note in notes),
            ]
        )
        write_results(section)
        print(f"updated {RESULTS_MD}")


if __name__ == "__main__":
    main()
