"""An index's learned-sparse part measured by `eval --index` (the first stage "sparse", and the hybrid that fuses every
list the index holds) with the very ranking `search --index` gives; hard negatives mined by a sparse model's exact
ranking (alone, or as the third list of the hybrid, fused as the index fuses it); bad input named in one line. Tiny
random models, a BEIR folder written to a temporary folder."""

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
from datasets import Dataset
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

from hf_siamese import SparseSiameseConfig, SparseSiameseModel
from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.data.beir import read_beir
from hf_siamese.evaluation.retrieval import RetrievalEvaluator, evaluate_retrieval
from hf_siamese.metrics import judged_queries
from hf_siamese.retrieval.mining.negatives import mine_hard_negatives
from hf_siamese.retrieval.stores import build_index, load_index

HAS_BM25 = importlib.util.find_spec("bm25s") is not None and importlib.util.find_spec("Stemmer") is not None
needs_bm25 = pytest.mark.skipif(not HAS_BM25, reason="bm25s and PyStemmer")


def _sparse_model() -> SparseSiameseModel:
    torch.manual_seed(0)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    return SparseSiameseModel(SparseSiameseConfig(encoder_config=encoder.config), encoder=encoder).eval()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 9)))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("sparse_eval_mine")
    for name, model in (("sparse", _sparse_model()), ("dense", make_tiny_model())):
        model.save_pretrained(root / name)
        tiny_tokenizer.save_pretrained(root / name)
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(root / "ce")
    rng = random.Random(11)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(40)))[:22]
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    rows = [{"_id": f"d{i}", "text": text} for i, text in enumerate(corpus)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    queries = {f"q{i}": " ".join(corpus[i].split()[:3]) for i in range(6)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6)) + "q5\td9\t1\n"
    )
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False}
    build_index(
        make_tiny_model(), str(beir), root / "idx", lexical=HAS_BM25, sparse_model=str(root / "sparse"), **common
    )
    build_index(make_tiny_model(), str(beir), root / "plain", lexical=False, **common)
    sparse = str(root / "sparse")
    build_index(make_tiny_model(), str(beir), root / "dense_sparse", lexical=False, sparse_model=sparse, **common)
    pairs = [{"anchor": _sentence(rng), "positive": corpus[i]} for i in range(0, 20, 2)]
    pairs[3]["anchor"] = pairs[2]["anchor"]  # two positives of one anchor: neither is its negative
    (root / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pairs), encoding="utf-8")
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _measured(monkeypatch) -> list[dict]:
    """The rankings every metric computation of an evaluation receives, in order (the first: the first stage's)."""
    seen: list[dict] = []
    real = RetrievalEvaluator._metrics
    monkeypatch.setattr(
        RetrievalEvaluator, "_metrics", lambda self, rankings: seen.append(rankings) or real(self, rankings)
    )
    return seen


def _searched(files: Path, model, tokenizer, top_k: int | None = None, **options) -> dict[str, list[str]]:
    """The judged queries' hits of `search --index` (default: over the whole corpus), by id."""
    data = read_beir(files / "beir")
    judged = judged_queries(data.qrels)
    hits = load_index(files / "idx").search(
        model, [data.queries[q] for q in judged], top_k=top_k or len(data.corpus), tokenizer=tokenizer, **options
    )
    return {q: [str(hit["id"]) for hit in found] for q, found in zip(judged, hits, strict=True)}


def _table_row(out: str, name: str) -> list[str]:
    return next(line for line in out.splitlines() if line.startswith(f"{name} ")).split()[1:]


def test_eval_through_the_sparse_part_measures_the_search_ranking(files: Path, monkeypatch, capsys) -> None:
    data, index = read_beir(files / "beir"), load_index(files / "idx")
    seen = _measured(monkeypatch)
    got = evaluate_retrieval(None, data, index=index, first_stage="sparse", percent=True)
    assert seen[0] == _searched(files, None, None, first_stage="sparse")  # the very ranking of the search
    assert got["num_queries"] == 6 and not any(key.startswith("dense_") for key in got)
    code, out, err = _run(["eval", files / "beir", "--index", files / "idx", "--first-stage", "sparse"], capsys)
    assert code == 0, err
    assert "first stage: sparse" in out and f"sparse part by {files / 'sparse'}" in out
    assert _table_row(out, "ndcg") == [f"{got[f'ndcg@{k}']:.2f}" for k in data.k_values]
    measured = json.loads((files / "idx" / "index.json").read_text())["measured"]
    assert {entry["search"] for entry in measured} >= {"sparse"}


