"""Building a collection in Milvus from a corpus (`build_engine_index`: what `build_index` and 'hf-siamese index -o
milvus...' run): the corpus is embedded into a local folder index (`build_folder_index`: the same reader, the
same streamed, resumable shards and BM25 pass), which `milvus_export.export_index` then upserts into the collection.

What can be checked is checked before any embedding, in this order: the settings (the lexical choices, by
`lexical.wants_lexical`; the dense index type, against what the engine builds), the collection there (one not written
by hf-siamese is refused without `overwrite`), then one read of the corpus (no model: its rows' content digest,
count and id type, and any text or id over the 65,535 bytes Milvus holds). A collection holding another export is then
refused without `overwrite` (naming what differs), and one holding this same export, complete, is returned as it is:
nothing is embedded again.

The work folder the corpus is embedded into (`work_folder`, or `work_dir`) is kept where a run stops; the next run
reuses it only where it holds this same corpus, by content (not by a file's size and time), embedded with the same
model and settings.

With `sparse_model`, the work folder gets its learned-sparse part (`sparse_part.py`) and the collection its
`learned_sparse` field (`milvus_sparse.py`); the sparse model is loaded (a wrong folder refused) before any reading,
and its fingerprint is part of what the collection and the work folder are compared by.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ....data.digest import TextDigest
from ....storage import write_text_atomic
from ...index.build import build_folder_index
from ...index.fingerprint import model_fingerprint, recorded_name
from ...index.lexical import LexicalSettings, wants_lexical
from ...index.parts import resolve_dtype
from .export import LEXICAL_KINDS, analyzer_of, another_export, check_engine_row, dense_index_of, export_index
from .index import MilvusIndex, MilvusLocation, read_record
from .lite_process import release_here, served_here

logger = logging.getLogger(__name__)

SOURCE_FILE = "export.json"  # in the work folder: what it was built from


def work_folder(location: str | MilvusLocation) -> Path:
    """Where `build_engine_index` embeds the corpus before the export: beside a Milvus Lite file, else in the
    current folder (`.hf-siamese-export-COLLECTION`)."""
    where = MilvusLocation.of(location)
    if where.lite:
        return Path(where.uri).with_name(f".{Path(where.uri).name}.{where.collection}.export")
    return Path.cwd() / f".hf-siamese-export-{where.collection}"


def build_engine_index(
    model: Any,
    corpus: Any,
    location: str | MilvusLocation,
    *,
    lexical: bool | None = None,
    lexical_settings: LexicalSettings | None = None,
    approximate: bool | None = None,
    engine_lexical: str | None = None,
    dense_index: str | None = None,
    dense_params: dict[str, Any] | None = None,
    overwrite: bool = False,
    work_dir: str | os.PathLike | None = None,
    sparse_model: Any = None,
    sparse_tokenizer: Any = None,
    precision: str = "float32",
    **build_kwargs: Any,
) -> MilvusIndex:
    """Embed `corpus` (a source `open_corpus` reads: `build_index` resolves a BEIR folder or `ids` first) with `model`
    into a local folder index (`index.build.build_folder_index`), in `work_dir` (default
    `work_folder(location)`, removed once exported), and export it to the collection at `location`; returns it
    opened. `engine_lexical`: the collection's BM25, "ours" (the default) or "milvus" (asks for the lexical part:
    refused with `lexical=False`). `approximate` picks the dense index as the folder's rule does (None: by size; True:
    IVF_FLAT; False: FLAT) unless `dense_index` names one (one the engine builds). See the module docstring for what
    is checked before any embedding. `sparse_model` (with `sparse_tokenizer`): a sparse model or its folder / Hub id,
    whose term weights the collection then holds in its `learned_sparse` field (the first stage "sparse"). `precision`:
    "float32", or "int8" (`engine_dense_index`: the engine's scalar-quantized index of the vectors)."""
    where = MilvusLocation.of(location)
    if build_kwargs.get("ids") is not None:
        raise ValueError("build_engine_index reads ids from the corpus: give ids= to build_index, which resolves them")
    build_kwargs.pop("ids", None)
    if engine_lexical is not None and engine_lexical not in LEXICAL_KINDS:
        raise ValueError(f"engine_lexical={engine_lexical!r} (--engine-lexical); accepted: {', '.join(LEXICAL_KINDS)}")
    with_lexical = wants_lexical(lexical, lexical_settings, engine_lexical)
    settings = lexical_settings or LexicalSettings()
    if with_lexical and engine_lexical == "milvus":
        analyzer_of(settings)  # what Milvus's analyzer cannot do: refused before any work
    dense_index = engine_dense_index(precision, dense_index, approximate)
    if dense_index is None and approximate is not None:
        dense_index = "IVF_FLAT" if approximate else "FLAT"
    if dense_index is not None:
        dense_index_of(0, dense_index, dense_params, where)  # a type the engine does not build: refused now
    sparse, sparse_print = _sparse_of(sparse_model, sparse_tokenizer, model)  # a wrong folder: before any reading
    found = _existing_record(where, overwrite)  # an unreachable engine, a foreign collection: before any reading
    if isinstance(corpus, Iterator):  # read twice (checked, then embedded): a one-shot iterator is kept as a list
        corpus = list(corpus)
    text_column, id_column = build_kwargs.get("text_column", "text"), build_kwargs.get("id_column")
    count, id_type, digest = _read_rows(corpus, text_column, id_column)
    fingerprint = model_fingerprint(model)["fingerprint"]
    folder_settings = {**build_kwargs, "lexical": with_lexical, "lexical_settings": lexical_settings}
    folder_settings.update({"sparse": sparse_print} if sparse_print is not None else {})
    source = _source(digest, folder_settings)
    engine = {"engine_lexical": engine_lexical, "dense_index": dense_index, "dense_params": dense_params}
    build = _digest({**source, "model": fingerprint, "name": recorded_name(model.config.name_or_path), **engine})
    folder = Path(work_dir) if work_dir is not None else work_folder(where)
    if found and not overwrite:
        expected = {
            "model": {"fingerprint": fingerprint, "name_or_path": recorded_name(model.config.name_or_path)},
            "settings": _embedding_settings(model, build_kwargs), "count": count, "data": digest.describe("documents"),
            "dim": model.config.embedding_size, "id_type": id_type,
            "lexical": {"kind": engine_lexical or "ours", "settings": asdict(settings)} if with_lexical else None,
            "dense_index": dense_index_of(count, dense_index, dense_params, where), "sparse": sparse_print,
        }  # fmt: skip
        differs = _differences(found, expected)
        if differs:
            raise another_export(where, differs)
        if found.get("build") == build and found.get("uploaded", 0) >= found["count"]:
            logger.info("%s: complete already (%d documents): nothing to embed", where.text, found["count"])
            if work_dir is None:
                shutil.rmtree(folder, ignore_errors=True)  # left by a run stopped after its export
            return MilvusIndex.open(where)
    kept = _kept_folder(folder, fingerprint, source)
    if kept is None:
        kept = build_folder_index(
            model, corpus, folder, overwrite=True, lexical=with_lexical, lexical_settings=lexical_settings,
            approximate=False, **sparse, **build_kwargs,
        )  # fmt: skip
        write_text_atomic(folder / SOURCE_FILE, json.dumps(source))
    result = export_index(
        kept, where, lexical=(engine_lexical or "ours") if kept.has_lexical else None, dense_index=dense_index,
        dense_params=dense_params, overwrite=overwrite, build=build, sparse=sparse_print is not None,
    )  # fmt: skip
    if work_dir is None:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def _sparse_of(sparse_model: Any, tokenizer: Any, model: Any) -> tuple[dict[str, Any], str | None]:
    """(`build_index`'s sparse keywords, the sparse model's fingerprint) of `sparse_model`, loaded once (None: none)."""
    if sparse_model is None:
        if tokenizer is not None:
            raise ValueError(
                "sparse_tokenizer applies with sparse_model (the sparse part's model); give both or neither"
            )
        return {}, None
    from ...index.sparse_part import resolve_sparse_model, sparse_fingerprint

    loaded, tokenizer, _ = resolve_sparse_model(sparse_model, tokenizer, device=str(model.device))
    return {"sparse_model": loaded, "sparse_tokenizer": tokenizer}, sparse_fingerprint(loaded)


ENGINE_INT8_INDEXES = ("IVF_SQ8", "HNSW_SQ")


def engine_dense_index(precision: str, dense_index: str | None, approximate: bool | None) -> str | None:
    """The dense index of a collection searched at `precision`: float32 keeps `dense_index`; int8 is the engine's
    scalar-quantized index (`ENGINE_INT8_INDEXES`; IVF_SQ8 by default: one byte a dimension, its nprobe chosen by
    measured recall); other precisions are refused (Milvus Lite has no binary or float16 vector field)."""
    if precision == "float32":
        return dense_index
    if precision != "int8":
        raise ValueError(
            f"precision={precision!r} (--precision): a Milvus collection holds float32 vectors, searched at int8 "
            f"through the engine's scalar-quantized indexes ({', '.join(ENGINE_INT8_INDEXES)}); Milvus Lite has no "
            f"binary or float16 vector field: build a folder index for {precision}"
        )
    if approximate is False:
        raise ValueError(
            "approximate=False (--no-approximate) with precision='int8': the engine's int8 search is its "
            f"scalar-quantized approximate index ({', '.join(ENGINE_INT8_INDEXES)})"
        )
    if dense_index is not None and dense_index.upper() not in ENGINE_INT8_INDEXES:
        raise ValueError(
            f"dense_index={dense_index!r} (--dense-index) with precision='int8': accepted "
            f"{', '.join(ENGINE_INT8_INDEXES)} (the engine's int8 indexes), or no --precision"
        )
    return (dense_index or ENGINE_INT8_INDEXES[0]).upper()


def _existing_record(where: MilvusLocation, overwrite: bool) -> dict[str, Any] | None:
    """The record of the collection at `where` (None: none there), read before any work: an unreachable engine, or a
    collection hf-siamese did not write (without `overwrite`), fails here. A Milvus Lite database that does not
    exist yet is not made here (the export makes it)."""
    if where.lite and not os.path.exists(where.uri):
        return None
    started = not served_here(where)
    client = where.connect()
    try:
        return read_record(client, where)
    except ValueError:
        if not overwrite:
            raise
        return None
    finally:
        client.close()
        if started:  # not held while the corpus is embedded: the export may open it in its engine's process
            release_here(where)


def _read_rows(corpus: Any, text_column: str, id_column: str | None) -> tuple[int, str, TextDigest]:
    """(count, id type, the digest of the (id, text) rows as the index will hold them), read once before any
    embedding; a `ValueError` names a text or id Milvus cannot hold."""
    from ....data.corpus_stream import open_corpus

    digest, id_type = TextDigest(), "int"
    for row, (doc_id, text) in enumerate(open_corpus(corpus, text_column, id_column)):
        doc_id = row if id_column is None else doc_id  # the build's ids: the positions where no id column is read
        check_engine_row(doc_id, text, row)
        digest.add(doc_id, text)
        if row == 0:
            id_type = type(doc_id).__name__
    if digest.count == 0:
        raise ValueError("the corpus is empty: there is nothing to embed")
    return digest.count, id_type, digest


def _embedding_settings(model: Any, build_kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the folder index records of how its corpus was embedded (`index_build.index_record`'s "settings")."""
    config = model.config
    return {
        "pooling": config.pooling,
        "normalize": config.normalize,
        "similarity": config.similarity,
        "max_seq_length": config.effective_max_seq_length,
        "truncate_dim": config.truncate_dim,
        "document_prompt": model.resolve_prompt(build_kwargs.get("prompt_name"), build_kwargs.get("prompt")),
        "dtype": resolve_dtype(build_kwargs.get("dtype"), model.device)[0],
    }


def _differences(found: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """The keys of the collection's record that differ from what this build would record, compared only where
    known before the embedding (a record with more keys, or a model record with more, differs in those only later)."""
    differs = []
    for key, value in expected.items():
        there = found.get(key)
        if key == "dense_index":
            there = {k: v for k, v in (there or {}).items() if k in ("type", "params")}
            value = {k: v for k, v in value.items() if k in ("type", "params")}
        elif key == "sparse":
            there = ((there or {}).get("model") or {}).get("fingerprint")
        elif key in ("model", "settings"):
            there = {k: (there or {}).get(k) for k in value}
        if there != value:
            differs.append(key)
    return sorted(differs)


def _source(digest: TextDigest, settings: dict[str, Any]) -> dict[str, Any]:
    """What a work folder is built from: the corpus by the content of its rows, and the build's settings."""
    shown = {key: repr(value) for key, value in sorted(settings.items()) if key != "show_progress_bar"}
    return {"data": f"{digest.count} documents, sha256 {digest.hexdigest()}", **shown}


def _digest(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=repr).encode("utf-8")).hexdigest()


def _kept_folder(folder: Path, fingerprint: str, source: dict[str, Any]) -> Any:
    """The work folder a stopped run left, where it holds this same corpus (by content), model and settings; else
    None (it is then built again)."""
    from ..folder import VectorIndex

    if not (folder / "index.json").is_file():
        return None
    try:
        recorded = json.loads((folder / SOURCE_FILE).read_text(encoding="utf-8"))
        kept = VectorIndex.load(folder)
    except (OSError, ValueError):
        return None
    if recorded != source or kept.info["model"]["fingerprint"] != fingerprint:
        logger.info("%s: made from another corpus or with other settings; embedding it again", folder)
        return None
    return kept


__all__ = ["build_engine_index", "work_folder"]
