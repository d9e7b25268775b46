"""An index in Milvus, a search engine built to run across machines (a server or cluster behind one URI), or in
Milvus Lite (the same engine in-process, one local file): the same `search` as the folder index (`store.SearchIndex`).

Where it lives, in the one string `--index` / `-o` take:

    milvus://HOST:PORT/COLLECTION        a server or cluster (a token, if it needs one, from $MILVUS_TOKEN: never
                                         written anywhere); milvuss://... for TLS
    milvus-lite:PATH/TO/FILE.db#COLLECTION   Milvus Lite: one process at a time

The scheme is read in any case. Searching never creates a database: a Milvus Lite path that does not exist, or is not
a Milvus Lite database, is refused at once, naming it (`milvus_location.py`: the parse, the connection, and the dense
index types each engine builds).

One collection holds, per document: `row` (its position in the corpus: the primary key, so a rerun upserts the same
keys and nothing is duplicated), `doc_id` (the corpus id), `text`, `dense` (the vector) and, with its lexical part,
`lexical`: a sparse vector of BM25 weights. The lexical part is ours by default (`lexical="ours"`: bm25s's Lucene
weights of each document, computed here over the whole corpus, term ids a 32-bit hash of the term; a query is its term
counts, so the engine's inner product is exactly the folder's BM25 score), or Milvus's own BM25 function over an
analyzer built from the same settings (`lexical="milvus"`: the engine tokenizes and weighs, and a collection can grow
without re-weighing; its scores are not bm25s's). The collection's properties record what built it
(`hf_siamese.index`: the model and its fingerprint, the embedding and lexical settings, the dense index type, the
data's digest, how many rows the engine has flushed); searching with another model is refused, naming both. Writing:
`milvus_export.py`. An index with a learned-sparse part adds `learned_sparse`, its documents' term weights
(`milvus_sparse.py`): the first stage "sparse" and the hybrid's third list, as in the folder.

pymilvus (and milvus-lite for Lite) come with `pip install 'hf-siamese[milvus]'`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base import SearchIndex
from . import sparse as milvus_sparse
from .location import MilvusLocation, check_dense_index, dense_index_types, require_milvus
from .sparse import NO_TERM_KEY, SPARSE_FIELD

RECORD_KEY = "hf_siamese.index"
FORMAT_NAME = "hf-siamese-milvus-index"
FORMAT_VERSION = 1
FIELDS = ("row", "doc_id", "text", "dense")
QUERY_CHUNK = 256  # queries per search request
METRICS = {"cosine": "COSINE", "dot": "IP", "euclidean": "L2"}


def term_key(term: str) -> int:
    """The sparse-vector dimension of a term: a 32-bit hash (Milvus's sparse indices are below 2**32 - 1; the last
    one is `NO_TERM_KEY`, which no query holds)."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little") % NO_TERM_KEY


def query_vectors(token_lists: Sequence[Sequence[str]]) -> list[dict[int, float]]:
    """Each query's term counts as a sparse vector (a term said twice counts twice, as bm25s scores it)."""
    vectors = []
    for terms in token_lists:
        counts: Counter[int] = Counter(term_key(term) for term in terms)
        vectors.append({key: float(count) for key, count in counts.items()})
    return vectors


def read_record(client: Any, location: MilvusLocation) -> dict[str, Any] | None:
    """The collection's record (what built it), or None where the collection does not exist; a `ValueError` where it
    exists but hf-siamese did not write it."""
    if not client.has_collection(location.collection):
        return None
    properties = client.describe_collection(location.collection).get("properties") or {}
    if RECORD_KEY not in properties:
        raise ValueError(
            f"{location.text}: the collection {location.collection!r} was not written by 'hf-siamese index' (no "
            f"{RECORD_KEY} property); give another collection, or --overwrite to replace it"
        )
    try:
        record = json.loads(properties[RECORD_KEY])
    except ValueError as error:
        raise ValueError(
            f"{location.text}: the {RECORD_KEY} property is not JSON ({error}); rebuild with --overwrite"
        ) from None
    if record.get("format") != FORMAT_NAME or record.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{location.text}: the collection records format {record.get('format')!r} version "
            f"{record.get('format_version')!r}; this hf-siamese reads {FORMAT_NAME!r} version {FORMAT_VERSION}: "
            "rebuild it with --overwrite"
        )
    return record


