"""The pipeline kept in an index (issue 53): a reranker and both stages' settings recorded in the index, then used by
`load_index(IDX).search`, `search --index` and `eval --index` with no further flags; a round trip through a folder
and through Milvus Lite."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.retrieval.index.additions import attach_reranker
from hf_siamese.retrieval.stores import build_index, load_index

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell"]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 9)))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("pipeline")
    make_tiny_model().save_pretrained(root / "bi")
    tiny_tokenizer.save_pretrained(root / "bi")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(root / "ce")
    rng = random.Random(5)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(40)))[:30]
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    rows = [{"_id": f"d{i}", "text": text} for i, text in enumerate(corpus)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    queries = {f"q{i}": " ".join(corpus[i].split()[:3]) for i in range(6)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6))
    )
    return root


def _ids(hits: list) -> list[list]:
    return [[(hit["id"], round(hit["score"], 5)) for hit in query] for query in hits]


def test_a_recorded_pipeline_searches_as_the_same_flags_would(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    build_index(model, str(files / "corpus.txt"), tmp_path / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False)
    settings = {"first_stage": "hybrid", "fusion": "zscore", "dense_weight": 0.3}
    index = attach_reranker(tmp_path / "idx", str(files / "ce"), rerank_top=8, first_stage_weight=0.2, **settings)
    record = index.pipeline
    assert record["reranker"] == str(files / "ce") and record["rerank_top"] == 8 and record["first_stage_weight"] == 0.2
    assert len(record["reranker_fingerprint"]) == 64
    reopened = load_index(tmp_path / "idx")
    kept = reopened.search(model, QUERIES, top_k=5, tokenizer=tiny_tokenizer)
    reranker = CrossEncoder.from_pretrained(files / "ce")
    by_hand = reopened.search(
        model, QUERIES, top_k=5, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=8, first_stage_weight=0.2,
        **settings,
    )  # fmt: skip
    assert _ids(kept) == _ids(by_hand) and all("reranker_score" in hit for hit in kept[0])
    alone = reopened.search(model, QUERIES, top_k=5, tokenizer=tiny_tokenizer, rerank=False, **settings)
    assert _ids(alone) == _ids(
        reopened.search(model, QUERIES, top_k=5, tokenizer=tiny_tokenizer, rerank=False, **settings)
    )
    assert "reranker_score" not in alone[0][0]
    card = (tmp_path / "idx" / "README.md").read_text()
    assert "reranked by" in card and "30" in card


def test_a_bad_pipeline_is_refused_before_anything_is_written(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    build_index(make_tiny_model(), str(files / "corpus.txt"), tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False)
    before = (tmp_path / "idx" / "index.json").read_text()
    with pytest.raises(ValueError, match="has no lexical part"):
        attach_reranker(tmp_path / "idx", str(files / "ce"), first_stage="hybrid")
    with pytest.raises(ValueError, match="the dense first stage has one list"):
        attach_reranker(tmp_path / "idx", str(files / "ce"), first_stage="dense", dense_weight=0.5)
    with pytest.raises(ValueError, match="rerank_top=0"):
        attach_reranker(tmp_path / "idx", str(files / "ce"), rerank_top=0)
    assert (tmp_path / "idx" / "index.json").read_text() == before


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_commands_round_trip(files: Path, tmp_path: Path, capsys) -> None:
    idx = tmp_path / "idx"
    argv = ["index", files / "corpus.txt", "--model", files / "bi", "-o", idx, "--rerank", files / "ce"]
    code, out, err = _run([*argv, "--rerank-top", "8"], capsys)
    assert code == 0 and "searches: hybrid first stage, its top 8 reranked by" in out, err
    code, out, err = _run(["search", "--index", idx, "--query", QUERIES[1], "--top-k", "3"], capsys)
    assert code == 0 and "(the index's pipeline: hybrid first stage" in out, err
    assert len(re.findall(r"\(first stage: #\d+", out)) == 3
    code, out, err = _run(["search", "--index", idx, "--query", QUERIES[1], "--top-k", "3", "--no-rerank"], capsys)
    assert code == 0 and "first stage: #" not in out and "pipeline" not in out, err
    code, out, err = _run(["index", "--attach", idx, "--rerank", files / "ce", "--first-stage", "dense"], capsys)
    assert code == 0 and "now searches: dense first stage, its top 100" in out, err
    for bad, fragment in (
        (["index", "--attach", idx], "--attach IDX records --rerank CE_DIR"),
        (["index", files / "corpus.txt", "-o", tmp_path / "x", "--rerank-top", "5"], "give them with --rerank"),
        (
            ["index", "--attach", idx, "--rerank", files / "ce", "--first-stage", "dense", "--fusion", "rrf"],
            "two lists",
        ),
        (
            ["search", "--corpus", files / "corpus.txt", "--query", "a", "--no-rerank"],
            "--no-rerank applies to an --index",
        ),
    ):
        code, _, err = _run(bad, capsys)
        assert code != 0 and fragment in err.splitlines()[-1], (bad, err)


def test_a_reranker_given_by_a_relative_path_is_kept(
    files: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the record keeps the absolute path; the fingerprint is the model's wherever it was loaded from
    shutil.copytree(files / "ce", tmp_path / "ce")
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["index", files / "corpus.txt", "--model", files / "bi", "-o", "idx", "--rerank", "ce"], capsys)
    assert code == 0, err
    code, out, err = _run(["search", "--index", "idx", "--query", QUERIES[1], "--top-k", "2"], capsys)
    assert code == 0 and "(the index's pipeline: hybrid first stage" in out, err
    code, out, err = _run(["index", "--attach", "idx", "--rerank", "ce", "--first-stage", "dense"], capsys)
    assert code == 0, err
    code, out, err = _run(["search", "--index", "idx", "--query", QUERIES[1], "--top-k", "2"], capsys)
    assert code == 0 and "(the index's pipeline: dense first stage" in out, err


def test_eval_through_the_index_measures_its_pipeline(files: Path, tmp_path: Path, capsys) -> None:
    idx = tmp_path / "idx"
    argv = ["index", files / "beir", "--model", files / "bi", "-o", idx, "--rerank", files / "ce", "--rerank-top", "6"]
    assert _run(argv, capsys)[0] == 0
    code, kept, err = _run(["eval", files / "beir", "--index", idx], capsys)
    assert code == 0 and "(the index's pipeline)" in kept, err
    flags = ["--rerank", files / "ce", "--rerank-top", "6", "--first-stage", "hybrid"]
    code, by_hand, err = _run(["eval", files / "beir", "--index", idx, *flags], capsys)
    assert code == 0, err
    table = [line for line in kept.splitlines() if line.startswith(("ndcg", "mrr", "recall"))]
    assert table and table == [line for line in by_hand.splitlines() if line.startswith(("ndcg", "mrr", "recall"))]
    # the index keeps what was measured with it: one entry per (data, split, search), in its record and its card
    measured = json.loads((idx / "index.json").read_text())["measured"]
    assert [(e["data"], e["split"], e["search"]) for e in measured] == [("beir", "test", "hybrid, top 6 reranked")]
    cells = next(line for line in kept.splitlines() if line.startswith("ndcg@10")).split()  # lexical dense fused rer.
    assert measured[0]["ndcg@10"] == pytest.approx(float(cells[3]), abs=0.01)
    assert measured[0]["reranked ndcg@10"] == pytest.approx(float(cells[4]), abs=0.01)
    card = (idx / "README.md").read_text()
    assert "## Measured with this index" in card and "| beir | test | 6 | hybrid, top 6 reranked |" in card


def test_milvus_keeps_the_pipeline_too(files: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("milvus_lite")
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    argv = ["index", files / "corpus.txt", "--model", files / "bi", "-o", location, "--rerank", files / "ce"]
    code, out, err = _run(argv, capsys)
    assert code == 0 and "searches: hybrid first stage" in out, err
    code, out, err = _run(["search", "--index", location, "--query", QUERIES[0], "--top-k", "3"], capsys)
    assert code == 0 and len(re.findall(r"\(first stage: #\d+", out)) == 3, err


def test_reciprocal_rank_fusion_of_any_number_of_lists() -> None:
    from hf_siamese.retrieval.fusion.hybrid import reciprocal_rank_fusion

    # a: 1/61 + 1/62; b: 1/62 + 1/61 + 1/61; c: 1/63; d: 1/62 -> b, a, d, c; a tie keeps the first list's order
    assert reciprocal_rank_fusion([["a", "b", "c"], ["b", "a"], ["b", "d"]]) == ["b", "a", "d", "c"]
    assert reciprocal_rank_fusion([["x", "y"], ["y", "x"]]) == ["x", "y"]
    assert reciprocal_rank_fusion([]) == []


def test_eval_over_hybrid_reports_the_three_orders_fused(files: Path, capsys) -> None:
    argv = ["eval", files / "beir", "--model", files / "bi", "--first-stage", "hybrid", "--rerank", files / "ce"]
    code, out, err = _run([*argv, "--rerank-top", "6"], capsys)
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert header.split()[-2:] == ["3", "(x100)"] and "RRF of 3" in header
    assert all(len(line.split()) == 6 for line in out.splitlines() if line.startswith("ndcg@"))


def test_a_reranker_with_stage_weights_fuses_three_scores_through_the_index(
    files: Path, tmp_path: Path, tiny_tokenizer
) -> None:
    """A reranker whose saved weights are three-score ones: the hybrid search's hits carry both stages' scores, the
    recorded pipeline keeps the weights, and searching through it equals the explicit three-score search."""
    model = make_tiny_model()
    build_index(model, str(files / "corpus.txt"), tmp_path / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False)
    reranker = CrossEncoder.from_pretrained(files / "ce")
    reranker.stage_weights = {"dense": 0.3, "lexical": 0.2}
    # chosen on this index's corpus (train-reranker / eval --choose-fusion record it): they rank it
    reranker.fusion_corpus = {"name": "corpus", "fingerprint": load_index(tmp_path / "idx").info["corpus"]}
    reranker.save_pretrained(tmp_path / "ce3")
    index = attach_reranker(tmp_path / "idx", str(tmp_path / "ce3"), rerank_top=8, first_stage="hybrid")
    assert index.pipeline["stage_weights"] is None  # the reranker's own apply by their rule when searching
    assert "its saved weights on the corpus they were chosen on" in (tmp_path / "idx" / "README.md").read_text()
    kept = load_index(tmp_path / "idx").search(model, QUERIES, top_k=5, tokenizer=tiny_tokenizer)
    explicit = load_index(tmp_path / "idx").search(
        model, QUERIES, top_k=5, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=8, first_stage="hybrid",
        stage_weights={"dense": 0.3, "lexical": 0.2},
    )  # fmt: skip
    assert _ids(kept) == _ids(explicit)
    assert all("dense_score" in hit and "lexical_score" in hit for hit in kept[0])
    two = load_index(tmp_path / "idx").search(
        model, QUERIES, top_k=5, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=8, first_stage="hybrid",
        first_stage_weight=0.0,
    )  # fmt: skip
    for query, found in zip(QUERIES, two, strict=True):  # an explicit first-stage weight: the two-score order
        expected = reranker.predict([(query, hit["text"]) for hit in found])  # weight 0: the reranker's own scores
        assert [hit["score"] for hit in found] == pytest.approx(expected.tolist(), abs=1e-2)  # bf16 batches differ
