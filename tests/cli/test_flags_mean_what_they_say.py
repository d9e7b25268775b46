"""Every flag means what it says (issue 50): the split asked for or a refusal listing the splits there are, a setting
given where it does not apply refused in one line (the library's `check_first_stage`, for every command), z-score
weights 0 / 1 exactly the lexical / dense order, non-finite numbers refused, outputs replaced only with --overwrite,
one build of an index at a time, and the Python API's bad queries named. Case ids: E (eval), S (search), I (index),
M (mine), F (fusion), P (Python API)."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.retrieval.fusion.hybrid import fuse
from hf_siamese.retrieval.stores import build_index, load_index
from hf_siamese.storage import exclusive_output


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:40]) for _ in range(rng.randint(4, 9)))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A tiny model, a corpus, its index with and without the lexical part, a BEIR folder with test and train qrels
    (no dev), scored pairs."""
    root = tmp_path_factory.mktemp("flags")
    make_tiny_model().save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    rng = random.Random(7)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(40)))[:30]
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    for name, extra in (("idx", []), ("idx-dense", ["--no-lexical"])):
        assert (
            main(["index", str(root / "corpus.txt"), "--model", str(root / "model"), "-o", str(root / name), *extra])
            == 0
        )
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(corpus))
    )
    queries = {f"q{i}": " ".join(corpus[i].split()[:3]) for i in range(8)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    header = "query-id\tcorpus-id\tscore\n"
    (beir / "qrels" / "test.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(4)))
    (beir / "qrels" / "train.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(4, 8)))
    pairs = [{"sentence1": corpus[i], "sentence2": corpus[i + 1], "score": i / 10} for i in range(10)]
    (root / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pairs))
    (root / "anchors.jsonl").write_text(
        "".join(json.dumps({"anchor": corpus[i][:20], "positive": corpus[i]}) + "\n" for i in range(6))
    )
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _refused(argv: list, capsys, *fragments: str) -> str:
    code, out, err = _run(argv, capsys)
    assert code != 0, out
    assert err.count("\n") == 1 and err.startswith("hf-siamese: "), err  # one line
    for fragment in fragments:
        assert fragment in err, err
    return err


# --- eval: the split asked for ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["dev", "validation"])
def test_e1_eval_split_missing_is_refused_listing_the_splits(files: Path, capsys, split: str) -> None:
    """A BEIR split that is not there was swapped for test; now it is refused, naming the splits found."""
    argv = ["eval", files / "beir", "--model", files / "model", "--split", split]
    _refused(argv, capsys, f"{split}.tsv not found", "splits found: ['test', 'train']")


def test_e1_eval_split_asked_for_is_the_one_evaluated(files: Path, capsys) -> None:
    code, out, err = _run(["eval", files / "beir", "--model", files / "model", "--split", "train"], capsys)
    assert code == 0, err
    assert "(train split): 4 queries" in out


def test_e2_choose_dense_weight_never_falls_back_to_test(files: Path, capsys) -> None:
    """--choose-dense-weight chose on test where dev was missing; it now chooses on dev by default or refuses."""
    argv = ["eval", files / "beir", "--model", files / "model", "--choose-dense-weight"]
    _refused(argv, capsys, "dev.tsv not found", "--choose-dense-weight chooses on held-out queries", "--split")
    _refused([*argv, "--split", "dev"], capsys, "dev.tsv not found", "splits found: ['test', 'train']")
    code, out, err = _run([*argv, "--split", "train"], capsys)
    assert code == 0, err
    assert "(train split)" in out and "note: choosing on the test split" not in out
    assert "<- best" in out


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--first-stage", "dense"], "give no --first-stage dense"),
        (["--first-stage", "lexical"], "give no --first-stage lexical"),
        (["--fusion", "rrf"], "give no --fusion rrf"),
        (["--dense-weight", "0.3"], "give no --dense-weight"),
    ],
    ids=["E3-dense", "E3-lexical", "E3-rrf", "E3-weight"],
)
def test_e3_choose_dense_weight_refuses_what_it_would_ignore(files: Path, capsys, extra: list, fragment: str) -> None:
    argv = ["eval", files / "beir", "--model", files / "model", "--choose-dense-weight", "--split", "train", *extra]
    _refused(argv, capsys, fragment)


