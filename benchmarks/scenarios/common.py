"""What the benchmarks share: the data files, the seeded training rows of the speed benchmark's recipes, STSb
Spearman of embeddings, the machine's load during a run, and the library versions for a results header."""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path
from typing import Any

DATA = Path(os.environ.get("HF_SIAMESE_DATA", "/work/shared/data"))
STSB = DATA / "stsb"
NLI_PAIRS = DATA / "nli" / "derived" / "nli_pairs_labelled.tsv"
NLI_TRIPLETS = DATA / "nli" / "derived" / "nli_triplets.tsv"

SEED = 42
LABEL2ID = {"entailment": 0, "neutral": 1, "contradiction": 2}
ZERO_SHOT_PUBLISHED = 82.03  # all-MiniLM-L6-v2's published STSb test Spearman x100


# ------------------------------------------------------------------------------------------------------ rows


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


def stsb_rows(split: str, size: int, seed: int = SEED) -> dict[str, list]:
    """The first `size` pairs of an STSb split after a shuffle with `seed` (scores 0-5; one seed's sizes are nested)."""
    table = stsb_split(split)
    order = seeded_order(len(table["score"]), seed)[:size]
    return {name: [values[i] for i in order] for name, values in table.items()}


def train_rows(recipe: str, max_train: int, nli_heldout: int) -> tuple[dict[str, list], dict[str, list] | None]:
    """Columns of the training rows of a recipe (identical for both libraries) and, for `softmax`, the held-out
    NLI pairs used for the classifier's accuracy."""
    if recipe == "cosine":
        return stsb_rows("train", max_train), None
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


# ------------------------------------------------------------------------------------------------------ measuring


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


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package in ("torch", "transformers", "sentence-transformers", "hf-siamese"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)
