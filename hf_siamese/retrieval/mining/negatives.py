"""Hard-negative mining: (anchor, positive) rows -> (anchor, positive, negative_1, ..., negative_n) rows, with the
model itself choosing documents that look relevant to the anchor but are not its positive.

Hard negatives make in-batch-negatives training (MNR) much stronger than random in-batch ones, but the most similar
documents are often unlabelled positives; `margin`, `max_score` and `range_min` keep those out. The candidates come
from the model's ranking (`negatives_from="dense"`), from BM25's ("lexical": documents sharing the anchor's words, as
DPR's negatives) or from both fused ("hybrid"); the filters always use the model's similarities. A learned-sparse
model (`SparseSiameseModel`) mines as a dense one does, by its own exact ranking ("sparse"), and a sparse model beside
a dense one (`sparse_model=`) adds its list to the hybrid: dense + BM25 + sparse, fused as an index's hybrid.
"""

from __future__ import annotations

import logging
import os
import random
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..fusion.hybrid import FIRST_STAGES, check_first_stage, stage_lists
from ..ranking.sparse import is_sparse_model

if TYPE_CHECKING:
    from ..index.lexical import LexicalSettings

logger = logging.getLogger(__name__)

SAMPLING = ("top", "random")


class _OwnRanking:
    """The default of `negatives_from`: the model's own ranking ("dense", or "sparse" for a sparse model)."""

    def __repr__(self) -> str:
        return "the model's own ranking"


OWN_RANKING: Any = _OwnRanking()


