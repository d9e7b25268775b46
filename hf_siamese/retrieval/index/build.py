"""Building the vector index: embed a corpus of any size once with `build_folder_index` (`stores.build_index` for any
store), then search it as often as needed (`stores.folder.VectorIndex`). One format at every size: the corpus is
streamed, never held, and a small corpus is the same folder searched exactly.

An index folder holds:

    index.json     format and version, the model (name, fingerprint, embedding config), the settings the corpus was
                   embedded with, count, dim, id type, backend ("exact" or "approximate") and, when approximate, what
                   the build measured (nprobe, recall@10, on which queries)
    texts.arrow    ids and texts (Arrow IPC stream, memory-mapped by `datasets.Dataset.from_file`); row i <-> vector i
    embeddings/    the `encode_corpus` folder: corpus.json and the stacked vectors.npy (float32, as `model.encode`
                   returns them; ids in vectors.ids.npy), memory-mapped for exact search and for re-scoring. The
                   Parquet shards the build wrote go once stacked (`keep_one_copy`): one copy of the vectors on disk.
                   An index of the earlier layout (shards and vectors.npy) opens as before
    embeddings/ann the approximate index (`ann_build.build_ann_index`), from `ann.EXACT_BELOW` documents on when faiss
                   is installed and the similarity is one faiss serves
    compact/       the vectors at a lower precision (`compact.py`: float16, int8 or binary codes), with `precision=`:
                   searched first, the best candidates rescored with embeddings/vectors.npy; with `approximate=True`
                   (int8, binary) an IVF over the codes gives the candidates (`compact_ivf.py`)
    multivector/   the documents' token vectors by a multi-vector model (`multivector_part.py`), with
                   `multivector_model=` (or added later: `add_multivector`), for a MaxSim rerank
    sparse/        the learned-sparse part (`sparse_part.py`: CSR arrays of a sparse model's term weights), with
                   `sparse_model=`: encoded from the staged texts inside the build, or added later (`add_sparse`)
    lexical/       the BM25 index of the same texts (`lexical.py`, bm25s's format), built in the same pass when bm25s
                   is installed (`lexical=None`), or added later without re-encoding (`add_lexical`); searched alone
                   or fused with the vectors (`search(first_stage="hybrid")`, `hybrid.py`)

The build runs in `.NAME.building` beside the output (a fixed name: a stopped build resumes its finished shards when
called again; one made with another model or other settings is started afresh) and is swapped into place at the end
(`hf_siamese.storage`: a kill during the swap is mended by the next run). Memory: one shard, the approximate index's
training sample and one part of its lists, whatever the corpus size. Searching checks the model against the recorded
fingerprint, so queries are never embedded by a model other than the one that embedded the corpus.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from ...storage import exclusive_output, recover_output, replace_file, replace_folder
from ..corpus import encode_corpus
from ..stores.folder import EMBEDDINGS_DIR, FORMAT_NAME, FORMAT_VERSION, INDEX_FILE, TEXTS_FILE, VectorIndex
from .compact import COMPACT_DIR, check_compact_similarity, check_rescore, write_compact_part
from .compact import check_precision as check_compact_precision
from .compact_ivf import check_approximate_precision
from .fingerprint import corpus_fingerprint, model_fingerprint, recorded_name
from .lexical import LEXICAL_DIR, LexicalBuilder, LexicalIndex, LexicalSettings, TermTokenizer, wants_lexical
from .matrix import corpus_matrix, keep_one_copy, neighbour_search
from .multivector_part import MULTIVECTOR_DIR, check_precision, resolve_multivector_model, write_multivector_part
from .parts import FAISS_METRICS, check_ids, check_texts, faiss_available, resolve_dtype
from .sparse_part import SPARSE_DIR, resolve_sparse_model, texts_in_batches, write_sparse_part
from .staging import TextTable, link_folder

logger = logging.getLogger(__name__)


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse to build into a file or a non-empty folder unless `overwrite`, naming what is there."""
    if output.exists() and not overwrite and (output.is_file() or any(output.iterdir())):
        what = "an existing index" if _is_index(output) else "not empty and not an index"
        raise ValueError(f"output_dir {os.fspath(output)!r} is {what}; pass overwrite=True (--overwrite) to replace it")


def _is_index(path: Path) -> bool:
    try:
        return json.loads((path / INDEX_FILE).read_text(encoding="utf-8")).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError):
        return False


