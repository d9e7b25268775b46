"""A learned-sparse model as the first stage of a retrieval evaluation and of `search --corpus` (exact, no index):
the metrics and the hits equal a by-hand ranking (dense dot products of the encoded vectors), ties go to the lower
corpus row, a reranker works over its hits, and the flags that only apply to dense models are refused by name. Tiny
random BERT masked-language models."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

from hf_siamese import SparseSiameseConfig, SparseSiameseModel
from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.data.beir import read_beir
from hf_siamese.evaluation.retrieval import RetrievalEvaluator, evaluate_retrieval
from hf_siamese.metrics import judged_queries, retrieval_metrics
from hf_siamese.retrieval.corpus_search import search_corpus, search_corpus_exact
from hf_siamese.retrieval.ranking import sparse as sparse_module
from hf_siamese.retrieval.ranking.sparse import sparse_search

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell"]


def _sparse_model(architecture: str = "splade") -> SparseSiameseModel:
    torch.manual_seed(0)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    config = SparseSiameseConfig(encoder_config=encoder.config, architecture=architecture)
    return SparseSiameseModel(config, encoder=encoder).eval()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("sparse")
    _sparse_model().save_pretrained(root / "sparse")
    tiny_tokenizer.save_pretrained(root / "sparse")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(root / "ce")
    rng = random.Random(7)
    corpus = list(dict.fromkeys(" ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 9))) for _ in range(40)))
    corpus = corpus[:24] + [corpus[3]]  # a duplicate text (another id, a later row): its ties go to the first
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    rows = [{"_id": f"d{i}", "text": text} for i, text in enumerate(corpus)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    queries = {f"q{i}": " ".join(corpus[i].split()[:3]) for i in range(6)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6)) + "q5\td24\t2\n"
    )
    return root


def _by_hand(model, tokenizer, queries: list[str], documents: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores): every query's best `depth` documents by the dense dot products of the encoded vectors."""
    query_vectors = model.encode(queries, tokenizer, task="query").to_dense()
    document_vectors = model.encode(documents, tokenizer, task="document").to_dense()
    scores = (query_vectors @ document_vectors.T).numpy()
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :depth]  # stable: equal scores by the lower row
    return rows, np.take_along_axis(scores, rows, axis=1)


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("architecture", ["splade", "inference_free"])
def test_the_sparse_first_stage_measures_the_by_hand_ranking(files: Path, tiny_tokenizer, architecture) -> None:
    model, data = _sparse_model(architecture), read_beir(files / "beir")
    judged, corpus_ids = judged_queries(data.qrels), list(data.corpus)
    depth = max(data.k_values)
    rows, _ = _by_hand(model, tiny_tokenizer, [data.queries[q] for q in judged], list(data.corpus.values()), depth)
    rankings = {q: [corpus_ids[j] for j in found] for q, found in zip(judged, rows.tolist(), strict=True)}
    expected = retrieval_metrics(rankings, data.qrels, data.k_values)
    got = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, batch_size=4)
    assert got == pytest.approx(expected) and set(got) == set(expected)
    for key in ("ndcg@10", "mrr@10", "recall@100", "map@10", "precision@1", "num_queries"):
        assert key in got
    dense = RetrievalEvaluator(data, tokenizer=tiny_tokenizer)(make_tiny_model())
    assert set(got) == set(dense)  # the same metric names as the dense first stage
    assert RetrievalEvaluator(data, tokenizer=tiny_tokenizer, batch_size=32)(model) == got  # batching: no change


def test_sparse_search_breaks_ties_by_corpus_row_and_bounds_its_blocks(monkeypatch, tiny_tokenizer) -> None:
    queries = torch.tensor([[1.0, 0, 0], [0, 0, 2]]).to_sparse()
    corpus = torch.tensor([[0, 1.0, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0], [0, 0, 1]]).to_sparse()
    scores_first, rows_first = sparse_search(queries, corpus, 4)
    assert rows_first.tolist() == [[1, 3, 0, 2], [2, 4, 0, 1]] and scores_first[:, :2].tolist() == [[1, 1], [2, 2]]
    assert sparse_search(queries, corpus, 99)[1].shape == (2, 5)  # at most the corpus
    model = _sparse_model()
    texts = [" ".join(random.Random(i).choices(WORDS[:60], k=6)) for i in range(20)]
    whole = sparse_search(model.encode(QUERIES, tiny_tokenizer, task="query"), model.encode(texts, tiny_tokenizer), 7)
    monkeypatch.setattr(sparse_module, "BLOCK_ELEMENTS", 1)  # one query at a time
    chunked = sparse_search(model.encode(QUERIES, tiny_tokenizer, task="query"), model.encode(texts, tiny_tokenizer), 7)
    assert whole[1].tolist() == chunked[1].tolist()
    np.testing.assert_allclose(whole[0], chunked[0], rtol=1e-6)
    rows, scores = _by_hand(model, tiny_tokenizer, QUERIES, texts, 7)
    assert whole[1].tolist() == rows.tolist()
    np.testing.assert_allclose(whole[0], scores, rtol=1e-5)
    with pytest.raises(ValueError, match="top_k"):
        sparse_search(queries, corpus, 0)
    by_term = sparse_module.term_major(corpus)  # made once for a corpus searched again and again
    again = sparse_search(queries, corpus, 4, by_term=by_term)
    assert again[1].tolist() == rows_first.tolist() and np.array_equal(again[0], scores_first)
    with pytest.raises(ValueError, match=r"by_term is \(5, 3\), not the corpus \(5, 3\) transposed"):
        sparse_search(queries, corpus, 4, by_term=by_term.T)


