"""Fusing two ranked lists of a first stage: the dense search's and the lexical (BM25) search's.

Both take (scores, rows) arrays `(queries, depth)`, best first, row -1 where a list is shorter; the fused list of a
query is the union of its two lists (so a reranker sees every candidate either stage found), best first:

- reciprocal-rank fusion (`fusion="rrf"`, the default: nothing to choose): a row scores the sum over the lists that
  hold it of `1 / (60 + rank)`;
- z-score fusion (`fusion="zscore"`): each list's scores are standardized over that list (a row missing from a list
  takes the list's lowest z), and a row scores `dense_weight * z_dense + (1 - dense_weight) * z_lexical`;
  `choose_dense_weight` picks the weight on held-out queries with relevance judgements.

Ties go to the row ranked higher by the list that weighs more (the dense list under rrf and from weight 0.5 on), then
by the other list, then the lower row: `dense_weight=0` gives exactly the lexical list's order and `1` the dense
list's, each followed by the rows only the other list found.

`check_first_stage` is the one rule for which settings apply to which first stage (every command and entry point
calls it): a setting that does not apply is refused, never ignored. An index with a learned-sparse part (`sparse_part`)
adds the first stage "sparse" (its list alone), and its hybrid fuses dense + sparse (+ BM25 where the index has it):
`stage_lists` is the one rule for which lists a first stage reads; more than two are fused by reciprocal ranks only
(`fuse_runs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FIRST_STAGES = ("dense", "lexical", "hybrid")  # what any corpus has (mining, eval of a set, a reranker's training)
INDEX_FIRST_STAGES = (*FIRST_STAGES, "sparse")  # an index with a learned-sparse part adds its list alone
SPARSE_PART = "build_index(..., sparse_model=...) or add_sparse() ('hf-siamese index --sparse-model / --add-sparse')"
FUSIONS = ("rrf", "zscore")
RRF_K = 60
# How deep each list is read before fusing when no reranker sets the depth: the same for every top_k, so that asking
# for more hits never reorders the best ones (RRF and z-scores both change with a list's depth); 100 is the depth
# `eval` fuses at (its deepest cut-off, recall@100) and a reranker's default.
FUSION_DEPTH = 100
WEIGHT_GRID = tuple(round(0.1 * i, 1) for i in range(11))

Ranked = tuple[np.ndarray, np.ndarray]


LEXICAL_FLAGS = "--language, --no-stemmer, --no-stopwords, --k1, --b"


def default_first_stage() -> str:
    """The default first stage: `"hybrid"` where bm25s is installed (`pip install 'hf-siamese[lexical]'`), else
    `"dense"`; the one `index` builds by default, so the one a reranker is trained for and its negatives mined by."""
    import importlib.util

    return "hybrid" if importlib.util.find_spec("bm25s") is not None else "dense"


def check_first_stage(
    first_stage: str,
    fusion: str | None = None,
    dense_weight: float | None = None,
    lexical_settings: Any = None,
    sparse_part: bool = False,
) -> str:
    """The one rule for a first stage's settings, used by every command and entry point; returns `first_stage`.

    `fusion` (None: rrf) applies to "hybrid" only, `dense_weight` (0-1) to "hybrid" with `fusion="zscore"` only, and
    `lexical_settings` (BM25's) to "lexical" and "hybrid" only: a setting given where it does not apply is refused
    with one line saying why, never ignored. "sparse" is accepted where `sparse_part` (an index with a learned-sparse
    part, or its recorded pipeline: the index itself checks it has the part)."""
    if first_stage == "sparse" and not sparse_part:
        raise ValueError(
            f"first stage 'sparse'; accepted: {', '.join(FIRST_STAGES)} (the sparse first stage searches the "
            f"learned-sparse part of an index folder, added by {SPARSE_PART})"
        )
    if first_stage not in INDEX_FIRST_STAGES:
        stages = INDEX_FIRST_STAGES if sparse_part else FIRST_STAGES
        raise ValueError(f"first stage {first_stage!r}; accepted: {', '.join(stages)}")
    if fusion is not None and fusion not in FUSIONS:
        raise ValueError(f"fusion {fusion!r}; accepted: {', '.join(FUSIONS)} (rrf: reciprocal ranks, no setting)")
    if fusion is not None and first_stage != "hybrid":
        raise ValueError(
            f"fusion={fusion!r} (--fusion) fuses the two lists of the hybrid first stage; the {first_stage} first "
            "stage has one list: give first_stage='hybrid' (--first-stage hybrid), or no fusion"
        )
    if dense_weight is not None:
        if isinstance(dense_weight, bool) or not isinstance(dense_weight, int | float) or not 0 <= dense_weight <= 1:
            raise ValueError(f"dense_weight={dense_weight!r}; accepted: a number from 0 to 1 (0: lexical alone)")
        if first_stage != "hybrid":
            raise ValueError(
                f"dense_weight={dense_weight!r} (--dense-weight) weighs the dense list of the hybrid first stage "
                f"(--first-stage hybrid --fusion zscore); the {first_stage} first stage has one list, nothing to weigh"
            )
        if fusion != "zscore":
            raise ValueError(
                f"dense_weight={dense_weight!r} applies to fusion='zscore' (--fusion zscore), not {fusion or 'rrf'!r} "
                "(reciprocal ranks take no weight)"
            )
    if lexical_settings is not None and first_stage in ("dense", "sparse"):
        raise ValueError(
            f"lexical_settings, BM25's ({LEXICAL_FLAGS}), apply to the lexical and hybrid first stages, not to the "
            f"{first_stage} one: give a lexical or hybrid first stage, or no BM25 settings"
        )
    return first_stage


def stage_lists(first_stage: str, lexical: bool, sparse: bool, fusion: str | None = None) -> tuple[str, ...]:
    """The one rule for which lists a first stage reads, in fusion order: its own list, or for "hybrid" the dense
    list, BM25's where the store has its lexical part (`lexical`) and the learned-sparse list where it has a sparse
    part (`sparse`). An index with neither gives ("dense",): the caller refuses it (no lexical part, as ever). More
    than two lists are fused by reciprocal ranks only: `fusion="zscore"` is refused."""
    if first_stage != "hybrid":
        return (first_stage,)
    lists = ("dense",) + (("lexical",) if lexical else ()) + (("sparse",) if sparse else ())
    if len(lists) > 2 and fusion == "zscore":
        raise ValueError(
            f"fusion='zscore' (--fusion zscore) weighs two lists; this index's hybrid fuses {len(lists)} "
            f"({', '.join(lists)}): give fusion='rrf' (the default), or first_stage='dense' / 'lexical' / 'sparse'"
        )
    return lists


def fuse_runs(
    runs: dict[str, Ranked], fusion: str | None = None, dense_weight: float | None = None, rrf_k: int = RRF_K
) -> Ranked:
    """The first stage's (scores, rows) from its lists' runs (`stage_lists` order): one list as it is, two by `fuse`
    (the first weighs as the dense list), more by reciprocal ranks (`reciprocal_rank_fusion` per query: ties by the
    first list's rank, then the next's), `(queries, width)`, -1 padded."""
    lists = list(runs.values())
    if len(lists) == 1:
        return lists[0]
    if len(lists) == 2:
        return fuse(lists[0], lists[1], fusion, dense_weight, rrf_k)
    if (fusion or "rrf") != "rrf" or dense_weight is not None:
        raise ValueError(f"{len(lists)} lists ({', '.join(runs)}) are fused by reciprocal ranks only (fusion='rrf')")
    fused = []
    for q in range(len(lists[0][1])):
        keyed = [[int(r) for r in rows[q] if r >= 0] for _, rows in lists]
        fused.append([(score, row) for row, score in reciprocal_rank_scores(keyed, rrf_k)])
    return _padded(fused)


def _padded(fused: list[list[tuple[float, int]]]) -> Ranked:
    """Per query (score, row) hits, best first -> `(queries, width)` scores and rows, width the longest, -1 padded."""
    width = max((len(hits) for hits in fused), default=0)
    scores = np.zeros((len(fused), width), dtype=np.float32)
    rows = np.full((len(fused), width), -1, dtype=np.int64)
    for q, hits in enumerate(fused):
        if hits:
            scores[q, : len(hits)], rows[q, : len(hits)] = zip(*hits, strict=True)
    return scores, rows


def _standardized(scores: np.ndarray, rows: np.ndarray) -> dict[int, float]:
    found = rows >= 0
    values = scores[found].astype(np.float64)
    if len(values) == 0:
        return {}
    spread = values.std()
    z = (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)
    return dict(zip(rows[found].tolist(), z.tolist(), strict=True))


def _ranks(rows: np.ndarray) -> dict[int, int]:
    return {int(row): rank for rank, row in enumerate(rows.tolist(), 1) if row >= 0}


def fuse(
    dense: Ranked, lexical: Ranked, fusion: str | None = None, dense_weight: float | None = None, rrf_k: int = RRF_K
) -> Ranked:
    """The fused (scores, rows) of each query, `(queries, width)` with width the largest union, -1 padded."""
    fusion = fusion or "rrf"
    check_first_stage("hybrid", fusion, dense_weight)
    weight = 0.5 if dense_weight is None else float(dense_weight)
    fused: list[list[tuple[float, int]]] = []
    for d_scores, d_rows, l_scores, l_rows in zip(dense[0], dense[1], lexical[0], lexical[1], strict=True):
        d_rank, l_rank = _ranks(d_rows), _ranks(l_rows)
        union = list(d_rank) + [row for row in l_rank if row not in d_rank]
        if fusion == "rrf":
            score = {
                row: (1 / (rrf_k + d_rank[row]) if row in d_rank else 0.0)
                + (1 / (rrf_k + l_rank[row]) if row in l_rank else 0.0)
                for row in union
            }
        else:
            d_z, l_z = _standardized(d_scores, d_rows), _standardized(l_scores, l_rows)
            d_floor, l_floor = min(d_z.values(), default=0.0), min(l_z.values(), default=0.0)
            score = {row: weight * d_z.get(row, d_floor) + (1 - weight) * l_z.get(row, l_floor) for row in union}
        # Equal scores: the row ranked higher by the list that weighs more (dense from 0.5 on), then by the other,
        # so weight 0 / 1 give exactly the lexical / dense order, the rows only the other list found after them.
        first, second = (d_rank, l_rank) if fusion == "rrf" or weight >= 0.5 else (l_rank, d_rank)
        last = len(union) + 1
        union.sort(key=lambda row: (-score[row], first.get(row, last), second.get(row, last), row))
        fused.append([(score[row], row) for row in union])
    return _padded(fused)


def reciprocal_rank_fusion(ranked_lists: Sequence[Sequence[Any]], rrf_k: int = RRF_K) -> list[Any]:
    """Keys of several best-first lists fused by reciprocal ranks (`sum 1 / (rrf_k + rank)` over the lists holding a
    key), best first; equal scores keep the order of the first list, then of the next. The setting-free fusion of any
    number of stages (the reranker's, the dense and the lexical orders: `evaluate_retrieval`'s `rerank_rrf3_`)."""
    return [key for key, _ in reciprocal_rank_scores(ranked_lists, rrf_k)]


def reciprocal_rank_scores(ranked_lists: Sequence[Sequence[Any]], rrf_k: int = RRF_K) -> list[tuple[Any, float]]:
    """`reciprocal_rank_fusion`'s order with each key's fused score: (key, sum 1 / (rrf_k + rank)), best first."""
    score: dict[Any, float] = {}
    position: dict[Any, list[float]] = {}
    for number, keys in enumerate(ranked_lists):
        for rank, key in enumerate(keys, 1):
            score[key] = score.get(key, 0.0) + 1 / (rrf_k + rank)
            position.setdefault(key, [float("inf")] * len(ranked_lists))[number] = rank
    return [(key, score[key]) for key in sorted(score, key=lambda key: (-score[key], position[key]))]


def choose_dense_weight(
    dense: Ranked,
    lexical: Ranked,
    quality: Callable[[np.ndarray], float],
    grid: Sequence[float] = WEIGHT_GRID,
) -> tuple[float, dict[float, float]]:
    """The z-score fusion weight of the dense list that maximizes `quality(fused rows)` (e.g. nDCG@10 of held-out
    queries, the lower weight on ties) and every weight's quality."""
    measured = {float(w): float(quality(fuse(dense, lexical, "zscore", w)[1])) for w in grid}
    best = max(measured, key=lambda w: (measured[w], -w))
    return best, measured


def stage_scores(rows: np.ndarray, runs: dict[str, Ranked]) -> list[list[dict[str, float | None]]]:
    """Per query, per row of `rows` (the fused order, -1 skipped), each stage's own score of that row under
    `"{stage}_score"` (`runs`: stage name -> its (scores, rows)); None where the stage did not find the row. What a
    reranker fuses with its own score (`rerank.fuse_stages`)."""
    found = []
    for q, fused_rows in enumerate(rows):
        by_stage = {
            stage: {int(r): float(v) for v, r in zip(scores[q], stage_rows[q], strict=True) if r >= 0}
            for stage, (scores, stage_rows) in runs.items()
        }
        found.append([{f"{stage}_score": by_stage[stage].get(int(r)) for stage in runs} for r in fused_rows if r >= 0])
    return found


def hits_of(
    scores: np.ndarray, rows: np.ndarray, lookup: Callable[[list[int]], dict[int, tuple[Any, str]]], limit: int
) -> list[list[dict[str, Any]]]:
    """`{"id", "text", "score", "rank"}` hits of each query (at most `limit`), from row arrays; `lookup(rows)` gives
    each row's (id, text)."""
    found = sorted({int(i) for i in rows[:, :limit].ravel() if i >= 0})
    by_row = lookup(found) if found else {}
    return [
        [
            {"id": by_row[row][0], "text": by_row[row][1], "score": float(score), "rank": rank}
            for rank, (score, row) in enumerate(
                ((s, int(r)) for s, r in zip(row_s[:limit], row_r[:limit], strict=True) if r >= 0), 1
            )
        ]
        for row_s, row_r in zip(scores, rows, strict=True)
    ]
