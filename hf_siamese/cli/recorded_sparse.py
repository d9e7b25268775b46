"""The learned-sparse model an index records with its sparse part, loaded for a command that reads that part (`eval
--index` with a sparse or hybrid first stage) as --model loads a sparse model (`sparse_options.load_sparse_model`)."""

from __future__ import annotations

from typing import Any

from .sparse_options import load_sparse_model


def use_recorded_sparse_model(index: Any, device: str | None = None) -> None:
    """Load the index's recorded sparse model (also a SparseEncoder folder; on `device`) and hand it to its sparse
    part, which checks it against the recorded fingerprint (another model at that path is refused, naming both)."""
    name = index.sparse.model_name
    if not name:
        raise ValueError(f"the sparse part of {index.location!r} records no model path (built from an unsaved model)")
    model, tokenizer = load_sparse_model(name, device=device)
    index.sparse.use_model(model, tokenizer)


__all__ = ["use_recorded_sparse_model"]
