"""The model kinds, in one registry: dense (`SiameseBertModel`), sparse (`SparseSiameseModel`), multi-vector
(`MultiVectorModel`) and the cross-encoder. Every place that asks "what kind of model is this?" asks here: loading
(`load_kind`), `hf-siamese train --kind` (`model_kinds(trainable=True)`), the trainer's loss rules
(`kind_of_model`), and the index and the commands told a model path (`kind_of_path`).

A kind is told by what a checkpoint says of itself, read without loading any weights: its config.json's `model_type`
(the hf-siamese class's), or, for a folder in sentence-transformers' layout, the `model_type` of its
`config_sentence_transformers.json` ("SparseEncoder", "MultiVectorEncoder"); a cross-encoder by its architectures
(`...ForSequenceClassification`). A new kind is one package (its config, model and loader) and one `register_kind`.
The loaders are named by dotted path, imported on first use: this module imports nothing of hf_siamese.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ST_CONFIG_FILE = "config_sentence_transformers.json"
ST_MODULES_FILE = "modules.json"
DENSE = "dense"


@dataclass(frozen=True)
class ModelKind:
    """One kind of model: its `name` (what `--kind` and error messages say), the `model_type` its hf-siamese config
    saves, the `model_type` a sentence-transformers folder of it records (`st_model_type`; None: none read as this
    kind), its `loader` (`(path, **options) -> (model, tokenizer)` for inference, or its dotted name
    "package.module:function", imported when first used), whether
    `hf-siamese train --kind` trains it (`trainable`) and a line on what it is (`summary`)."""

    name: str
    model_type: str | None
    loader: str | Callable[..., tuple[Any, Any]]
    st_model_type: str | None = None
    trainable: bool = True
    summary: str = ""

    def load(self, path: str, **options: Any) -> tuple[Any, Any]:
        """`(model, tokenizer)` of the checkpoint at `path` by this kind's loader."""
        return _resolve(self.loader)(path, **options)


_KINDS: dict[str, ModelKind] = {}


def register_kind(kind: ModelKind) -> None:
    """Add `kind` to the registry (a registered name is replaced). Its loader is checked to resolve now, so a wrong
    dotted path fails at registration, not at the first load."""
    if not isinstance(kind, ModelKind):
        raise ValueError(f"register_kind({kind!r}): expected a ModelKind")
    _resolve(kind.loader)
    _KINDS[kind.name] = kind


def model_kinds(trainable: bool = False) -> tuple[str, ...]:
    """The registered kinds' names, in registration order (`trainable`: only those `train --kind` takes)."""
    return tuple(name for name, kind in _KINDS.items() if kind.trainable or not trainable)


def get_kind(name: str) -> ModelKind:
    """The kind called `name`, or a `ValueError` naming it and the registered ones."""
    if name not in _KINDS:
        raise ValueError(f"kind={name!r}; accepted: {', '.join(_KINDS)}")
    return _KINDS[name]


def kind_of_config(config: Any) -> str:
    """The kind a model config says (a transformers config, or config.json read as a dict): its `model_type`'s, the
    cross-encoder's by its architectures, else dense (a plain encoder is read as a dense model)."""
    model_type = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    for kind in _KINDS.values():
        if kind.model_type is not None and kind.model_type == model_type:
            return kind.name
    names = config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)
    if any(str(name).endswith("ForSequenceClassification") for name in names or []):
        return "cross-encoder"
    return DENSE


def kind_of_model(model: Any) -> str:
    """The kind of a loaded model, by its config (so the remote-code classes of saved ones count too)."""
    return kind_of_config(getattr(model, "config", None) or {})


def kind_of_path(path: str | os.PathLike | None) -> str | None:
    """The kind of the checkpoint at `path` (a folder, or a Hub id already in the cache), read from its files without
    loading it; None where there is nothing to read (no path, a missing folder, an id not in the cache: the loader
    that follows names the problem)."""
    if path is None:
        return None
    text = os.fspath(path)
    folder = Path(text)
    if folder.is_dir() and (folder / ST_MODULES_FILE).is_file() and (folder / ST_CONFIG_FILE).is_file():
        st_type = (_read_json(folder / ST_CONFIG_FILE) or {}).get("model_type")
        for kind in _KINDS.values():
            if kind.st_model_type is not None and kind.st_model_type == st_type:
                return kind.name
    config = _read_json(folder / "config.json") if folder.is_dir() else _cached_config(text)
    return None if config is None else kind_of_config(config)


def load_kind(path: str, kind: str | None = None, **options: Any) -> tuple[Any, Any]:
    """`(model, tokenizer)` of the checkpoint at `path` by a kind's loader: `kind`'s (whose loader refuses a
    checkpoint of another kind, naming what it found), else the kind the checkpoint says (`kind_of_path`; dense where
    it says nothing). `options` go to the loader (`device`, `max_seq_length`, ...)."""
    return get_kind(kind or kind_of_path(path) or DENSE).load(path, **options)


def _resolve(dotted: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(dotted):
        return dotted
    module, _, attribute = dotted.partition(":")
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"loader {dotted!r} is not callable")
    return target


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _cached_config(text: str) -> dict[str, Any] | None:
    """config.json of a Hub id in the local cache (never a download); None for a local path that is not there."""
    if os.path.exists(text) or text.startswith((".", "/", "~")) or text.count("/") > 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(text, "config.json")
    except Exception:  # not a valid repo id: the loader names it
        return None
    return _read_json(Path(cached)) if isinstance(cached, str) else None


for _kind in (
    ModelKind(DENSE, "siamese-bert", "hf_siamese.formats.loading:load_model", summary="one vector a text"),
    ModelKind(
        "sparse", "siamese-sparse", "hf_siamese.formats.loading:load_sparse_model", "SparseEncoder",
        summary="learned term weights over the vocabulary (SPLADE, inference-free, CSR)",
    ),
    ModelKind(
        "multi-vector", "siamese-multivector", "hf_siamese.formats.multivector_layout:load_multivector_model",
        "MultiVectorEncoder", summary="one vector a token, scored by MaxSim (ColBERT-style)",
    ),
    ModelKind(
        "cross-encoder", None, "hf_siamese.cross_encoder.model:load_cross_encoder_model", None,
        trainable=False, summary="scores a (query, document) pair (hf-siamese train-reranker trains it)",
    ),
):  # fmt: skip
    _KINDS[_kind.name] = _kind  # the built-ins: their loaders are imported when first used, not now


__all__ = [
    "ModelKind", "get_kind", "kind_of_config", "kind_of_model", "kind_of_path", "load_kind", "model_kinds",
    "register_kind",
]  # fmt: skip
