"""`hf-siamese mine --negatives-from lexical|hybrid`: the library's rows (BM25, or fused with the model's ranking),
the BM25 settings passed on, the index kept in --embeddings-dir, and bad input in one line."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from conftest import WORDS, make_tiny_model
from datasets import Dataset

from hf_siamese.cli import main
from hf_siamese.retrieval.index.lexical import LexicalSettings
from hf_siamese.retrieval.mining.negatives import mine_hard_negatives

pytest.importorskip("bm25s")
pytest.importorskip("Stemmer")


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 8)))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("mine")
    make_tiny_model().save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    rng = random.Random(2)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(30)))
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    rows = [{"anchor": _sentence(rng), "positive": corpus[i]} for i in range(0, 24, 2)]
    (root / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _library(w: Path, tiny_tokenizer, **kwargs) -> list[dict]:
    pairs = Dataset.from_json(str(w / "pairs.jsonl"))
    corpus = (w / "corpus.txt").read_text(encoding="utf-8").splitlines()
    mined = mine_hard_negatives(
        pairs, make_tiny_model(), corpus, tokenizer=tiny_tokenizer, show_progress_bar=False, **kwargs
    )
    return mined.to_list()


@pytest.mark.parametrize("negatives_from", ["lexical", "hybrid"])
def test_negatives_from_gives_the_library_rows(files: Path, tiny_tokenizer, tmp_path: Path, capsys, negatives_from):
    w = files
    out = tmp_path / "mined.jsonl"
    base = ["mine", w / "pairs.jsonl", "--model", w / "model", "--corpus", w / "corpus.txt", "--num-negatives", "2"]
    code, stdout, stderr = _run([*base, "-o", out, "--negatives-from", negatives_from], capsys)
    assert code == 0, stderr
    mined = _rows(out)
    assert f"mined {len(mined)} of 12 rows (2 negatives each)" in stdout and len(mined) >= 6
    assert mined == _library(w, tiny_tokenizer, num_negatives=2, negatives_from=negatives_from)
    code, _, stderr = _run([*base, "-o", tmp_path / "dense.jsonl"], capsys)  # the default: dense
    assert code == 0, stderr
    assert _rows(tmp_path / "dense.jsonl") == _library(w, tiny_tokenizer, num_negatives=2)
    assert _rows(tmp_path / "dense.jsonl") != mined


def test_bm25_settings_and_the_kept_index(files: Path, tiny_tokenizer, tmp_path: Path, capsys) -> None:
    w = files
    out, kept = tmp_path / "mined.jsonl", tmp_path / "emb"
    argv = ["mine", w / "pairs.jsonl", "--model", w / "model", "--corpus", w / "corpus.txt", "-o", out]
    argv += ["--negatives-from", "lexical", "--no-stemmer", "--k1", "0.9", "--margin", "0"]
    code, _, stderr = _run([*argv, "--embeddings-dir", kept], capsys)
    assert code == 0, stderr
    settings = LexicalSettings(stemmer=False, k1=0.9)
    assert _rows(out) == _library(w, tiny_tokenizer, negatives_from="lexical", lexical_settings=settings, margin=0.0)
    record = json.loads((kept / "lexical" / "lexical.json").read_text(encoding="utf-8"))
    assert record["settings"]["stemmer"] is False and record["settings"]["k1"] == 0.9 and record["count"] == 30
    assert (kept / "corpus.json").is_file()


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--negatives-from", "bm25"], 2, "argument --negatives-from: invalid choice: 'bm25'"),
        (["--k1", "1.2"], 1, "(--negatives-from dense): lexical_settings, BM25's (--language, --no-stemmer"),
        (["--negatives-from", "lexical", "--b", "2"], 1, "BM25 b=2.0; accepted: a number from 0 to 1"),
        (["--negatives-from", "lexical", "--approximate"], 1, "approximate=True is the dense search's"),
    ],
    ids=["unknown", "bm25-setting-with-dense", "bad-b", "approximate-lexical"],
)
def test_bad_input_is_named(files: Path, tmp_path: Path, capsys, extra: list, code: int, message: str) -> None:
    w = files
    argv = ["mine", w / "pairs.jsonl", "--model", w / "model", "--corpus", w / "corpus.txt", "-o", tmp_path / "m.jsonl"]
    returned, _, stderr = _run([*argv, *extra], capsys)
    assert returned == code and message in stderr, stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_missing_bm25s_names_the_install_command(files: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "bm25s", None)
    w = files
    argv = ["mine", w / "pairs.jsonl", "--model", w / "model", "-o", tmp_path / "m.jsonl", "--negatives-from", "hybrid"]
    code, _, stderr = _run(argv, capsys)
    assert code == 1 and "bm25s is missing): pip install 'hf-siamese[lexical]'" in stderr, stderr
    assert stderr.count("\n") == 1