def test_eval_hybrid_fuses_every_list_of_the_index(files: Path, tiny_tokenizer, monkeypatch, capsys) -> None:
    data, index, model = read_beir(files / "beir"), load_index(files / "idx"), make_tiny_model()
    lists = ("dense", "lexical", "sparse") if HAS_BM25 else ("dense", "sparse")
    assert index.stage_lists("hybrid") == lists
    seen = _measured(monkeypatch)
    got = evaluate_retrieval(model, data, tokenizer=tiny_tokenizer, index=index, first_stage="hybrid", percent=True)
    assert seen[0] == _searched(files, model, tiny_tokenizer)  # the search's default over this index: hybrid
    assert seen[1:] == [_searched(files, model, tiny_tokenizer, first_stage=stage) for stage in lists]
    assert all(f"{stage}_ndcg@10" in got for stage in lists)
    sparse = evaluate_retrieval(None, data, index=index, first_stage="sparse", percent=True)
    assert got["sparse_ndcg@10"] == pytest.approx(sparse["ndcg@10"])
    reranker = CrossEncoder.from_pretrained(files / "ce")
    seen.clear()
    both = evaluate_retrieval(
        model, data, tokenizer=tiny_tokenizer, index=index, first_stage="hybrid", rerank=reranker, rerank_top=8
    )
    reranked = _searched(files, model, tiny_tokenizer, 8, rerank=reranker, rerank_top=8)
    assert {q: ids[:8] for q, ids in seen[1 + len(lists)].items()} == reranked
    assert both["rerank_top"] == 8 and f"rerank_rrf{len(lists) + 1}_ndcg@10" in both
    argv = ["eval", files / "beir", "--index", files / "idx", "--model", files / "dense", "--first-stage", "hybrid"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert f"first stage: hybrid ({' + '.join(lists)})" in out
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert header.split()[1:-1] == [*(s for s in ("lexical", "dense", "sparse") if s in lists), "fused", "(rrf)"]
    assert _table_row(out, "ndcg@10")[-1] == f"{got['ndcg@10']:.2f}"
    assert _table_row(out, "ndcg@10")[-2] == f"{got['sparse_ndcg@10']:.2f}"  # the sparse list alone, then fused
    code, out, err = _run([*argv, "--rerank", files / "ce"], capsys)
    assert code == 0 and f"RRF of {len(lists) + 1}" in out, err


def _pairs(files: Path) -> Dataset:
    return Dataset.from_json(str(files / "pairs.jsonl"))


def _corpus(files: Path) -> list[str]:
    return (files / "corpus.txt").read_text(encoding="utf-8").splitlines()


def test_a_sparse_model_mines_by_its_own_ranking(files: Path, tiny_tokenizer, tmp_path: Path, capsys) -> None:
    model, corpus, pairs = _sparse_model(), _corpus(files), _pairs(files)
    mined = mine_hard_negatives(
        pairs, model, corpus, tokenizer=tiny_tokenizer, num_negatives=2, show_progress_bar=False
    )
    assert len(mined) == len(pairs)
    documents = model.encode(corpus, tiny_tokenizer, task="document").to_dense()
    positives: dict[str, set[str]] = {}
    for row in pairs:
        positives.setdefault(row["anchor"], set()).add(row["positive"])
    for row in mined:
        query = model.encode([row["anchor"]], tiny_tokenizer, task="query").to_dense()
        order = np.argsort(-(query @ documents.T).numpy()[0], kind="stable")  # equal scores: the lower row
        ranked = [corpus[j] for j in order if corpus[j] not in positives[row["anchor"]] and corpus[j] != row["anchor"]]
        negatives = [row["negative_1"], row["negative_2"]]
        assert negatives == ranked[:2] and not set(negatives) & positives[row["anchor"]]
    out = tmp_path / "mined.jsonl"
    argv = ["mine", files / "pairs.jsonl", "--model", files / "sparse", "--corpus", files / "corpus.txt"]
    code, stdout, err = _run([*argv, "--num-negatives", "2", "-o", out, "--teacher", files / "ce"], capsys)
    assert code == 0, err
    assert f"mined {len(mined)} of {len(pairs)} rows (2 negatives each, scored by the teacher)" in stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: row[k] for k in mined.column_names} for row in rows] == mined.to_list()
    assert all(len(row["label"]) == 3 for row in rows)  # the teacher's scores: positive, then each negative
    if HAS_BM25:  # BM25's list fused with the sparse model's; the filters compare the sparse model's scores
        fused = mine_hard_negatives(
            pairs, model, corpus, tokenizer=tiny_tokenizer, num_negatives=2, negatives_from="hybrid", margin=0.0,
            show_progress_bar=False,
        )  # fmt: skip
        assert all(not {r["negative_1"], r["negative_2"]} & positives[r["anchor"]] for r in fused)


