"""The second stage of a search: a cross-encoder re-scores a first stage's hits.

Any object with `predict(pairs, batch_size=..., show_progress_bar=...) -> one score per (query, text) pair` reranks
(`hf_siamese.cross_encoder.CrossEncoder`, or sentence-transformers' `CrossEncoder`); retrieval/ does not import the
cross-encoder package, it only calls `predict`. `VectorIndex.search(..., rerank=, rerank_top=)` and
`evaluate_retrieval(..., rerank=, rerank_top=)` use it; `rerank_hits` works on any first stage's hits.

Score fusion: with a `first_stage_weight` w > 0 (given, or the reranker's own `first_stage_weight`, which
`hf-siamese train-reranker` chooses on held-out queries and saves in the cross-encoder's config.json), the hits are
ordered by `(1 - w) * z(reranker score) + w * z(first-stage score)`, each standardized over the query's hits. A
reranker trained on a few hundred queries is a noisy judge on its own; fused with the first stage it keeps what the
first stage already ranks well (on SciFact: benchmarks/RESULTS.md, bench_cross_encoder_scifact).

Over a hybrid first stage the hits carry each stage's own score (`dense_score`, `lexical_score`: hybrid.stage_scores);
with `stage_weights` {"dense": a, "lexical": b} (given, or the reranker's own, chosen by `train-reranker` where they
measured better than the two-score order) three scores are fused: `(1 - a - b) z(reranker) + a z(dense) + b
z(lexical)` (`fuse_stages`; a hit one stage did not find takes that stage's lowest standardized score).

Never worse than the first stage: where the weights leave the reranker no share (w = 1, or a + b = 1) the hits keep
the first stage's order exactly, and the reranker is not run.

Saved weights rank only the corpus they were chosen on: `train-reranker` (and `eval --choose-fusion`) record that
corpus with them (`fusion_corpus`: its name and `fingerprint.corpus_fingerprint`). Where the caller's `corpus` is
another one, or unknown, and no weight is given, the hits take the setting-free order instead: the reciprocal-rank
fusion of the reranker's order and the first stage's (over a hybrid first stage, the dense and the lexical orders:
three orders), with a warning that says so and how to choose weights for this corpus. On SciFact's held-out claims
weights chosen there beat it; on another corpus they ranked 2.3 nDCG@10 below the first stage, the RRF 0.1 above.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exact import best_first
from ..index.parts import check_top_k
from .hybrid import reciprocal_rank_scores

logger = logging.getLogger(__name__)

RERANK_TOP = 100  # first-stage hits per query the reranker re-scores by default


def saved_weights_apply(reranker: Any, corpus: str | None) -> bool:
    """Whether the reranker's saved fusion weights may rank the corpus of fingerprint `corpus`: they give the
    reranker less than everything (`first_stage_weight` > 0 or `stage_weights`), and were chosen on that corpus
    (its `fusion_corpus` record names the same fingerprint). A reranker with no saved weights ranks by itself."""
    record = getattr(reranker, "fusion_corpus", None)
    return isinstance(record, dict) and corpus is not None and record.get("fingerprint") == corpus


def has_saved_weights(reranker: Any) -> bool:
    """Whether the reranker carries fusion weights of its own (`first_stage_weight` > 0 or `stage_weights`)."""
    return bool(getattr(reranker, "first_stage_weight", 0.0) or getattr(reranker, "stage_weights", None))


def _warn_setting_free(reranker: Any, corpus: str | None) -> None:
    record = getattr(reranker, "fusion_corpus", None)
    chosen = f"chosen on {record.get('name', 'another corpus')!r}" if isinstance(record, dict) else "of unknown origin"
    here = "an unknown corpus" if corpus is None else "another corpus"
    logger.warning(
        "rerank: the reranker's saved fusion weights were %s; these hits come from %s, so they are ranked by the "
        "setting-free order (reciprocal ranks of the reranker's and the first stage's orders). Choose weights for this "
        "corpus on its dev or train queries ('hf-siamese eval BEIR_DIR --rerank CE --choose-fusion'), or give "
        "--first-stage-weight",
        chosen,
        here,
    )


def check_reranker(reranker: Any) -> None:
    """Raise `ValueError` unless `reranker` has a callable `predict`."""
    if not callable(getattr(reranker, "predict", None)):
        raise ValueError(
            f"rerank: expected a cross-encoder (an object with .predict(pairs) -> one score per pair), got "
            f"{type(reranker).__name__}; load one with hf_siamese.cross_encoder.CrossEncoder.from_pretrained(DIR)"
        )


def check_first_stage_weight(value: Any) -> float:
    """`value` as a float in [0, 1], or `ValueError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) or not 0 <= value <= 1:
        raise ValueError(
            f"first_stage_weight={value!r}: expected a number in [0, 1] (0: the reranker's order alone, 1: the first "
            "stage's order)"
        )
    return float(value)


def first_stage_weight_of(reranker: Any, given: Any = None) -> float:
    """The fusion weight to use: `given`, else the reranker's own `first_stage_weight` (0 when it has none)."""
    return check_first_stage_weight(given if given is not None else getattr(reranker, "first_stage_weight", 0.0) or 0.0)


STAGES = ("dense", "lexical")  # the first stages whose own scores a hybrid search's hits carry


def check_stage_weights(value: Any) -> dict[str, float] | None:
    """`value` as {"dense": a, "lexical": b} (each in [0, 1], a + b <= 1: the reranker's share is the rest), None
    for None, or `ValueError` naming it."""
    if value is None:
        return None
    numbers = isinstance(value, dict) and set(value) == set(STAGES)
    numbers = numbers and all(
        not isinstance(v, bool) and isinstance(v, int | float | np.integer | np.floating) and 0 <= v <= 1
        for v in value.values()
    )
    if not numbers or sum(value.values()) > 1 + 1e-9:
        raise ValueError(
            f"stage_weights={value!r}: expected {{'dense': a, 'lexical': b}}, each in [0, 1] with a + b <= 1 (the "
            "reranker's share is 1 - a - b)"
        )
    return {stage: float(value[stage]) for stage in STAGES}


def stage_weights_of(reranker: Any, given: Any = None) -> dict[str, float] | None:
    """The three-score weights to use: `given`, else the reranker's own `stage_weights` (None when it has none)."""
    return check_stage_weights(given if given is not None else getattr(reranker, "stage_weights", None))


def reranker_has_no_share(first_stage_weight: float, stage_weights: dict[str, float] | None) -> bool:
    """Whether the weights leave the reranker nothing (w = 1, or dense + lexical = 1): the first stage's order
    stands, exactly (the never-worse rule)."""
    share = 1 - sum(stage_weights.values()) if stage_weights is not None else 1 - first_stage_weight
    return share <= 1e-12


def _standardized(values: np.ndarray) -> np.ndarray:
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


def fuse_stages(reranker_scores: Any, stage_scores: dict[str, Any], weights: dict[str, float]) -> np.ndarray:
    """One query's fused scores: `(1 - sum(w)) * z(reranker) + sum over stages of w[s] * z(stage s)`, z standardizing
    over the query's candidates (mean 0, standard deviation 1; equal scores give zeros), so the scales meet. A
    candidate a stage did not score (None or NaN) takes that stage's lowest standardized score."""
    reranker_scores = np.asarray(reranker_scores, dtype=np.float64)
    share = 1 - sum(weights.values())
    fused = share * _standardized(reranker_scores) if share > 0 else np.zeros_like(reranker_scores)
    for stage, weight in weights.items():
        if weight == 0:
            continue
        values = np.array([np.nan if v is None else v for v in stage_scores[stage]], dtype=np.float64)
        if values.shape != reranker_scores.shape:
            raise ValueError(f"fuse_stages: {values.shape[0]} {stage} scores for {reranker_scores.shape[0]} candidates")
        known = ~np.isnan(values)
        z = np.zeros_like(values)
        if known.any():
            z[known] = _standardized(values[known])
            z[~known] = z[known].min()
        fused += weight * z
    return fused


def fuse_scores(reranker_scores: Any, first_stage_scores: Any, first_stage_weight: float) -> np.ndarray:
    """One query's two-score order: `(1 - w) * z(reranker) + w * z(first stage)` (`fuse_stages` with one stage); w = 0
    gives the reranker's scores themselves."""
    if first_stage_weight == 0:
        return np.asarray(reranker_scores, dtype=np.float64)
    return fuse_stages(reranker_scores, {"first-stage": first_stage_scores}, {"first-stage": first_stage_weight})


def _stage_weights(reranker: Any, given: Any, hits: Sequence[Sequence[Any]]) -> dict[str, float] | None:
    """The three-score weights `rerank_hits` uses: `given` (the hits must carry each stage's score), else the
    reranker's own where every hit carries them, else None (the two-score order)."""
    weights = stage_weights_of(reranker, given)
    if weights is None:
        return None
    carried = all(isinstance(hit, dict) and all(f"{s}_score" in hit for s in STAGES) for found in hits for hit in found)
    if not carried and given is not None:
        raise ValueError(
            f"stage_weights={given!r} fuse each stage's own score, but the hits carry no 'dense_score' / "
            "'lexical_score' (a hybrid search's hits do); pass first_stage_weight instead"
        )
    return weights if carried else None


def check_rerank(reranker: Any, rerank_top: Any, top_k: int, available: int | None = None) -> int:
    """How many first-stage hits per query to rerank: `rerank_top`, checked (a positive int, at least `top_k`; the
    reranker can only return hits the first stage found) and clamped, with one warning, to the `available`
    documents when it asks for more."""
    check_reranker(reranker)
    if isinstance(rerank_top, bool) or not isinstance(rerank_top, int | np.integer) or rerank_top < 1:
        raise ValueError(f"rerank_top={rerank_top!r}: expected a positive int (first-stage hits per query to rerank)")
    if rerank_top < top_k:
        raise ValueError(
            f"rerank_top={rerank_top} is below top_k={top_k}: the reranker returns only hits the first stage "
            f"found; pass rerank_top >= {top_k}"
        )
    if available is not None and rerank_top > available:
        logger.warning(
            "rerank_top=%d is more than the %d documents searched: reranking all %d", rerank_top, available, available
        )
        return int(available)
    return int(rerank_top)


def rerank_hits(
    reranker: Any,
    queries: str | Sequence[str],
    hits: Sequence[Sequence[dict[str, Any]]],
    top_k: int | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    first_stage_weight: float | None = None,
    stage_weights: dict[str, float] | None = None,
    corpus: str | None = None,
) -> list[list[dict[str, Any]]]:
    """Re-sort each query's first-stage `hits` by the reranker's score of (query, hit text), fused with the hits'
    first-stage scores when the fusion weight is above 0, or with each stage's own score (three scores) where the
    hits carry them (`dense_score`, `lexical_score`: a hybrid search) and stage weights are set; or, where the
    reranker's saved weights were chosen on another corpus than `corpus`, in the setting-free order (see the module).

    Args:
        reranker: an object with `predict(pairs, batch_size=, show_progress_bar=)` returning one score per pair.
        queries: one text per query (the raw query: no prompt).
        hits: per query, the first stage's hits, best first: dicts with `"text"` (and usually `"id"`, `"score"`,
            `"rank"`, as `VectorIndex.search` returns them).
        top_k: hits kept per query after reranking (default: all).
        batch_size, show_progress_bar: passed to `predict`.
        first_stage_weight: w in [0, 1] of `fuse_scores`; default: the reranker's `first_stage_weight` (0 when it
            has none: the reranker's order alone). Above 0 every hit needs its first-stage `"score"`.
        stage_weights: {"dense": a, "lexical": b} of `fuse_stages`; default: the reranker's `stage_weights`, used
            where every hit carries `dense_score` and `lexical_score` (else the two-score order). Given, the hits must
            carry them. A `first_stage_weight` given without `stage_weights` asks for the two-score order.
        corpus: the fingerprint of the corpus the hits come from (`fingerprint.corpus_fingerprint`), for the saved
            weights' rule; None: unknown (saved weights then do not apply).

    Returns:
        Per query, copies of its hits best first: `"score"` (the fused score, or the reranker's when w is 0) and
        `"rank"` (1, 2, ...) are the two stages'; `"reranker_score"` (when fused) the reranker's; `"first_stage_score"`
        (when the hit had a score) and `"first_stage_rank"` (its rank, or its 1-based position) are the first
        stage's. Equal scores keep the first stage's order. All queries' pairs go to ONE `predict` call, each distinct
        pair once, so a cross-encoder sorts its batches across queries.
    """
    check_reranker(reranker)
    weight = first_stage_weight_of(reranker, first_stage_weight)
    queries = [queries] if isinstance(queries, str) else list(queries)
    if isinstance(hits, str | bytes) or not isinstance(hits, Sequence) or len(hits) != len(queries):
        count = len(hits) if isinstance(hits, Sequence) else type(hits).__name__
        raise ValueError(f"hits: expected one list of hits per query ({len(queries)} queries), got {count}")
    keep = None if top_k is None else check_top_k(top_k)
    given = first_stage_weight is not None or stage_weights is not None
    if not given and has_saved_weights(reranker) and not saved_weights_apply(reranker, corpus):
        _warn_setting_free(reranker, corpus)
        return _setting_free(reranker, queries, hits, keep, batch_size, show_progress_bar)
    stages = _stage_weights(reranker, stage_weights, hits) if first_stage_weight is None or stage_weights else None
    if reranker_has_no_share(weight, stages):
        logger.info("rerank: the weights give the reranker no share; the first stage's order stands")
        return [
            [
                {**hit, "rank": rank, "first_stage_rank": hit.get("rank", rank)}
                for rank, hit in enumerate(found[:keep], 1)
            ]
            for found in hits
        ]
    unique = list(dict.fromkeys(_pairs(queries, hits, weight if stages is None else 0.0)))
    scores = _pair_scores(reranker, unique, batch_size, show_progress_bar)
    where = {pair: position for position, pair in enumerate(unique)}
    results = []
    for query, found in zip(queries, hits, strict=True):
        found_scores = scores[[where[(query, hit["text"])] for hit in found]] if found else scores[:0]
        if stages is not None:
            by_stage = {stage: [hit[f"{stage}_score"] for hit in found] for stage in STAGES}
            final = fuse_stages(found_scores, by_stage, stages)
        else:
            final = (
                fuse_scores(found_scores, [hit.get("score") for hit in found], weight) if weight > 0 else found_scores
            )
        order = best_first(final[None], np.arange(len(final))[None], keep)[1][0]  # ties: the first stage's order
        reranked = []
        for rank, position in enumerate(order.tolist(), start=1):
            hit = found[position]
            first = {"first_stage_rank": hit.get("rank", position + 1)}
            if "score" in hit:
                first["first_stage_score"] = hit["score"]
            if weight > 0 or stages is not None:
                first["reranker_score"] = float(found_scores[position])
            reranked.append({**hit, "score": float(final[position]), "rank": rank, **first})
        results.append(reranked)
    return results


def _setting_free(
    reranker: Any, queries: list[Any], hits: Any, keep: int | None, batch_size: int, show_progress_bar: bool
) -> list[list[dict[str, Any]]]:
    """`rerank_hits` in the setting-free order: per query, the reciprocal-rank fusion of the reranker's order and
    the first stage's (the hits' order; over hybrid hits, which carry each stage's score, the dense and the lexical
    orders instead). `"score"` is the fused reciprocal-rank score, `"reranker_score"` the reranker's."""
    unique = list(dict.fromkeys(_pairs(queries, hits, 0.0)))
    scores = _pair_scores(reranker, unique, batch_size, show_progress_bar)
    where = {pair: position for position, pair in enumerate(unique)}
    results = []
    for query, found in zip(queries, hits, strict=True):
        own = [float(scores[where[(query, hit["text"])]]) for hit in found]
        lists = [sorted(range(len(found)), key=lambda i: (-own[i], i))]
        if found and all(all(f"{stage}_score" in hit for stage in STAGES) for hit in found):
            for stage in STAGES:  # each stage's own order of the hits it found
                scored = [
                    (hit[f"{stage}_score"], i) for i, hit in enumerate(found) if hit[f"{stage}_score"] is not None
                ]
                lists.append([i for _, i in sorted(scored, key=lambda item: (-item[0], item[1]))])
        else:
            lists.append(list(range(len(found))))
        reranked = []
        for rank, (i, fused) in enumerate(reciprocal_rank_scores(lists)[:keep], 1):
            hit = found[i]
            first = {"first_stage_rank": hit.get("rank", i + 1), "reranker_score": own[i]}
            if "score" in hit:
                first["first_stage_score"] = hit["score"]
            reranked.append({**hit, "score": fused, "rank": rank, **first})
        results.append(reranked)
    return results


def _pairs(queries: list[Any], hits: Sequence[Sequence[Any]], weight: float) -> list[tuple[str, str]]:
    """Every (query, hit text) pair, in order; a hit without a text, or without a first-stage score where `weight`
    above 0 fuses with one, is refused, naming it."""
    pairs = []
    for row, (query, found) in enumerate(zip(queries, hits, strict=True)):
        if not isinstance(query, str):
            raise ValueError(f"queries[{row}] is {type(query).__name__} ({query!r:.60}); expected a str")
        for position, hit in enumerate(found):
            if not isinstance(hit, dict) or not isinstance(hit.get("text"), str):
                raise ValueError(f"hits[{row}][{position}] has no text (a str): {hit!r:.80}")
            score = hit.get("score")
            if weight > 0 and (isinstance(score, bool) or not isinstance(score, int | float | np.number)):
                raise ValueError(
                    f"hits[{row}][{position}] has no first-stage 'score' (a number): {hit!r:.80}; fusing with "
                    f"first_stage_weight={weight} needs one per hit (pass first_stage_weight=0 to rank by the "
                    "reranker alone)"
                )
            pairs.append((query, hit["text"]))
    return pairs


def _pair_scores(reranker: Any, pairs: list[tuple[str, str]], batch_size: int, show_progress_bar: bool) -> np.ndarray:
    """float32 reranker scores of `pairs` in ONE `predict` call; anything but one score per pair is refused."""
    scores = np.zeros(0, dtype=np.float32)
    if pairs:
        scores = np.asarray(
            reranker.predict(pairs, batch_size=batch_size, show_progress_bar=show_progress_bar), dtype=np.float32
        )
    if scores.shape != (len(pairs),):
        raise ValueError(
            f"the reranker gave scores of shape {scores.shape} for {len(pairs)} pairs; reranking needs one score "
            "per pair (a cross-encoder with one output)"
        )
    return scores


__all__ = [
    "RERANK_TOP",
    "check_first_stage_weight",
    "check_stage_weights",
    "fuse_stages",
    "reranker_has_no_share",
    "stage_weights_of",
    "check_rerank",
    "check_reranker",
    "first_stage_weight_of",
    "fuse_scores",
    "rerank_hits",
    "saved_weights_apply",
]
