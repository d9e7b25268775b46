"""Issue 60, search and the pipeline kept in an index: what a command says is what it does. The top of a hybrid
ranking does not depend on how many hits are asked for; `--first-stage-weight` means the same in `search`, `eval` and
the Python API; a recorded reranker replaced on disk is refused by its fingerprint; the recorded pipeline's messages
name the flag that works; options with no model to apply to are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from test_pipeline import QUERIES, files  # noqa: F401  (the fixture)

from hf_siamese.retrieval.stores import build_index, load_index


@pytest.fixture(scope="module")
def hybrid_index(files: Path, tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:  # noqa: F811
    pytest.importorskip("bm25s")
    folder = tmp_path_factory.mktemp("says") / "idx"
    build_index(make_tiny_model(), str(files / "corpus.txt"), folder, tokenizer=tiny_tokenizer, show_progress_bar=False)
    return folder


@pytest.mark.parametrize("fusion", ["rrf", "zscore"])
def test_the_top_of_a_hybrid_ranking_does_not_depend_on_top_k(hybrid_index: Path, tiny_tokenizer, fusion) -> None:
    index, model = load_index(hybrid_index), make_tiny_model()
    settings = {"first_stage": "hybrid", "fusion": fusion, "dense_weight": 0.5 if fusion == "zscore" else None}
    few = index.search(model, QUERIES, top_k=3, tokenizer=tiny_tokenizer, **settings)
    many = index.search(model, QUERIES, top_k=20, tokenizer=tiny_tokenizer, **settings)
    for short, long in zip(few, many, strict=True):
        assert [(h["id"], h["score"]) for h in short] == [(h["id"], h["score"]) for h in long[:3]]


def _run(argv: list, capsys) -> tuple[int, str, str]:
    from hf_siamese.cli import main

    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _hits(out: str) -> list[str]:
    return re.findall(r"^\s+\d+\. [-\d.]+\s+\[(\w+)\]", out, flags=re.M)


@pytest.fixture
def three_score_ce(files: Path, tmp_path: Path) -> Path:  # noqa: F811
    from hf_siamese.cross_encoder import CrossEncoder

    reranker = CrossEncoder.from_pretrained(files / "ce")
    reranker.first_stage_weight, reranker.stage_weights = 0.4, {"dense": 0.3, "lexical": 0.2}
    reranker.save_pretrained(tmp_path / "ce3")
    return tmp_path / "ce3"


@pytest.fixture
def cli_index(files: Path, tmp_path: Path, capsys) -> Path:  # noqa: F811
    pytest.importorskip("bm25s")
    idx = tmp_path / "idx"
    code, _, err = _run(["index", files / "corpus.txt", "--model", files / "bi", "-o", idx], capsys)
    assert code == 0, err
    return idx


def test_search_honours_first_stage_weight_over_a_three_score_reranker(cli_index, three_score_ce, capsys) -> None:
    query = ["--query", QUERIES[0], "--top-k", "6"]
    code, alone, err = _run(["search", "--index", cli_index, *query], capsys)
    assert code == 0, err
    # weight 1 leaves the reranker no share: the first stage's order stands (the three-score order ignored it before)
    argv = ["search", "--index", cli_index, *query, "--rerank", three_score_ce]
    code, weighed, err = _run([*argv, "--first-stage-weight", "1"], capsys)
    assert code == 0, err
    assert _hits(weighed) == _hits(alone)
    code, three, err = _run(argv, capsys)  # no weight given: the reranker's own three-score order
    assert code == 0 and _hits(three) != _hits(alone), err


def test_a_recorded_pipeline_takes_weight_and_depth_and_every_first_stage(cli_index, three_score_ce, capsys) -> None:
    code, out, err = _run(["index", "--attach", cli_index, "--rerank", three_score_ce], capsys)
    assert code == 0 and "its saved weights on the corpus they were chosen on" in out, err
    query = ["--query", QUERIES[0], "--top-k", "6"]
    code, alone, err = _run(["search", "--index", cli_index, *query, "--no-rerank"], capsys)
    assert code == 0, err
    # --first-stage-weight and --rerank-top set the recorded reranker (they were refused without --rerank)
    code, out, err = _run(["search", "--index", cli_index, *query, "--first-stage-weight", "1"], capsys)
    assert code == 0 and _hits(out) == _hits(alone), err
    code, out, err = _run(["search", "--index", cli_index, *query, "--rerank-top", "7"], capsys)
    assert code == 0 and len(_hits(out)) == 6, err
    # a dense or lexical first stage: the recorded reranker with its two-score weight (was: "pass first_stage_weight")
    for stage in ("dense", "lexical"):
        code, out, err = _run(["search", "--index", cli_index, *query, "--first-stage", stage], capsys)
        assert code == 0 and len(_hits(out)) == 6 and "first stage: #" in out, (stage, err)
    code, _, err = _run(["search", "--index", cli_index, *query, "--no-rerank", "--rerank-top", "7"], capsys)
    assert code == 1 and "--no-rerank searches the first stage alone: give no --rerank-top" in err


def test_a_replaced_recorded_reranker_is_refused_by_its_fingerprint(cli_index, three_score_ce, files, capsys) -> None:  # noqa: F811
    import shutil

    code, _, err = _run(["index", "--attach", cli_index, "--rerank", three_score_ce], capsys)
    assert code == 0, err
    from hf_siamese.cross_encoder import CrossEncoder

    other = CrossEncoder.from_pretrained(three_score_ce)
    with torch.no_grad():
        for parameter in other.model.parameters():
            parameter.add_(0.01)
    shutil.rmtree(three_score_ce)
    other.save_pretrained(three_score_ce)
    query = ["--query", QUERIES[0]]
    for argv in (["search", "--index", cli_index, *query], ["eval", files / "beir", "--index", cli_index]):
        code, _, err = _run(argv, capsys)
        last = err.splitlines()[-1]
        assert code == 1 and "now has fingerprint" in last and "--no-rerank" in last and "--attach" in last, err
    code, out, err = _run(["search", "--index", cli_index, *query, "--no-rerank"], capsys)
    assert code == 0 and _hits(out), err


def test_a_deleted_or_unreadable_recorded_reranker_names_no_rerank(cli_index, three_score_ce, capsys) -> None:
    import json
    import shutil

    code, _, err = _run(["index", "--attach", cli_index, "--rerank", three_score_ce], capsys)
    assert code == 0, err
    shutil.rmtree(three_score_ce)
    for stage in ("dense", "lexical", "hybrid"):
        code, _, err = _run(["search", "--index", cli_index, "--query", "a", "--first-stage", stage], capsys)
        last = err.splitlines()[-1]
        assert code == 1 and "cannot be loaded" in last and "--no-rerank" in last, (stage, err)
    record = json.loads((cli_index / "index.json").read_text())
    for bad, key in ((None, "'reranker' is None"), ({"x": 1}, "'reranker' is None"), ("abc", "expected an object")):
        pipeline = dict(record["pipeline"], reranker=None) if bad is None else bad
        if isinstance(bad, dict):
            pipeline = dict(record["pipeline"], reranker=None)
        (cli_index / "index.json").write_text(json.dumps(dict(record, pipeline=pipeline)))
        code, _, err = _run(["search", "--index", cli_index, "--query", "a"], capsys)
        assert code == 1 and key in err.splitlines()[-1] and "Traceback" not in err, err
    bad_weight = dict(record["pipeline"], first_stage_weight="abc")
    (cli_index / "index.json").write_text(json.dumps(dict(record, pipeline=bad_weight)))
    code, _, err = _run(["search", "--index", cli_index, "--query", "a"], capsys)
    assert code == 1 and "first_stage_weight" in err.splitlines()[-1], err


@pytest.mark.parametrize("flag", [["--prompt-name", "query"], ["--max-seq-length", "64"], ["--pooling", "cls"]])
def test_model_options_without_a_model_are_refused(cli_index, capsys, flag) -> None:
    argv = ["search", "--index", cli_index, "--query", "a", "--first-stage", "lexical", *flag]
    code, _, err = _run(argv, capsys)
    assert code == 1 and f"{flag[0]} sets the model that embeds the queries" in err.splitlines()[-1], err


def test_eval_first_stage_weight_and_no_rerank_through_a_recorded_pipeline(files, tmp_path, capsys) -> None:  # noqa: F811
    pytest.importorskip("bm25s")
    idx = tmp_path / "idx"
    argv = ["index", files / "beir", "--model", files / "bi", "-o", idx, "--rerank", files / "ce", "--rerank-top", "6"]
    assert _run(argv, capsys)[0] == 0
    code, alone, err = _run(["eval", files / "beir", "--index", idx, "--no-rerank"], capsys)
    assert code == 0 and "rerank" not in alone.split("first stage")[-1].splitlines()[0], err
    code, out, err = _run(["eval", files / "beir", "--index", idx, "--first-stage-weight", "1"], capsys)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("ndcg@10")).split()
    assert row[-1] == row[-2]  # weight 1: the reranked column equals the fused first stage's
    code, _, err = _run(["eval", files / "beir", "--no-rerank", "--model", files / "bi"], capsys)
    assert code == 1 and "--no-rerank measures the first stage alone" in err.splitlines()[-1]


class _Reranker:
    """A reranker with saved weights chosen on the corpus `chosen_on` (its fingerprint), scoring by text length."""

    def __init__(self, chosen_on: str | None, weight: float = 0.6, stages: dict | None = None) -> None:
        self.first_stage_weight, self.stage_weights = weight, stages
        self.fusion_corpus = None if chosen_on is None else {"name": "scifact", "fingerprint": chosen_on}

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        return [float(len(text)) for _, text in pairs]


def _first_stage_hits(hybrid: bool) -> list[list[dict]]:
    texts = ["a b", "a b c d e f", "a", "a b c", "a b c d e f g h i", "x y z w"]
    hits = [{"id": f"d{i}", "text": t, "score": 1.0 - 0.1 * i, "rank": i + 1} for i, t in enumerate(texts)]
    if hybrid:
        for i, hit in enumerate(hits):
            hit.update(dense_score=0.5 - 0.05 * i, lexical_score=None if i == 2 else float(i % 3))
    return [hits]


@pytest.mark.parametrize("hybrid", [False, True])
def test_saved_weights_rank_only_the_corpus_they_were_chosen_on(hybrid: bool, caplog) -> None:
    from hf_siamese.retrieval.fusion.hybrid import reciprocal_rank_fusion
    from hf_siamese.retrieval.fusion.rerank import rerank_hits
    from hf_siamese.retrieval.index.fingerprint import corpus_fingerprint

    here, there = corpus_fingerprint(["d0", "d1"]), corpus_fingerprint(["e0"])
    stages = {"dense": 0.2, "lexical": 0.2} if hybrid else None
    hits = _first_stage_hits(hybrid)
    weighed = rerank_hits(_Reranker(here, stages=stages), ["q"], hits, corpus=here)
    explicit = rerank_hits(_Reranker(None), ["q"], hits, first_stage_weight=0.6, stage_weights=stages)
    assert [h["id"] for h in weighed[0]] == [h["id"] for h in explicit[0]]  # chosen here: the saved weights
    for corpus in (there, None):  # another corpus, or an unknown one: the setting-free order, said
        caplog.clear()
        free = rerank_hits(_Reranker(here, stages=stages), ["q"], hits, corpus=corpus)
        assert "setting-free order" in caplog.text and "--choose-fusion" in caplog.text
        by_reranker = sorted(range(6), key=lambda i: -len(hits[0][i]["text"]))
        if hybrid:
            dense = list(range(6))
            lexical = sorted((i for i in range(6) if i != 2), key=lambda i: (-(i % 3), i))
            expected = reciprocal_rank_fusion([by_reranker, dense, lexical])
        else:
            expected = reciprocal_rank_fusion([by_reranker, list(range(6))])
        assert [h["id"] for h in free[0]] == [f"d{i}" for i in expected]
        assert all("reranker_score" in h and "first_stage_rank" in h for h in free[0])
    # a weight given is used as given, whatever the corpus; a reranker with no saved weights ranks by itself
    given = rerank_hits(_Reranker(here, stages=stages), ["q"], hits, corpus=there, first_stage_weight=0.6)
    assert [h["id"] for h in given[0]] == [
        h["id"] for h in rerank_hits(_Reranker(None), ["q"], hits, first_stage_weight=0.6)[0]
    ]
    alone = rerank_hits(_Reranker(None, weight=0.0), ["q"], hits, corpus=there)
    assert [h["text"] for h in alone[0]] == sorted((h["text"] for h in hits[0]), key=len, reverse=True)


def test_eval_chooses_fusion_weights_on_the_corpus_at_hand(files, tmp_path, capsys, caplog) -> None:  # noqa: F811
    import json
    import shutil

    from hf_siamese.cross_encoder import CrossEncoder
    from hf_siamese.retrieval.index.fingerprint import corpus_fingerprint

    ce = tmp_path / "ce"
    shutil.copytree(files / "ce", ce)
    reranker = CrossEncoder.from_pretrained(ce)
    reranker.first_stage_weight = 0.5  # weights of unknown origin: they rank no corpus
    reranker.save_pretrained(ce)
    argv = ["eval", files / "beir", "--model", files / "bi", "--first-stage", "dense", "--rerank", ce]
    code, _, err = _run([*argv, "--rerank-top", "6"], capsys)
    assert code == 0 and "setting-free order" in caplog.text, err
    caplog.clear()
    code, out, err = _run([*argv, "--choose-fusion", "--split", "test", "--rerank-top", "6"], capsys)
    assert code == 0, err
    assert "note: choosing on the test split" in out and "fusion (test of beir, 6 queries, nDCG@10)" in out
    saved = json.loads((ce / "config.json").read_text())
    ids = [json.loads(line)["_id"] for line in (files / "beir" / "corpus.jsonl").read_text().splitlines()]
    assert saved["fusion_corpus"] == {"name": "beir", "split": "test", "fingerprint": corpus_fingerprint(ids)}
    assert CrossEncoder.from_pretrained(ce).first_stage_weight == saved["first_stage_weight"]
    code, _, err = _run([*argv, "--rerank-top", "6"], capsys)  # now this corpus takes them, with no warning
    assert code == 0 and "setting-free order" not in caplog.text, err
    for bad, fragment in (
        ([*argv, "--choose-fusion", "--first-stage-weight", "0.2"], "give no --first-stage-weight"),
        (["eval", files / "beir", "--model", files / "bi", "--choose-fusion"], "give --rerank CE_DIR"),
        ([*argv[:-1], "cross-encoder/nope", "--choose-fusion"], "is no local folder"),
    ):
        code, _, err = _run(bad, capsys)
        assert code == 1 and fragment in err.splitlines()[-1], (bad, err)
