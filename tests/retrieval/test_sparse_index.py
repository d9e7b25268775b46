"""The learned-sparse part of an index folder: built in the same build as the vectors or added later, it ranks exactly
as the exact sparse search of the same texts; the hybrid fuses it with the dense list (and BM25) by reciprocal ranks,
as `reciprocal_rank_fusion` does by hand; a stopped build leaves no half part; another sparse model at the recorded
path is refused, naming both; the CLI flags. Tiny random models."""

from __future__ import annotations

import importlib.util
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
from hf_siamese.retrieval.fusion.hybrid import check_first_stage, reciprocal_rank_fusion, stage_lists
from hf_siamese.retrieval.index import sparse_part
from hf_siamese.retrieval.index.additions import add_sparse
from hf_siamese.retrieval.index.sparse_part import SPARSE_DIR
from hf_siamese.retrieval.ranking.sparse import encode_sparse, sparse_search
from hf_siamese.retrieval.stores import build_index, load_index

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell"]
HAS_BM25 = importlib.util.find_spec("bm25s") is not None and importlib.util.find_spec("Stemmer") is not None


def _sparse_model(seed: int = 0) -> SparseSiameseModel:
    torch.manual_seed(seed)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    return SparseSiameseModel(SparseSiameseConfig(encoder_config=encoder.config), encoder=encoder).eval()


