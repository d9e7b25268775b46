"""Corpus embedding that never holds the corpus: `encode_corpus` reads a stream of texts shard by shard and writes each
shard's vectors to a Parquet file as soon as they are computed; `read_corpus_shards` reads them back, shard by shard.

An output folder holds `corpus.json` (format and version, the model fingerprint and the settings that change the
vectors, written before any shard; `done`, `num_rows` and `num_shards` once every shard is written) and
`shard-00000.parquet`, `shard-00001.parquet`, ...: shard s holds the global rows s * shard_size ... (s + 1) * shard_size
- 1 in columns `id` (int64 or string) and `embedding` (fixed-size list of float32, exactly as `model.encode` returns
them: `settings.normalize` / `similarity` say what they are). It loads with `datasets.load_dataset("parquet",
data_files=f"{output_dir}/shard-*.parquet")`.

Memory is bounded by one shard (texts, ids, tokens, vectors) whatever the corpus size. A stopped run resumes when called
again with the same arguments: finished shards are checked (readable; the ids, and a hash of ids and texts, that the
stream gives for them) and kept, the others computed; another model or setting is refused before anything changes.
Several processes (`torchrun`, `accelerate launch`, or RANK / WORLD_SIZE) share the work: process p embeds the shards
s with s % num_processes == p. Ids are checked unique within each shard while writing, and across shards before the
folder is marked done (8 bytes a row: a hash of each id; the ids of two rows whose hashes agree are read back from
their shards and named).
"""

from __future__ import annotations

import array
import itertools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ..data.corpus_stream import open_corpus
from ..data.digest import TextDigest
from ..modeling.distributed import rank_and_world
from ..storage import write_atomic, write_text_atomic
from .index.fingerprint import describe_mismatch, model_fingerprint, recorded_name
from .index.parts import resolve_dtype

FORMAT_NAME = "hf-siamese-corpus-embeddings"
FORMAT_VERSION = 1
MANIFEST = "corpus.json"
SHARD_GLOB = "shard-*.parquet"
MATRIX = "vectors.npy"  # the shards stacked into one matrix (`corpus_matrix.corpus_matrix`), beside them
IDS = "vectors.ids.npy"  # its ids, in the same order
ROWS_HASH_KEY = b"hf_siamese.rows_sha256"  # Parquet metadata of a shard: sha256 of its ids and texts
logger = logging.getLogger(__name__)
DEFAULT_SHARD_SIZE = 10_000
MANIFEST_WAIT_S = 600.0  # how long processes > 0 wait for process 0's manifest (it may still be loading a model)


@dataclass(frozen=True)
class CorpusShards:
    """What `encode_corpus` did. `shards_computed` / `shards_reused` count this process's shards; `done`: the folder
    is finished (with several processes and no process group, only the last one to finish sees every shard)."""

    output_dir: Path
    num_rows: int
    num_shards: int
    dim: int
    shards_computed: int
    shards_reused: int
    done: bool = True


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.parquet"


# ------------------------------------------------------------------------------------------------ shards and manifest


def _rows_hash(ids: list, texts: list[str]) -> str:
    """sha256 of a shard's ids and texts, length-prefixed (no two different shards hash alike by concatenation)."""
    digest = TextDigest()
    for doc_id, text in zip(ids, texts, strict=True):
        digest.add(repr(doc_id), text)
    return digest.hexdigest()


def _write_shard(path: Path, ids: list, vectors: np.ndarray, rows_hash: str) -> None:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
    id_type = pa.string() if isinstance(ids[0], str) else pa.int64()
    table = pa.table({"id": pa.array(ids, type=id_type), "embedding": column})
    table = table.replace_schema_metadata({ROWS_HASH_KEY: rows_hash.encode()})
    write_atomic(path, lambda temporary: pq.write_table(table, temporary))  # a whole shard or none under its name


def _shard_problem(path: Path, count: int, rows_hash: str, dim: int, ids: list | None = None) -> str | None:
    """Why a shard file cannot be kept, or None. With `ids` the whole file is read (a damaged page shows), else only
    its footer (the row count and the hash of the rows it was made from)."""
    try:
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
        if file.metadata.num_rows != count:
            return f"{file.metadata.num_rows} rows, expected {count}"
        if (schema.metadata or {}).get(ROWS_HASH_KEY, b"").decode() != rows_hash:
            return "made from other rows (ids or texts differ)"
        if schema.names != ["id", "embedding"] or schema.field("embedding").type != pa.list_(pa.float32(), dim):
            return f"unexpected columns {schema}"
        if ids is not None:
            table = file.read()
            if table.column("embedding").null_count or table.column("id").to_pylist() != ids:
                return "other ids, or missing vectors"
    except (OSError, pa.ArrowException, ValueError) as err:
        return f"unreadable ({type(err).__name__}: {err})"
    return None