@pytest.mark.parametrize(
    "extra",
    [["--choose-dense-weight"], ["--fusion", "zscore"], ["--k1", "1.2"], ["--first-stage", "hybrid"]],
    ids=["E3b-choose", "E3b-fusion", "E3b-k1", "E3b-first-stage"],
)
def test_e3b_retrieval_flags_on_scored_pairs_are_refused(files: Path, capsys, extra: list) -> None:
    """On scored pairs --choose-dense-weight printed the STS table; every retrieval flag is refused there."""
    _refused(["eval", files / "pairs.jsonl", "--model", files / "model", *extra], capsys, "not to scored pairs")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--first-stage", "dense", "--dense-weight", "0.5"], "the dense first stage has one list"),
        (["--first-stage", "lexical", "--dense-weight", "0.5"], "the lexical first stage has one list"),
        (["--first-stage", "hybrid", "--dense-weight", "0.5"], "applies to fusion='zscore'"),
        (["--first-stage", "dense", "--fusion", "zscore"], "fuses the two lists of the hybrid first stage"),
        (["--k1", "1.2"], "apply to the lexical and hybrid first stages, not to the dense one"),
        (["--first-stage", "dense", "--no-stemmer"], "apply to the lexical and hybrid first stages"),
    ],
    ids=["E4-dense-weight", "E4-lexical-weight", "E4-rrf-weight", "E4-dense-fusion", "E5-bm25-dense", "E5-stemmer"],
)
def test_e4_e5_eval_settings_of_another_stage_are_refused(files: Path, capsys, extra: list, fragment: str) -> None:
    _refused(["eval", files / "beir", "--model", files / "model", *extra], capsys, fragment)