@needs_bm25
def test_the_hybrid_mines_dense_bm25_and_sparse_as_the_index_fuses(files: Path, tiny_tokenizer, tmp_path) -> None:
    dense, sparse, corpus, pairs = make_tiny_model(), _sparse_model(), _corpus(files), _pairs(files)
    mined = mine_hard_negatives(
        pairs, dense, corpus, tokenizer=tiny_tokenizer, num_negatives=2, negatives_from="hybrid", sparse_model=sparse,
        sparse_tokenizer=tiny_tokenizer, show_progress_bar=False,
    )  # fmt: skip
    index = build_index(
        dense, corpus, tmp_path / "idx", tokenizer=tiny_tokenizer, sparse_model=sparse, sparse_tokenizer=tiny_tokenizer,
        show_progress_bar=False,
    )  # fmt: skip
    assert index.stage_lists("hybrid") == ("dense", "lexical", "sparse")
    index.sparse.use_model(sparse, tiny_tokenizer)  # built from an unsaved model: no path recorded
    anchors = list(dict.fromkeys(pairs["anchor"]))
    hits = index.search(dense, anchors, top_k=len(corpus), tokenizer=tiny_tokenizer)
    fused = {anchor: [hit["text"] for hit in found] for anchor, found in zip(anchors, hits, strict=True)}
    positives: dict[str, set[str]] = {}
    for row in pairs:
        positives.setdefault(row["anchor"], set()).add(row["positive"])
    assert len(mined) == len(pairs)
    for row in mined:
        ranked = [text for text in fused[row["anchor"]] if text not in positives[row["anchor"]]]
        assert [row["negative_1"], row["negative_2"]] == ranked[:2]
    alone = mine_hard_negatives(
        pairs, dense, corpus, tokenizer=tiny_tokenizer, num_negatives=2, negatives_from="sparse", sparse_model=sparse,
        sparse_tokenizer=tiny_tokenizer, show_progress_bar=False,
    )  # fmt: skip
    by_itself = mine_hard_negatives(pairs, sparse, corpus, tokenizer=tiny_tokenizer, num_negatives=2)
    assert alone.to_list() == by_itself.to_list()  # the sparse list is the sparse model's own ranking


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["mine", "PAIRS", "--model", "SPARSE", "--pooling", "mean"], ["--pooling", "is a sparse model"]),
        (["mine", "PAIRS", "--model", "SPARSE", "--embeddings-dir", "EMB"], ["--embeddings-dir", "is a sparse model"]),
        (
            ["mine", "PAIRS", "--model", "SPARSE", "--negatives-from", "dense"],
            ["negatives_from='dense'", "accepted: 'sparse', 'lexical', 'hybrid'"],
        ),
        (
            ["mine", "PAIRS", "--model", "DENSE", "--negatives-from", "sparse"],
            ["negatives_from='sparse'", "--sparse-model", "accepted: 'dense', 'lexical', 'hybrid'"],
        ),
        (["mine", "PAIRS", "--model", "DENSE", "--sparse-model", "DENSE"], ["--sparse-model", "a learned-sparse"]),
        (["mine", "PAIRS", "--model", "DENSE", "--sparse-model", "SPARSE"], ["negatives_from='dense' reads none"]),
        (
            ["eval", "BEIR", "--index", "PLAIN", "--first-stage", "sparse"],
            ["first stage 'sparse'; accepted: dense, lexical, hybrid", "--add-sparse"],
        ),
        (["eval", "BEIR", "--index", "IDX", "--first-stage", "sparse", "--model", "DENSE"], ["--model", "sparse part"]),
        (["eval", "BEIR", "--index", "IDX", "--model", "SPARSE"], ["--index", "is a sparse model"]),
    ],
    ids=[
        "mine-pooling", "mine-embeddings-dir", "mine-dense-of-sparse", "mine-sparse-without-one",
        "mine-dense-as-sparse", "mine-unused-sparse", "eval-no-sparse-part", "eval-model-with-sparse",
        "eval-sparse-model-and-index",
    ],
)  # fmt: skip
def test_bad_input_is_named_in_one_line(files: Path, tmp_path: Path, capsys, argv: list, named: list) -> None:
    where = {
        "PAIRS": files / "pairs.jsonl", "SPARSE": files / "sparse", "DENSE": files / "dense", "BEIR": files / "beir",
        "IDX": files / "idx", "PLAIN": files / "plain", "EMB": tmp_path / "emb",
    }  # fmt: skip
    argv = [where.get(part, part) for part in argv]
    if argv[0] == "mine":
        argv += ["--corpus", files / "corpus.txt", "-o", tmp_path / "m.jsonl"]
    code, out, err = _run(argv, capsys)
    assert code == 1 and not out.strip(), err
    assert len(err.strip().splitlines()) == 1 and all(part in err for part in named), err
    assert not (tmp_path / "m.jsonl").exists() and not (tmp_path / "emb").exists()


