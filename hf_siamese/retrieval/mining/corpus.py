"""Hard-negative mining, the one implementation behind `mine_hard_negatives`, for a corpus of any size (a list too),
on the corpus machinery: the corpus is embedded by `encode_corpus` into Parquet shards (resumable, reused by a later
run), stacked once into a memory-mapped matrix (`corpus_matrix`), and each anchor's best candidates come from
`neighbour_search` (exact search a chunk at a time below `ann.EXACT_BELOW` vectors, an approximate faiss index above,
as for similar pairs). Never an anchors x corpus matrix, never the corpus texts in memory.

Memory: 8 bytes a corpus row (a hash of its text, which tells duplicates and positives apart without keeping the
texts), the anchors' and positives' vectors, and the chosen negatives; the texts of the chosen rows are read back from
the source at the end. The source is read three times (hashes, embedding, chosen texts), so it must be re-readable:
any `open_corpus` source but a one-shot iterator (a list of strings, a path or glob, a `datasets.Dataset` /
`IterableDataset`, a Hub dataset id, opened once).

The rules (equal to a brute-force search over all texts, tested): ranks over distinct texts, the positive, every
positive of the same anchor and the anchor itself excluded, then `max_score` and `margin`, then `sampling`.

The lists a first stage reads (`lists`, `mining.check_mining_stage`): "dense" ranks by the model's vectors (above);
"lexical" by BM25 (`lexical.py`, built in the hashes' pass, a shard of texts at a time, into `embeddings_dir/lexical`
when given, else a temporary folder); "sparse" by a learned-sparse model's exact ranking (`mining_sparse`: its corpus
matrix built in the same pass); several lists are fused over each anchor's best `range_max` distinct texts of each by
reciprocal ranks (`hybrid.fuse_runs`, "rrf": as an index's hybrid fuses them). The filters `max_score` / `margin`
always compare the mining model's scores (a candidate's to the anchor: the dense model's similarity read from its
vector, or a sparse model's dot product): with "lexical" the corpus is embedded only for them, or when
`embeddings_dir` is given to keep it.
"""

from __future__ import annotations

import array
import os
import random
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...data.corpus_stream import open_corpus, resolve_corpus
from ...storage import replace_folder, staging_folder, temporary_folder
from ..corpus import DEFAULT_SHARD_SIZE, MANIFEST, encode_corpus
from ..corpus_search import work_folder
from ..index.lexical import LEXICAL_DIR, SETTINGS_FILE, LexicalBuilder, LexicalIndex, LexicalSettings
from ..index.matrix import Search, corpus_matrix, matrix_search, texts_of
from ..ranking.sparse import is_sparse_model
from .sparse import SparseBuilder, SparseSide

ROW_CHUNK = 2048  # dataset rows whose anchors are searched at a time: bounds the (anchors, k) result arrays
WIDEST = 64  # a search asks for at most WIDEST x the rows wanted (repeated texts or empty slots make it ask for more)


def check_source(source: Any) -> None:
    """ValueError for what cannot serve as a corpus to read several times: a one-shot iterator, or a folder of
    embeddings (which holds vectors and ids, not the texts the negatives are made of)."""
    if isinstance(source, str | os.PathLike) and (Path(source) / MANIFEST).is_file():
        where = os.fspath(source)
        raise ValueError(
            f"{where!r} holds corpus embeddings (encode_corpus / 'hf-siamese embed'), not the texts: pass the corpus "
            f"itself as the corpus and this folder as embeddings_dir (--embeddings-dir) to reuse its shards"
        )
    if isinstance(source, Iterator):
        raise ValueError(
            "the corpus is a one-shot iterator, read three times here (hashes, embedding, texts of the negatives): "
            "pass a list, a file or glob, or a datasets.Dataset / IterableDataset"
        )