def test_e6_eval_lexical_loads_no_model(files: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    import hf_siamese.cli.evaluate as evaluate

    def no_model(*args, **kwargs):
        raise AssertionError("the lexical first stage loaded a model")

    monkeypatch.setattr(evaluate, "load_inference_model", no_model)
    code, out, err = _run(["eval", files / "beir", "--first-stage", "lexical"], capsys)
    assert code == 0, err
    assert "Retrieval evaluation of BM25, first stage: lexical" in out
    _refused(["eval", files / "beir", "--first-stage", "lexical", "--model", files / "model"], capsys, "no model")


def test_e7_hybrid_zscore_header_keeps_its_columns_apart(files: Path, capsys) -> None:
    argv = ["eval", files / "beir", "--model", files / "model", "--first-stage", "hybrid", "--fusion", "zscore"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert "densefused" not in header
    assert [title.strip() for title in header.split("  ") if title.strip()][:4] == [
        "metric",
        "lexical",
        "dense",
        "fused (zscore)",
    ]


# --- fusion: weight 0 / 1 are the lexical / dense orders --------------------------------------------------------------


def test_f1_zscore_weight_zero_is_exactly_the_lexical_order() -> None:
    """A row only the dense list found took the lexical list's lowest z and won the tie through its dense rank."""
    dense = (np.array([[0.9, 0.8, 0.7]]), np.array([[5, 1, 2]]))
    lexical = (np.array([[3.0, 2.0, 1.0]]), np.array([[1, 2, 3]]))
    _, rows = fuse(dense, lexical, "zscore", 0.0)
    assert rows[0].tolist() == [1, 2, 3, 5]  # the lexical list, then what only dense found
    _, rows = fuse(dense, lexical, "zscore", 1.0)
    assert rows[0].tolist() == [5, 1, 2, 3]  # the dense list, then what only lexical found


def test_f1_zscore_weights_zero_and_one_equal_the_single_stages_on_an_index(files: Path, tiny_tokenizer) -> None:
    index, model = load_index(files / "idx"), make_tiny_model()
    queries = [" ".join(text.split()[:3]) for text in index.corpus["text"][:8]]
    kwargs = {"tokenizer": tiny_tokenizer, "top_k": 5}

    def ids(hits: list) -> list[list]:
        return [[hit["id"] for hit in query] for query in hits]

    lexical = ids(index.search(None, queries, first_stage="lexical", **kwargs))
    dense = ids(index.search(model, queries, first_stage="dense", **kwargs))
    zero = ids(index.search(model, queries, first_stage="hybrid", fusion="zscore", dense_weight=0, **kwargs))
    one = ids(index.search(model, queries, first_stage="hybrid", fusion="zscore", dense_weight=1, **kwargs))
    assert one == dense
    for got, want in zip(zero, lexical, strict=True):
        assert got[: len(want)] == want


# --- search -----------------------------------------------------------------------------------------------------------


def test_s1_fusion_on_an_index_without_lexical_part_is_refused(files: Path, capsys) -> None:
    argv = ["search", "--index", files / "idx-dense", "--query", "a dog", "--fusion", "zscore", "--dense-weight", "0.5"]
    _refused(argv, capsys, "has no lexical part", "--add-lexical")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--first-stage", "dense", "--dense-weight", "0.5"], "the dense first stage has one list"),
        (["--first-stage", "lexical", "--fusion", "rrf"], "fuses the two lists of the hybrid first stage"),
        (["--first-stage", "lexical", "--model", "{model}"], "--first-stage lexical searches BM25 alone"),
        (["--dense-weight", "-inf", "--fusion", "zscore"], "--dense-weight: expected a finite number, got '-inf'"),
        (["--fusion", "zscore", "--dense-weight", "1e400"], "expected a finite number, got '1e400'"),
    ],
    ids=["S3-dense-weight", "S3-lexical-fusion", "S3-lexical-model", "V4-minus-inf", "V4-overflow"],
)
def test_s3_search_settings_that_do_not_apply(files: Path, capsys, extra: list, fragment: str) -> None:
    extra = [str(files / "model") if part == "{model}" else part for part in extra]
    _refused(["search", "--index", files / "idx", "--query", "a dog", *extra], capsys, fragment)


