"""Augmented SBERT's silver data (Thakur et al. 2021): new sentence pairs sampled among the gold sentences by a
bi-encoder's nearest neighbours, labelled by a cross-encoder trained on the gold pairs, for the bi-encoder to train on
gold + silver.

The paper shows that the sampling decides whether silver data helps: random pairs are almost all dissimilar and teach
little; the bi-encoder's own neighbours (or BM25's) give pairs across the whole similarity range. Each sentence's
`neighbours` nearest other sentences become candidate pairs; each unordered pair is kept once, and the gold pairs are
left out (their gold labels stay).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def neighbour_pairs(
    sentences: Sequence[str],
    bi_encoder: Any,
    neighbours: int = 3,
    *,
    exclude: Iterable[tuple[str, str]] = (),
    batch_size: int = 64,
    show_progress_bar: bool = False,
) -> list[tuple[str, str]]:
    """Unordered pairs (each once, in a fixed order) of every distinct sentence with its `neighbours` nearest others by
    the bi-encoder's similarity, without the pairs of `exclude` (in either order)."""
    from ..metrics import exact_search

    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 1:
        raise ValueError(f"neighbours={neighbours!r}: expected a positive int (nearest sentences paired per sentence)")
    unique = list(dict.fromkeys(sentences))
    bad = next((text for text in unique if not isinstance(text, str)), None)
    if bad is not None:
        raise ValueError(f"neighbour_pairs: a sentence is {bad!r:.60}; expected strings")
    if len(unique) < 2:
        raise ValueError(f"neighbour_pairs: {len(unique)} distinct sentence(s); pairs need at least 2")
    embeddings = np.asarray(
        bi_encoder.encode(unique, batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_numpy=True)
    )
    depth = min(neighbours + 1, len(unique))
    _, found = exact_search(embeddings, embeddings, depth, similarity=bi_encoder.config.similarity)
    skip = {frozenset(pair) for pair in exclude}
    pairs: dict[frozenset, tuple[str, str]] = {}
    for row, hits in enumerate(found.tolist()):
        others = [j for j in hits if j != row][:neighbours]
        for j in others:
            key = frozenset((unique[row], unique[j]))
            if key not in skip and key not in pairs:
                pairs[key] = (unique[min(row, j)], unique[max(row, j)])
    return list(pairs.values())


def silver_pairs(
    sentences: Sequence[str],
    bi_encoder: Any,
    teacher: Any,
    neighbours: int = 3,
    *,
    gold_pairs: Iterable[tuple[str, str]] = (),
    score_range: tuple[float, float] = (0.0, 1.0),
    batch_size: int = 64,
    show_progress_bar: bool = False,
) -> Any:
    """A `datasets.Dataset` of silver pairs `sentence1, sentence2, score`: `neighbour_pairs` of the sentences (gold
    pairs left out) scored by the cross-encoder `teacher` with its activation (a regression cross-encoder's sigmoid:
    0..1), mapped linearly onto `score_range` (the gold scores' range, e.g. (0, 5) for STSb)."""
    import datasets

    from .evaluation import score_pairs

    low, high = score_range
    if not high > low:
        raise ValueError(f"score_range={score_range!r}: expected (low, high) with high > low")
    if getattr(teacher, "num_labels", 1) != 1 or not callable(getattr(teacher, "predict", None)):
        raise ValueError("silver_pairs: the teacher must be a one-output cross-encoder (a .predict(pairs) scorer)")
    pairs = neighbour_pairs(
        sentences, bi_encoder, neighbours, exclude=gold_pairs, batch_size=batch_size,
        show_progress_bar=show_progress_bar,
    )  # fmt: skip
    if not pairs:
        raise ValueError("silver_pairs: every neighbour pair is a gold pair; nothing to label")
    scores = score_pairs(teacher, pairs, batch_size, show_progress_bar).astype(np.float64)
    if scores.min() < 0 or scores.max() > 1:
        raise ValueError(
            f"silver_pairs: the teacher's scores span [{scores.min():.3g}, {scores.max():.3g}], not [0, 1]; give a "
            "cross-encoder with a sigmoid activation (a regression / relevance model)"
        )
    return datasets.Dataset.from_dict(
        {
            "sentence1": [a for a, _ in pairs],
            "sentence2": [b for _, b in pairs],
            "score": (low + scores * (high - low)).tolist(),
        }
    )


__all__ = ["neighbour_pairs", "silver_pairs"]
