"""Metrics as `evaluate` scripts and their plain functions: STS (`evaluate.load(STS_SPEARMAN)`) and retrieval
(`evaluate.load(RETRIEVAL)`: nDCG@k, MRR@k, Recall@k, MAP@k, Precision@k of rankings; ranking a corpus is
`hf_siamese.retrieval.exact_search`).

The functions live in the metric scripts themselves, which evaluate copies and imports on their own; importing them
pulls in `evaluate` (seconds), so they are loaded on first use rather than with the package.

The evaluators (the contract `Evaluator`, `EmbeddingSimilarityEvaluator`, ...) live in `hf_siamese.evaluation`, a
part above this one: they embed, search or score, then hand the numbers to the metrics here. The evaluator names this
package exported still resolve from it, looked up there on first use, so that nothing here imports that part.
"""

import importlib
import os
from typing import Any

# `evaluate.load` accepts a folder holding a script of the same name; it never touches the network for a local
# path, so this works with HF_HUB_OFFLINE=1.
STS_SPEARMAN: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sts_spearman")
RETRIEVAL: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "retrieval")

_FROM_SCRIPT = (
    "DEFAULT_SCORE_RANGE",
    "SIMILARITY_FUNCTIONS",
    "STSSpearman",
    "paired_similarities",
    "sts_correlations",
    "sts_metrics_from_embeddings",
)
_FROM_RETRIEVAL_SCRIPT = (
    "DEFAULT_K_VALUES",
    "Retrieval",
    "judged_queries",
    "retrieval_metrics",
)
# The evaluators' names this package exported before they moved to `hf_siamese.evaluation`.
_FROM_EVALUATION = (
    "EmbeddingSimilarityEvaluator",
    "Evaluator",
    "evaluator_primary_key",
    "is_evaluator",
    "prefixed_metrics",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_SCRIPT:
        module = importlib.import_module(".sts_spearman.sts_spearman", __name__)
        return getattr(module, name)
    if name in _FROM_RETRIEVAL_SCRIPT:
        module = importlib.import_module(".retrieval.retrieval", __name__)
        return getattr(module, name)
    if name in _FROM_EVALUATION:
        module = importlib.import_module("..evaluation", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RETRIEVAL",
    "STS_SPEARMAN",
    *_FROM_EVALUATION,
    *_FROM_SCRIPT,
    *_FROM_RETRIEVAL_SCRIPT,
]