def _save(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("sparse_index")
    _save(_sparse_model(), tiny_tokenizer, root / "sparse")
    _save(make_tiny_model(), tiny_tokenizer, root / "dense")
    rng = random.Random(3)
    corpus = list(dict.fromkeys(" ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 9))) for _ in range(30)))
    (root / "corpus.txt").write_text("\n".join(corpus[:20]) + "\n", encoding="utf-8")
    return root


def _texts(files: Path) -> list[str]:
    return (files / "corpus.txt").read_text(encoding="utf-8").splitlines()


def _build(files: Path, output: Path, tokenizer, **options):
    return build_index(
        make_tiny_model(), _texts(files), output, tokenizer=tokenizer, shard_size=6, show_progress_bar=False,
        sparse_model=str(files / "sparse"), **{"lexical": False, **options},
    )  # fmt: skip


def _ids(hits) -> list[list]:
    return [[hit["id"] for hit in query] for query in hits]


def test_the_sparse_part_ranks_as_the_exact_sparse_search(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index = _build(files, tmp_path / "idx", tiny_tokenizer)
    record = json.loads((tmp_path / "idx" / "index.json").read_text())["sparse"]
    assert record["model"]["name_or_path"] == str(files / "sparse") and len(record["model"]["fingerprint"]) == 64
    assert record["count"] == len(_texts(files)) and index.has_sparse and index.default_first_stage() == "hybrid"
    assert sorted(p.name for p in (tmp_path / "idx" / SPARSE_DIR).iterdir()) == [
        "data.npy", "indices.npy", "indptr.npy", "sparse.json",
    ]  # fmt: skip
    model, texts = _sparse_model(), _texts(files)
    corpus = encode_sparse(model, texts, task="document", tokenizer=tiny_tokenizer)
    scores, rows = sparse_search(encode_sparse(model, QUERIES, task="query", tokenizer=tiny_tokenizer), corpus, 8)
    hits = load_index(tmp_path / "idx").search(None, QUERIES, top_k=8, first_stage="sparse")
    assert _ids(hits) == rows.tolist()
    np.testing.assert_allclose([[hit["score"] for hit in query] for query in hits], scores, rtol=1e-5)
    assert [[hit["text"] for hit in query] for query in hits] == [[texts[j] for j in row] for row in rows.tolist()]
    np.testing.assert_allclose(index.sparse.matrix.toarray(), corpus.toarray(), rtol=1e-6)  # every batch, in order


def test_the_sparse_part_transposes_its_matrix_once(files: Path, tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    """The term-major matrix a search multiplies by is made on the first search and kept, not remade per search (a
    pass over the whole part)."""
    _build(files, tmp_path / "idx", tiny_tokenizer)
    made = []
    real = sparse_part.term_major
    monkeypatch.setattr(sparse_part, "term_major", lambda matrix: made.append(1) or real(matrix))
    index = load_index(tmp_path / "idx")
    first = index.search(None, QUERIES, top_k=4, first_stage="sparse")
    assert index.search(None, QUERIES, top_k=4, first_stage="sparse") == first and len(made) == 1


def test_dense_plus_sparse_is_reciprocal_rank_fusion_by_hand(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index, model, n = _build(files, tmp_path / "idx", tiny_tokenizer), make_tiny_model(), len(_texts(files))
    dense = index.search(model, QUERIES, top_k=n, first_stage="dense", tokenizer=tiny_tokenizer)
    sparse = index.search(None, QUERIES, top_k=n, first_stage="sparse")
    hybrid = index.search(model, QUERIES, top_k=n, tokenizer=tiny_tokenizer)  # the default: dense + sparse
    for d, s, h in zip(_ids(dense), _ids(sparse), hybrid, strict=True):
        assert [hit["id"] for hit in h] == reciprocal_rank_fusion([d, s])
        by_hand = [1 / (60 + d.index(i) + 1) + 1 / (60 + s.index(i) + 1) for i in reciprocal_rank_fusion([d, s])]
        np.testing.assert_allclose([hit["score"] for hit in h], by_hand, rtol=1e-6)
    zscore = index.search(model, QUERIES, top_k=3, fusion="zscore", dense_weight=1.0, tokenizer=tiny_tokenizer)
    assert _ids(zscore) == [row[:3] for row in _ids(dense)]  # two lists: z-scores still apply


def test_a_reranker_reranks_the_fused_list_with_each_stage_score(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index, model = _build(files, tmp_path / "idx", tiny_tokenizer), make_tiny_model()
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    reranker = CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer)
    hits = index.search(model, QUERIES, top_k=3, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=6)
    assert [len(query) for query in hits] == [3, 3, 3]
    assert all("sparse_score" in hit and "dense_score" in hit and "first_stage_rank" in hit for hit in hits[0])
    alone = index.search(None, QUERIES, top_k=3, first_stage="sparse", rerank=reranker, rerank_top=6)
    assert all("first_stage_rank" in hit and "sparse_score" not in hit for hit in alone[0])


@pytest.mark.skipif(not HAS_BM25, reason="bm25s and PyStemmer")
def test_dense_bm25_and_sparse_fuse_three_lists(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index, model, n = _build(files, tmp_path / "idx", tiny_tokenizer, lexical=True), make_tiny_model(), 20
    assert index.stage_lists("hybrid") == ("dense", "lexical", "sparse")
    lists = [
        _ids(index.search(model, QUERIES, top_k=n, first_stage=stage, tokenizer=tiny_tokenizer))
        for stage in ("dense", "lexical", "sparse")
    ]
    hybrid = index.search(model, QUERIES, top_k=n, tokenizer=tiny_tokenizer)
    for q, hits in enumerate(hybrid):
        assert [hit["id"] for hit in hits] == reciprocal_rank_fusion([found[q] for found in lists])[:n]
    with pytest.raises(ValueError, match=r"zscore.*3 \(dense, lexical, sparse\)"):
        index.search(model, QUERIES, fusion="zscore", tokenizer=tiny_tokenizer)


def test_a_stopped_build_leaves_no_sparse_part(files: Path, tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    calls = {"n": 0}
    real = sparse_part.encode_sparse

    def stops(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sparse_part, "encode_sparse", stops)
    with pytest.raises(KeyboardInterrupt):
        _build(files, tmp_path / "idx", tiny_tokenizer)
    assert not (tmp_path / "idx").exists()  # the build is swapped in whole, or not at all
    plain = build_index(make_tiny_model(), _texts(files), tmp_path / "plain", tokenizer=tiny_tokenizer, lexical=False)
    calls["n"] = 0
    with pytest.raises(KeyboardInterrupt):
        add_sparse(tmp_path / "plain", str(files / "sparse"), shard_size=6)
    reopened = load_index(tmp_path / "plain")
    assert not reopened.has_sparse and "sparse" not in reopened.info
    assert sorted(p.name for p in (tmp_path / "plain").iterdir() if "sparse" in p.name) == []
    with pytest.raises(ValueError, match="first stage 'sparse'.*--add-sparse"):
        reopened.search(None, QUERIES, first_stage="sparse")
    monkeypatch.setattr(sparse_part, "encode_sparse", real)
    (tmp_path / "plain" / f".{SPARSE_DIR}.building").mkdir()  # what a killed process leaves: made anew
    added = add_sparse(tmp_path / "plain", str(files / "sparse"), shard_size=6)
    assert added.has_sparse and not (tmp_path / "plain" / f".{SPARSE_DIR}.building").exists()
    np.testing.assert_array_equal(np.array(added.embeddings), np.array(plain.embeddings))  # nothing re-encoded
    expected = _build(files, tmp_path / "whole", tiny_tokenizer).search(None, QUERIES, first_stage="sparse")
    assert added.search(None, QUERIES, first_stage="sparse") == expected
    with pytest.raises(ValueError, match="has a sparse part already"):
        add_sparse(tmp_path / "plain", str(files / "sparse"))


def test_a_replaced_sparse_model_is_refused_naming_both(tmp_path: Path, files: Path, tiny_tokenizer) -> None:
    folder = _save(_sparse_model(), tiny_tokenizer, tmp_path / "sparse")
    build_index(
        make_tiny_model(), _texts(files), tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False,
        sparse_model=str(folder), show_progress_bar=False,
    )  # fmt: skip
    _save(_sparse_model(seed=1), tiny_tokenizer, folder)  # another model at the recorded path
    index = load_index(tmp_path / "idx")
    with pytest.raises(ValueError, match=r"built with sparse model '.*sparse' \(fingerprint \w{12}\), not '.*sparse'"):
        index.search(None, QUERIES, first_stage="sparse")
    with pytest.raises(ValueError, match="fingerprint"):
        index.search(make_tiny_model(), QUERIES, tokenizer=tiny_tokenizer)  # the hybrid reads the sparse list too
    index.sparse.use_model(_sparse_model(), tiny_tokenizer)  # the model that built it: accepted
    assert len(index.search(None, QUERIES, top_k=2, first_stage="sparse")[0]) == 2


def test_the_rule_of_first_stages() -> None:
    refused = "first stage 'sparse'; accepted: dense, lexical, hybrid \\(the sparse first stage searches"
    with pytest.raises(ValueError, match=refused):
        check_first_stage("sparse")
    assert check_first_stage("sparse", sparse_part=True) == "sparse"
    with pytest.raises(ValueError, match="fusion='rrf'.*one list"):
        check_first_stage("sparse", "rrf", sparse_part=True)
    with pytest.raises(ValueError, match="lexical_settings.*not to the sparse one"):
        check_first_stage("sparse", lexical_settings=object(), sparse_part=True)
    assert stage_lists("hybrid", lexical=True, sparse=False) == ("dense", "lexical")  # as ever without a sparse part
    assert stage_lists("hybrid", lexical=False, sparse=False) == ("dense",)  # refused by the store: no lexical part
    assert stage_lists("hybrid", lexical=False, sparse=True, fusion="zscore") == ("dense", "sparse")
    assert stage_lists("sparse", lexical=True, sparse=True) == ("sparse",)


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_index_with_a_sparse_part_and_search_it(files: Path, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    idx = tmp_path / "idx"
    base = ["index", files / "corpus.txt", "--model", files / "dense", "--no-lexical"]
    code, out, err = _run([*base, "-o", idx, "--sparse-model", files / "sparse"], capsys)
    assert code == 0, err
    assert "with its sparse part" in out
    search = ["search", "--index", idx, "--query", QUERIES[0], "--top-k", "5"]
    code, out, err = _run([*search, "--first-stage", "sparse"], capsys)
    assert code == 0, err
    expected = load_index(idx).search(None, QUERIES[:1], top_k=5, first_stage="sparse")[0]
    printed = re.findall(r"^\s+\d+\. (\S+)  \[(\d+)\] ", out, flags=re.MULTILINE)
    assert printed == [(f"{hit['score']:.4f}", str(hit["id"])) for hit in expected]
    code, out, err = _run(search, capsys)  # the default: hybrid, dense + sparse
    assert code == 0 and "Query:" in out, err
    code, out, err = _run([*search, "--first-stage", "sparse", "--model", files / "dense"], capsys)
    assert code == 1 and "--model" in err and "--first-stage sparse" in err
    code, out, err = _run([*base, "-o", tmp_path / "plain"], capsys)
    assert code == 0, err
    plain_search = ["search", "--index", tmp_path / "plain", "--query", QUERIES[0], "--first-stage", "sparse"]
    code, out, err = _run(plain_search, capsys)
    assert code == 1 and "--add-sparse" in err
    code, out, err = _run(["index", "--add-sparse", tmp_path / "plain"], capsys)
    assert code == 1 and "--sparse-model SPARSE_DIR" in err
    code, out, err = _run(["index", "--add-sparse", tmp_path / "plain", "-o", tmp_path / "x"], capsys)
    assert code == 1 and "no -o" in err
    code, out, err = _run(["index", "--add-sparse", tmp_path / "plain", "--sparse-model", files / "sparse"], capsys)
    assert code == 0 and "added the sparse part (20 documents" in out, err
    code, out, err = _run([*plain_search, "--top-k", "5"], capsys)
    assert code == 0 and re.findall(r"^\s+\d+\. (\S+)  \[(\d+)\] ", out, flags=re.MULTILINE) == printed, err


def test_an_evaluation_through_the_index_reads_its_sparse_part(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    from hf_siamese.data.beir import read_beir
    from hf_siamese.evaluation.retrieval import evaluate_retrieval

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    rows = [{"_id": f"d{i}", "text": text} for i, text in enumerate(_texts(files))]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(QUERIES))
    )
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(3))
    )
    model = make_tiny_model()
    index = build_index(
        model, str(beir), tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False, sparse_model=str(files / "sparse"),
        show_progress_bar=False,
    )  # fmt: skip
    data = read_beir(beir)
    dense = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, index=index)  # the vectors alone: measured
    assert dense["num_queries"] == 3
    hybrid = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, index=index, first_stage="hybrid")
    assert "sparse_ndcg@10" in hybrid and "dense_ndcg@10" in hybrid  # dense + sparse: test_sparse_eval_mine.py
    assert evaluate_retrieval(None, data, index=index, first_stage="sparse")["num_queries"] == 3
