"""The same index in Milvus (Milvus Lite, the engine in-process) as in the folder: quality, latency and scale.

Parts:
- `quality`: BEIR SciFact test (300 claims, 5,183 abstracts), zero-shot all-MiniLM-L6-v2: nDCG@10 and recall@100 x100
  of the dense, lexical and hybrid first stages through the folder index and through Milvus Lite with each lexical
  field (our BM25 weights as sparse vectors; Milvus's BM25 function). The z-score weight is chosen on the 809 TRAIN
  claims for each store, then reported on test. Every number comes from `evaluate_retrieval(..., index=...)`, the
  path of `hf-siamese eval BEIR --index LOCATION`.
- `rrf`: Milvus's own RRF (hybrid_search, RRFRanker(60)) against ours on the same two top-10 lists of each test claim.
- `latency`: query latency on the same SciFact index, folder vs Milvus Lite, dense and hybrid (RRF): one claim at a
  time (median of 100, query embedding included) and the 300 test claims in one call (ms per claim).
- `scale`: export N short generated documents (a tiny random encoder, so the export is measured, not the encoder) in
  a child process per size: documents/s of the folder build and of the Milvus export, the child's peak RSS (and that of
  the engine's own process, which an export of `milvus_lite_process.PROCESS_FROM` rows or more starts), and for the
  approximate dense index (IVF_FLAT) its recall@10 against exact search, as the export measured it.

    python benchmarks/run.py milvus [--parts quality,latency,scale] [--workdir DIR] [--sizes 100000,1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from common import REPO, SCIFACT, cpu_flags, peak_rss_mib, read_scifact, require  # noqa: E402


def cpu_header() -> str:
    """The results header: the CPU flags and the pymilvus version."""
    import pymilvus

    return f"# {cpu_flags()}; pymilvus {pymilvus.__version__}, Milvus Lite"


def stores(workdir: Path) -> dict[str, object]:
    """The folder index of SciFact's corpus and its two Milvus Lite exports (built once, kept in workdir)."""
    from hf_siamese.cli.common import load_inference_model
    from hf_siamese.retrieval.stores import build_index, load_index
    from hf_siamese.retrieval.stores.milvus.export import export_index

    folder = workdir / "scifact-index"
    if not (folder / "index.json").is_file():
        model, tokenizer = load_inference_model(None, None, None, None)
        build_index(
            model,
            str(require(SCIFACT, "BEIR SciFact")),
            folder,
            tokenizer=tokenizer,
            overwrite=True,
            show_progress_bar=False,
        )
    index = load_index(folder)
    found = {"folder": index}
    for kind in ("ours", "milvus"):
        start = time.perf_counter()
        location = f"milvus-lite:{workdir}/scifact.db#scifact_{kind}"
        found[f"milvus-{kind}"] = export_index(index, location, lexical=kind, overwrite=True)
        print(f"# exported to Milvus Lite ({kind} lexical field) in {time.perf_counter() - start:.1f} s", flush=True)
    return found


def quality(workdir: Path) -> None:
    from hf_siamese.cli.common import load_inference_model
    from hf_siamese.metrics import retrieval_metrics
    from hf_siamese.retrieval.fusion.hybrid import choose_dense_weight, fuse

    model, tokenizer = load_inference_model(None, None, None, None)
    test, train = read_scifact(split="test"), read_scifact(split="train")
    print("| store | dense | lexical | hybrid RRF | hybrid z-score (weight chosen on train) |")
    print("|---|---|---|---|---|")
    for name, index in stores(workdir).items():
        runs = {}
        for split, data in (("train", train), ("test", test)):
            claims = [q for q in data.qrels]
            vectors = model.encode([data.queries[q] for q in claims], tokenizer=tokenizer, convert_to_numpy=True)
            dense = index.dense_rows(index.query_array(vectors), 100)
            lexical = index.lexical_rows([data.queries[q] for q in claims], 100)
            found = sorted({int(r) for arr in (dense[1], lexical[1]) for r in arr.ravel() if r >= 0})
            ids = {row: str(doc) for row, (doc, _) in index.rows_of(found).items()}
            runs[split] = (claims, dense, lexical, ids, data)

        def metrics(split: str, rows: np.ndarray, runs: dict = runs) -> dict[str, float]:
            claims, _, _, ids, data = runs[split]
            ranked = {q: [ids[int(r)] for r in found if r >= 0] for q, found in zip(claims, rows.tolist(), strict=True)}
            return retrieval_metrics(ranked, data.qrels, [10, 100], percent=True)

        _, dense, lexical, _, _ = runs["train"]
        weight, _ = choose_dense_weight(dense, lexical, lambda rows: metrics("train", rows)["ndcg@10"])
        _, dense, lexical, _, _ = runs["test"]
        cells = [metrics("test", dense[1]), metrics("test", lexical[1]), metrics("test", fuse(dense, lexical)[1])]
        cells.append(metrics("test", fuse(dense, lexical, "zscore", weight)[1]))
        text = [f"{m['ndcg@10']:.2f} / {m['recall@100']:.2f}" for m in cells]
        text[-1] += f" (w={weight})"
        print(f"| {name} | " + " | ".join(text) + " |", flush=True)
    print("(nDCG@10 / recall@100, x100, SciFact test)")


