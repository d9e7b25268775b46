"""What is added to an index once it is built, without re-encoding the vectors: its lexical (BM25) part
(`add_lexical`, from the stored texts), its learned-sparse part (`add_sparse`, the stored texts encoded by a sparse
model), its multi-vector part (`add_multivector`: the stored texts' token vectors, for a MaxSim rerank), its compact
vectors (`set_precision`: float16 / int8 / binary codes of the stored vectors) and the
pipeline it searches with (`attach_reranker`: a reranker and the settings of both stages, `pipeline.py`)."""

from __future__ import annotations

import os
import shutil
from typing import Any

from ...storage import exclusive_output, recover_output, replace_folder
from ..fusion.rerank import RERANK_TOP
from ..stores import load_index
from ..stores.folder import VectorIndex
from .compact import COMPACT_DIR, check_rescore, write_compact_part
from .compact import check_precision as check_compact_precision
from .compact_ivf import check_approximate_precision
from .lexical import LEXICAL_DIR, LexicalBuilder, LexicalIndex, LexicalSettings
from .multivector_part import MULTIVECTOR_DIR, check_precision, resolve_multivector_model, write_multivector_part
from .parts import faiss_available
from .pipeline import load_reranker, pipeline_record
from .sparse_part import SPARSE_DIR, resolve_sparse_model, texts_in_batches, write_sparse_part


def add_lexical(
    path: str | os.PathLike,
    settings: LexicalSettings | None = None,
    *,
    overwrite: bool = False,
    shard_size: int = 10_000,
) -> VectorIndex:
    """Add the lexical (BM25) part to an index folder built without it, from its stored texts: nothing is re-encoded.
    An existing lexical part is replaced only with `overwrite=True` (other settings, say), once the new one is
    complete; returns the index loaded."""
    with exclusive_output(path, "a build of this index"):
        return _add_lexical(path, settings, overwrite, shard_size)


def _add_lexical(
    path: str | os.PathLike, settings: LexicalSettings | None, overwrite: bool, shard_size: int
) -> VectorIndex:
    """`add_lexical` under the index's lock."""
    index = VectorIndex.load(path)
    where = os.fspath(index.path)
    if index.has_lexical and not overwrite:
        raise ValueError(
            f"the index {where!r} has a lexical part already ({index.info['lexical']['settings']}); pass "
            "overwrite=True (--overwrite) to rebuild it"
        )
    target, staging = index.path / LEXICAL_DIR, index.path / f".{LEXICAL_DIR}.building"
    shutil.rmtree(staging, ignore_errors=True)  # what a stopped run left: rebuilt from the start
    builder = LexicalBuilder(staging, settings)
    try:
        for start in range(0, len(index), shard_size):
            builder.add(index.corpus[start : start + shard_size]["text"])
        builder.finish()
    finally:
        builder.close()
    recover_output(target)
    replace_folder(staging, target)
    index.write_info(dict(index.info, lexical=LexicalIndex.record_of(target)))  # under add_lexical's lock
    return VectorIndex.load(index.path)