def mine_hard_negatives(
    dataset: Any, model: Any, corpus: Any = None, *, num_negatives: int = 3, range_min: int = 0,
    range_max: int | None = None, margin: float | None = None, max_score: float | None = None, sampling: str = "top",
    anchor_column: str | None = None, positive_column: str | None = None, tokenizer: Any = None, batch_size: int = 32,
    anchor_prompt: str | None = None, corpus_prompt: str | None = None, seed: int = 42, show_progress_bar: bool = True,
    embeddings_dir: str | os.PathLike | None = None, text_column: str = "text", id_column: str | None = None,
    shard_size: int | None = None, approximate: bool | None = None, dtype: Any = None,
    corpus_dir: str | os.PathLike | None = None, negatives_from: str = OWN_RANKING,
    lexical_settings: LexicalSettings | None = None, sparse_model: Any = None, sparse_tokenizer: Any = None,
) -> Any:  # fmt: skip
    """Add `num_negatives` mined negatives to every (anchor, positive) row.

    For each anchor, the corpus documents are ranked by the first stage `negatives_from` (over distinct texts): the
    model's similarity ("dense"), BM25 over the corpus texts ("lexical"), or the reciprocal-rank fusion of the two
    ("hybrid": each one's best `range_max` distinct texts fused, `hybrid.fuse(..., fusion="rrf")`). The candidates
    are the documents ranked `range_min` to `range_max` (0-based, `range_max` excluded; default:
    `range_min + max(100, 10 * num_negatives)`, so that memory stays bounded on a large corpus),
    without the row's positive, without every other positive of the same anchor (rows sharing the anchor), without
    the anchor itself, without documents scoring above `max_score`, and without documents scoring within `margin` of
    the positive (`score > positive_score - margin`: likely unlabelled positives). `sampling="top"` takes the
    best-ranked candidates, `"random"` draws them uniformly (seeded). Rows with fewer than `num_negatives`
    candidates are dropped (their count is logged; with "lexical", a document sharing no word with the anchor is
    no candidate).

    The scores of `max_score` and `margin` are always the model's similarities (candidate to anchor, positive to
    anchor), whatever ranked the candidates: with "lexical" / "hybrid" the candidates keep the BM25 / fused order,
    and the model's similarity drops likely false negatives among them (one scale for both settings whatever the
    first stage; BM25's scores have none that carries across anchors).

    Every corpus takes one path (`hf_siamese.retrieval.mining.corpus`): embedded by `encode_corpus` into resumable
    shards in `embeddings_dir` (default: a temporary folder; a later run with the same folder reuses them), searched
    through `neighbour_search` (exact below 100,000 texts, an approximate faiss index above, or as `approximate`
    says), in memory bounded by the shards and the dataset, never the corpus texts or an anchors x corpus matrix.
    "lexical" / "hybrid" also build a BM25 index of the corpus texts (`hf_siamese.retrieval.index.lexical`, a shard of
    texts at a time) in a temporary folder, or in `embeddings_dir/lexical` (kept; rebuilt on each run). "lexical" embeds
    the corpus only when `margin` / `max_score` need the model's similarities or `embeddings_dir` is given to keep
    the embeddings; they need bm25s and PyStemmer (`pip install 'hf-siamese[lexical]'`).

    Args:
        dataset: a `datasets.Dataset` with anchor and positive columns (`anchor`/`positive`, `query`/`document`,
            ... as the collator reads them, or named with `anchor_column` / `positive_column`).
        model: the `SiameseBertModel` that scores the candidates, or a learned-sparse `SparseSiameseModel` (its
            term weights' dot products rank and score them, exactly: `sparse_search`; its corpus is held as one CSR
            matrix, so `embeddings_dir`, `approximate` and `dtype` are refused for it).
        corpus: the documents to mine from, any source `hf_siamese.data.open_corpus` reads (a list of str, a path
            or glob of .txt / .jsonl / .csv / .tsv / .parquet files, a `datasets.Dataset` or `IterableDataset`, a
            Hub dataset id), read three times, so not a one-shot iterator; defaults to the dataset's distinct
            positives. The positives are always scored, in or out of the corpus.
        anchor_prompt: the anchors' prompt (default: the model's `query` prompt when it has one).
        corpus_prompt: the corpus's prompt (default: the model's `document` / `passage` prompt when it has one).
        embeddings_dir: the folder of the embedded corpus, kept and reused (as `encode_corpus` / `hf-siamese embed
            -o` write it; refused if another model or setting made it); default: a temporary folder.
        text_column: the corpus's text column, as in `open_corpus`.
        id_column: the corpus's id column, as in `open_corpus`.
        shard_size: as in `encode_corpus` (defaults to the one `embeddings_dir` was started with, else 10,000).
        dtype: as in `encode_corpus`.
        corpus_dir: deprecated name of `embeddings_dir` (a FutureWarning).
        negatives_from: the first stage that ranks the candidates: the model's own ranking (the default: "dense",
            or "sparse" for a sparse model), "lexical" (BM25), "hybrid" (the model's list and BM25's, and
            `sparse_model`'s where given, fused by reciprocal ranks as an index's hybrid: `hybrid.stage_lists`) or,
            with `sparse_model`, "sparse" (its list alone).
        sparse_model: a learned-sparse model beside the dense `model`, for the "sparse" list (its tokenizer:
            `sparse_tokenizer`); the filters still compare `model`'s similarities.
        lexical_settings: how BM25 tokenizes and weighs ("lexical" / "hybrid"; default `LexicalSettings()`:
            English stems, stopwords left out, k1 1.5, b 0.75).

    Returns:
        A `datasets.Dataset` with columns `anchor`, `positive`, `negative_1`, ..., `negative_{num_negatives}` (the
        anchor and positive columns keep their names).
    """
    import datasets

    from ..prompts import CORPUS_PROMPT_NAMES, QUERY_PROMPT_NAMES, side_prompt
    from .corpus import mine_corpus

    embeddings_dir = _embeddings_dir(embeddings_dir, corpus_dir)
    _check_arguments(num_negatives, range_min, range_max, margin, max_score, sampling)
    sparse = _sparse_side(model, tokenizer, sparse_model, sparse_tokenizer, embeddings_dir, approximate, dtype)
    kind = "sparse" if is_sparse_model(model) else "dense"
    lists = check_mining_stage(negatives_from, lexical_settings, approximate, kind, sparse_model is not None)
    if sparse is not None and kind == "sparse":  # a sparse model's own prompts unless some are given
        sparse = (*sparse[:2], anchor_prompt, corpus_prompt)
    filters = margin is not None or max_score is not None
    anchor_column, positive_column, anchors, positives = _anchors_and_positives(dataset, anchor_column, positive_column)
    range_max = range_min + max(100, 10 * num_negatives) if range_max is None else range_max
    kept, negatives, count = mine_corpus(
        anchors, positives, model, list(dict.fromkeys(positives)) if corpus is None else corpus, embeddings_dir,
        _picker(num_negatives, margin, max_score, sampling), num_negatives=num_negatives, range_min=range_min,
        range_max=range_max, seed=seed, tokenizer=tokenizer, batch_size=batch_size,
        show_progress_bar=show_progress_bar, anchor_prompt=side_prompt(model, anchor_prompt, QUERY_PROMPT_NAMES),
        document_prompt=side_prompt(model, corpus_prompt, CORPUS_PROMPT_NAMES), text_column=text_column,
        id_column=id_column, shard_size=shard_size, approximate=approximate, dtype=dtype, lists=lists,
        lexical_settings=lexical_settings, model_scores=filters,
        sparse=sparse if "sparse" in lists or (kind == "sparse" and filters) else None,
    )  # fmt: skip
    ranks = f"ranks {range_min}..{range_max - 1} of {count} documents by {' + '.join(lists)}"
    _check_kept(len(anchors), len(kept), num_negatives, f"{ranks}, margin={margin}, max_score={max_score}")
    columns = {anchor_column: [anchors[i] for i in kept], positive_column: [positives[i] for i in kept]}
    columns.update({f"negative_{n + 1}": [row[n] for row in negatives] for n in range(num_negatives)})
    return datasets.Dataset.from_dict(columns)


