"""The input checks and small parts the vector index and the corpus-scale index share: texts, ids, top_k and dtype
checks, whether faiss is installed (moving a finished folder into place lives in `hf_siamese.storage`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

FAISS_METRICS = {"cosine": "inner_product", "dot": "inner_product", "euclidean": "l2"}  # manhattan: exact search
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_texts(corpus: Iterable[str]) -> list[str]:
    if isinstance(corpus, str) or not isinstance(corpus, Iterable):
        raise ValueError(f"corpus must be a list of strings, got {type(corpus).__name__}; wrap one text in a list")
    texts = list(corpus)
    if not texts:
        raise ValueError("corpus is empty: an index needs at least one text")
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"corpus[{position}] is {type(text).__name__} ({text!r:.60}); every text must be a str")
    return texts


def check_ids(ids: Iterable[Any] | None, count: int) -> list[Any]:
    if ids is None:
        return list(range(count))
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise ValueError(f"ids must be a list of str or int (one per text), got {type(ids).__name__}")
    ids = [i.item() if isinstance(i, np.generic) else i for i in ids]  # numpy ints and strs -> Python ones
    if len(ids) != count:
        raise ValueError(f"ids has {len(ids)} entries but corpus has {count} texts; give exactly one id per text")
    seen: dict[Any, int] = {}
    for position, value in enumerate(ids):
        if isinstance(value, bool) or not isinstance(value, int | str) or type(value) is not type(ids[0]):
            raise ValueError(
                f"ids[{position}] is {type(value).__name__} ({value!r:.60}); ids must be all str or all int"
            )
        if value in seen:
            raise ValueError(f"duplicate id {value!r} (ids[{seen[value]}] and ids[{position}]); ids must be unique")
        seen[value] = position
    return ids


def check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ValueError(f"top_k={top_k!r}: expected a positive int (the number of hits per query)")
    return int(top_k)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> tuple[str, torch.dtype | None]:
    """(name recorded in index.json, dtype for `encode`'s autocast): float16 runs in float32 on a CPU."""
    if dtype is None:
        return "float32", None
    name = dtype if isinstance(dtype, str) else next((n for n, d in DTYPES.items() if d == dtype), None)
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: expected one of {', '.join(DTYPES)} (or the torch dtype)")
    compute = DTYPES[name]
    return name, None if name == "float32" or (name == "float16" and device.type == "cpu") else compute


def require_modules(needed: dict[str, str], purpose: str, install: str) -> None:
    """Raise `ImportError` unless every module of `needed` (module -> its pip package) imports, naming each package
    that does not and why (an ImportError need not carry the module's name), then `install`."""
    failures = []
    for module, package in needed.items():
        try:
            __import__(module)  # the import statement's own hook (tests replace builtins.__import__)
        except ImportError as error:
            if getattr(error, "name", None) == module:
                failures.append(f"{package} is missing")
            else:
                failures.append(f"{package} does not import: {str(error).strip() or type(error).__name__}")
    if failures:
        raise ImportError(f"{purpose} ({'; '.join(failures)}): {install}")


def resolve_part_model(
    model: Any, tokenizer: Any, device: str | None, kind: str, argument: str
) -> tuple[Any, Any, str]:  # fmt: skip
    """(model, tokenizer, recorded name) of the model an index part is encoded by (`kind`: "sparse" or
    "multi-vector"): a loaded model of that kind (with `tokenizer`, or its own; its `config.name_or_path` recorded) or
    the folder / Hub id of one, loaded by the kind's loader (`modeling.kinds`: a sentence-transformers folder too).
    Anything else is refused, naming `argument` and what it is."""
    import os

    from ...modeling.kinds import get_kind, kind_of_model, load_kind
    from .fingerprint import recorded_name

    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        try:
            loaded, tokenizer = load_kind(path, kind, device=device)
        except ValueError as error:
            raise ValueError(f"{kind} model {path!r}: {str(error).splitlines()[0]}") from None
        return loaded, tokenizer, recorded_name(path)
    if kind_of_model(model) != kind:
        raise ValueError(
            f"{argument}: expected a {kind} model ({get_kind(kind).model_type}) or its folder, got "
            f"{type(model).__name__}"
        )
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    return model, tokenizer, recorded_name(getattr(model.config, "name_or_path", ""))


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True
