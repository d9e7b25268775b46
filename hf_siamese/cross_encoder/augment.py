"""Augmented SBERT's silver data (Thakur et al. 2021): new sentence pairs sampled among the gold sentences by a
bi-encoder's nearest neighbours, labelled by a cross-encoder trained on the gold pairs, for the bi-encoder to train on
gold + silver.

The paper shows that the sampling decides whether silver data helps: random pairs are almost all dissimilar and teach
little; the bi-encoder's own neighbours (or BM25's) give pairs across the whole similarity range. Each sentence's
`neighbours` nearest other sentences become candidate pairs; each unordered pair is kept once, and the gold pairs are
left out (their gold labels stay). BM25 is the project's one BM25, `hf_siamese.retrieval.index.lexical` (bm25s's Lucene
weighting: `pip install 'hf-siamese[lexical]'`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..retrieval.index.lexical import LexicalSettings


def _distinct(sentences: Sequence[str], caller: str) -> list[str]:
    unique = list(dict.fromkeys(sentences))
    bad = next((text for text in unique if not isinstance(text, str)), None)
    if bad is not None:
        raise ValueError(f"{caller}: a sentence is {bad!r:.60}; expected strings")
    if len(unique) < 2:
        raise ValueError(f"{caller}: {len(unique)} distinct sentence(s); pairs need at least 2")
    return unique


def _check_neighbours(neighbours: Any, name: str = "neighbours") -> None:
    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 1:
        raise ValueError(f"{name}={neighbours!r}: expected a positive int (nearest sentences paired per sentence)")


def _pairs_of_hits(
    unique: list[str], found: Any, neighbours: int, exclude: Iterable[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Each row's first `neighbours` hits other than itself as unordered pairs, each once, gold pairs left out (a hit
    -1 is no hit: a lexical search finds fewer than asked where too few sentences share a term)."""
    skip = {frozenset(pair) for pair in exclude}
    pairs: dict[frozenset, tuple[str, str]] = {}
    for row, hits in enumerate(found.tolist()):
        others = [j for j in hits if j != row and j >= 0][:neighbours]
        for j in others:
            key = frozenset((unique[row], unique[j]))
            if key not in skip and key not in pairs:
                pairs[key] = (unique[min(row, j)], unique[max(row, j)])
    return list(pairs.values())


def check_sampling(neighbours: Any, bm25_neighbours: Any) -> None:
    """`neighbours` (bi-encoder) and `bm25_neighbours` are counts, not both 0; else a `ValueError` naming them. BM25
    sampling needs bm25s and PyStemmer: without them, an `ImportError` naming the install command, before any work."""
    if neighbours:
        _check_neighbours(neighbours)
    if bm25_neighbours:
        _check_neighbours(bm25_neighbours, "bm25 neighbours")
        from ..retrieval.index.lexical import require_lexical

        require_lexical()
    if not neighbours and not bm25_neighbours:
        raise ValueError(f"neighbours={neighbours!r} and bm25_neighbours={bm25_neighbours!r} sample no pairs; give one")


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
    from ..retrieval.exact import exact_search

    _check_neighbours(neighbours)
    unique = _distinct(sentences, "neighbour_pairs")
    embeddings = np.asarray(
        bi_encoder.encode(unique, batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_numpy=True)
    )
    depth = min(neighbours + 1, len(unique))
    _, found = exact_search(embeddings, embeddings, depth, similarity=bi_encoder.config.similarity)
    return _pairs_of_hits(unique, found, neighbours, exclude)


def bm25_pairs(
    sentences: Sequence[str],
    neighbours: int = 3,
    *,
    exclude: Iterable[tuple[str, str]] = (),
    settings: LexicalSettings | None = None,
) -> list[tuple[str, str]]:
    """Like `neighbour_pairs`, with each sentence's nearest others by BM25: pairs that share rare words, which a
    bi-encoder's neighbours may miss (the paper's other sampling). The distinct sentences are indexed in a temporary
    folder (`hf_siamese.retrieval.index.lexical`, bm25s's Lucene BM25; `settings`: its tokenizing and weighting, default
    English stemming and stopwords) and each is searched against them; a sentence sharing no term with any other
    pairs with none (fewer than `neighbours` pairs where fewer sentences share its terms)."""
    from ..retrieval.index.lexical import build_lexical_index, require_lexical
    from ..storage import temporary_folder

    _check_neighbours(neighbours, "bm25 neighbours")
    unique = _distinct(sentences, "bm25_pairs")
    require_lexical(settings.stemmer if settings is not None else True)
    with temporary_folder("bm25") as folder:
        index = build_lexical_index(unique, folder, settings)
        _, found = index.search(unique, min(neighbours + 1, len(unique)))
        del index  # the memory-mapped matrices close before the folder goes (Windows)
    return _pairs_of_hits(unique, found, neighbours, exclude)


def silver_pairs(
    sentences: Sequence[str],
    bi_encoder: Any,
    teacher: Any,
    neighbours: int = 3,
    *,
    bm25_neighbours: int = 0,
    gold_pairs: Iterable[tuple[str, str]] = (),
    score_range: tuple[float, float] = (0.0, 1.0),
    batch_size: int = 64,
    show_progress_bar: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Any:
    """A `datasets.Dataset` of silver pairs `sentence1, sentence2, score`: the `neighbour_pairs` of the sentences by
    the bi-encoder (and, with `bm25_neighbours`, their `bm25_pairs`), gold pairs left out, scored by the cross-encoder
    `teacher` with its activation (a regression cross-encoder's sigmoid: 0..1), mapped linearly onto `score_range`
    (the gold scores' range, e.g. (0, 5) for STSb). `neighbours=0` samples by BM25 alone (no bi-encoder needed).
    With `cache_dir` the scores are streamed there and a stopped run resumes (`score_store.stored_scores`)."""
    import datasets

    from ..evaluation.pairs import score_pairs
    from ..storage.score_store import stored_scores, teacher_id

    low, high = score_range
    if not high > low:
        raise ValueError(f"score_range={score_range!r}: expected (low, high) with high > low")
    if getattr(teacher, "num_labels", 1) != 1 or not callable(getattr(teacher, "predict", None)):
        raise ValueError("silver_pairs: the teacher must be a one-output cross-encoder (a .predict(pairs) scorer)")
    check_sampling(neighbours, bm25_neighbours)
    gold_pairs = list(gold_pairs)
    found: dict[tuple[str, str], None] = {}
    if neighbours:
        found.update(dict.fromkeys(neighbour_pairs(
            sentences, bi_encoder, neighbours, exclude=gold_pairs, batch_size=batch_size,
            show_progress_bar=show_progress_bar,
        )))  # fmt: skip
    if bm25_neighbours:
        seen = {frozenset(pair) for pair in found}
        found.update(
            (pair, None)
            for pair in bm25_pairs(sentences, bm25_neighbours, exclude=gold_pairs)
            if frozenset(pair) not in seen
        )
    pairs = list(found)
    if not pairs:
        raise ValueError("silver_pairs: every sampled pair is a gold pair; nothing to label")

    def score(chunk: list[tuple[str, str]]) -> np.ndarray:
        return score_pairs(teacher, chunk, batch_size, show_progress_bar)

    if cache_dir is None:
        scores = score(pairs)
    else:
        scores = stored_scores(
            score, pairs, cache_dir, teacher_id=f"{teacher_id(teacher)} (activation)", show_progress=print
        )
    scores = scores.astype(np.float64)
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


__all__ = ["bm25_pairs", "check_sampling", "neighbour_pairs", "silver_pairs"]