def add_sparse(
    path: str | os.PathLike,
    sparse_model: Any,
    *,
    tokenizer: Any = None,
    overwrite: bool = False,
    batch_size: int = 32,
    shard_size: int = 10_000,
) -> Any:
    """Add the learned-sparse part to an index folder, encoding its stored texts with `sparse_model` (a folder or Hub
    id, or a loaded model with `tokenizer`); the vectors are kept. An existing sparse part is replaced only with
    `overwrite=True`, once the new one is complete; returns the index loaded."""
    with exclusive_output(path, "a build of this index"):
        index = VectorIndex.load(path)
        _refuse_existing_part(index, index.has_sparse, "sparse", "sparse", overwrite)
        model, tokenizer, name = resolve_sparse_model(sparse_model, tokenizer)
        target, staging = index.path / SPARSE_DIR, index.path / f".{SPARSE_DIR}.building"
        try:
            record = write_sparse_part(
                staging, texts_in_batches(index.corpus, shard_size), model, tokenizer, name, batch_size
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _swap_in(index, staging, target, "sparse", record)
    return VectorIndex.load(index.path)


def add_multivector(
    path: str | os.PathLike,
    multivector_model: Any,
    *,
    tokenizer: Any = None,
    precision: str = "float16",
    overwrite: bool = False,
    batch_size: int = 32,
    shard_size: int = 10_000,
    dtype: Any = None,
) -> Any:
    """Add the multi-vector part to an index folder: its stored texts encoded by `multivector_model` (a folder or Hub
    id, or a loaded `MultiVectorModel` with `tokenizer`) in `dtype` (None: float32; "bfloat16"), the token vectors
    stored at `precision` ("float16" or "int8": `multivector_part.py`); the vectors are kept. A stopped run resumes
    its finished shards when called again (`.multivector.building` in the index). An existing part is replaced only
    with `overwrite=True`, once the new one is complete; returns the index loaded."""
    check_precision(precision)
    with exclusive_output(path, "a build of this index"):
        index = VectorIndex.load(path)
        _refuse_existing_part(index, index.has_multivector, "multi-vector", "multivector", overwrite)
        model, tokenizer, name = resolve_multivector_model(multivector_model, tokenizer)
        target, staging = index.path / MULTIVECTOR_DIR, index.path / f".{MULTIVECTOR_DIR}.building"
        record = write_multivector_part(
            staging, index.corpus, model, tokenizer, name, precision=precision, corpus_key=index.info.get("corpus"),
            batch_size=batch_size, shard_size=shard_size, dtype=dtype,
        )  # fmt: skip
        _swap_in(index, staging, target, "multivector", record)
    return VectorIndex.load(index.path)


def set_precision(
    path: str | os.PathLike, precision: str, *, rescore: int | None = None, approximate: bool | None = None
) -> VectorIndex:
    """Search the index folder at `path` at `precision` (`compact.py`: "float16", "int8", "binary" codes written from
    its stored float32 vectors, which rescore the candidates; "float32" removes them), with `rescore` (None: the
    precision's default); nothing is re-encoded. `approximate=True` (int8, binary; faiss): the candidates through an
    IVF over the codes (`compact_ivf.py`); None or False: the codes searched exactly. Returns the index loaded."""
    check_compact_precision(precision)
    rescore = None if rescore is None else check_rescore(rescore)
    if approximate:
        if precision == "float32":
            raise ValueError(
                "approximate=True (--approximate) with precision='float32': set_precision writes compact codes; an "
                "approximate index of the float32 vectors is built with the index (build_index(approximate=True))"
            )
        check_approximate_precision(precision)
        if not faiss_available():
            raise ImportError("approximate=True needs faiss: pip install 'hf-siamese[index]' (faiss-cpu)")
    with exclusive_output(path, "a build of this index"):
        index = VectorIndex.load(path)
        if index.ann is not None or index.info.get("backend") == "approximate":
            raise ValueError(
                f"the index {os.fspath(index.path)!r} searches through an approximate index of its float32 vectors; "
                "compact vectors replace it: rebuild it with --precision int8|binary (--approximate for an IVF over "
                "the codes)"
            )
        target, staging = index.path / COMPACT_DIR, index.path / f".{COMPACT_DIR}.building"
        shutil.rmtree(staging, ignore_errors=True)
        if precision == "float32":
            index.write_info(dict(index.info, compact=None))
            shutil.rmtree(target, ignore_errors=True)
            return VectorIndex.load(index.path)
        try:
            record = write_compact_part(
                staging, index.embeddings, precision, index.similarity, rescore, approximate=bool(approximate)
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _swap_in(index, staging, target, "compact", record)
    return VectorIndex.load(index.path)


def _refuse_existing_part(index: VectorIndex, present: bool, what: str, key: str, overwrite: bool) -> None:
    """Refuse to rebuild the index's `what` part (index.json's `key`) where it has one, unless `overwrite`, naming
    the model that built it."""
    if present and not overwrite:
        raise ValueError(
            f"the index {os.fspath(index.path)!r} has a {what} part already (model "
            f"{index.info[key]['model'].get('name_or_path')!r}); pass overwrite=True (--overwrite) to rebuild it"
        )


def _swap_in(index: VectorIndex, staging: Any, target: Any, key: str, record: Any) -> None:
    """Put the finished part at `staging` in place of `target` (under the index's lock) and record it in index.json
    as `key`."""
    recover_output(target)
    replace_folder(staging, target)
    index.write_info(dict(index.info, **{key: record}))


def attach_reranker(
    location: str | os.PathLike,
    reranker_location: str,
    *,
    rerank_top: int = RERANK_TOP,
    first_stage_weight: float | None = None,
    first_stage: str | None = None,
    fusion: str | None = None,
    dense_weight: float | None = None,
) -> Any:
    """Record the reranker at `reranker_location` (a cross-encoder folder or Hub id, or a multi-vector model's, which
    reranks by MaxSim of the index's stored token vectors: the index needs its multi-vector part) and the settings
    of both stages in the index at `location` (a folder or an engine's collection); returns the index, reopened. The
    same call with other settings replaces the record."""
    index = load_index(location)
    reranker = load_reranker(reranker_location)
    record = pipeline_record(
        index, reranker_location, reranker, rerank_top=rerank_top, first_stage_weight=first_stage_weight,
        first_stage=first_stage, fusion=fusion, dense_weight=dense_weight,
    )  # fmt: skip
    index.save_info(dict(index.info, pipeline=record))
    return load_index(location)


__all__ = ["add_lexical", "add_multivector", "add_sparse", "attach_reranker", "set_precision"]