def corpus_source(corpus: Any, ids: Any, text_column: str, id_column: str | None) -> tuple[Any, str, str | None]:
    """(source for `encode_corpus`, text column, id column): a list with `ids` becomes a two-column table; a BEIR
    folder, its corpus (`_id`, title and text, as `read_beir` reads it: the documents a retrieval evaluation ranks)."""
    from ...data.beir import is_beir_folder, read_corpus

    if isinstance(corpus, str | os.PathLike) and os.path.isdir(corpus) and is_beir_folder(corpus):
        if ids is not None or text_column != "text" or id_column is not None:
            raise ValueError(
                f"{os.fspath(corpus)!r} is a BEIR folder: its ids and texts are its own; give no ids or columns"
            )
        documents = read_corpus(corpus)
        return datasets.Dataset.from_dict({"id": list(documents), "text": list(documents.values())}), "text", "id"
    if ids is None:
        return corpus, text_column, id_column
    if not isinstance(corpus, list | tuple):
        raise ValueError(
            f"ids= applies to a list of texts; the corpus is a {type(corpus).__name__}: name its id column with "
            "id_column= (--id-column)"
        )
    texts = check_texts(corpus)
    return datasets.Dataset.from_dict({"id": check_ids(ids, len(texts)), "text": texts}), "text", "id"


def _embed_queries(model: Any, queries: Iterable[str] | None, tokenizer: Any, batch_size: int) -> np.ndarray | None:
    """The calibration queries embedded as queries are (the model's query prompt, if it has one)."""
    if queries is None:
        return None
    from ..prompts import QUERY_PROMPT_NAMES, side_prompt

    texts = [queries] if isinstance(queries, str) else list(queries)
    if not texts or not all(isinstance(text, str) and text.strip() for text in texts):
        raise ValueError("calibration_queries: expected a non-empty list of non-empty query strings")
    prompt = side_prompt(model, None, QUERY_PROMPT_NAMES)
    return model.encode(texts, tokenizer=tokenizer, batch_size=batch_size, prompt=prompt, convert_to_numpy=True)


def check_build_options(
    precision: str, rescore: int | None, multivector_precision: str, multivector_model: Any, multivector_tokenizer: Any
) -> None:
    """The build options every store checks before any work: the precisions, the rescoring depth, the multi-vector
    model given with its tokenizer."""
    check_precision(multivector_precision)
    check_compact_precision(precision)
    if rescore is not None:
        check_rescore(rescore)
    if multivector_model is None and multivector_tokenizer is not None:
        raise ValueError("multivector_tokenizer applies with multivector_model; give both or neither")


