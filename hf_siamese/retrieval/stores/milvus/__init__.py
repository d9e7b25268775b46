"""The Milvus store (registered in `stores/__init__.py`): an index in a Milvus server, cluster or Milvus Lite file
(`index.MilvusIndex`), where it lives (`location`), built from a corpus (`build`) or written from a folder index
(`export`, `lite_process`), with its learned-sparse field (`sparse`). pymilvus is imported only when a collection is
opened or written."""

from __future__ import annotations

from typing import Any

from .location import MilvusLocation, is_engine_location


def claims(text: str) -> bool:
    """Whether `text` names a Milvus collection (a scheme starting "milvus", in any case)."""
    return is_engine_location(text)


def parse(text: str) -> MilvusLocation:
    """The collection `text` names (`MilvusLocation.parse`)."""
    return MilvusLocation.parse(text)


def open_store(where: MilvusLocation, rescore: int | None = None) -> Any:
    """The collection at `where`, opened and checked (`MilvusIndex.open`)."""
    from .index import MilvusIndex

    if rescore is not None:
        raise ValueError(
            f"rescore={rescore!r} (--rescore): the search engine's collection {where.text!r} holds float32 vectors; "
            "rescoring applies to a folder index built with precision float16, int8 or binary"
        )
    return MilvusIndex.open(where)


def build_store(
    model: Any,
    corpus: Any,
    where: MilvusLocation,
    *,
    engine_options: dict[str, Any] | None = None,
    ids: Any = None,
    text_column: str = "text",
    id_column: str | None = None,
    calibration_queries: Any = None,
    precision: str = "float32",
    rescore: int | None = None,
    multivector_model: Any = None,
    multivector_tokenizer: Any = None,
    multivector_precision: str = "float16",
    **options: Any,
) -> Any:
    """`corpus` embedded by `model` into a local folder index, then exported to the collection at `where`
    (`build.build_engine_index`, with `engine_options`); what a collection cannot keep is refused before any work."""
    from ...index.build import check_build_options, corpus_source
    from .build import build_engine_index

    check_build_options(precision, rescore, multivector_precision, multivector_model, multivector_tokenizer)
    if rescore is not None:
        raise ValueError(
            f"rescore={rescore!r} (--rescore): the search engine's collection {where.text!r} searches its own index; "
            "rescoring applies to a folder index's compact vectors"
        )
    if multivector_model is not None:
        raise ValueError(
            f"multivector_model (--multi-vector-model): the search engine's collection {where.text!r} keeps no token "
            "vectors; build a folder index to rerank by MaxSim"
        )
    if calibration_queries is not None:
        raise ValueError(
            "calibration_queries (--calibration-queries): an engine's approximate index measures its recall on "
            "held-out documents; give none"
        )
    corpus, text_column, id_column = corpus_source(corpus, ids, text_column, id_column)  # read as the build reads it
    return build_engine_index(
        model, corpus, where, text_column=text_column, id_column=id_column, precision=precision, **options,
        **(engine_options or {}),
    )  # fmt: skip


__all__ = ["build_store", "claims", "open_store", "parse"]