def _checked_record(client: Any, location: MilvusLocation) -> dict[str, Any]:
    """The record of the collection at `location`, checked: written by hf-siamese, complete, its fields and dimension
    as recorded; each problem is one line naming the location and what to do."""
    text = location.text
    info = read_record(client, location)
    if info is None:
        names = client.list_collections()
        raise ValueError(
            f"{text}: no collection {location.collection!r} there (collections: {sorted(names)}); build one with "
            f"'hf-siamese index CORPUS -o {text}'"
        )
    if info.get("uploaded") != info.get("count"):
        raise ValueError(
            f"{text}: the export stopped at {info.get('uploaded')} of {info.get('count')} documents; run the same "
            "'hf-siamese index' command again to finish it (where it stopped on an error, change what that error "
            "named and rebuild with --overwrite)"
        )
    fields = {field["name"]: field for field in client.describe_collection(location.collection)["fields"]}
    wanted = [*FIELDS, "lexical"] if info.get("lexical") else list(FIELDS)
    wanted += [SPARSE_FIELD] if info.get("sparse") else []
    missing = [name for name in wanted if name not in fields]
    if missing:
        raise ValueError(f"{text}: the collection has no field(s) {missing}; rebuild it with --overwrite")
    dim = int(fields["dense"].get("params", {}).get("dim", -1))
    if dim != int(info["dim"]):
        raise ValueError(f"{text}: the dense field has dimension {dim}, the record says {info['dim']}; rebuild it")
    client.load_collection(location.collection)
    return info


