"""A learned-sparse `--model` on the command line (`eval BEIR_DIR`, `search --corpus`): telling one from a dense model
by its folder's config.json, refusing the flags that only apply to dense models, and loading it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .common import quiet_progress_bars

SPARSE_MODEL_TYPE = "siamese-sparse"  # SparseSiameseConfig.model_type (not imported here: start-up time)


def _config_of(path: str) -> dict[str, Any] | None:
    """The config.json of a local folder, or of a Hub id already in the cache; None when there is none to read."""
    folder = Path(path)
    if folder.is_dir():
        config = folder / "config.json"
    else:
        if os.path.exists(path) or path.startswith((".", "/", "~")) or path.count("/") > 1:
            return None  # a file, or a local path that is not there: the model loader names it
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # not a valid repo id: the model loader names it
            return None
        if not isinstance(cached, str):
            return None
        config = Path(cached)
    try:
        return json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_sparse_model_path(path: str | None) -> bool:
    """Whether `--model PATH` is a learned-sparse model: its config.json's model_type is "siamese-sparse", or it is a
    folder in sentence-transformers' SparseEncoder layout. None (the default model, a dense one): False."""
    if path is None:
        return False
    if Path(path).is_dir():
        from ..formats.sparse_layout import is_sparse_encoder_folder

        if is_sparse_encoder_folder(path):
            return True
    config = _config_of(os.fspath(path))
    return config is not None and config.get("model_type") == SPARSE_MODEL_TYPE


def refuse_dense_flags(model_path: str, given: dict[str, Any], kind: str = "sparse") -> None:
    """One line naming the flags of `given` (flag -> value; None and False: not given) that only apply to a dense
    model, for the sparse (or, `kind="multi-vector"`, multi-vector) `model_path`."""
    flags = [flag for flag, value in given.items() if value not in (None, False)]
    if flags:
        verb = "applies" if len(flags) == 1 else "apply"
        what = {
            "sparse": f"a sparse model ({SPARSE_MODEL_TYPE}, ranked exactly by its term weights; an index keeps it as "
            "its sparse part, 'index --sparse-model')",
            "multi-vector": "a multi-vector model (ranked exactly by MaxSim of its token vectors; an index keeps them "
            "as its multi-vector part, 'index --multi-vector-model', and reranks by them, 'search --rerank')",
        }[kind]
        named = ", ".join(flags)
        raise ValueError(f"{named} {verb} to a dense model; {model_path} is {what}: give no {named}")


def load_sparse_model(path: str, max_seq_length: int | None = None, device: str | None = None) -> tuple[Any, Any]:
    """`(model, tokenizer)` of a sparse model folder or Hub id (or a SparseEncoder folder), in eval mode on `device`;
    `max_seq_length` cuts its texts shorter than its config says."""
    from transformers import AutoModel, AutoTokenizer

    from ..formats.sparse_layout import is_sparse_encoder_folder, read_sparse_encoder
    from ..modeling.checkpoints import check_model_source
    from ..modeling.devices import resolve_device
    from ..retrieval.ranking.sparse import is_sparse_model

    path = check_model_source(path)
    with quiet_progress_bars():
        if Path(path).is_dir() and is_sparse_encoder_folder(path):
            model = read_sparse_encoder(path)
            tokenizer = model.tokenizer
        else:
            model = AutoModel.from_pretrained(path)
            tokenizer = AutoTokenizer.from_pretrained(path)
    if not is_sparse_model(model):
        raise ValueError(f"--model {path}: expected a sparse model ({SPARSE_MODEL_TYPE}), got {type(model).__name__}")
    if max_seq_length is not None:
        model.config.max_seq_length = max_seq_length
    return model.to(resolve_device(device)).eval(), tokenizer


def use_recorded_sparse_model(index: Any, device: str | None = None) -> None:
    """Load the learned-sparse model an index records with its sparse part (also a SparseEncoder folder; on `device`)
    and hand it to that part, which checks it against the recorded fingerprint (another model at that path is
    refused, naming both): for `search` and `eval --index` with a sparse or hybrid first stage."""
    name = index.sparse.model_name
    if not name:
        raise ValueError(f"the sparse part of {index.location!r} records no model path (built from an unsaved model)")
    model, tokenizer = load_sparse_model(name, device=device)
    index.sparse.use_model(model, tokenizer)


__all__ = ["is_sparse_model_path", "load_sparse_model", "refuse_dense_flags", "use_recorded_sparse_model"]