def build_folder_index(
    model: Any,
    corpus: Any,
    output_dir: str | os.PathLike,
    *,
    ids: Sequence[str | int] | None = None,
    text_column: str = "text",
    id_column: str | None = None,
    tokenizer: Any = None,
    batch_size: int = 64,
    shard_size: int | None = None,
    dtype: str | torch.dtype | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    approximate: bool | None = None,
    calibration_queries: Iterable[str] | None = None,
    embeddings_dir: str | os.PathLike | None = None,
    show_progress_bar: bool = True,
    overwrite: bool = False,
    lexical: bool | None = None,
    lexical_settings: LexicalSettings | None = None,
    sparse_model: Any = None,
    sparse_tokenizer: Any = None,
    multivector_model: Any = None,
    multivector_tokenizer: Any = None,
    multivector_precision: str = "float16",
    precision: str = "float32",
    rescore: int | None = None,
) -> VectorIndex:
    """Embed `corpus` once with `model` and save a searchable index in the folder `output_dir`; returns it loaded
    (`stores.build_index` takes a store's location too: a Milvus collection is built from such a folder).

    Args:
        model: a `SiameseBertModel`; its `config.similarity` decides how the index is searched.
        corpus: any corpus `encode_corpus` reads: a list of str, a path or glob of .txt / .jsonl / .csv / .tsv /
            .parquet files, a `datasets.Dataset` or `IterableDataset` (with `text_column`, optional `id_column`).
        output_dir: the index folder (see the module docstring). An existing non-empty folder is replaced only with
            `overwrite=True`, and only once the new index is complete.
        ids: for a list of texts, one unique `str` or `int` per text (default: the positions 0..n-1).
        tokenizer: as in `model.encode`.
        batch_size: as in `model.encode`.
        prompt_name: as in `model.encode` (the prompt is recorded in index.json).
        prompt: as in `model.encode` (recorded in index.json).
        shard_size: rows embedded and written at a time (what memory holds of the corpus; default 10,000, or what
            a stopped build of the same output used, so that it resumes).
        dtype: `"bfloat16"` / `"float16"` (or the torch dtype) to embed under autocast; vectors are stored in float32.
            The multi-vector part's documents are encoded in it too (its record names it).
        approximate: None builds an approximate index from `ann.EXACT_BELOW` documents on (faiss installed and a
            similarity it serves: cosine, dot, euclidean), True always (an error where it cannot), False never.
        calibration_queries: texts like the queries the index will serve. The approximate index's nprobe is chosen
            by the recall@10 measured on them (embedded with the model's query prompt); without them, on held-out
            documents, which overstates the recall of queries unlike the documents (index.json says which).
        embeddings_dir: an embeddings folder of this corpus to reuse (what `encode_corpus` / 'hf-siamese embed'
            wrote, e.g. on N GPUs): embedded into or resumed as `encode_corpus` does (another model or setting is
            refused), then hard-linked into the index (copied where links cannot be made).
        lexical: build the BM25 index of the texts beside the vectors, in the same pass (None: when bm25s and
            PyStemmer are installed, `pip install 'hf-siamese[lexical]'`; True: an ImportError naming that install
            where they are not). `lexical_settings`: its language, stemmer, stopwords, k1 and b.
        sparse_model: a sparse model (`SparseSiameseModel`, with `sparse_tokenizer`) or its folder / Hub id: also
            store the documents' term weights (the index's sparse part, `sparse_part.py`), for the first stage
            "sparse" and the hybrid's third list; its path and fingerprint are recorded (in Milvus: the
            `learned_sparse` field).
        multivector_model: a multi-vector model (`MultiVectorModel`, with `multivector_tokenizer`) or its folder /
            Hub id (also a sentence-transformers MultiVectorEncoder folder): also store every document's token vectors
            at `multivector_precision` ("float16" or "int8"), the index's multi-vector part (`multivector_part.py`),
            which a MaxSim rerank reads (`rerank=MultiVectorReranker`); its path and fingerprint are recorded. A folder
            index's only; a stopped build resumes it too.
        precision: how the vectors are searched (`compact.py`): "float32" (default), or "float16", "int8" (ranges
            calibrated on the corpus) or "binary" (sign bits, Hamming distance), kept beside the float32 vectors,
            which rescore the best candidates; the codes are searched exactly, or with `approximate=True` (int8,
            binary) through an IVF over them, nprobe chosen by measured recall (None: exact at every size); for the
            cosine and dot similarities. A Milvus collection takes "int8": the engine's scalar-quantized index
            (IVF_SQ8 or HNSW_SQ, `milvus_build.engine_dense_index`). `rescore`: the candidates rescored, as a
            multiple of max(top_k, 100) (None: the precision's default, `compact.RESCORE`; 0: none), changed at
            search time with `index.rescore`.
    """
    check_build_options(precision, rescore, multivector_precision, multivector_model, multivector_tokenizer)
    if sparse_model is None and sparse_tokenizer is not None:
        raise ValueError("sparse_tokenizer applies with sparse_model (the sparse part's model); give both or neither")
    output = Path(output_dir)
    with exclusive_output(output, "a build of this index"):  # a second build at once is refused, not interleaved
        return _build_index(
            model, corpus, output, ids=ids, text_column=text_column, id_column=id_column, tokenizer=tokenizer,
            batch_size=batch_size, shard_size=shard_size, dtype=dtype, prompt_name=prompt_name, prompt=prompt,
            approximate=approximate, calibration_queries=calibration_queries, embeddings_dir=embeddings_dir,
            show_progress_bar=show_progress_bar, overwrite=overwrite, lexical=lexical,
            lexical_settings=lexical_settings, sparse=sparse_model, sparse_tokenizer=sparse_tokenizer,
            multivector=(multivector_model, multivector_tokenizer, multivector_precision),
            compact=(precision, rescore),
        )  # fmt: skip


