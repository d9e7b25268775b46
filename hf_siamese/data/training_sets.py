"""The data of a fine-tuning run, read once: the training rows and the set that measures the model before and after
(scored pairs, or a BEIR retrieval folder), from local files, the Hub or the built-in demo set; what `hf-siamese
train` reads its `--train` / `--eval` options with."""

from __future__ import annotations

import dataclasses
from typing import Any

DEMO_TRAIN_NAME = "built-in demo set (train split)"
DEMO_DEV_NAME = "built-in demo set (dev split)"


@dataclasses.dataclass
class TrainingSets:
    """The training rows and their name (a path or Hub id, as the user gave it), and the evaluation set or None: a
    `datasets.Dataset` of scored pairs or a `RetrievalDataset`. `demo`: both come from the built-in demo set."""

    train: Any
    train_name: str
    eval: Any = None
    eval_name: str | None = None
    demo: bool = False


def read_training_sets(
    train: str | None = None,
    *,
    train_split: str | None = None,
    columns: dict[str, str] | None = None,
    dataset_config: str | None = None,
    max_train: int | None = None,
    eval: str | None = None,  # noqa: A002 - the option's name
    eval_split: str | None = None,
    eval_columns: dict[str, str] | None = None,
    eval_dataset_config: str | None = None,
    max_eval: int | None = None,
    seed: int = 42,
) -> TrainingSets:
    """Read `train` (a BEIR folder: its `train_split`'s (query, relevant document) rows, `beir_pairs`; a file, folder or
    Hub dataset through `load_pairs`; None: the built-in demo set, with its dev
    split as the evaluation set unless `eval` is given) and `eval`: a BEIR folder (its `eval_split`, else dev, then
    test), or scored pairs (`eval_split`, default "validation"). `max_train` / `max_eval` keep that many rows, drawn
    at random with `seed`.

    Raises:
        ValueError: `columns` / `dataset_config` without `train`, a missing split, eval rows that are not scored
            pairs, a limit below 1 (each naming the source).
    """
    from .beir import beir_split, is_beir_folder, read_beir
    from .readers import load_demo_dataset

    demo = train is None
    if demo and (columns or dataset_config):
        raise ValueError("--columns/--dataset-config describe --train data; give --train too")
    demo_splits = load_demo_dataset() if demo else None
    if demo:
        train_rows, train_name = demo_splits["train"], DEMO_TRAIN_NAME
    elif is_beir_folder(train) and columns is None and dataset_config is None:
        train_rows, train_name = beir_pairs(train, train_split), f"{train} ({train_split} split)"
    else:
        train_rows, train_name = load_data(train, train_split, columns, dataset_config), train
    sets = TrainingSets(take(train_rows, max_train, seed), train_name, demo=demo)
    if eval is not None and is_beir_folder(eval):
        # A retrieval set: nDCG@10 before and after, IR metrics in the trainer's evaluations. The split asked for
        # (an error listing the splits there are if it is not there), else dev, then test.
        split = eval_split or beir_split(eval, ["dev", "validation", "test"])
        return dataclasses.replace(sets, eval=read_beir(eval, split=split), eval_name=f"{eval} ({split} split)")
    if eval is not None:
        rows, sets.eval_name = load_data(eval, eval_split or "validation", eval_columns, eval_dataset_config), eval
    elif demo:
        rows, sets.eval_name = demo_splits["dev"], DEMO_DEV_NAME
    else:
        return sets
    sets.eval = take(rows, max_eval, seed)
    scored_pairs_layout(sets.eval, sets.eval_name)
    return sets


def beir_pairs(folder: str, split: str) -> Any:
    """(anchor, positive) rows of a BEIR folder's `split`: each judged query with each document it holds relevant
    (grade above 0), its title and text as the corpus gives them; MNR's (and sparse_mnr's) rows."""
    from datasets import Dataset

    from .beir import read_beir

    data = read_beir(folder, split=split)
    rows = [
        {"anchor": data.queries[query], "positive": data.corpus[doc]}
        for query, relevant in sorted(data.qrels.items())
        for doc, grade in sorted(relevant.items())
        if grade > 0 and query in data.queries and doc in data.corpus
    ]
    if not rows:
        raise ValueError(f"{folder}: its {split} split judges no document relevant to any query; nothing to train on")
    return Dataset.from_list(rows)


def load_data(source: str, split: str | None, columns: dict[str, str] | None, subset: str | None) -> Any:
    """A pair dataset from a local file / folder or the Hub (`load_pairs`): `split`, `columns` renamed, the Hub
    dataset's config `subset`."""
    from .readers import load_pairs

    return load_pairs(source, split=split, columns=columns, **({"name": subset} if subset else {}))


def take(dataset: Any, limit: int | None, seed: int) -> Any:
    """At most `limit` rows of a `datasets.Dataset`, drawn at random (files are often sorted by source or label)."""
    if limit is None or limit >= len(dataset):
        return dataset
    if limit < 1:
        raise ValueError(f"--max-train/--max-eval must be at least 1, got {limit}")
    return dataset.shuffle(seed=seed).select(range(limit))


def scored_pairs_layout(dataset: Any, source: str) -> tuple[str, str, str]:
    """(text column 1, text column 2, score column) of a dataset of scored pairs, or a clear error naming `source`."""
    from .columns import detect_layout

    try:
        layout = detect_layout(dataset.column_names)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    if layout.label is None or len(layout.texts) != 2 or not isinstance(dataset[0][layout.label], float):
        raise ValueError(
            f"{source}: expected scored pairs (sentence1, sentence2, score: a number), got columns "
            f"{dataset.column_names}; use --columns sentence1=...,sentence2=...,score=... to pick them"
        )
    return layout.texts[0], layout.texts[1], layout.label


__all__ = [
    "DEMO_DEV_NAME",
    "DEMO_TRAIN_NAME",
    "TrainingSets",
    "load_data",
    "read_training_sets",
    "scored_pairs_layout",
    "take",
]
