"""Learned sparse vs BM25 at about 100,000 documents, as hf-siamese stores and searches them: the size of each index
part and its query latency on the CPU.

A proxy corpus: encoding 100k real documents with a SPLADE model takes over an hour on 2 cores, so SciFact's 5,183
abstracts (title + " " + text, as read_beir gives them) are encoded once and the corpus is built `--copies` times over
(19 -> 98,477 documents): the learned sparse part is the encoded CSR matrix stacked `copies` times, BM25's lexical part
is built over the texts repeated `copies` times (same texts, same order). Same term distribution, posting lists
`copies` times longer (every document has `copies` equal twins: the rankings mean nothing, only sizes and speed).

Learned sparse: the stacked matrix is written as the index's sparse part is (`write_sparse_part`: sparse/indptr.npy
int64, indices.npy int32, data.npy float32, sparse.json), loaded by `SparsePart.load` and searched as
`SparsePart.search` does after encoding: `sparse_search(query_matrix, part.matrix, 10, by_term=part.by_term)`, the
term-major matrix made on the part's first search and kept (`term_major`): that one-off cost is timed alone. Queries:
the first `--queries` test queries of the set (qrels/test.tsv) by id, encoded with task="query"; their encoding (one
at a time, batch of 1) is timed apart from the search. BM25: `LexicalBuilder` (default `LexicalSettings`: English
stemmer and stopwords, k1 1.5, b 0.75) fed 10,000 texts at a time, `LexicalIndex.load`, `LexicalIndex.search(queries,
10)` (tokenisation inside). Each is timed one query at a time (median, p95; after one warm-up call) and with all
queries in one call.

    python benchmarks/bench_sparse_scale.py --model SPARSE_DIR [--copies 19] [--queries 300]
        [--data ../shared/data/retrieval/scifact] [--batch-size 32] [--device cpu] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_train_step import cpu_flags  # the header's CPU line, as the training benchmark prints it

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parents[1] / "shared" / "data" / "retrieval" / "scifact"
TOP_K, SHARD, TRANSPOSE_RUNS = 10, 10_000, 3


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected an int >= 1")
    return number


def read_set(data: Path, count: int) -> tuple[list[str], list[str]]:
    """(documents in corpus order, the first `count` test queries by id) of the BEIR folder `data`."""
    from hf_siamese import read_beir

    needed = [data / "corpus.jsonl", data / "queries.jsonl", data / "qrels" / "test.tsv"]
    missing = [str(path) for path in needed if not path.is_file()]
    if missing:
        raise SystemExit(
            f"bench_sparse_scale: --data {data}: {', '.join(missing)} not found; expected a BEIR folder with "
            "corpus.jsonl, queries.jsonl and qrels/test.tsv (SciFact: ../shared/data/retrieval/scifact)"
        )
    dataset = read_beir(str(data), split="test")
    ids = sorted(dataset.queries)[:count]
    return list(dataset.corpus.values()), [dataset.queries[i] for i in ids]


def ms(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - start)


def latencies(search: Callable[[Any], Any], items: list[Any], everything: Any) -> dict[str, float]:
    """One warm-up call, then each item alone (median, p95 ms) and all in one call (ms a query)."""
    search(items[0])
    each = [ms(lambda item=item: search(item)) for item in items]
    return {
        "search_median_ms": statistics.median(each),
        "search_p95_ms": float(np.percentile(each, 95)),
        "search_all_ms": ms(lambda: search(everything)) / len(items),
    }


def folder_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 2**20


def learned_sparse(args: argparse.Namespace, documents: list[str], queries: list[str], work: Path) -> dict[str, Any]:
    import scipy.sparse

    from hf_siamese.formats.loading import load_sparse_model
    from hf_siamese.retrieval.index.sparse_part import SPARSE_FILE, SparsePart, sparse_fingerprint
    from hf_siamese.retrieval.ranking.sparse import encode_sparse, sparse_search, term_major

    model, tokenizer = load_sparse_model(args.model, device=args.device)
    start = time.perf_counter()
    base = encode_sparse(
        model, documents, task="document", tokenizer=tokenizer, batch_size=args.batch_size, show_progress_bar=True
    )
    encode_documents_s = time.perf_counter() - start
    base.sort_indices()
    stacked = scipy.sparse.vstack([base] * args.copies, format="csr", dtype=np.float32)
    folder = work / "sparse"  # the arrays and record write_sparse_part writes
    folder.mkdir()
    np.save(folder / "indptr.npy", stacked.indptr.astype(np.int64))
    np.save(folder / "indices.npy", stacked.indices.astype(np.int32))
    np.save(folder / "data.npy", stacked.data.astype(np.float32))
    model_record = {"name_or_path": args.model, "fingerprint": sparse_fingerprint(model)}
    record = {"model": model_record, "count": stacked.shape[0], "vocab": stacked.shape[1], "weights": stacked.nnz}
    (folder / SPARSE_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    del stacked
    part = SparsePart.load(folder)
    matrix = part.matrix
    # the part's first search makes its term-major matrix, once (SparsePart.search)
    transpose = [ms(lambda: term_major(matrix)) for _ in range(TRANSPOSE_RUNS)]
    part.by_term = term_major(matrix)

    def encode(texts: list[str], batch_size: int) -> Any:
        return encode_sparse(model, texts, task="query", tokenizer=tokenizer, batch_size=batch_size)

    query_matrix = encode(queries, args.batch_size)
    encode(queries[:1], 1)  # warm-up
    encode_each = [ms(lambda text=text: encode([text], 1)) for text in queries]
    rows = [query_matrix[i : i + 1] for i in range(len(queries))]
    result = latencies(lambda q: sparse_search(q, matrix, TOP_K, by_term=part.by_term), rows, query_matrix)
    return {
        **result,
        "documents": matrix.shape[0],
        "size_mb": folder_mb(folder),
        "terms_doc": matrix.nnz / matrix.shape[0],
        "terms_query": query_matrix.nnz / len(queries),
        "encode_median_ms": statistics.median(encode_each),
        "transpose_ms": statistics.median(transpose),
        "encode_documents_s": encode_documents_s,
    }


def bm25(documents: list[str], queries: list[str], copies: int, work: Path) -> dict[str, Any]:
    from hf_siamese.retrieval.index.lexical import LexicalBuilder, LexicalIndex, LexicalSettings

    folder, texts = work / "lexical", documents * copies
    start = time.perf_counter()
    builder = LexicalBuilder(folder, LexicalSettings())
    try:
        for first in range(0, len(texts), SHARD):
            builder.add(texts[first : first + SHARD])
        builder.finish()
    finally:
        builder.close()
    build_s = time.perf_counter() - start
    index = LexicalIndex.load(folder)
    vocabulary = index.retriever.vocab_dict
    terms = [len({t for t in words if t in vocabulary}) for words in index.tokenize(queries)]
    postings = np.load(folder / "indices.csc.index.npy", mmap_mode="r").shape[0]
    result = latencies(lambda q: index.search(q, TOP_K), [[text] for text in queries], queries)
    return {
        **result,
        "documents": len(index),
        "size_mb": folder_mb(folder),
        "terms_doc": postings / len(index),
        "terms_query": sum(terms) / len(terms),
        "build_s": build_s,
    }


def report(args: argparse.Namespace, base: int, sparse: dict[str, Any], lexical: dict[str, Any]) -> dict[str, Any]:
    import torch

    print(
        f"# bench_sparse_scale on {cpu_flags()}; torch {torch.__version__}; model {args.model}; "
        f"{sparse['documents']:,} documents ({base:,} of {args.data.name} x {args.copies} copies: same term "
        f"distribution, posting lists {args.copies}x longer); {args.queries_used} queries; top {TOP_K}"
    )
    print(
        "\n| part | documents | size MB | active terms doc / query | search ms a query (one at a time, median / p95) "
        "| search ms a query (all at once) | encode ms a query (median) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row, encode in (
        ("learned sparse (model)", sparse, f"{sparse['encode_median_ms']:.2f}"),
        ("BM25 (bm25s)", lexical, "- (inside search)"),
    ):
        print(
            f"| {name} | {row['documents']:,} | {row['size_mb']:.2f} | {row['terms_doc']:.1f} / "
            f"{row['terms_query']:.1f} | {row['search_median_ms']:.2f} / {row['search_p95_ms']:.2f} | "
            f"{row['search_all_ms']:.2f} | {encode} |"
        )
    ratios = {
        "latency": sparse["search_median_ms"] / lexical["search_median_ms"],
        "latency_with_encoding": (sparse["search_median_ms"] + sparse["encode_median_ms"])
        / lexical["search_median_ms"],
        "size": sparse["size_mb"] / lexical["size_mb"],
    }
    print(f"\nlatency learned sparse / BM25 (one at a time, median): {ratios['latency']:.2f}x (target <= 2x)")
    print(f"latency with query encoding, (encode + search) / BM25 search: {ratios['latency_with_encoding']:.2f}x")
    print(f"size learned sparse / BM25: {ratios['size']:.2f}x")
    print(
        f"the part's term-major matrix, made once on its first search (term_major): {sparse['transpose_ms']:.0f} ms "
        f"(median of {TRANSPOSE_RUNS})"
    )
    print(
        f"document encoding (once, {base:,} texts): {sparse['encode_documents_s']:.1f} s; BM25 build "
        f"({lexical['documents']:,} texts): {lexical['build_s']:.1f} s"
    )
    return {
        "cpu": cpu_flags(), "torch": torch.__version__, "model": args.model, "data": str(args.data),
        "base_documents": base, "copies": args.copies, "queries": args.queries_used, "top_k": TOP_K,
        "learned_sparse": sparse, "bm25": lexical, "ratios": ratios,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a hf-siamese sparse folder or SparseEncoder folder")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a BEIR folder (default: SciFact)")
    parser.add_argument("--copies", type=positive, default=19, help="times the corpus is repeated (19: 98,477)")
    parser.add_argument("--queries", type=positive, default=300, help="test queries used, the first by id")
    parser.add_argument("--batch-size", type=positive, default=32, help="encoding batch of documents and queries")
    parser.add_argument("--device", default="cpu", help="where the model encodes (searches run on the CPU)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    documents, queries = read_set(args.data, args.queries)
    args.queries_used = len(queries)
    work = Path(tempfile.mkdtemp(prefix="bench_sparse_scale_"))
    try:
        sparse = learned_sparse(args, documents, queries, work)
        lexical = bm25(documents, queries, args.copies, work)
        numbers = report(args, len(documents), sparse, lexical)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