class MilvusIndex(SearchIndex):
    """A collection written by `hf-siamese index -o milvus...` (`milvus_export.export_index`), searched like a folder
    index; open one with `load_index(location)` or `MilvusIndex.open`."""

    def __init__(self, location: MilvusLocation, client: Any, info: dict[str, Any]) -> None:
        self.where, self.client, self.info = location, client, info
        self.location = location.text
        self.dim, self.settings = int(info["dim"]), info["settings"]
        self.similarity, self.model_name = self.settings["similarity"], info["model"].get("name_or_path")
        self.backend = info["dense_index"]["type"]
        self._tokenize: Any = None
        self._sparse: Any = None

    @classmethod
    def open(cls, text: str | MilvusLocation) -> MilvusIndex:
        """Open the collection at `text`, checked: written by hf-siamese, complete, its fields and dimension as
        recorded; each problem is one line naming the location and what to do."""
        location = MilvusLocation.of(text)
        client = location.connect()
        try:
            return cls(location, client, _checked_record(client, location))
        except BaseException:
            client.close()  # its own channel: not left open behind a refusal
            raise

    def close(self) -> None:
        """Close the client's channel (the index cannot search afterwards)."""
        self.client.close()

    def __repr__(self) -> str:
        return f"MilvusIndex({self.location!r}, count={len(self)}, dim={self.dim}, similarity={self.similarity!r})"

    @property
    def has_lexical(self) -> bool:
        return bool(self.info.get("lexical"))

    @property
    def lexical_kind(self) -> str | None:
        """ "ours" (bm25s's weights as sparse vectors) or "milvus" (the engine's BM25 function); None: no lexical."""
        return (self.info.get("lexical") or {}).get("kind")

    @property
    def has_sparse(self) -> bool:
        """Whether the collection holds a learned-sparse field (`milvus_sparse.py`)."""
        return bool(self.info.get("sparse"))

    @property
    def sparse(self) -> Any:
        """The recorded sparse model (`sparse_part.SparseQueryEncoder`: `model_name`, `use_model`, checked by
        fingerprint), made on first use; a `ValueError` where the collection has no learned-sparse field."""
        if self._sparse is None:
            if not self.has_sparse:
                raise ValueError(milvus_sparse.missing_field(self.location, self.has_lexical))
            self._sparse = milvus_sparse.query_encoder(self.info["sparse"], self.location)
        return self._sparse

    def check_first_stage(
        self, first_stage: str | None, fusion: str | None = None, dense_weight: float | None = None
    ) -> str:
        if first_stage == "sparse" and not self.has_sparse:
            raise ValueError(milvus_sparse.missing_field(self.location, self.has_lexical))
        return super().check_first_stage(first_stage, fusion, dense_weight)

    def sparse_rows(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The learned-sparse field's (scores, rows): the query's term weights by the recorded sparse model, the
        engine's inner product, completed by the documents sharing no term (score 0) as the folder ranks them."""
        data = milvus_sparse.query_vectors(self.sparse.encode_queries(list(queries)), self.sparse.model_name)
        scores, rows = self._search(data, SPARSE_FIELD, {"metric_type": "IP"}, k, float, positive_only=True)
        return milvus_sparse.with_zero_rows(scores, rows, k, len(self))

    def needs_bm25s(self) -> bool:
        return self.lexical_kind == "ours"  # our weights: the queries are tokenized here

    def missing_lexical_part(self) -> str:
        return (
            f"the collection {self.location!r} has no lexical part, which lexical and hybrid search need: build it "
            "again with its lexical part ('hf-siamese index CORPUS -o LOCATION --overwrite', without --no-lexical)"
        )

    def save_info(self, info: dict[str, Any]) -> None:
        """The collection's record replaced (one property)."""
        self.client.alter_collection_properties(self.where.collection, properties={RECORD_KEY: json.dumps(info)})
        self.info = info

    def dense_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        params = {"metric_type": METRICS[self.similarity], "params": self.info["dense_index"].get("search", {})}
        return self._search([q.tolist() for q in queries], "dense", params, k, self._dense_score)

    def lexical_rows(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.lexical_kind == "milvus":
            data: list[Any] = list(queries)
            # BM25 scores are >= 0; Milvus Lite returns them negated (as distances), a server as they are
            return self._search(data, "lexical", {"metric_type": "BM25"}, k, abs, positive_only=True)
        else:
            if self._tokenize is None:
                from ...index.lexical import LexicalSettings, TermTokenizer

                self._tokenize = TermTokenizer(LexicalSettings.from_dict(self.info["lexical"]["settings"]))
            data, params = query_vectors(self._tokenize(list(queries))), {"metric_type": "IP"}
        return self._search(data, "lexical", params, k, lambda distance: distance, positive_only=True)

    def rows_of(self, rows: list[int]) -> dict[int, tuple[Any, str]]:
        found: dict[int, tuple[Any, str]] = {}
        for start in range(0, len(rows), 1000):
            chunk = [int(row) for row in rows[start : start + 1000]]
            for entity in self.client.query(
                self.where.collection, filter=f"row in {chunk}", output_fields=["row", "doc_id", "text"]
            ):
                found[int(entity["row"])] = (entity["doc_id"], entity["text"])
        lost = [row for row in rows if row not in found]
        if lost:
            raise ValueError(f"{self.location}: rows {lost[:5]} were searched but are not in the collection")
        return found

    def _dense_score(self, distance: float) -> float:
        # Milvus's L2 is the squared distance; the folder's score is the negated distance (larger: more similar).
        return -float(np.sqrt(max(distance, 0.0))) if self.similarity == "euclidean" else float(distance)

    def _search(
        self, data: list[Any], field: str, params: dict[str, Any], k: int, score: Any, positive_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) `(n, k)` of one search per query (in chunks), best first, ties -> lower row, -1 padded."""
        scores = np.zeros((len(data), k), dtype=np.float32)
        rows = np.full((len(data), k), -1, dtype=np.int64)
        asked = [i for i, item in enumerate(data) if item != {}]  # a query with no term: no lexical hit
        for start in range(0, len(asked), QUERY_CHUNK):
            chunk = asked[start : start + QUERY_CHUNK]
            results = self.client.search(
                self.where.collection, data=[data[i] for i in chunk], anns_field=field, limit=k,
                search_params=params, output_fields=[],
            )  # fmt: skip
            for i, hits in zip(chunk, results, strict=True):
                pairs = [(score(hit["distance"]), int(hit["row"])) for hit in hits]
                pairs = sorted((p for p in pairs if p[0] > 0 or not positive_only), key=lambda p: (-p[0], p[1]))
                for j, (value, row) in enumerate(pairs[:k]):
                    scores[i, j], rows[i, j] = value, row
        return scores, rows


__all__ = [
    "MilvusIndex", "MilvusLocation", "check_dense_index", "dense_index_types", "query_vectors", "read_record",
    "require_milvus", "term_key",
]  # fmt: skip
