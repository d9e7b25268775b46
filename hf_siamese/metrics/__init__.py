"""STS metric: an `evaluate` script (load it with `evaluate.load(STS_SPEARMAN)`) and its plain functions.

The functions live in the metric script itself, which evaluate copies and imports on its own; importing them
pulls in `evaluate` (seconds), so they are loaded on first use rather than with the package.
"""

import importlib
import os
from typing import Any

# `evaluate.load` accepts a folder holding a script of the same name; it never touches the network for a local
# path, so this works with HF_HUB_OFFLINE=1.
STS_SPEARMAN: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sts_spearman")

_FROM_SCRIPT = (
    "DEFAULT_SCORE_RANGE",
    "SIMILARITY_FUNCTIONS",
    "STSSpearman",
    "paired_similarities",
    "sts_correlations",
    "sts_metrics_from_embeddings",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_SCRIPT:
        module = importlib.import_module(".sts_spearman.sts_spearman", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["STS_SPEARMAN", *_FROM_SCRIPT]
