"""A learned-sparse `--model` on the command line (`eval BEIR_DIR`, `search --corpus`): telling one from a dense model
by its folder's config.json, refusing the flags that only apply to dense models, and loading it."""

from __future__ import annotations

from typing import Any

from .common import quiet_progress_bars


def is_sparse_model_path(path: str | None) -> bool:
    """Whether `--model PATH` is a learned-sparse model (its config, or sentence-transformers' SparseEncoder layout:
    the model-kind registry's answer). None (the default model, a dense one): False."""
    from ..modeling.kinds import kind_of_path

    return kind_of_path(path) == "sparse"


def refuse_dense_flags(model_path: str, given: dict[str, Any], kind: str = "sparse") -> None:
    """One line naming the flags of `given` (flag -> value; None and False: not given) that only apply to a dense
    model, for the sparse (or, `kind="multi-vector"`, multi-vector) `model_path`."""
    flags = [flag for flag, value in given.items() if value not in (None, False)]
    if flags:
        verb = "applies" if len(flags) == 1 else "apply"
        what = {
            "sparse": "a sparse model (siamese-sparse, ranked exactly by its term weights; an index keeps it as "
            "its sparse part, 'index --sparse-model')",
            "multi-vector": "a multi-vector model (ranked exactly by MaxSim of its token vectors; an index keeps them "
            "as its multi-vector part, 'index --multi-vector-model', and reranks by them, 'search --rerank')",
        }[kind]
        named = ", ".join(flags)
        raise ValueError(f"{named} {verb} to a dense model; {model_path} is {what}: give no {named}")


def load_sparse_model(path: str, max_seq_length: int | None = None, device: str | None = None) -> tuple[Any, Any]:
    """`(model, tokenizer)` of a sparse model folder or Hub id (or a SparseEncoder folder), in eval mode on `device`
    (`formats.loading.load_sparse_model`, its progress bars quiet); a model of another kind is refused, naming it."""
    from ..formats.loading import load_sparse_model as load

    with quiet_progress_bars():
        return load(path, max_seq_length=max_seq_length, device=device)


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