def engine_rrf_agreement(index, model, tokenizer, data) -> None:
    """Milvus's own RRF (hybrid_search with RRFRanker(60)) against ours (`hybrid.fuse`) on the same two lists of each
    test claim: how many claims get the same top 10, and the same top 10 as a set (ties ordered otherwise)."""
    from pymilvus import AnnSearchRequest, RRFRanker

    from hf_siamese.retrieval.stores.milvus.index import query_vectors

    claims = [data.queries[q] for q in data.qrels]
    vectors = model.encode(claims, tokenizer=tokenizer, convert_to_numpy=True)
    ours = index.search(model, claims, top_k=10, tokenizer=tokenizer, first_stage="hybrid")
    tokens = index._tokenize(claims) if index._tokenize is not None else None
    same_order = same_set = 0
    for i in range(len(claims)):
        requests = [
            AnnSearchRequest([vectors[i].tolist()], "dense", {"metric_type": "COSINE"}, limit=10),
            AnnSearchRequest(query_vectors([tokens[i]]), "lexical", {"metric_type": "IP"}, limit=10),
        ]
        found = index.client.hybrid_search(
            index.where.collection, requests, RRFRanker(60), limit=10, output_fields=["row"]
        )
        engine = [int(hit["row"]) for hit in found[0]]
        mine = [hit["id"] for hit in ours[i]]
        rows = {row: doc for row, (doc, _) in index.rows_of(engine).items()}
        engine_ids = [rows[row] for row in engine]
        same_order += engine_ids == mine
        same_set += set(engine_ids) == set(mine)
    print(
        f"# Milvus's RRF vs ours on the same lists, {len(claims)} claims: same top 10 in the same order for "
        f"{same_order}, as a set for {same_set}"
    )


def latency(workdir: Path) -> None:
    from hf_siamese.cli.common import load_inference_model

    model, tokenizer = load_inference_model(None, None, None, None)
    claims = list(read_scifact(split="test").queries.values())
    print("| store | first stage | one claim at a time, median ms | 300 claims in one call, ms per claim |")
    print("|---|---|---|---|")
    for name, index in stores(workdir).items():
        if name == "milvus-milvus":
            continue
        for first_stage in ("dense", "hybrid"):
            index.search(model, claims[:5], tokenizer=tokenizer, first_stage=first_stage)  # warm
            single = []
            for claim in claims[:100]:
                start = time.perf_counter()
                index.search(model, claim, top_k=10, tokenizer=tokenizer, first_stage=first_stage)
                single.append(1000 * (time.perf_counter() - start))
            start = time.perf_counter()
            index.search(model, claims, top_k=10, tokenizer=tokenizer, first_stage=first_stage, batch_size=64)
            batched = 1000 * (time.perf_counter() - start) / len(claims)
            print(f"| {name} | {first_stage} | {statistics.median(single):.1f} | {batched:.1f} |", flush=True)


CHILD = r"""
import json, os, resource, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
sys.path.insert(0, sys.argv[4])
from conftest import VOCAB, WORDS, make_tiny_model
from transformers import BertTokenizer
from hf_siamese.retrieval.stores.milvus.export import export_index
from hf_siamese.retrieval.stores import build_index
from hf_siamese.retrieval.stores import load_index
size, workdir, part = int(sys.argv[1]), sys.argv[2], sys.argv[3]
words = WORDS[:40]  # the tiny tokenizer's own words: every text is distinct (40 ** 6 of them)
corpus, folder = f"{workdir}/scale-{size}.txt", f"{workdir}/scale-{size}"
if not os.path.exists(corpus):
    with open(corpus, "w") as handle:
        for i in range(size):
            handle.write(" ".join(words[(i // 40 ** j) % 40] for j in range(6)) + "\n")
model = make_tiny_model()
tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)
start = time.perf_counter()
if part == "folder":
    build_index(model, corpus, folder, tokenizer=tokenizer, overwrite=True, show_progress_bar=False,
                approximate=False, batch_size=256)
else:
    export_index(load_index(folder), f"milvus-lite:{workdir}/scale.db#scale_{size}", overwrite=True,
                 dense_index="IVF_FLAT")
seconds = time.perf_counter() - start
result = {"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "engine_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
if part == "milvus":
    from hf_siamese.retrieval.stores.milvus.index import MilvusIndex
    opened = MilvusIndex.open(f"milvus-lite:{workdir}/scale.db#scale_{size}")
    result["recall"] = opened.info["dense_index"].get("recall")
print(json.dumps(result))
"""


def scale(workdir: Path, sizes: list[int]) -> None:
    tests = REPO / "tests"
    print(
        "| documents | folder build docs/s | folder peak RSS MiB | Milvus export docs/s | export peak RSS MiB | "
        "engine process peak RSS MiB | IVF_FLAT recall@10 |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        found = {}
        for part in ("folder", "milvus"):
            out = (
                subprocess.run(
                    [sys.executable, "-c", CHILD, str(size), str(workdir), part, str(tests)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            found[part] = json.loads(out)
        recall = found["milvus"].get("recall") or {}
        print(
            f"| {size:,} | {size / found['folder']['seconds']:,.0f} | {found['folder']['rss_mib']:,.0f} | "
            f"{size / found['milvus']['seconds']:,.0f} | {found['milvus']['rss_mib']:,.0f} | "
            f"{found['milvus']['engine_rss_mib'] or 0:,.0f} | {recall.get('value', '-')} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="quality,rrf,latency,scale")
    parser.add_argument("--workdir", default="/tmp/bench_milvus")
    parser.add_argument("--sizes", default="100000,1000000")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    print(cpu_header())
    parts = args.parts.split(",")
    if "quality" in parts:
        quality(workdir)
    if "rrf" in parts:
        from hf_siamese.cli.common import load_inference_model

        model, tokenizer = load_inference_model(None, None, None, None)
        engine_rrf_agreement(stores(workdir)["milvus-ours"], model, tokenizer, read_scifact(split="test"))
    if "latency" in parts:
        latency(workdir)
    if "scale" in parts:
        scale(workdir, [int(s) for s in args.sizes.split(",")])
    print(f"# peak RSS of this process: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