def _check_kept(rows: int, kept: int, num_negatives: int, exclusions: str) -> None:
    """ValueError where no row kept `num_negatives` candidates after the exclusions; a warning counting the rows
    dropped where some did not."""
    if not kept:
        raise ValueError(
            f"mine_hard_negatives: none of the {rows} rows has {num_negatives} candidates left after the "
            f"exclusions ({exclusions}); lower num_negatives, widen range_max or give a larger corpus."
        )
    if rows > kept:
        logger.warning(
            "mine_hard_negatives: %d of %d rows had fewer than %d candidates left after the exclusions; dropped.",
            rows - kept,
            rows,
            num_negatives,
        )


def _embeddings_dir(embeddings_dir: Any, corpus_dir: Any) -> Any:
    """`embeddings_dir`, or the deprecated `corpus_dir` (a FutureWarning); both given is refused."""
    if corpus_dir is None:
        return embeddings_dir
    if embeddings_dir is not None:
        raise ValueError("mine_hard_negatives: give embeddings_dir= only (corpus_dir= is its deprecated name)")
    warnings.warn(
        "mine_hard_negatives: corpus_dir= is deprecated; use embeddings_dir= (the same folder)",
        FutureWarning,
        stacklevel=3,
    )
    return corpus_dir


def _anchors_and_positives(
    dataset: Any, anchor_column: str | None, positive_column: str | None
) -> tuple[str, str, list[str], list[str]]:
    """(anchor column, positive column, anchors, positives) of the dataset: the columns named, or those the collator
    reads; every value checked to be a string."""
    from ...data.columns import detect_layout

    names = list(dataset.column_names)
    if anchor_column is None or positive_column is None:
        texts = detect_layout(names).texts
        anchor_column, positive_column = anchor_column or texts[0], positive_column or texts[1]
    for column in (anchor_column, positive_column):
        if column not in names:
            raise ValueError(f"mine_hard_negatives: column {column!r} is not in the dataset (columns: {names}).")
    anchors, positives = list(dataset[anchor_column]), list(dataset[positive_column])
    for column, values in ((anchor_column, anchors), (positive_column, positives)):
        bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
        if bad is not None:
            raise ValueError(
                f"mine_hard_negatives: row {bad}: column {column!r} holds {values[bad]!r}; expected a string."
            )
    return anchor_column, positive_column, anchors, positives


def _picker(
    num_negatives: int, margin: float | None, max_score: float | None, sampling: str
) -> Callable[[list[tuple[int, float]], float, random.Random], list[int] | None]:
    """`pick(ranked, positive_score, rng)`: the negatives of one row among its ranked `(document, score)`
    candidates (`max_score` and `margin` applied, then `sampling`), or None if too few are left."""

    def pick(ranked: list[tuple[int, float]], positive_score: float, rng: random.Random) -> list[int] | None:
        candidates = [
            index
            for index, score in ranked
            if not (max_score is not None and score > max_score)
            and not (margin is not None and score > positive_score - margin)
        ]
        if len(candidates) < num_negatives:
            return None
        return candidates[:num_negatives] if sampling == "top" else rng.sample(candidates, num_negatives)

    return pick


def _check_arguments(
    num_negatives: Any, range_min: Any, range_max: Any, margin: Any, max_score: Any, sampling: Any
) -> None:
    if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
        raise ValueError(f"mine_hard_negatives: num_negatives={num_negatives!r} must be a positive int.")
    if isinstance(range_min, bool) or not isinstance(range_min, int) or range_min < 0:
        raise ValueError(f"mine_hard_negatives: range_min={range_min!r} must be an int >= 0.")
    if range_max is not None and (not isinstance(range_max, int) or range_max <= range_min):
        raise ValueError(f"mine_hard_negatives: range_max={range_max!r} must be an int > range_min ({range_min}).")
    if margin is not None and not (isinstance(margin, (int, float)) and margin >= 0):
        raise ValueError(f"mine_hard_negatives: margin={margin!r} must be a number >= 0.")
    if max_score is not None and not isinstance(max_score, (int, float)):
        raise ValueError(f"mine_hard_negatives: max_score={max_score!r} must be a number.")
    if sampling not in SAMPLING:
        raise ValueError(f"mine_hard_negatives: sampling={sampling!r} is not one of {list(SAMPLING)}.")


