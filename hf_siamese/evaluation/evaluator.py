"""The one evaluator contract: an evaluator is a callable object, `evaluator(model) -> dict[str, float]`, that
carries its settings and its data and says which of its numbers is the headline (`primary_metric`).

Both trainers (`SiameseTrainer`, `CrossEncoderTrainer`) accept evaluators as (or among) their `eval_dataset` and log
each number as `eval_{name_}{key}`, choosing the best checkpoint by the primary metric unless told otherwise; the
`hf-siamese eval` command builds one and calls it. The evaluators, all in this package:

* `EmbeddingSimilarityEvaluator` (here): STS Spearman / Pearson of a bi-encoder's embeddings on scored pairs, and
  `ShardedSimilarityEvaluator`, the same with its texts encoded over processes (what `SiameseTrainer` runs);
* `retrieval.RetrievalEvaluator`: nDCG / MRR / Recall / MAP / Precision on a retrieval set;
* `reranking.RerankingEvaluator`, `pairs.PairScoreEvaluator`, `pairs.PairClassificationEvaluator`: the
  cross-encoder's.

Each metric is computed in one place, the `evaluate` scripts of `hf_siamese.metrics` (`sts_spearman`, `retrieval`);
the evaluators only embed or score and hand the numbers to them. This module does not import `evaluate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


class Evaluator:
    """Base of the evaluators: `evaluator(model)` returns `{metric: value}`.

    Attributes:
        name: a prefix for logging (`""`: none); a trainer logs `eval_{name}_{metric}`, and `prefixed` adds it.
        primary_metric: the key of the headline number among the returned ones (unprefixed), used to choose the best
            checkpoint.
        greater_is_better: whether a larger primary metric is better.

    A subclass sets `primary_metric` and implements `__call__`. Any object with `__call__` and a `primary_metric`
    string follows the contract too (`is_evaluator`), without deriving from this class.
    """

    name: str = ""
    primary_metric: str = ""
    greater_is_better: bool = True

    def __call__(self, model: Any) -> dict[str, float]:
        """The metrics of `model` on this evaluator's data."""
        raise NotImplementedError(f"{type(self).__name__} does not implement __call__(model)")

    def prefixed(self, metrics: Mapping[str, float], prefix: str = "") -> dict[str, float]:
        """`metrics` with their logging names: `{prefix}_{name}_{key}` (the parts that are empty are left out)."""
        return prefixed_metrics(metrics, prefix, self.name)


def is_evaluator(value: Any) -> bool:
    """Whether `value` follows the evaluator contract: callable, with a `primary_metric` string."""
    return callable(value) and isinstance(getattr(value, "primary_metric", None), str)


def prefixed_metrics(
    metrics: Mapping[str, float], prefix: str = "", name: str = "", skip: Iterable[str] = ()
) -> dict[str, float]:
    """`{prefix}_{name}_{key}: value` for each metric not in `skip`; an empty prefix or name is left out."""
    head = "".join(f"{part}_" for part in (prefix, name) if part)
    left_out = set(skip)
    return {f"{head}{key}": value for key, value in metrics.items() if key not in left_out}


def evaluator_primary_key(evaluator: Any) -> str:
    """The key under which a trainer logs `evaluator`'s primary metric (without `eval_`): `{name}_{primary}`."""
    name = getattr(evaluator, "name", "") or ""
    return f"{name}_{evaluator.primary_metric}" if name else evaluator.primary_metric