def _row_keys(
    source: Any,
    text_column: str,
    id_column: str | None,
    wanted: set[int],
    builders: Sequence[Any] = (),
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> tuple[np.ndarray, dict]:
    """(hash of every row's text, int64; {key: first row} for the keys in `wanted`), one pass over the source, which
    also feeds each of `builders` (the lexical index, a sparse model's corpus matrix) `shard_size` texts at a time."""
    keys = array.array("q")
    first: dict[int, int] = {}
    texts: list[str] = []
    for row, (_, text) in enumerate(open_corpus(source, text_column, id_column)):
        key = hash(text)
        keys.append(key)
        if key in wanted and key not in first:
            first[key] = row
        if builders:
            texts.append(text)
            if len(texts) == shard_size:
                for builder in builders:
                    builder.add(texts)
                texts = []
    for builder in builders if texts else ():
        builder.add(texts)
    return np.frombuffer(keys, dtype=np.int64) if keys else np.empty(0, np.int64), first


def _distinct_rankings(
    search: Search, queries: np.ndarray, keys: np.ndarray, depth: int, all_hits_when_short: bool = False
) -> list[list[tuple]]:
    """Per query, its best `depth` corpus rows of distinct texts `(row, key, score)`, best first (the first row of
    texts that repeat, as the in-memory path ranks distinct documents). Queries whose first k rows hold fewer
    distinct texts are searched again with twice k, up to `WIDEST * depth` rows (then a ranking may stay shorter);
    with `all_hits_when_short` (a lexical search: a result shorter than k holds every hit) only full results are."""
    total, widest = len(keys), min(len(keys), WIDEST * depth)
    rankings: list[list[tuple]] = [[] for _ in range(queries.shape[0])]
    pending, k = np.arange(queries.shape[0]), min(total, depth)
    while len(pending):
        scores, rows = search(queries[pending], k)
        short = []
        for query, found_rows, found_scores in zip(pending.tolist(), rows.tolist(), scores.tolist(), strict=True):
            seen: set[int] = set()
            ranking = rankings[query] = []
            for row, score in zip(found_rows, found_scores, strict=True):
                key = int(keys[row]) if row >= 0 else None  # -1: an approximate index's empty slot
                if key is None or key in seen:
                    continue
                seen.add(key)
                ranking.append((row, key, score))
                if len(ranking) == depth:
                    break
            if len(ranking) < depth and k < widest and not (all_hits_when_short and found_rows[-1] < 0):
                short.append(query)
        pending, k = np.asarray(short, dtype=np.int64), min(widest, 2 * k)
    return rankings


def _fused_rankings(
    first: list[list[tuple]], second: list[list[tuple]], keys: np.ndarray, *more: list[list[tuple]]
) -> list[list[tuple]]:
    """Each query's distinct rankings of two lists or more (in fusion order: `first`, `second`, then `more`; the
    dense list first where it is read) fused by reciprocal ranks (`hybrid.fuse_runs`, "rrf", as an index's hybrid),
    over texts: a text several lists hold (maybe by two rows of a repeated text) is one candidate, under the row of
    the first list that holds it."""
    from ..fusion.hybrid import fuse_runs

    rankings = [first, second, *more]
    width = max((len(ranking) for lists in rankings for ranking in lists), default=0)
    shape = (len(rankings[0]), width)
    runs = {n: (np.zeros(shape, np.float32), np.full(shape, -1, np.int64)) for n in range(len(rankings))}
    for query in range(shape[0]):
        row_of: dict[int, int] = {}  # text -> its row in the fused list: the first list's that holds it
        for (scores, rows), ranking in zip(runs.values(), (lists[query] for lists in rankings), strict=True):
            for rank, (row, key, score) in enumerate(ranking):
                scores[query, rank], rows[query, rank] = score, row_of.setdefault(key, row)
    fused_scores, fused_rows = fuse_runs({str(n): run for n, run in runs.items()}, fusion="rrf")
    return [
        [(row, int(keys[row]), score) for row, score in zip(rows.tolist(), scores.tolist(), strict=True) if row >= 0]
        for scores, rows in zip(fused_scores, fused_rows, strict=True)
    ]


def _keep_lexical(built: Path, folder: Path) -> Path:
    """The lexical index built in a scratch folder, copied beside `folder/lexical` and swapped in whole
    (`storage.replace_folder`: an earlier run's stays complete until then)."""
    target = folder / LEXICAL_DIR
    if target.exists() and not (target / SETTINGS_FILE).is_file():
        raise ValueError(
            f"{os.fspath(target)!r} is in the way of the corpus's lexical index and is not one; move it away"
        )
    staging = staging_folder(target, "mine")
    try:
        shutil.copytree(built, staging, dirs_exist_ok=True)
        replace_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def mine_corpus(
    anchors: Sequence[str],
    positives: Sequence[str],
    model: Any,
    source: Any,
    embeddings_dir: str | os.PathLike | None,
    pick: Callable[..., list | None],
    *,
    num_negatives: int,
    range_min: int,
    range_max: int,
    seed: int,
    tokenizer: Any,
    batch_size: int,
    anchor_prompt: str,
    document_prompt: str,
    show_progress_bar: bool,
    text_column: str = "text",
    id_column: str | None = None,
    shard_size: int | None = None,
    approximate: bool | None = None,
    dtype: Any = None,
    lists: tuple[str, ...] = ("dense",),
    lexical_settings: LexicalSettings | None = None,
    model_scores: bool = True,
    sparse: tuple[Any, Any, str | None, str | None] | None = None,
) -> tuple[list[int], list[list[str]], int]:
    """(kept row numbers, their negatives' texts, distinct corpus texts): `mine_hard_negatives`' corpus path (see the
    module docstring). `model`: the mining model, dense or learned-sparse (its own list is "dense" or "sparse");
    `sparse`: (sparse model, its tokenizer, anchor prompt, document prompt; None: the model's own) where a "sparse"
    list is read or the mining model is sparse. `pick(ranked, positive_score, rng)` applies the filters and the
    sampling to one row's `[(row, score), ...]` (positives and the anchor already removed, in the order of the
    first stage, `lists` fused) and returns the chosen rows or None. With `model_scores` (the filters need them)
    the scores are the mining model's (the candidate's and the positive's to the anchor); without, a candidate's
    score is its first stage's and `positive_score` is 0 where the model's own list is not read."""
    check_source(source)
    source = resolve_corpus(source)  # a Hub id opened once, not on each of the three reads
    own = "sparse" if is_sparse_model(model) else "dense"
    unique_anchors = list(dict.fromkeys(anchors))
    anchor_row = {text: i for i, text in enumerate(unique_anchors)}
    positive_key = {text: hash(text) for text in dict.fromkeys(positives)}
    encode = {"tokenizer": tokenizer, "batch_size": batch_size, "convert_to_numpy": True}
    scored = own in lists or model_scores  # the mining model scores the positives (not for BM25 alone)
    with temporary_folder("lexical") as scratch:
        built = scratch / LEXICAL_DIR
        terms = None if sparse is None else SparseBuilder(sparse[0], sparse[1], batch_size, sparse[3])
        keys, positive_row, distinct = _corpus_keys(
            source, text_column, id_column, set(positive_key.values()), built if "lexical" in lists else None,
            lexical_settings, shard_size or DEFAULT_SHARD_SIZE, num_negatives, terms,
        )  # fmt: skip
        side = None
        if terms is not None:
            side = SparseSide(
                sparse[0], sparse[1], terms.finish(), unique_anchors, batch_size, sparse[2], sparse[3],
                show_progress_bar,
            )  # fmt: skip
        with work_folder(embeddings_dir) as folder:
            vectors = search = index = anchor_vectors = scorer = None
            if own == "dense" and ("dense" in lists or model_scores or embeddings_dir is not None):
                encode_corpus(
                    model, source, folder, tokenizer=tokenizer, text_column=text_column, id_column=id_column,
                    batch_size=batch_size, shard_size=shard_size, dtype=dtype,
                    prompt=document_prompt, show_progress_bar=show_progress_bar,
                )  # fmt: skip
                _, vectors = corpus_matrix(folder)
                if len(vectors) != len(keys):
                    raise ValueError(
                        f"the corpus gave {len(keys)} rows, then {len(vectors)} embedded: it must not change"
                    )
            if "dense" in lists:
                search = matrix_search(vectors, folder, model.config.similarity, approximate)
            if "lexical" in lists:
                index = LexicalIndex.load(_keep_lexical(built, folder) if embeddings_dir is not None else built)
            positive_scores = np.zeros(len(anchors))
            if scored and own == "dense":
                shown = {"show_progress_bar": show_progress_bar}
                anchor_vectors = model.encode(unique_anchors, prompt=anchor_prompt, **shown, **encode)
                positive_scores = _positive_scores(
                    model, anchors, positives, anchor_vectors, anchor_row, vectors, positive_key, positive_row,
                    document_prompt, encode,
                )  # fmt: skip
                scorer = _DenseScorer(anchor_vectors, anchor_row, vectors, model.config.similarity)
            elif scored:
                positive_scores = side.positive_scores(anchors, positives, anchor_row, positive_key, positive_row)
                scorer = side.scorer(anchor_row)
            readers = _readers(lists, search, index, side, anchor_vectors, anchor_row)
            first_stage = _Ranker(readers, keys, scorer)
            kept, chosen = _pick_rows(
                anchors, positives, positive_key, positive_scores, first_stage, model_scores and lists != (own,),
                range_min, range_max, pick, random.Random(seed),
            )  # fmt: skip
            del vectors, search, index, first_stage, scorer, side
    texts = texts_of(source, {r for rows in chosen for r in rows}, text_column, id_column)
    return kept, [[texts[r] for r in rows] for rows in chosen], distinct


def _corpus_keys(
    source: Any, text_column: str, id_column: str | None, wanted: set[int], lexical_folder: Path | None,
    lexical_settings: LexicalSettings | None, shard_size: int, num_negatives: int, terms: SparseBuilder | None = None,
) -> tuple[np.ndarray, dict[int, int], int]:  # fmt: skip
    """(hash of every row's text, {positive's key: its first row}, distinct texts) from the first pass over the
    source, which also builds the lexical index into `lexical_folder` when given and feeds `terms` (a sparse model's
    corpus matrix). An empty corpus, or one with too few distinct texts for `num_negatives`, is refused."""
    builder = LexicalBuilder(lexical_folder, lexical_settings) if lexical_folder is not None else None
    builders = [b for b in (builder, terms) if b is not None]
    try:
        keys, positive_row = _row_keys(source, text_column, id_column, wanted, builders, shard_size)
        if builder is not None and len(keys):
            builder.finish()
    finally:
        if builder is not None:
            builder.close()
    if not len(keys):
        raise ValueError("mine_hard_negatives: the corpus is empty.")
    distinct = len(np.unique(keys))
    if num_negatives >= distinct:  # the positive is one of them, or the row has none to spare
        raise ValueError(
            f"mine_hard_negatives: num_negatives={num_negatives} but the corpus has only {distinct} distinct "
            f"documents; at most {distinct - 1} negatives per row can be mined from it."
        )
    return keys, positive_row, distinct


def _positive_scores(
    model: Any, anchors: Sequence[str], positives: Sequence[str], anchor_vectors: np.ndarray,
    anchor_row: dict[str, int], vectors: np.ndarray, positive_key: dict[str, int], positive_row: dict[int, int],
    document_prompt: str, encode: dict[str, Any],
) -> np.ndarray:  # fmt: skip
    """Each row's positive scored against its anchor by the model: a positive in the corpus by its row's vector,
    one outside it embedded here."""
    from ...metrics import paired_similarities

    extra = [text for text, key in positive_key.items() if key not in positive_row]  # scored, not mined
    extra_vectors = model.encode(extra, prompt=document_prompt, **encode) if extra else None
    extra_row = {text: i for i, text in enumerate(extra)}
    positive_vectors = np.stack(
        [
            vectors[positive_row[positive_key[p]]] if p not in extra_row else extra_vectors[extra_row[p]]
            for p in positives
        ]
    )
    similarity = model.config.similarity
    return paired_similarities(anchor_vectors[[anchor_row[a] for a in anchors]], positive_vectors, similarity)


class _DenseScorer:
    """`scorer(anchor, rows)`: the dense model's similarities of the corpus `rows` (their vectors) to `anchor`."""

    def __init__(self, anchor_vectors: np.ndarray, anchor_row: dict[str, int], vectors: Any, similarity: str) -> None:
        self.anchor_vectors, self.anchor_row = anchor_vectors, anchor_row
        self.vectors, self.similarity = vectors, similarity

    def __call__(self, anchor: str, rows: np.ndarray) -> np.ndarray:
        from ...metrics import paired_similarities

        vector = self.anchor_vectors[self.anchor_row[anchor]]
        return paired_similarities(np.repeat(vector[None], len(rows), axis=0), self.vectors[rows], self.similarity)


def _readers(
    lists: tuple[str, ...], search: Search | None, index: LexicalIndex | None, side: SparseSide | None,
    anchor_vectors: np.ndarray | None, anchor_row: dict[str, int],
) -> list[tuple[Any, Callable, bool]]:  # fmt: skip
    """Each list's (search, the queries of a batch of anchors for it, whether a short result holds every hit)."""

    def rows(batch: list[str]) -> list[int]:
        return [anchor_row[a] for a in batch]

    readers = {
        "dense": lambda: (search, lambda batch: anchor_vectors[rows(batch)], False),
        "lexical": lambda: (lambda q, k: index.search(list(q), k), lambda b: np.asarray(b, dtype=object), True),
        "sparse": lambda: (side.search, lambda batch: side.anchors[rows(batch)], False),
    }
    return [readers[name]() for name in lists]


class _Ranker:
    """The first stage of a batch of anchors: each list's distinct rankings (`readers`: (search, the batch's queries
    for it, whether a short result holds every hit) in fusion order), fused where several; its scores the mining
    model's (`scorer`) with `rescored=True` (what the filters compare, whatever ranked)."""

    def __init__(self, readers: list[tuple[Search, Callable, bool]], keys: np.ndarray, scorer: Any) -> None:
        self.readers, self.keys, self.scorer = readers, keys, scorer

    def __call__(self, batch: list[str], depth: int, rescored: bool) -> list[list[tuple]]:
        rankings = [
            _distinct_rankings(search, queries(batch), self.keys, depth, whole)
            for search, queries, whole in self.readers
        ]
        fused = rankings[0] if len(rankings) == 1 else _fused_rankings(*rankings[:2], self.keys, *rankings[2:])
        if not rescored:
            return fused
        return [_rescored(ranking, self.scorer, anchor) for anchor, ranking in zip(batch, fused, strict=True)]


def _pick_rows(
    anchors: Sequence[str], positives: Sequence[str], positive_key: dict[str, int], positive_scores: np.ndarray,
    rank: _Ranker, rescored: bool, range_min: int, range_max: int, pick: Callable[..., list | None],
    rng: random.Random,
) -> tuple[list[int], list[list[int]]]:  # fmt: skip
    """(kept row numbers, their chosen corpus rows): each row's candidates ranked `range_min` to `range_max`, without
    every positive of its anchor and the anchor itself, handed to `pick`; `ROW_CHUNK` rows at a time."""
    excluded: dict[str, set[int]] = {}  # every positive of the anchor, and the anchor itself
    for anchor, positive in zip(anchors, positives, strict=True):
        excluded.setdefault(anchor, {hash(anchor)}).add(positive_key[positive])
    kept: list[int] = []
    chosen: list[list[int]] = []
    for start in range(0, len(anchors), ROW_CHUNK):
        rows = range(start, min(start + ROW_CHUNK, len(anchors)))
        batch = list(dict.fromkeys(anchors[row] for row in rows))
        by_anchor = dict(zip(batch, rank(batch, range_max, rescored), strict=True))
        for row in rows:
            skip = excluded[anchors[row]]
            ranked = [(r, s) for r, key, s in by_anchor[anchors[row]][range_min:] if key not in skip]
            picked = pick(ranked, float(positive_scores[row]), rng)
            if picked is not None:
                kept.append(row)
                chosen.append(picked)
    return kept, chosen


def _rescored(ranking: list[tuple], scorer: Callable[[str, np.ndarray], np.ndarray], anchor: str) -> list[tuple]:
    """`ranking` `(row, key, score)` in its order, each score now the mining model's of the row to `anchor`."""
    if not ranking:
        return ranking
    scores = scorer(anchor, np.asarray([row for row, _, _ in ranking], dtype=np.int64))
    return [(row, key, float(score)) for (row, key, _), score in zip(ranking, scores, strict=True)]


__all__ = ["mine_corpus"]
