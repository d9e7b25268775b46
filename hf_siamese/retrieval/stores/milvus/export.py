"""Writing an index into Milvus (`milvus.py` says where and what a collection holds): `export_index` upserts a folder
index into the collection in batches (`milvus_build.build_engine_index` embeds a corpus into one first).

Resumable and idempotent: rows are upserted by their position (the primary key), and the collection records how many
rows the engine has flushed (`uploaded`), so a killed export, run again, goes on from there; nothing is duplicated or
lost. A collection holding another export (other data, model or settings) is replaced only with `overwrite=True`.

The dense field's index follows the folder's rule: exact (FLAT) below `ann.EXACT_BELOW` documents, else IVF_FLAT with
`nprobe` chosen by the recall@10 measured against exact search on held-out documents (the folder's vectors give the
exact answer); `dense_index=` / `dense_params=` pass any other index type the engine builds (`milvus.dense_index_types`:
HNSW, ...; another is refused before any work). What Milvus cannot hold (a text or id over 65,535 bytes) is refused
before the collection is created or replaced: nothing already there is lost, nothing is left half-written.

A folder index with a learned-sparse part exports it too (`sparse=None`, the default; False leaves it out): each
document's term weights in the `learned_sparse` field, the sparse model recorded (`milvus_sparse.py`).

An export of `milvus_lite_process.PROCESS_FROM` rows or more to Milvus Lite runs the engine in a process of its own
(Milvus Lite holds an open collection in the memory of the process that serves it): the exporting process stays flat,
and the index returned connects (loading the collection into the process that searches) on its first use.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import numpy as np

from ....data.digest import TextDigest
from ...index.lexical import lucene_idf, lucene_weights
from . import sparse as milvus_sparse
from .index import (
    FORMAT_NAME,
    FORMAT_VERSION,
    METRICS,
    NO_TERM_KEY,
    RECORD_KEY,
    MilvusIndex,
    MilvusLocation,
    _checked_record,
    check_dense_index,
    query_vectors,
    read_record,
    term_key,
)
from .lite_process import ClientOnUse, EngineProcess, wants_process

logger = logging.getLogger(__name__)

LEXICAL_KINDS = ("ours", "milvus")
BATCH = 2_000  # rows a request
FLUSH_EVERY = 20  # batches between flushes: the recorded resume point is always flushed
RECALL_TARGET, RECALL_SAMPLE = 0.95, 200
_MAX_TEXT_BYTES = 65_535  # Milvus's VARCHAR limit


def check_engine_row(doc_id: Any, text: str, row: int) -> None:
    """A `ValueError` naming the document, its size and what to change where its text (or its id) is over the
    65,535 bytes Milvus holds in a VARCHAR field; checked before any collection is made or replaced."""
    fixes = {"text": "split long documents into passages (or shorten this one)", "id": "give it a shorter id"}
    for what, value in (("text", text), ("id", doc_id)):
        # a character is at most 4 bytes in UTF-8: most values need no encoding to be known short enough
        if isinstance(value, str) and 4 * len(value) > _MAX_TEXT_BYTES:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > _MAX_TEXT_BYTES:
                raise ValueError(
                    f"document {doc_id!r:.60} (row {row}) has {size:,} bytes of {what}, over the {_MAX_TEXT_BYTES:,} "
                    f"Milvus holds in a {what} field: {fixes[what]}, then run the command again (the collection was "
                    "not touched)"
                )


def analyzer_of(settings: Any) -> dict[str, Any]:
    """Milvus's analyzer for our lexical settings: the standard tokenizer, lowercase, the language's stopwords as
    bm25s lists them (given as words: Milvus Lite 3.2 ignores its own `_english_` list) and the language's stemmer
    (which Milvus Lite 3.2 does not apply either: measured, see the README; a server does)."""
    filters: list[Any] = ["lowercase"]
    if settings.stopwords:
        from bm25s.tokenization import _infer_stopwords

        filters.append({"type": "stop", "stop_words": list(_infer_stopwords(settings.language))})
    if settings.stemmer:
        filters.append({"type": "stemmer", "language": settings.language})
    return {"tokenizer": "standard", "filter": filters}


def dense_index_of(
    count: int, index_type: str | None, params: dict[str, Any] | None, location: MilvusLocation | None = None
) -> dict[str, Any]:
    """The dense field's index: given (checked against what the engine at `location` builds), or FLAT below
    `ann.EXACT_BELOW` documents and IVF_FLAT above (an IVF kind's nlist about 4 x sqrt(count) where not given; its
    nprobe is then chosen by measured recall)."""
    from ...index.ann import EXACT_BELOW

    if index_type is None:
        index_type = "FLAT" if count < EXACT_BELOW else "IVF_FLAT"
    elif location is not None:
        index_type = check_dense_index(index_type, location)
    index_type, params = index_type.upper(), dict(params or {})
    if index_type.startswith("IVF_"):
        params.setdefault("nlist", int(min(65_536, max(16, 4 * np.sqrt(count)))))
        return {"type": index_type, "params": params, "search": {"nprobe": 16}}
    return {"type": index_type, "params": params, "search": {}}


def export_index(
    index: Any,
    location: str | MilvusLocation,
    *,
    lexical: str | None = "ours",
    dense_index: str | None = None,
    dense_params: dict[str, Any] | None = None,
    overwrite: bool = False,
    batch_size: int = BATCH,
    build: str | None = None,
    sparse: bool | None = None,
) -> MilvusIndex:
    """Upsert the folder index `index` (a `VectorIndex`) into the collection at `location`; returns it opened.

    `lexical`: "ours" (the folder's BM25 weights as sparse vectors: the same scores as the folder), "milvus" (the
    engine's BM25 function over `analyzer_of` its settings) or None (no lexical part); the folder must have a lexical
    part for either. A collection holding this same export is resumed (or, complete, returned as it is). `build`:
    what made the folder (recorded, not compared: `milvus_build`'s digest of the corpus and settings). `sparse`: the
    folder's learned-sparse part as the `learned_sparse` field (None: where the folder has one; True: required;
    False: left out; weights Milvus cannot hold, negative or not finite, are refused before any work)."""
    if lexical is not None and lexical not in LEXICAL_KINDS:
        raise ValueError(f"lexical={lexical!r}; accepted: {', '.join(LEXICAL_KINDS)} or None")
    if lexical is not None and not index.has_lexical:
        raise ValueError(f"lexical={lexical!r}: the folder index {index.location!r} has no lexical part to export")
    if index.similarity not in METRICS:
        raise ValueError(
            f"the {index.similarity!r} similarity has no Milvus metric; Milvus serves {', '.join(METRICS)}"
        )
    where = MilvusLocation.of(location)
    dense = dense_index_of(len(index), dense_index, dense_params, where)  # before any work
    sparse_record = milvus_sparse.export_record(index, sparse)
    wanted = _record(index, lexical, dense)  # refuses what Milvus cannot hold before anything is written
    wanted["sparse"] = sparse_record
    wanted["build"] = build
    engine = EngineProcess(where) if wants_process(where, len(index)) else None
    client = engine.client() if engine is not None else where.connect(create=True)
    try:
        start = _prepare(client, where, wanted, overwrite)
        if start is not None:
            upload = _Uploader(index, client, where, wanted, lexical)
            for begin in range(start, len(index), batch_size):
                upload.batch(begin, min(begin + batch_size, len(index)))
            upload.finish()
            if wanted["dense_index"]["type"].startswith("IVF_"):
                _choose_nprobe(index, client, where, wanted)
        if engine is not None:
            info = _checked_record(client, where)  # as `MilvusIndex.open` checks it, in the engine's process
    finally:
        if engine is not None:
            engine.stop()  # the database closed, its lock released: the collection is held by no process now
        else:
            client.close()  # its own channel: closed, not left pinging an idle engine
    if engine is not None:
        return MilvusIndex(where, ClientOnUse(where), info)
    return MilvusIndex.open(where)


def _record(index: Any, lexical: str | None, dense: dict[str, Any]) -> dict[str, Any]:
    digest = TextDigest()
    for begin in range(0, len(index), 10_000):
        chunk = index.corpus[begin : begin + 10_000]
        for offset, (doc_id, text) in enumerate(zip(chunk["id"], chunk["text"], strict=True)):
            check_engine_row(doc_id, text, begin + offset)
            digest.add(doc_id, text)
    info = index.info
    lexical_record = None
    if lexical is not None:
        lexical_record = {"kind": lexical, "settings": info["lexical"]["settings"]}
    return {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "model": _small_model(info["model"]),
        "settings": info["settings"], "count": info["count"], "dim": info["dim"], "id_type": info["id_type"],
        "corpus": info.get("corpus"), "lexical": lexical_record, "dense_index": dense,
        "data": digest.describe("documents"), "uploaded": 0,
    }  # fmt: skip


def _small_model(model: dict[str, Any]) -> dict[str, Any]:
    """The model record without the encoder's full config (a property's value is kept short)."""
    config = {key: value for key, value in model.get("config", {}).items() if key != "encoder"}
    return {**{key: value for key, value in model.items() if key != "config"}, "config": config}


def _comparable(record: dict[str, Any]) -> dict[str, Any]:
    """What makes two exports the same: not how far one got, what made its folder, nor what its search measured."""
    dense = {key: value for key, value in record["dense_index"].items() if key not in ("search", "recall")}
    kept = {key: value for key, value in record.items() if key not in ("uploaded", "build")}
    return {**kept, "dense_index": dense}


def another_export(where: MilvusLocation, differs: list[str]) -> ValueError:
    """The refusal to write over a collection holding another export (`differs`: the record's keys that differ)."""
    return ValueError(
        f"{where.text}: the collection holds another export (differs in {differs}); pass --overwrite "
        "(overwrite=True) to replace it, or give another collection"
    )


def _prepare(client: Any, where: MilvusLocation, wanted: dict[str, Any], overwrite: bool) -> int | None:
    """The row to upload from (None: the export is complete already), after creating or replacing the collection."""
    try:
        found = read_record(client, where)
    except ValueError:
        if not overwrite:
            raise
        found = {}
    if found:
        differs = sorted(k for k in _comparable(wanted) if _comparable(found).get(k) != _comparable(wanted)[k])
        if not differs and not overwrite:
            if found["uploaded"] >= found["count"]:
                logger.info("%s: complete already (%d documents)", where.text, found["count"])
                return None
            logger.warning("%s: resuming the export at row %d of %d", where.text, found["uploaded"], found["count"])
            return int(found["uploaded"])
        if not overwrite:
            raise another_export(where, differs)
    if found is not None:
        client.drop_collection(where.collection)
    _create(client, where, wanted)
    return 0


def _create(client: Any, where: MilvusLocation, record: dict[str, Any]) -> None:
    from pymilvus import DataType, Function, FunctionType

    lexical = record["lexical"]
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("row", DataType.INT64, is_primary=True)
    if record["id_type"] == "int":
        schema.add_field("doc_id", DataType.INT64)
    else:
        schema.add_field("doc_id", DataType.VARCHAR, max_length=_MAX_TEXT_BYTES)
    text_kwargs: dict[str, Any] = {}
    if lexical is not None and lexical["kind"] == "milvus":
        from ...index.lexical import LexicalSettings

        settings = LexicalSettings.from_dict(lexical["settings"])
        text_kwargs = {"enable_analyzer": True, "analyzer_params": analyzer_of(settings)}
    schema.add_field("text", DataType.VARCHAR, max_length=_MAX_TEXT_BYTES, **text_kwargs)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=int(record["dim"]))
    indexes = client.prepare_index_params()
    dense = record["dense_index"]
    metric = METRICS[record["settings"]["similarity"]]
    indexes.add_index("dense", index_type=dense["type"], metric_type=metric, params=dense["params"])
    if lexical is not None:
        schema.add_field("lexical", DataType.SPARSE_FLOAT_VECTOR)
        if lexical["kind"] == "milvus":
            schema.add_function(
                Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"],
                         output_field_names=["lexical"])
            )  # fmt: skip
            k1, b = lexical["settings"]["k1"], lexical["settings"]["b"]
            indexes.add_index(
                "lexical", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                params={"bm25_k1": k1, "bm25_b": b},
            )  # fmt: skip
        else:
            indexes.add_index("lexical", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
    if record.get("sparse"):
        milvus_sparse.add_field(schema, indexes)
    try:
        client.create_collection(
            where.collection, schema=schema, index_params=indexes, properties={RECORD_KEY: json.dumps(record)}
        )
    except Exception as error:
        raise ValueError(
            f"{where.text}: Milvus refused the collection ({' '.join(str(error).split())[:300]})"
        ) from None


class _Uploader:
    """Upserts row batches and records the flushed resume point."""

    def __init__(self, index: Any, client: Any, where: MilvusLocation, record: dict[str, Any], lexical: Any) -> None:
        self.index, self.client, self.where, self.record = index, client, where, record
        self.weights = _DocumentWeights(index) if lexical == "ours" else None
        self.sparse = index.sparse.matrix if record.get("sparse") else None
        self.pending, self.done = 0, None

    def batch(self, begin: int, end: int) -> None:
        chunk = self.index.corpus[begin:end]
        vectors = np.asarray(self.index.embeddings[begin:end], dtype=np.float32)
        rows = []
        for offset, (doc_id, text) in enumerate(zip(chunk["id"], chunk["text"], strict=True)):
            rows.append({"row": begin + offset, "doc_id": doc_id, "text": text, "dense": vectors[offset].tolist()})
        if self.weights is not None:
            for row, sparse in zip(rows, self.weights(chunk["text"]), strict=True):
                row["lexical"] = sparse
        if self.sparse is not None:
            for row, sparse in zip(rows, milvus_sparse.document_vectors(self.sparse[begin:end]), strict=True):
                row[milvus_sparse.SPARSE_FIELD] = sparse
        self.client.upsert(self.where.collection, rows)
        self.pending, self.done = self.pending + 1, end
        if self.pending >= FLUSH_EVERY:
            self.finish()

    def finish(self) -> None:
        """Flush, then record how far the engine holds the rows."""
        if self.done is None:
            return
        self.client.flush(self.where.collection)
        self.record["uploaded"] = self.done
        properties = {RECORD_KEY: json.dumps(self.record)}
        self.client.alter_collection_properties(self.where.collection, properties=properties)
        self.pending = 0


class _DocumentWeights:
    """Each document's BM25 weights (`lexical.lucene_weights` over the folder index's corpus statistics) as a sparse
    vector keyed by `term_key`: a query's term counts then score exactly as the folder's lexical search."""

    def __init__(self, index: Any) -> None:
        lexical = index.lexical
        self.tokenize, self.settings = lexical.tokenize, lexical.settings
        self.vocabulary = lexical.retriever.vocab_dict
        self.idf = lucene_idf(len(lexical), np.diff(np.asarray(lexical.retriever.scores["indptr"])))
        # recorded by the build since this version; an older lexical part is read once more for it
        self.mean_length = lexical.record.get("mean_length") or self._mean_length(index)

    def _mean_length(self, index: Any) -> float:
        total = 0
        for begin in range(0, len(index), 10_000):
            total += sum(len(terms) for terms in self.tokenize(index.corpus[begin : begin + 10_000]["text"]))
        return max(total / max(len(index), 1), 1e-9)

    def __call__(self, texts: list[str]) -> list[dict[int, float]]:
        vectors = []
        for terms in self.tokenize(list(texts)):
            counts = Counter(terms)
            weights = lucene_weights(
                list(counts.values()), len(terms), self.mean_length,
                self.idf[[self.vocabulary[term] for term in counts]], self.settings,
            )  # fmt: skip
            vector: dict[int, float] = {}
            for term, weight in zip(counts, weights.tolist(), strict=True):
                key = term_key(term)
                vector[key] = vector.get(key, 0.0) + weight
            vectors.append({key: weight for key, weight in vector.items() if weight > 0} or {NO_TERM_KEY: 1.0})
        return vectors


def _choose_nprobe(index: Any, client: Any, where: MilvusLocation, record: dict[str, Any]) -> None:
    """The smallest nprobe whose recall@10 against exact search reaches `RECALL_TARGET` on held-out documents."""
    from ...exact import exact_search

    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(len(index), size=min(RECALL_SAMPLE, len(index)), replace=False))
    queries = np.asarray(index.embeddings[sample], dtype=np.float32)
    _, truth = exact_search(queries, index.embeddings, 11, similarity=index.similarity)
    opened = MilvusIndex(where, client, record)
    client.load_collection(where.collection)
    # up to the most lists an engine may have made (Milvus Lite makes its own number for a small collection)
    most = max(int(record["dense_index"]["params"]["nlist"]), min(len(index), 65_536))
    nprobe, recall = 1, 0.0
    while True:
        record["dense_index"]["search"] = {"nprobe": nprobe}
        _, found = opened.dense_rows(queries, 11)
        recall = float(np.mean([len(set(t[1:]) & set(f[:11])) / 10 for t, f in zip(truth, found, strict=True)]))
        if recall >= RECALL_TARGET or nprobe >= most:
            break
        nprobe = min(nprobe * 2, most)
    record["dense_index"]["recall"] = {"at": 10, "value": round(recall, 4), "measured_on": "held-out documents"}
    client.alter_collection_properties(where.collection, properties={RECORD_KEY: json.dumps(record)})
    kind = record["dense_index"]["type"]
    logger.info("%s: %s nprobe %d, recall@10 %.3f on held-out documents", where.text, kind, nprobe, recall)


__all__ = [
    "LEXICAL_KINDS", "analyzer_of", "another_export", "check_engine_row", "dense_index_of", "export_index",
    "query_vectors",
]  # fmt: skip
