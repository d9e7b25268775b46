"""A vector index of a corpus of any size: `build_corpus_index` streams the corpus into resumable shards
(`encode_corpus`), and its texts into a memory-mapped Arrow file, instead of holding either; searching reads the
stacked vectors memory-mapped, exactly, or through an approximate faiss index (`ann_build.build_ann_index`) from
`ann.EXACT_BELOW` documents on.

The folder is a vector index like `build_index`'s (`hf_siamese.load_index`, i.e. `load_index` here, opens both kinds;
searching checks the model's fingerprint), with backend "shards":

    index.json     as build_index's, with "backend": "shards" and "shards": {"ann": bool}
    texts.arrow    ids and texts (Arrow IPC stream: `datasets.Dataset.from_file` maps it)
    embeddings/    the `encode_corpus` folder (shards, corpus.json, the stacked vectors.npy) and, when approximate,
                   its ann/ index

It is built in `.NAME.building` beside the output and renamed into place at the end; a build stopped before then
resumes its shards when run again with the same arguments.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa

from ..data.corpus_stream import open_corpus
from .corpus import encode_corpus
from .corpus_groups import corpus_matrix, neighbour_search
from .fingerprint import model_fingerprint
from .index_parts import (
    FAISS_METRICS,
    faiss_available,
    move_into_place,
    resolve_dtype,
)
from .vector_index import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE,
    VectorIndex,
    check_output,
    index_record,
)

logger = logging.getLogger(__name__)

BACKEND, TEXTS_FILE, EMBEDDINGS_DIR = "shards", "texts.arrow", "embeddings"
_BATCH = 10_000  # rows per Arrow record batch of texts.arrow


class CorpusVectorIndex(VectorIndex):
    """A loaded "shards" index: the vectors memory-mapped, searched exactly or through `ann` (an `AnnIndex`)."""

    def __init__(self, path: Path, info: dict[str, Any], corpus: datasets.Dataset, vectors: Any, ann: Any) -> None:
        super().__init__(path, info, corpus, "approximate" if ann is not None else "exact")
        self._embeddings, self.ann = vectors, ann

    def _top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.ann is not None:
            return self.ann.search(queries, k)
        from ..metrics import exact_search

        return exact_search(queries, self._embeddings, k, similarity=self.similarity)


def _write_texts(source: Any, text_column: str, id_column: str | None, path: Path) -> int:
    """Write the ids (the row positions without `id_column`) and texts of the stream to `path`, a batch at a time."""
    writer, count, batch = None, 0, []

    def flush() -> None:
        nonlocal writer
        ids, texts = [row if doc_id is None else doc_id for row, doc_id, _ in batch], [t for _, _, t in batch]
        table = pa.table({"id": pa.array(ids, pa.string() if isinstance(ids[0], str) else pa.int64()), "text": texts})
        writer = writer or pa.ipc.new_stream(str(path), table.schema)
        writer.write_table(table)

    try:
        for row, (doc_id, text) in enumerate(open_corpus(source, text_column, id_column)):
            batch.append((row, doc_id, text))
            if len(batch) == _BATCH:
                flush()
                batch.clear()
            count = row + 1
        if batch:
            flush()
    finally:
        if writer is not None:
            writer.close()
    return count


def build_corpus_index(
    model: Any,
    source: Any,
    output_dir: str | os.PathLike,
    *,
    text_column: str = "text",
    id_column: str | None = None,
    tokenizer: Any = None,
    batch_size: int = 64,
    shard_size: int = 10_000,
    dtype: Any = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    approximate: bool | None = None,
    show_progress_bar: bool = True,
    overwrite: bool = False,
) -> VectorIndex:
    """Embed the corpus `source` (as `encode_corpus` reads it: files, a glob, a dataset, an iterable of str) into a
    vector index folder that `load_index` opens; returns it loaded. Memory: one shard, whatever the corpus size.

    `approximate`: None builds an approximate faiss index from `ann.EXACT_BELOW` documents on (faiss installed, a
    similarity faiss serves), True / False force it; without one, searches are exact over the memory-mapped vectors.
    An existing non-empty `output_dir` is replaced only with `overwrite=True`.
    """
    output = Path(output_dir)
    check_output(output, overwrite)
    similarity = model.config.similarity
    if approximate is None:
        approximate = None if similarity in FAISS_METRICS and faiss_available() else False
    staging = output.with_name(f".{output.name}.building")  # a fixed name: a stopped build resumes its shards
    embeddings = staging / EMBEDDINGS_DIR
    encode_corpus(
        model, source, embeddings, tokenizer=tokenizer, text_column=text_column, id_column=id_column,
        batch_size=batch_size, shard_size=shard_size, dtype=dtype, prompt_name=prompt_name, prompt=prompt,
        show_progress_bar=show_progress_bar,
    )  # fmt: skip
    ids, vectors = corpus_matrix(embeddings)
    count = _write_texts(source, text_column, id_column, staging / TEXTS_FILE)
    if count != len(vectors):
        raise ValueError(f"the corpus gave {len(vectors)} rows, then {count}: it must not change during the build")
    ann = neighbour_search(vectors, embeddings, similarity, approximate) is not None
    document_prompt = model.resolve_prompt(prompt_name, prompt)
    dtype_name = resolve_dtype(dtype, model.device)[0]
    info = index_record(model, model_fingerprint(model), document_prompt, dtype_name, vectors.shape, ids, BACKEND)
    info["shards"] = {"ann": ann}
    del vectors
    (staging / INDEX_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    move_into_place(staging, output)
    return load_index(output)


def load_index(path: str | os.PathLike) -> VectorIndex:
    """Open any vector index folder: a streamed one (`build_corpus_index`) here, the others with `VectorIndex.load`.
    `hf_siamese.load_index` is this function (`vector_index`, which the corpus modules import, cannot import them)."""
    path = Path(path)
    try:
        info = json.loads((path / INDEX_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = None  # VectorIndex.load names what is wrong
    if isinstance(info, dict) and info.get("format") == FORMAT_NAME and info.get("backend") == BACKEND:
        if info.get("format_version") == FORMAT_VERSION:
            return load_corpus_index(path, info)
    return VectorIndex.load(path)


def load_corpus_index(path: Path, info: dict[str, Any]) -> VectorIndex:
    """Open a "shards" index folder whose index.json holds `info`; without faiss an approximate one is searched
    exactly, with a warning."""
    from .ann import load_ann_index

    where = os.fspath(path)
    ann_dir = path / EMBEDDINGS_DIR / "ann"
    wanted = [path / TEXTS_FILE, path / EMBEDDINGS_DIR / "corpus.json"]
    wanted += [ann_dir / "ann.json"] if info.get("shards", {}).get("ann") else []
    missing = [os.fspath(p.relative_to(path)) for p in wanted if not p.is_file()]
    missing += [key for key in ("model", "settings", "count", "dim") if key not in info]
    if missing:
        raise ValueError(f"corrupt vector index {where!r}: {', '.join(missing)} missing; rebuild the index")
    try:
        corpus = datasets.Dataset.from_file(str(path / TEXTS_FILE))
        _, vectors = corpus_matrix(path / EMBEDDINGS_DIR)
    except Exception as err:
        raise ValueError(f"corrupt vector index {where!r}: {type(err).__name__}: {err}") from None
    expected = (info["count"], info["dim"])
    if len(corpus) != info["count"] or vectors.shape != expected or corpus.column_names != ["id", "text"]:
        raise ValueError(
            f"corrupt vector index {where!r}: {INDEX_FILE} says {expected[0]} x {expected[1]}, the texts have "
            f"{len(corpus)} rows ({corpus.column_names}), the embeddings are {vectors.shape}"
        )
    ann = None
    if info["shards"].get("ann"):
        if faiss_available():
            ann = load_ann_index(ann_dir)
        else:
            logger.warning("faiss is not installed: searching %s exactly (pip install 'hf-siamese[index]')", where)
    return CorpusVectorIndex(path, info, corpus, vectors, ann)


__all__ = ["CorpusVectorIndex", "build_corpus_index", "load_corpus_index", "load_index"]