@needs_bm25
def test_three_lists_refuse_zscore_fusion(files: Path, capsys) -> None:
    argv = ["eval", files / "beir", "--index", files / "idx", "--first-stage", "hybrid", "--fusion", "zscore"]
    code, _, err = _run(argv, capsys)
    assert code == 1 and re.search(r"fusion='zscore'.*3 \(dense, lexical, sparse\)", err), err


@needs_bm25
def test_three_lists_refuse_choosing_a_dense_weight(files: Path, capsys) -> None:
    argv = ["eval", files / "beir", "--index", files / "idx", "--choose-dense-weight", "--split", "test"]
    code, _, err = _run(argv, capsys)
    assert code == 1 and re.search(r"fusion='zscore'.*3 \(dense, lexical, sparse\)", err), err


def test_dense_weight_of_dense_and_sparse_chosen_through_the_index(files: Path, tiny_tokenizer, capsys) -> None:
    """--choose-dense-weight --index weighs the two lists of an index's hybrid (dense + learned sparse here); each
    weight's figure is what eval --fusion zscore --dense-weight W measures through the same index."""
    data, index, model = read_beir(files / "beir"), load_index(files / "dense_sparse"), make_tiny_model()
    assert index.stage_lists("hybrid", "zscore") == ("dense", "sparse")
    argv = ["eval", files / "beir", "--index", files / "dense_sparse", "--model", files / "dense"]
    code, out, err = _run([*argv, "--choose-dense-weight", "--split", "test"], capsys)
    assert code == 0, err
    assert "dense + sparse through" in out and "note: choosing on the test split" in out
    printed = dict(line.split()[:2] for line in out.splitlines() if re.match(r"  \d\.\d ", line))
    assert list(printed) == [f"{0.1 * i:.1f}" for i in range(11)]
    for weight in ("0.0", "0.3", "1.0"):
        got = evaluate_retrieval(
            model, data, tokenizer=tiny_tokenizer, index=index, first_stage="hybrid", fusion="zscore",
            dense_weight=float(weight), percent=True,
        )  # fmt: skip
        assert printed[weight] == f"{got['ndcg@10']:.2f}"
    sparse = evaluate_retrieval(None, data, index=index, first_stage="sparse", percent=True)
    assert printed["0.0"] == f"{sparse['ndcg@10']:.2f}"  # weight 0: the sparse list's order
    code, _, err = _run([*argv, "--choose-dense-weight", "--split", "test", "--k1", "1.2"], capsys)
    assert code == 1 and "give no --language/--no-stemmer/--no-stopwords/--k1/--b" in err, err
