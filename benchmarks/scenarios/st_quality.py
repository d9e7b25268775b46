"""The data and the quality metrics of the sentence-transformers serving rows (st_serving_row.py), with the standard
library and numpy only, as that runs in the ST benchmark venv: STSb pairs, BEIR SciFact, Spearman x100 and
nDCG@10 / recall@100 of an `encode` function, and the small readers the rows share."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import statistics
from pathlib import Path
from typing import Any


def digest(data: bytes, length: int = 10) -> str:
    return hashlib.sha256(data).hexdigest()[:length]


def read_json_texts(path: str | Path) -> list[str]:
    texts = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
        raise ValueError(f"{path}: expected a non-empty JSON list of strings")
    return texts


def read_stsb(path: str | Path) -> tuple[list[str], list[str], list[float]]:
    """STS Benchmark: tab-separated, no header, 7 fields (genre, file, year, id, score, s1, s2) or 9 (+2 licences).

    csv.QUOTE_NONE because sentences contain unbalanced quotes; sentences are kept byte-exact; blank lines skipped.
    """
    sentence1: list[str] = []
    sentence2: list[str] = []
    scores: list[float] = []
    with open(path, encoding="utf-8-sig", newline="") as file:
        for fields in csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE):
            if not fields:
                continue
            if len(fields) not in (7, 9):
                raise ValueError(f"{path}: an STS Benchmark line has {len(fields)} fields, not 7 or 9")
            scores.append(float(fields[4]))
            sentence1.append(fields[5])
            sentence2.append(fields[6])
    if not scores:
        raise ValueError(f"{path}: no rows")
    return sentence1, sentence2, scores


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def read_beir(folder: str | Path, split: str = "test") -> tuple[dict[str, str], dict[str, str], dict[str, dict]]:
    """BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (header line, maybe CRLF).

    Returns (corpus id -> title + " " + text, query id -> text of the judged queries, query id -> {doc id: rel}).
    """
    folder = Path(folder)
    corpus = {}
    for row in read_jsonl(folder / "corpus.jsonl"):
        title = (row.get("title") or "").strip()
        text = row.get("text") or ""
        corpus[str(row["_id"])] = f"{title} {text}" if title else text
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8", newline="") as file:
        reader = csv.reader(file, delimiter="\t")
        next(reader)  # header: query-id, corpus-id, score
        for fields in reader:
            if fields:
                qrels.setdefault(fields[0].strip(), {})[fields[1].strip()] = int(fields[2])
    qrels = {q: judged for q, judged in qrels.items() if any(rel > 0 for rel in judged.values())}
    queries = {str(row["_id"]): row["text"] for row in read_jsonl(folder / "queries.jsonl")}
    missing = [q for q in qrels if q not in queries]
    if missing:
        raise ValueError(f"{folder}: {len(missing)} judged queries are not in queries.jsonl (e.g. {missing[0]})")
    return corpus, {q: queries[q] for q in qrels}, qrels


def ranking_metrics(ranked: list[list[str]], judged: list[dict[str, int]]) -> dict[str, float]:
    """nDCG@10, MRR@10, Recall@100 (x100), trec_eval's definitions, averaged over the queries."""
    ndcg, mrr, recall = [], [], []
    for ranking, rels in zip(ranked, judged, strict=True):
        dcg = sum(rels.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:10]))
        ideal = sorted((rel for rel in rels.values() if rel > 0), reverse=True)[:10]
        idcg = sum(rel / math.log2(rank + 2) for rank, rel in enumerate(ideal))
        ndcg.append(dcg / idcg)
        first = next((rank + 1 for rank, doc in enumerate(ranking[:10]) if rels.get(doc, 0) > 0), None)
        mrr.append(1 / first if first else 0.0)
        relevant = {doc for doc, rel in rels.items() if rel > 0}
        recall.append(len(relevant.intersection(ranking[:100])) / len(relevant))
    return {
        "ndcg@10": 100 * statistics.fmean(ndcg),
        "mrr@10": 100 * statistics.fmean(mrr),
        "recall@100": 100 * statistics.fmean(recall),
        "num_queries": len(ranked),
    }


def unit_rows(x):
    import numpy as np

    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def eval_stsb(encode, path: str) -> dict[str, Any]:
    import numpy as np
    from scipy.stats import spearmanr

    sentence1, sentence2, gold = read_stsb(path)
    distinct = list(dict.fromkeys(sentence1 + sentence2))
    position = {text: i for i, text in enumerate(distinct)}
    embeddings = unit_rows(encode(distinct))
    u = embeddings[[position[text] for text in sentence1]]
    v = embeddings[[position[text] for text in sentence2]]
    cosine = (u * v).sum(axis=1)
    return {
        "spearman_x100": float(100 * spearmanr(cosine, np.asarray(gold)).statistic),
        "pairs": len(gold),
        "sentences": len(distinct),
    }


def eval_scifact(encode, folder: str) -> dict[str, Any]:
    import numpy as np

    corpus, queries, qrels = read_beir(folder, "test")
    doc_ids = list(corpus)
    docs = unit_rows(encode([corpus[d] for d in doc_ids]))
    query_ids = list(queries)
    query_vectors = unit_rows(encode([queries[q] for q in query_ids]))
    ranked = []
    depth = min(100, len(doc_ids))
    for start in range(0, len(query_ids), 256):
        scores = query_vectors[start : start + 256] @ docs.T
        top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
        for row, candidates in zip(scores, top, strict=True):
            order = candidates[np.lexsort((candidates, -row[candidates]))]  # score descending, then corpus order
            ranked.append([doc_ids[i] for i in order])
    metrics = ranking_metrics(ranked, [qrels[q] for q in query_ids])
    metrics["corpus"] = len(doc_ids)
    return metrics