def test_a_reranker_reranks_the_sparse_hits(files: Path, tiny_tokenizer) -> None:
    model, data = _sparse_model(), read_beir(files / "beir")
    reranker = CrossEncoder.from_pretrained(files / "ce")
    alone = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer)
    both = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=10)
    assert both["rerank_top"] == 10 and "rerank_ndcg@10" in both
    assert {k: v for k, v in both.items() if not k.startswith("rerank")} == pytest.approx(alone)
    for setting in ({"first_stage": "hybrid"}, {"first_stage": "lexical"}, {"index": object()}):
        with pytest.raises(ValueError, match=next(iter(setting))):
            evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, **setting)


def test_search_corpus_ranks_by_the_sparse_model(files: Path, tiny_tokenizer) -> None:
    model, corpus = _sparse_model(), files / "corpus.txt"
    texts = corpus.read_text().splitlines()
    hits = search_corpus(model, str(corpus), QUERIES, 4, tokenizer=tiny_tokenizer, batch_size=3)
    rows, scores = _by_hand(model, tiny_tokenizer, QUERIES, texts, 4)
    assert [[hit["id"] for hit in query] for query in hits] == rows.tolist()
    assert [[hit["text"] for hit in query] for query in hits] == [[texts[j] for j in row] for row in rows.tolist()]
    np.testing.assert_allclose([[hit["score"] for hit in query] for query in hits], scores, rtol=1e-5)
    assert hits == search_corpus_exact(model, str(corpus), QUERIES, 4, tokenizer=tiny_tokenizer)
    reranked = search_corpus(model, str(corpus), QUERIES, 3, tokenizer=tiny_tokenizer, rerank=_ce(files), rerank_top=6)
    assert all(len(query) == 3 and "first_stage_rank" in query[0] for query in reranked)
    with pytest.raises(ValueError, match="embeddings_dir"):
        search_corpus(model, str(corpus), QUERIES, 4, tokenizer=tiny_tokenizer, embeddings_dir=files / "x")


def _ce(files: Path) -> CrossEncoder:
    return CrossEncoder.from_pretrained(files / "ce")


def test_eval_prints_the_sparse_table(files: Path, tiny_tokenizer, capsys) -> None:
    code, out, err = _run(["eval", files / "beir", "--model", files / "sparse", "--batch-size", "4"], capsys)
    assert code == 0, err
    assert "first stage: sparse" in out and "6 queries, 25 documents" in out
    metrics = evaluate_retrieval(_sparse_model(), read_beir(files / "beir"), tokenizer=tiny_tokenizer, percent=True)
    ndcg = next(line for line in out.splitlines() if line.startswith("ndcg "))
    assert ndcg.split()[1:] == [f"{metrics[f'ndcg@{k}']:.2f}" for k in (1, 3, 5, 10, 100)]
    code, out, err = _run(["eval", files / "beir", "--model", files / "sparse", "--rerank", files / "ce"], capsys)
    assert code == 0, err
    assert "reranked by" in out and re.search(r"ndcg@10\s+\d", out)


def test_search_corpus_prints_the_sparse_hits_in_order(files: Path, tiny_tokenizer, capsys) -> None:
    argv = ["search", "--corpus", files / "corpus.txt", "--model", files / "sparse", "--top-k", "5"]
    code, out, err = _run([*argv, "--query", QUERIES[0], "--query", QUERIES[1]], capsys)
    assert code == 0, err
    texts = (files / "corpus.txt").read_text().splitlines()
    rows, scores = _by_hand(_sparse_model(), tiny_tokenizer, QUERIES[:2], texts, 5)
    printed = re.findall(r"^\s+(\d+)\. (\S+)  \[(\d+)\] (.*)$", out, flags=re.MULTILINE)
    assert [int(doc) for _, _, doc, _ in printed] == rows.ravel().tolist()
    assert [text for *_, text in printed] == [texts[j] for j in rows.ravel().tolist()]
    assert [rank for rank, *_ in printed] == [str(r) for r in range(1, 6)] * 2
    assert [score for _, score, *_ in printed] == [f"{s:.4f}" for s in scores.ravel().tolist()]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--pooling", "mean"], "--pooling"),
        (["--no-normalize"], "--normalize"),
        (["--first-stage", "hybrid"], "--first-stage hybrid"),
        (["--first-stage", "lexical"], "--first-stage lexical"),
        (["--index", "somewhere"], "--index"),
        (["--quantize", "int8"], "--quantize"),
    ],
)
def test_eval_refuses_the_dense_flags_by_name(files: Path, capsys, flags, named) -> None:
    code, out, err = _run(["eval", files / "beir", "--model", files / "sparse", *flags], capsys)
    assert code == 1 and not out
    assert len(err.strip().splitlines()) == 1 and named in err and "sparse model" in err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--corpus", "CORPUS", "--embeddings-dir", "EMB"], "--embeddings-dir"),
        (["--corpus", "CORPUS", "--approximate"], "--approximate"),
        (["--corpus", "CORPUS", "--pooling", "cls"], "--pooling"),
        (["--index", "somewhere"], "--index"),
    ],
)
def test_search_refuses_the_dense_flags_by_name(files: Path, tmp_path: Path, capsys, flags, named) -> None:
    flags = [str(files / "corpus.txt") if f == "CORPUS" else str(tmp_path / "emb") if f == "EMB" else f for f in flags]
    code, out, err = _run(["search", *flags, "--model", files / "sparse", "--query", QUERIES[0]], capsys)
    assert code == 1 and not out.strip()
    assert len(err.strip().splitlines()) == 1 and named in err and "sparse model" in err
    assert not (tmp_path / "emb").exists()