def test_s2_missing_bm25s_is_said_not_searched_dense(files: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bm25s, an index with a lexical part was searched dense-only by default: other results, no word."""
    monkeypatch.setitem(sys.modules, "bm25s", None)  # import bm25s -> ImportError
    err = _refused(
        ["search", "--index", files / "idx", "--query", "a dog"], capsys, "pip install 'hf-siamese[lexical]'"
    )
    assert "--first-stage dense" in err
    code, out, err = _run(["search", "--index", files / "idx", "--query", "a dog", "--first-stage", "dense"], capsys)
    assert code == 0 and "Query: a dog" in out, err


# --- index ------------------------------------------------------------------------------------------------------------


def test_i1_bm25_settings_with_no_lexical_are_refused(files: Path, capsys, tmp_path: Path) -> None:
    argv = [
        "index",
        files / "corpus.txt",
        "--model",
        files / "model",
        "-o",
        tmp_path / "i",
        "--no-lexical",
        "--b",
        "0.5",
    ]
    _refused(argv, capsys, "--no-lexical) leaves out")
    assert not any(tmp_path.iterdir())


def test_i2_refused_language_leaves_nothing_beside_the_output(files: Path, capsys, tmp_path: Path) -> None:
    argv = ["index", files / "corpus.txt", "--model", files / "model", "-o", tmp_path / "i"]
    _refused([*argv, "--language", "klingon", "--no-stopwords"], capsys, "no stemmer for language 'klingon'")
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())


def test_i3_a_second_build_at_once_is_refused(files: Path, capsys, tmp_path: Path) -> None:
    argv = ["index", files / "corpus.txt", "--model", files / "model", "-o", tmp_path / "i"]
    with exclusive_output(tmp_path / "i", "a build of this index"):
        _refused(argv, capsys, "a build of this index is running into it already", f"process {os.getpid()}")
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i"]  # no lock file left behind


def test_i3_a_killed_build_leaves_no_lock(files: Path, capsys, tmp_path: Path) -> None:
    holder = (
        "import sys, time\nfrom hf_siamese.storage import exclusive_output\n"
        "with exclusive_output(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path / "i")], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        argv = ["index", files / "corpus.txt", "--model", files / "model", "-o", tmp_path / "i"]
        _refused(argv, capsys, "is running into it already", f"process {process.pid}")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    time.sleep(0.1)
    code, _, err = _run(argv, capsys)
    assert code == 0, err


def test_i4_an_all_empty_corpus_is_indexed_with_a_warning(tmp_path: Path, tiny_tokenizer, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        build_index(make_tiny_model(), ["", "  ", "\t"], tmp_path / "i", tokenizer=tiny_tokenizer, lexical=False)
    assert "every one of the 3 texts of the corpus is empty or blank" in caplog.text


# --- mine -------------------------------------------------------------------------------------------------------------


def test_m1_mine_keeps_an_existing_output_without_overwrite(files: Path, capsys, tmp_path: Path) -> None:
    output = tmp_path / "mined.jsonl"
    output.write_text("kept\n")
    argv = ["mine", files / "anchors.jsonl", "--model", files / "model", "--corpus", files / "corpus.txt", "-o", output]
    _refused([*argv, "--num-negatives", "1"], capsys, "exists; pass --overwrite")
    assert output.read_text() == "kept\n"
    code, _, err = _run([*argv, "--num-negatives", "1", "--overwrite"], capsys)
    assert code == 0, err
    assert output.read_text() != "kept\n"


# --- the Python API ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "queries", "kwargs", "fragment"),
    [
        (None, ["a dog"], {"first_stage": "hybrid"}, "the hybrid first stage embeds the queries: give the model"),
        (None, ["a dog"], {"first_stage": "dense"}, "the dense first stage embeds the queries"),
        ("model", None, {}, "queries=None; expected a string or a list of strings"),
        ("model", ["a dog", None], {}, "query 1 is None"),
        ("model", "", {}, "query 0 is ''; every query must be a non-empty string"),
        ("model", ["  "], {}, "query 0 is '  '"),
        ("model", ["a dog"], {"fusion": "zscore", "dense_weight": True}, "dense_weight=True; accepted: a number"),
        ("model", ["a dog"], {"first_stage": "dense", "fusion": "rrf"}, "fuses the two lists"),
    ],
    ids=[
        "P1-none-hybrid",
        "P1-none-dense",
        "P1-none-queries",
        "P1-none-query",
        "P1-empty",
        "P1-blank",
        "P1-bool",
        "P1-rrf",
    ],
)
def test_p1_search_api_bad_input(files: Path, tiny_tokenizer, model, queries, kwargs: dict, fragment: str) -> None:
    index = load_index(files / "idx")
    model = make_tiny_model() if model == "model" else model
    with pytest.raises(ValueError, match=None) as raised:
        index.search(model, queries, tokenizer=tiny_tokenizer, **kwargs)
    assert fragment in str(raised.value)


def test_p2_pretokenize_takes_a_bool(tiny_tokenizer) -> None:
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_siamese import SiameseTrainer

    rows = Dataset.from_dict({"anchor": ["a b"], "positive": ["a c"]})
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match=r"pretokenize='yes'; accepted: True, False"):
        SiameseTrainer(
            model=make_tiny_model(), args=args, train_dataset=rows, processing_class=tiny_tokenizer, pretokenize="yes"
        )