def _build_index(
    model: Any, corpus: Any, output: Path, *, ids: Any, text_column: str, id_column: str | None, tokenizer: Any,
    batch_size: int, shard_size: int | None, dtype: Any, prompt_name: str | None, prompt: str | None,
    approximate: bool | None, calibration_queries: Any, embeddings_dir: Any, show_progress_bar: bool,
    overwrite: bool, lexical: bool | None, lexical_settings: LexicalSettings | None, sparse: Any = None,
    sparse_tokenizer: Any = None, multivector: tuple[Any, Any, str] = (None, None, "float16"),
    compact: tuple[Any, ...] = ("float32", None),
) -> VectorIndex:  # fmt: skip
    """`build_folder_index` under the output's lock."""
    recover_output(output)  # first: a half-swapped old index is an existing index
    check_output(output, overwrite)
    source, text_column, id_column = corpus_source(corpus, ids, text_column, id_column)
    similarity = model.config.similarity
    if approximate and similarity not in FAISS_METRICS:
        raise ValueError(
            f"approximate=True: the {similarity!r} similarity has no faiss index; faiss serves "
            f"{', '.join(FAISS_METRICS)} (approximate=None searches {similarity} exactly)"
        )
    if approximate and not faiss_available():
        raise ImportError("approximate=True needs faiss: pip install 'hf-siamese[index]' (faiss-cpu)")
    if compact[0] != "float32":
        if approximate:
            check_approximate_precision(compact[0])
        check_compact_similarity(compact[0], similarity)
        compact, approximate = (*compact, bool(approximate)), False  # the IVF, if any, is over the codes
    if approximate is None and not (similarity in FAISS_METRICS and faiss_available()):
        approximate = False
    with_lexical = wants_lexical(lexical, lexical_settings)
    if with_lexical:
        TermTokenizer(
            lexical_settings or LexicalSettings()
        )  # a language it has no stemmer for: refused before any work
    if sparse is not None:  # loaded (and a wrong folder refused) before any work
        sparse = resolve_sparse_model(sparse, sparse_tokenizer, device=str(model.device))
    token_model = None if multivector[0] is None else resolve_multivector_model(*multivector[:2], str(model.device))
    calibration = _embed_queries(model, calibration_queries, tokenizer, batch_size)
    staging = output.with_name(f".{output.name}.building")  # a fixed name: a stopped build resumes its shards
    if staging.exists() and not (staging / EMBEDDINGS_DIR).is_dir():
        shutil.rmtree(staging) if staging.is_dir() else staging.unlink()
    staging.mkdir(parents=True, exist_ok=True)
    embeddings = staging / EMBEDDINGS_DIR
    builder = LexicalBuilder(staging / LEXICAL_DIR, lexical_settings) if with_lexical else None
    texts = TextTable(staging / f"{TEXTS_FILE}.tmp", builder)
    try:
        encode_corpus(
            model, source, embeddings if embeddings_dir is None else embeddings_dir, tokenizer=tokenizer,
            text_column=text_column, id_column=id_column, batch_size=batch_size, shard_size=shard_size, dtype=dtype,
            prompt_name=prompt_name, prompt=prompt, show_progress_bar=show_progress_bar, on_shard=texts,
            restart_if_different=embeddings_dir is None,
        )  # fmt: skip
        if embeddings_dir is not None:
            link_folder(Path(embeddings_dir), embeddings)
    except BaseException:
        if not any(embeddings.glob("shard-*.parquet")):  # nothing worth resuming
            shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        texts.close()
    row_ids, vectors = corpus_matrix(embeddings)
    if texts.rows != len(vectors):
        raise ValueError(f"the corpus gave {texts.rows} texts for {len(vectors)} vectors: it must not change")
    if texts.rows and not texts.worded:
        logger.warning(
            "%s: every one of the %d texts of the corpus is empty or blank: nothing to search by (the vectors are all "
            "the same, and BM25 finds nothing); check the text column (--text-column)", output, texts.rows,
        )  # fmt: skip
    replace_file(staging / f"{TEXTS_FILE}.tmp", staging / TEXTS_FILE)
    if builder is not None:
        builder.finish()
    elif (staging / LEXICAL_DIR).exists():  # left by a stopped build that had one
        shutil.rmtree(staging / LEXICAL_DIR)
    records = _write_parts(
        staging, vectors, row_ids, similarity, sparse=sparse, token_model=token_model, multivector=multivector,
        compact=compact, batch_size=batch_size, shard_size=shard_size or 10_000, calibration=calibration, dtype=dtype,
    )  # fmt: skip
    search = neighbour_search(vectors, embeddings, similarity, approximate, calibration=calibration)
    if calibration is not None and search is None and not (records.get("compact") or {}).get("approximate"):
        logger.info("%s: exact search (%d documents): the calibration queries are not needed", output, len(vectors))
    info = index_record(
        model, model_fingerprint(model), model.resolve_prompt(prompt_name, prompt),
        resolve_dtype(dtype, model.device)[0], vectors.shape, row_ids, "exact" if search is None else "approximate",
    )  # fmt: skip
    if search is not None:
        ann = json.loads((embeddings / "ann" / "ann.json").read_text(encoding="utf-8"))
        info["ann"] = {"factory": ann["factory"], "nprobe": ann["nprobe"], "recall": ann["recall"]}
        logger.info(
            "%s: approximate index %s, nprobe %s, recall@10 %s measured on %s", output, ann["factory"],
            ann["nprobe"], ann["recall"]["value"], ann["recall"]["measured_on"],
        )  # fmt: skip
    if builder is not None:
        info["lexical"] = LexicalIndex.record_of(staging / LEXICAL_DIR)
    info.update(records)
    del vectors, search
    (staging / INDEX_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    replace_folder(staging, output)
    keep_one_copy(output / EMBEDDINGS_DIR)  # after the swap: a kill before it leaves a complete index either way
    return VectorIndex.load(output)


def _write_parts(
    staging: Path, vectors: np.ndarray, row_ids: Sequence[Any], similarity: str, *, sparse: Any, token_model: Any,
    multivector: tuple[Any, Any, str], compact: tuple[Any, ...], batch_size: int, shard_size: int,
    calibration: np.ndarray | None = None, dtype: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """The parts a build writes after the vectors, into `staging` (each made anew, or its folder left by a stopped
    build removed): the learned-sparse part (a second pass over the staged texts), the multi-vector part (resumed
    after a stop, as the vectors are) and the compact vectors (precision, rescore and whether with an IVF, measured
    on the `calibration` query vectors where given); returns their records by index.json key."""
    records: dict[str, Any] = {}
    shutil.rmtree(staging / SPARSE_DIR, ignore_errors=True)
    if sparse is not None:
        stored = datasets.Dataset.from_file(str(staging / TEXTS_FILE))
        records["sparse"] = write_sparse_part(
            staging / SPARSE_DIR, texts_in_batches(stored, shard_size), *sparse, batch_size
        )
        del stored
    if token_model is not None:
        stored = datasets.Dataset.from_file(str(staging / TEXTS_FILE))
        records["multivector"] = write_multivector_part(
            staging / MULTIVECTOR_DIR, stored, *token_model, precision=multivector[2],
            corpus_key=corpus_fingerprint(row_ids), batch_size=batch_size, shard_size=shard_size, dtype=dtype,
        )  # fmt: skip
        del stored
    else:
        shutil.rmtree(staging / MULTIVECTOR_DIR, ignore_errors=True)
    shutil.rmtree(staging / COMPACT_DIR, ignore_errors=True)
    if compact[0] != "float32":
        records["compact"] = write_compact_part(
            staging / COMPACT_DIR, vectors, compact[0], similarity, compact[1], approximate=compact[2],
            calibration=calibration,
        )  # fmt: skip
    return records


def index_record(
    model: Any,
    fingerprint: dict[str, Any],
    document_prompt: str,
    dtype_name: str,
    shape: tuple[int, ...],
    ids: Sequence[Any],
    backend: str,
) -> dict[str, Any]:
    """The `index.json` of an index of `shape` (rows, dim) vectors with `ids`, made by `model`."""
    config = model.config
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "model": {"name_or_path": recorded_name(config.name_or_path), **fingerprint},
        "settings": {
            "pooling": config.pooling,
            "normalize": config.normalize,
            "similarity": config.similarity,
            "max_seq_length": config.effective_max_seq_length,
            "truncate_dim": config.truncate_dim,
            "document_prompt": document_prompt,
            "dtype": dtype_name,
        },
        "count": int(shape[0]),
        "dim": int(shape[1]),
        "id_type": type(ids[0]).__name__,
        "corpus": corpus_fingerprint(ids),
        "backend": backend,
        "ann": None,
        "lexical": None,
        "compact": None,
    }


__all__ = ["build_folder_index", "check_build_options", "check_output", "corpus_source", "index_record"]