def _sparse_side(
    model: Any, tokenizer: Any, sparse_model: Any, sparse_tokenizer: Any, embeddings_dir: Any, approximate: Any,
    dtype: Any,
) -> tuple[Any, Any, str | None, str | None] | None:  # fmt: skip
    """(sparse model, tokenizer, anchor prompt, document prompt: None, its own) of the mining: the model where it is
    sparse (the settings of a dense corpus embedding refused, each named), else `sparse_model`, checked; or None."""
    if sparse_model is None and sparse_tokenizer is not None:
        raise ValueError("mine_hard_negatives: sparse_tokenizer goes with sparse_model (its tokenizer); give both")
    if is_sparse_model(model):
        if sparse_model is not None:
            raise ValueError(
                "mine_hard_negatives: sparse_model is a second model beside a dense one; the model is sparse already: "
                "give a dense model with it, or no sparse_model"
            )
        given = {"embeddings_dir": embeddings_dir, "approximate": approximate or None, "dtype": dtype}
        refused = [name for name, value in given.items() if value is not None]
        if refused:
            raise ValueError(
                f"mine_hard_negatives: {', '.join(refused)} set(s) the dense corpus embedding; a sparse model ranks "
                "its corpus exactly by its term weights, held in memory: give none"
            )
        return model, tokenizer, None, None
    if sparse_model is None:
        return None
    if not is_sparse_model(sparse_model):
        raise ValueError(
            f"mine_hard_negatives: sparse_model is a {type(sparse_model).__name__}; accepted: a learned-sparse model "
            "(SparseSiameseModel)"
        )
    return sparse_model, sparse_tokenizer, None, None


def check_mining_stage(
    negatives_from: Any, lexical_settings: Any, approximate: Any, kind: str = "dense", sparse_model: bool = False
) -> tuple[str, ...]:
    """The lists that rank the candidates (`hybrid.stage_lists`' order; a sparse model's own list takes the dense
    one's place), for `negatives_from` (`OWN_RANKING`: the model's own ranking) with a model of `kind` ("dense" or
    "sparse") and, with `sparse_model`, a sparse model beside it. ValueError for a first stage that is not one or
    not there for this model, or a setting of the stage that is not used (the rule of `hybrid.check_first_stage`);
    ImportError naming the install command where BM25 is asked for without bm25s / PyStemmer (before any work)."""
    own = "sparse" if kind == "sparse" else "dense"
    chosen = own if negatives_from is OWN_RANKING else negatives_from
    accepted = ("sparse", "lexical", "hybrid") if own == "sparse" else (*FIRST_STAGES, *(("sparse",) * sparse_model))
    if chosen not in accepted:
        why = {
            "dense": " ranks by a dense model's vectors, and the model is sparse (its own ranking: 'sparse')",
            "sparse": " ranks by a learned-sparse model: give one as the model, or sparse_model= (--sparse-model) "
            "beside the dense one",
        }.get(chosen, "")
        raise ValueError(
            f"mine_hard_negatives: negatives_from={chosen!r}{why}; accepted: {', '.join(map(repr, accepted))}"
        )
    from ..index.lexical import LexicalSettings, require_lexical

    if lexical_settings is not None and not isinstance(lexical_settings, LexicalSettings):
        raise ValueError(f"mine_hard_negatives: lexical_settings={lexical_settings!r:.80}; expected a LexicalSettings")
    try:
        check_first_stage(chosen, lexical_settings=lexical_settings, sparse_part=True)
    except ValueError as error:
        raise ValueError(f"mine_hard_negatives (--negatives-from {chosen}): {error}") from None
    if sparse_model and chosen not in ("sparse", "hybrid"):
        raise ValueError(
            f"mine_hard_negatives: sparse_model (--sparse-model) ranks the sparse list of negatives_from='sparse' or "
            f"'hybrid'; negatives_from={chosen!r} reads none: give one of those, or no sparse model"
        )
    if own == "sparse":
        lists = {"sparse": ("sparse",), "lexical": ("lexical",), "hybrid": ("sparse", "lexical")}[chosen]
    else:
        lists = stage_lists(chosen, lexical=True, sparse=sparse_model)
    if approximate and "dense" not in lists:
        raise ValueError(
            f"mine_hard_negatives: approximate=True is the dense search's; negatives_from={chosen!r} has none"
        )
    if "lexical" in lists:
        require_lexical(lexical_settings.stemmer if lexical_settings is not None else True)
    return lists


__all__ = ["OWN_RANKING", "check_mining_stage", "mine_hard_negatives"]
