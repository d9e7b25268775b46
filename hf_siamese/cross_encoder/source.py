"""What a model folder holds: a cross-encoder (a `...ForSequenceClassification`), a bi-encoder (ours, or a
sentence-transformers embedding model), or a plain encoder. Loaders use it to say which is which when a user hands one
where the other is expected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Where our bi-encoder's save_pretrained puts the encoder (config, weights, tokenizer).
BI_ENCODER_ENCODER_FOLDER = "0_Transformer"
SIAMESE_MODEL_TYPE = "siamese-bert"


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def model_kind(source: str | os.PathLike) -> str:
    """`"cross-encoder"`, `"bi-encoder"`, `"encoder"` or `"unknown"` (a Hub id, or a folder with no config.json) for
    a local folder."""
    folder = Path(source)
    if not folder.is_dir():
        return "unknown"
    config = _json(folder / "config.json")
    if not isinstance(config, dict):
        return "unknown"
    if config.get("model_type") == SIAMESE_MODEL_TYPE:
        return "bi-encoder"
    from ..modeling.configuration_siamese import is_cross_encoder_config

    if is_cross_encoder_config(config):
        return "cross-encoder"
    modules = _json(folder / "modules.json")
    if isinstance(modules, list) and any("Pooling" in str(module.get("type", "")) for module in modules):
        return "bi-encoder"
    return "encoder"


def encoder_folder(source: str | os.PathLike) -> str:
    """The folder (or Hub id) that holds the encoder of `source`: our bi-encoder keeps it in `0_Transformer/`."""
    folder = Path(source)
    if folder.is_dir() and (_json(folder / "config.json") or {}).get("model_type") == SIAMESE_MODEL_TYPE:
        inner = folder / BI_ENCODER_ENCODER_FOLDER
        if not (inner / "config.json").exists():
            raise ValueError(f"{os.fspath(folder)!r} is a hf-siamese bi-encoder without its {inner.name}/ encoder")
        return os.fspath(inner)
    return os.fspath(source)


def is_ours(source: str | os.PathLike) -> bool:
    """Whether `source` is a folder of our bi-encoder (`SiameseBertModel`)."""
    return (_json(Path(source) / "config.json") or {}).get("model_type") == SIAMESE_MODEL_TYPE
