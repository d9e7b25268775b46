"""Hard negatives for a fine-tuning run from a BEIR folder (`hf-siamese train --train BEIR_DIR --hard-negatives N`):
each (query, relevant document) row gets `N` documents of the folder's corpus that the first stage ranks high but that
are not judged relevant, mined before training by the model the run starts from (`mine_hard_negatives`). The first
stage is the hybrid one by default: the start model's ranking (a dense model's vectors, a sparse model's term
weights) fused with BM25's by reciprocal ranks, so a start model that ranks poorly (a new SPLADE head) still gets the
lexical neighbours. The rows then train as any (anchor, positive, negatives) rows do.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

NEGATIVES_FROM = ("hybrid", "lexical", "dense", "sparse")
# A sparse or multi-vector model trained from a BEIR folder mines this many a row unless told (KIND_HARD_NEGATIVES):
# on 162 held-out SciFact train claims one hybrid negative gave a sparse model +2.3 and +0.8 nDCG@10 (two seeds) with
# half the active terms, and a multi-vector model, with two epochs, +4.3 and +3.9 over one epoch without (two seeds;
# benchmarks/RESULTS.md). A dense model mines none unless told.
KIND_HARD_NEGATIVES = {"sparse": 1, "multi-vector": 1}


def default_hard_negatives(kind: str, train: str | os.PathLike | None) -> int:
    """Negatives mined a row when `train --hard-negatives` is not given: `KIND_HARD_NEGATIVES` of the kind for a
    model trained from a BEIR folder, else none."""
    from ..data.beir import is_beir_folder

    return KIND_HARD_NEGATIVES.get(kind, 0) if train is not None and is_beir_folder(train) else 0


def with_hard_negatives(
    sets: Any,
    beir_folder: str | os.PathLike | None,
    model_path: str,
    num_negatives: int,
    *,
    kind: str = "dense",
    negatives_from: str = "hybrid",
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 64,
    seed: int = 42,
    show_progress_bar: bool = False,
) -> Any:
    """`sets` (`data.training_sets.TrainingSets` read from the BEIR folder `beir_folder`) with `num_negatives` mined
    negatives added to every training row, from the folder's corpus, by `negatives_from` ("hybrid": the start model's
    own ranking fused with BM25; "lexical": BM25 alone; "dense" / "sparse": the model's own ranking alone) with the
    model the run starts from (`model_path` built as `fine_tune` builds it, `kind` "dense" or "sparse"; for
    "multi-vector" its encoder as the dense model it is, mean-pooled as its checkpoint says: MaxSim over a whole corpus
    is the slow first stage). Rows left without `num_negatives` candidates are dropped (a warning counts them)."""
    from ..data.beir import is_beir_folder, read_corpus
    from ..retrieval.mining.negatives import mine_hard_negatives
    from .fine_tune import encoder_to_train

    if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
        raise ValueError(f"--hard-negatives {num_negatives!r}: expected a whole number >= 1 (negatives a row)")
    if beir_folder is None or not is_beir_folder(beir_folder):
        given = "no --train" if beir_folder is None else f"--train {os.fspath(beir_folder)!r} is none"
        raise ValueError(
            f"--hard-negatives mines from a BEIR folder's corpus, and {given}: give --train BEIR_DIR, or mine other "
            "rows first ('hf-siamese mine')"
        )
    if kind not in ("dense", "sparse", "multi-vector"):
        raise ValueError(f"--hard-negatives with --kind {kind!r}; accepted kinds: dense, sparse, multi-vector")
    if negatives_from not in NEGATIVES_FROM:
        raise ValueError(f"negatives_from={negatives_from!r}; accepted: {', '.join(NEGATIVES_FROM)}")
    if kind == "multi-vector" and negatives_from == "sparse":
        raise ValueError(
            "--negatives-from sparse ranks by a sparse model, and a multi-vector run mines with its encoder as a dense "
            "model: give --negatives-from hybrid, dense or lexical"
        )
    model, tokenizer = encoder_to_train(
        model_path, pooling=pooling, normalize=normalize, max_seq_length=max_seq_length,
        kind="dense" if kind == "multi-vector" else kind,
    )  # fmt: skip
    corpus = list(read_corpus(beir_folder).values())
    rows = mine_hard_negatives(
        sets.train, model.eval(), corpus, num_negatives=num_negatives, negatives_from=negatives_from,
        tokenizer=tokenizer, batch_size=batch_size, seed=seed, show_progress_bar=show_progress_bar,
    )  # fmt: skip
    name = f"{sets.train_name} + {num_negatives} hard negatives ({negatives_from})"
    return dataclasses.replace(sets, train=rows, train_name=name)


__all__ = ["KIND_HARD_NEGATIVES", "NEGATIVES_FROM", "default_hard_negatives", "with_hard_negatives"]
