"""`hf-siamese augment`: Augmented SBERT's three stages from tiny models (teacher trained on the gold pairs, silver
pairs labelled on the gold range, the bi-encoder trained on both, a card that says so); a rerun resumes; bad input
in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from conftest import TINY, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder

WORDS = ("a dog runs", "music plays", "the market fell", "soup is hot")
GOLD = [
    (f"{a} today", f"{b} now", float(i % 6)) for i, (a, b) in enumerate(zip(WORDS, WORDS[1:] + WORDS[:1], strict=True))
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("augment")
    make_tiny_model().save_pretrained(root / "bi")
    tiny_tokenizer.save_pretrained(root / "bi")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(root / "ce")
    (root / "more.txt").write_text("a cat runs today\nthe soup is cold\n")
    with open(root / "gold.tsv", "w", newline="") as file:
        writer = csv.writer(file, delimiter="\t")
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(GOLD)
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_three_stages_then_resume(files, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["augment", files / "gold.tsv", "--model", files / "bi", "-o", out, "--neighbours", "2", "--bm25", "1"]
    argv += [
        "--eval",
        files / "gold.tsv",
        "--teacher-epochs",
        "1",
        "--batch-size",
        "4",
        "--sentences",
        files / "more.txt",
    ]
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    assert (out / "teacher" / "config.json").is_file() and (out / "model" / "config.json").is_file()
    silver = [json.loads(line) for line in (out / "silver.jsonl").read_text().splitlines()]
    gold_pairs = {frozenset(g[:2]) for g in GOLD}
    assert silver and all(frozenset((r["sentence1"], r["sentence2"])) not in gold_pairs for r in silver)
    assert all(0.0 <= r["score"] <= 3.0 for r in silver)  # the gold scores span 0..3
    card = (out / "model" / "README.md").read_text()
    assert f"{len(GOLD)} gold scored pairs and {len(silver)} silver pairs" in card
    assert "and of 2 unlabelled sentences" in card
    assert any("a cat runs today" in (r["sentence1"], r["sentence2"]) for r in silver)
    assert not (out / "checkpoints").exists() and not (out / "silver-scores").exists()
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    for stage in ("stage 1 done before", "stage 2 done before", "stage 3 done before"):
        assert stage in stdout
    code, _, stderr = _run([*argv, "--lr", "1e-3"], capsys)
    assert code == 1 and "a run with other settings is kept here (differs in ['lr'])" in stderr


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--teacher", "{root}/bi"], 1, "is a bi-encoder"),
        (["--neighbours", "0"], 1, "--neighbours 0 and --bm25 0 sample no pairs"),
        (["--neighbours", "-1"], 2, "--neighbours"),
        (["--sentences", "{root}/missing.txt"], 1, "missing.txt"),
        (["--columns", "sentence1=sentence1,sentence2=sentence2"], 1, "expected scored pairs"),
    ],
)
def test_bad_input_is_named(files, tmp_path, capsys, extra, code, message):
    out = tmp_path / "out"
    argv = [part.format(root=files, out=out) for part in extra]
    returned, _, stderr = _run(["augment", files / "gold.tsv", "--model", files / "bi", "-o", out, *argv], capsys)
    assert returned == code and message in stderr, stderr
    if code == 1:
        assert stderr.startswith("hf-siamese: error: ") and stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())