def _load_manifest(output: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((output / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError as err:
        raise ValueError(f"{os.fspath(output / MANIFEST)} is not valid JSON ({err})") from None
    found = (manifest.get("format"), manifest.get("format_version")) if isinstance(manifest, dict) else None
    if found != (FORMAT_NAME, FORMAT_VERSION):
        wanted = f"{FORMAT_NAME} version {FORMAT_VERSION}"
        raise ValueError(f"{os.fspath(output / MANIFEST)} is {found}, this hf-siamese reads {wanted}: use a new folder")
    return manifest


def _write_manifest(output: Path, manifest: dict[str, Any]) -> None:
    write_text_atomic(output / MANIFEST, json.dumps(manifest, indent=2) + "\n")  # processes may write at once


def _check_resumable(output: Path, recorded: dict[str, Any], manifest: dict[str, Any]) -> None:
    """Refuse to add shards to a folder made with another model or other settings, before anything changes."""
    old, new = recorded.get("settings", {}), manifest["settings"]
    differ = [f"{k} ({old.get(k)!r} there, {new.get(k)!r} now)" for k in sorted(new) if old.get(k) != new[k]]
    if recorded.get("model", {}).get("fingerprint") != manifest["model"]["fingerprint"]:
        how = describe_mismatch(recorded.get("model", {}), manifest["model"]).replace(" in the index", " there")
        differ.insert(0, f"model ({how})")
    if differ:
        raise ValueError(
            f"{os.fspath(output)} holds corpus embeddings made differently: {'; '.join(differ)}. "
            "Resume with the same model and settings, or choose another output_dir"
        )


def _open_folder(
    output: Path, manifest: dict[str, Any], process_index: int, num_processes: int, restart: bool = False
) -> None:
    """Process 0 writes the manifest (or checks the one there; with `restart`, a folder made differently is emptied
    and started afresh); the others wait for it, then check it."""
    deadline = time.monotonic() + MANIFEST_WAIT_S
    while process_index and (recorded := _load_manifest(output)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"process {process_index} of {num_processes} waited {MANIFEST_WAIT_S:.0f} s for "
                f"process 0 to write {os.fspath(output / MANIFEST)}; is it running?"
            )
        time.sleep(0.2)
    if process_index:
        return _check_resumable(output, recorded, manifest)
    if restart:
        try:
            recorded = _load_manifest(output)
            if recorded is not None:
                _check_resumable(output, recorded, manifest)
        except ValueError as err:
            logger.info("starting %s afresh: %s", output, err)
            shutil.rmtree(output)
        if output.exists() and _load_manifest(output) is None:
            shutil.rmtree(output) if output.is_dir() else output.unlink()
    recorded = _load_manifest(output)
    if recorded is None:
        if output.exists() and (output.is_file() or any(output.iterdir())):
            raise ValueError(
                f"output_dir {os.fspath(output)!r} is not empty and holds no {MANIFEST}; choose a new or empty folder"
            )
        output.mkdir(parents=True, exist_ok=True)
        return _write_manifest(output, manifest)
    _check_resumable(output, recorded, manifest)
    if recorded.get("done"):  # shards may change below: the folder is unfinished until this run finishes it
        _write_manifest(output, {**recorded, "done": False, "num_rows": None, "num_shards": None, "stacked": False})
    return None


# ------------------------------------------------------------------------------------------------ encode


def _process_layout(process_index: int | None, num_processes: int | None) -> tuple[int, int]:
    rank, world = rank_and_world(from_env=True)
    process_index = rank if process_index is None else process_index
    num_processes = world if num_processes is None else num_processes
    if not 0 <= process_index < num_processes:
        raise ValueError(f"process_index={process_index} must be in 0..{num_processes - 1} ({num_processes} processes)")
    return process_index, num_processes


def encode_corpus(
    model: Any, source: Any, output_dir: str | os.PathLike, *, tokenizer: Any = None, text_column: str = "text",
    id_column: str | None = None, batch_size: int = 64, shard_size: int | None = None,
    dtype: str | torch.dtype | None = None, prompt_name: str | None = None, prompt: str | None = None,
    process_index: int | None = None, num_processes: int | None = None, show_progress_bar: bool = False,
    on_shard: Callable[[int, list, list[str]], None] | None = None, restart_if_different: bool = False,
) -> CorpusShards:  # fmt: skip
    """Embed every text of `source` with `model` into Parquet shards of `shard_size` rows in `output_dir` (see the
    module docstring), holding one shard at a time; called again on the same folder, it resumes a stopped run.

    Args:
        model: a `SiameseBertModel`.
        source: a `datasets.Dataset` or `IterableDataset` (columns `text_column`, optional `id_column`), an iterable
            of `str`, or a path or glob (`docs/*.jsonl`: the matches in sorted order) of `.txt` (one text per line,
            blank lines skipped), `.jsonl`, `.csv` / `.tsv` (with a header) or `.parquet` files. Without
            `id_column` the ids are the positions 0, 1, ... of the rows over all files.
        shard_size: rows per shard (default: the one `output_dir` was started with, so that it resumes, else
            10,000).
        tokenizer: as in `model.encode`.
        batch_size: as in `model.encode`.
        prompt_name: as in `model.encode` (the resolved prompt is recorded).
        prompt: as in `model.encode` (recorded).
        dtype: compute dtype (`"bfloat16"`, `"float16"` or the torch dtype); vectors are stored in float32.
        process_index: this process's share (default: the torch.distributed rank, else the RANK environment
            variable, else 0); every process reads the whole stream.
        num_processes: the number of shares (default: the torch.distributed world size, else the WORLD_SIZE
            environment variable, else 1).
        show_progress_bar: a tqdm bar over the texts, with the encoding speed.
        on_shard: called with (shard number, ids, texts) for every shard in order, computed or reused: what a
            caller needs of the texts (e.g. the text table of an index) without reading the source again.
        restart_if_different: for a folder the caller owns (an index's staging folder): one made with another
            model or settings, or holding something else, is emptied and started afresh instead of refused.

    Raises:
        DataFormatError: a text that is not a str, a missing column, an empty or unreadable file (named).
        ValueError: the folder was started with another model or settings (the differences are named), or two rows
            rows of the corpus have the same id (both rows and the id named; the folder is not marked done).
    """
    if shard_size is None:  # the folder's own (so that it resumes), else the default
        recorded = _load_manifest(Path(output_dir)) if Path(output_dir).is_dir() else None
        shard_size = (recorded or {}).get("settings", {}).get("shard_size") or DEFAULT_SHARD_SIZE
    for name, value in (("batch_size", batch_size), ("shard_size", shard_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: expected a positive int")
    process_index, num_processes = _process_layout(process_index, num_processes)
    stream = open_corpus(source, text_column, id_column)
    first = next(stream, None)  # errors of the first file, and an empty corpus, stop the run before anything is written
    if first is None:
        raise ValueError("the corpus is empty: there is nothing to embed")
    dtype_name, compute = resolve_dtype(dtype, model.device)
    document_prompt = model.resolve_prompt(prompt_name, prompt)
    dim = model.config.embedding_size
    manifest = _new_manifest(model, shard_size, text_column, id_column, document_prompt, dtype_name)
    output = Path(output_dir)
    _open_folder(output, manifest, process_index, num_processes, restart_if_different)

    from tqdm.auto import tqdm

    total = len(source) if isinstance(source, datasets.Dataset | list | tuple) else None
    bar = tqdm(total=total, desc="Embedding corpus", unit="text", disable=not show_progress_bar)
    expected: list[tuple[int, str]] = []  # (rows, hash) per shard: to check the other processes' shards at the end
    computed = reused = encoded = 0
    seconds = 0.0
    id_keys = array.array("q")  # a hash of every row's id: duplicates across shards, 8 bytes a row
    rows = itertools.chain([first], stream)
    encode_args = {"tokenizer": tokenizer, "batch_size": batch_size, "dtype": compute, "prompt": document_prompt}
    encode_args["convert_to_numpy"] = True
    with bar:
        while block := list(itertools.islice(rows, shard_size)):  # the only rows in memory
            index, start = len(expected), len(expected) * shard_size
            ids = [doc_id for doc_id, _ in block] if id_column else list(range(start, start + len(block)))
            texts = [text for _, text in block]
            del block
            path = output / shard_name(index)
            if id_column:
                _check_shard_ids(ids, start, path)
            expected.append((len(ids), _rows_hash(ids, texts)))
            if id_column:
                id_keys.extend(hash(doc_id) for doc_id in ids)
            if on_shard is not None:
                on_shard(index, ids, texts)
            if index % num_processes == process_index:
                took = _embed_shard(model, path, ids, texts, expected[-1][1], dim, encode_args)
                if took is None:
                    reused += 1
                else:
                    seconds, computed, encoded = seconds + took, computed + 1, encoded + len(texts)
            speed = f"{encoded / seconds:.0f}" if seconds else "-"
            bar.set_postfix(texts_per_s=speed, computed=computed, reused=reused, refresh=False)
            bar.update(len(texts))
    num_rows = sum(count for count, _ in expected)
    if id_column:
        _check_unique_ids(output, id_keys, shard_size)
    done = _finish(output, manifest, expected, dim, process_index, num_processes)
    return CorpusShards(output, num_rows, len(expected), dim, computed, reused, done)


def _new_manifest(
    model: Any, shard_size: int, text_column: str, id_column: str | None, document_prompt: str, dtype_name: str
) -> dict[str, Any]:
    """The manifest of a folder being started: the model (name and fingerprint) and every setting the vectors
    depend on, not done yet."""
    config = model.config
    settings = dict(shard_size=shard_size, text_column=text_column, id_column=id_column, prompt=document_prompt)
    settings.update(max_seq_length=config.effective_max_seq_length, dtype=dtype_name, dim=config.embedding_size)
    settings.update(similarity=config.similarity, normalize=config.normalize)
    model_info = {"name_or_path": recorded_name(config.name_or_path), **model_fingerprint(model)}
    manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "model": model_info, "settings": settings}
    manifest.update(done=False, num_rows=None, num_shards=None)
    return manifest


def _check_shard_ids(ids: list[Any], start: int, path: Path) -> None:
    """ValueError naming an id repeated within one shard (its rows counted from `start`)."""
    if len(set(ids)) == len(ids):
        return
    seen: dict[Any, int] = {}
    for row, doc_id in enumerate(ids, start):
        if seen.setdefault(doc_id, row) != row:
            raise ValueError(
                f"duplicate id {doc_id!r} (rows {seen[doc_id]} and {row}, both in {path.name}); ids must be unique"
            )


def _embed_shard(
    model: Any, path: Path, ids: list[Any], texts: list[str], digest: str, dim: int, encode_args: dict[str, Any]
) -> float | None:
    """Embed one shard and write it to `path`, returning the seconds `model.encode` took; None where a complete
    shard of the same rows is there already (reused)."""
    if path.exists() and _shard_problem(path, len(ids), digest, dim, ids) is None:
        return None
    began = time.perf_counter()
    vectors = model.encode(texts, **encode_args)
    took = time.perf_counter() - began
    if vectors.shape != (len(texts), dim):
        raise ValueError(f"model.encode returned {vectors.shape}, expected ({len(texts)}, {dim})")
    _write_shard(path, ids, vectors, digest)
    return took


def _check_unique_ids(output: Path, id_keys: array.array, shard_size: int) -> None:
    """ValueError naming the first repeated id in row order (the earliest row whose id an earlier row has; rows whose
    id hashes agree are checked in their shards), whatever the hashes' order."""
    keys = np.frombuffer(id_keys, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    same = np.flatnonzero(keys[order][1:] == keys[order][:-1])
    pairs = sorted(zip(order[same].tolist(), order[same + 1].tolist(), strict=True), key=lambda pair: pair[1])
    for first, second in pairs:
        found = []
        for row in (first, second):
            path = output / shard_name(row // shard_size)
            try:
                found.append(pq.read_table(path, columns=["id"]).column("id")[row % shard_size].as_py())
            except (OSError, pa.ArrowException, IndexError):  # another process's shard, not written yet
                found.append(None)
        if found[0] is None or found[0] == found[1]:
            what = "the same id" if found[0] is None else f"id {found[0]!r}"
            raise ValueError(
                f"duplicate {what}: rows {first} and {second} of the corpus ({shard_name(first // shard_size)} and "
                f"{shard_name(second // shard_size)} in {os.fspath(output)}); ids must be unique"
            )


def _barrier() -> None:
    if torch.distributed.get_backend() == "nccl" and torch.cuda.is_available():
        torch.distributed.barrier(device_ids=[torch.cuda.current_device()])  # NCCL would guess a device and warn
    else:
        torch.distributed.barrier()


def _finish(output: Path, manifest: dict, expected: list, dim: int, process_index: int, num_processes: int) -> bool:
    """Mark the folder done once every shard is there: with a process group, process 0 between two barriers;
    without one, whichever process finds every shard written (the last one to finish)."""
    dist = torch.distributed
    group = num_processes > 1 and dist.is_available() and dist.is_initialized()
    group = group and (dist.get_rank(), dist.get_world_size()) == (process_index, num_processes)
    if group:
        _barrier()
    problems: dict[int, str] = {}
    if not group or process_index == 0:
        problems = {i: _shard_problem(output / shard_name(i), n, h, dim) for i, (n, h) in enumerate(expected)}
        problems = {i: problem for i, problem in problems.items() if problem is not None}
        if not problems:
            for stale in output.glob(SHARD_GLOB):  # shards beyond the end of an earlier, longer corpus
                if stale.stem[6:].isdigit() and int(stale.stem[6:]) >= len(expected):
                    stale.unlink()
            num_rows = sum(count for count, _ in expected)
            _write_manifest(output, {**manifest, "done": True, "num_rows": num_rows, "num_shards": len(expected)})
    if group:  # every process returns once the folder is marked done, or raises with process 0
        outcome = [problems]
        dist.broadcast_object_list(outcome, src=0)
        if outcome[0]:
            index, problem = next(iter(outcome[0].items()))
            raise RuntimeError(
                f"{os.fspath(output)}: {shard_name(index)} is missing or damaged after every process "
                f"finished ({problem})"
            )
    return not problems


# ------------------------------------------------------------------------------------------------ read back


def read_corpus_shards(output_dir: str | os.PathLike) -> Iterator[tuple[list, np.ndarray]]:
    """(ids, `(rows, dim)` float32 embeddings) of each shard of a finished `encode_corpus` folder, in order, one shard
    in memory at a time (the ids are unique: a run with a repeated id is never marked done). A missing or unfinished
    folder raises at the call, not at the first shard."""
    output = Path(output_dir)
    manifest = _load_manifest(output)
    if manifest is None:
        raise FileNotFoundError(2, f"no corpus embeddings in {os.fspath(output)!r} (no {MANIFEST})", os.fspath(output))
    if not manifest.get("done"):
        raise ValueError(
            f"the corpus embedding run in {os.fspath(output)!r} is unfinished "
            f"({len(list(output.glob(SHARD_GLOB)))} shard files so far): run encode_corpus or "
            "'hf-siamese embed' again with the same arguments to finish it"
        )
    return _iter_shards(output, manifest)


def _iter_shards(output: Path, manifest: dict) -> Iterator[tuple[list, np.ndarray]]:
    settings, num_shards = manifest["settings"], manifest["num_shards"]
    dim, shard_size = settings["dim"], settings["shard_size"]
    if manifest.get("stacked"):  # the shards were replaced by their stacked copy (an index keeps one copy)
        ids, matrix = np.load(output / IDS, allow_pickle=False), np.load(output / MATRIX, mmap_mode="r")
        if matrix.shape != (manifest["num_rows"], dim) or len(ids) != len(matrix):
            raise ValueError(f"corrupt corpus embeddings: {os.fspath(output / MATRIX)} is {matrix.shape}")
        for start in range(0, len(matrix), shard_size):
            yield ids[start : start + shard_size].tolist(), np.array(matrix[start : start + shard_size])
        return
    for index in range(num_shards):
        path = output / shard_name(index)
        rows = shard_size if index < num_shards - 1 else manifest["num_rows"] - shard_size * (num_shards - 1)
        try:
            table = pq.read_table(path)
            kind = table.schema.field("embedding").type
        except (OSError, KeyError, pa.ArrowException) as err:
            raise ValueError(f"corrupt corpus embeddings: {os.fspath(path)}: {err}") from None
        if table.num_rows != rows or kind != pa.list_(pa.float32(), dim):
            raise ValueError(
                f"corrupt corpus embeddings: {os.fspath(path)} has {table.num_rows} rows of {kind}, "
                f"expected {rows} of {dim} float32"
            )
        vectors = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, dim)
        yield table.column("id").to_pylist(), vectors