class EmbeddingSimilarityEvaluator(Evaluator):
    """STS evaluation of a bi-encoder: Spearman and Pearson correlations of the similarity of each pair's two
    embeddings with gold scores (`sts_metrics_from_embeddings`: cosine, dot, euclidean, manhattan, plus
    `mse_cosine` / `mae_cosine`).

    Args:
        sentences1: the first side of each pair (N >= 2).
        sentences2: the second side of each pair (N >= 2).
        scores: the gold score of each pair.
        score_range: (low, high) of the gold scale, for `mse_cosine` / `mae_cosine`; None: the gold's min and max.
        prompts: the prompt of each side (None: the model's default prompt; "" none).
        tokenizer: passed to `model.encode`.
        batch_size: passed to `model.encode`.
        max_length: passed to `model.encode` when given.
        similarity_fns: the similarity functions reported.
        percent: correlations x100.
        show_progress_bar: passed to `model.encode`.
        name: the logging prefix.

    Each distinct (prompt, text) is encoded once, one `encode` call per distinct prompt (`embed_items`; a subclass
    may encode otherwise, e.g. in shards over processes). After a call, `last_embeddings` holds the two sides'
    embeddings (for a scatter plot of the similarities against the gold).
    """

    def __init__(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        scores: Sequence[float],
        *,
        score_range: Sequence[float] | None = None,
        prompts: tuple[str | None, str | None] = (None, None),
        tokenizer: Any = None,
        batch_size: int = 32,
        max_length: int | None = None,
        similarity_fns: str | Iterable[str] = ("cosine", "dot", "euclidean", "manhattan"),
        percent: bool = False,
        show_progress_bar: bool = False,
        name: str = "",
    ) -> None:
        self.sentences1, self.sentences2 = list(sentences1), list(sentences2)
        self.scores = scores
        if len(self.sentences1) != len(self.sentences2):
            raise ValueError(
                f"sentences1 and sentences2 must have the same length, got {len(self.sentences1)} and "
                f"{len(self.sentences2)}"
            )
        self.score_range = score_range
        self.prompts = prompts
        self.tokenizer, self.batch_size, self.max_length = tokenizer, batch_size, max_length
        self.similarity_fns = [similarity_fns] if isinstance(similarity_fns, str) else list(similarity_fns)
        self.percent, self.show_progress_bar, self.name = percent, show_progress_bar, name
        first = "cosine" if "cosine" in self.similarity_fns else (self.similarity_fns or ["cosine"])[0]
        self.primary_metric = f"spearman_{first}"
        self.last_embeddings: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.sentences1)

    def __call__(self, model: Any) -> dict[str, float]:
        """The STS metrics of `model` (anything with `encode(texts, tokenizer=, batch_size=, ...)`)."""
        self.last_embeddings = self.embed(model)
        return self.compute(*self.last_embeddings)

    def embed(self, model: Any) -> tuple[np.ndarray, np.ndarray]:
        """The embeddings of the two sides, each distinct (prompt, text) encoded once."""
        first = [(self.prompts[0], text) for text in self.sentences1]
        second = [(self.prompts[1], text) for text in self.sentences2]
        unique = list(dict.fromkeys(first + second))
        embeddings = self.embed_items(model, unique)
        position = {item: i for i, item in enumerate(unique)}
        return embeddings[[position[i] for i in first]], embeddings[[position[i] for i in second]]

    def embed_items(self, model: Any, items: list[tuple[str | None, str]]) -> np.ndarray:
        """Embeddings `(len(items), dim)` of `(prompt, text)` items, one `encode` call per distinct prompt."""
        parts: dict[int, np.ndarray] = {}
        for prompt in dict.fromkeys(prompt for prompt, _ in items):
            index = [i for i, (p, _) in enumerate(items) if p == prompt]
            options: dict[str, Any] = {"prompt": prompt} if prompt is not None else {}
            if self.max_length is not None:
                options["max_length"] = self.max_length
            vectors = model.encode(
                [items[i][1] for i in index], tokenizer=self.tokenizer, batch_size=self.batch_size,
                convert_to_numpy=True, show_progress_bar=self.show_progress_bar, **options,
            )  # fmt: skip
            parts.update(zip(index, np.asarray(vectors), strict=True))
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([parts[i] for i in range(len(items))])

    def compute(self, embeddings1: Any, embeddings2: Any) -> dict[str, float]:
        """The metrics of given embeddings of the two sides (`sts_metrics_from_embeddings`)."""
        from ..metrics.sts_spearman.sts_spearman import sts_metrics_from_embeddings

        score_range = self.score_range
        if score_range is None:
            gold = np.asarray(self.scores, dtype=np.float64)
            score_range = (float(gold.min()), float(gold.max())) if gold.size else (0.0, 5.0)
        return sts_metrics_from_embeddings(
            embeddings1, embeddings2, self.scores, self.similarity_fns, score_range, percent=self.percent
        )


class ShardedSimilarityEvaluator(EmbeddingSimilarityEvaluator):
    """`EmbeddingSimilarityEvaluator` whose texts are encoded over processes: each encodes a contiguous shard of the
    unique (prompt, text) items and the shards are gathered in rank order, so every process computes the metric once
    on the full set, exactly as one process would."""

    def __init__(self, *args: Any, process_index: int = 0, num_processes: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.process_index, self.num_processes = process_index, num_processes

    def embed_items(self, model: Any, items: list[tuple[str | None, str]]) -> np.ndarray:
        """This process's shard of `items` encoded, gathered with the others'."""
        from ..modeling.distributed import encode_in_shards

        def encode(part: list[tuple[str | None, str]]) -> np.ndarray:
            if not part:
                return np.zeros((0, model.config.embedding_size), dtype=np.float32)
            return super(ShardedSimilarityEvaluator, self).embed_items(model, part)

        return encode_in_shards(items, encode, self.process_index, self.num_processes)


__all__ = [
    "EmbeddingSimilarityEvaluator",
    "Evaluator",
    "ShardedSimilarityEvaluator",
    "evaluator_primary_key",
    "is_evaluator",
    "prefixed_metrics",
]
