"""`hf-siamese augment`: gold scored pairs + silver pairs from a tiny bi-encoder's neighbours labelled by a tiny
cross-encoder, written to a file `train` reads; bad input in one line."""

from __future__ import annotations

import csv
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
    with open(root / "gold.tsv", "w", newline="") as file:
        writer = csv.writer(file, delimiter="\t")
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(GOLD)
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_gold_plus_silver_in_one_file(files, tmp_path, capsys):
    out = tmp_path / "augmented.tsv"
    argv = ["augment", files / "gold.tsv", "--teacher", files / "ce", "--model", files / "bi", "-o", out]
    code, stdout, stderr = _run([*argv, "--neighbours", "2"], capsys)
    assert code == 0, stderr
    with open(out, newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t"))
    assert [(r["sentence1"], r["sentence2"], float(r["score"])) for r in rows[: len(GOLD)]] == GOLD
    silver = rows[len(GOLD) :]
    assert silver and f"{len(GOLD)} gold + {len(silver)} silver pairs" in stdout
    gold_pairs = {frozenset(g[:2]) for g in GOLD}
    assert all(frozenset((r["sentence1"], r["sentence2"])) not in gold_pairs for r in silver)
    assert all(0.0 <= float(r["score"]) <= 3.0 for r in silver)  # the gold scores span 0..3


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--teacher", "{root}/bi"], 1, "is a bi-encoder"),
        (["--teacher", "{root}/ce", "-o", "{out}.txt"], 1, "must end in one of ['.csv', '.json', '.jsonl', '.tsv']"),
        (["--teacher", "{root}/ce", "--neighbours", "0"], 2, "--neighbours"),
    ],
)
def test_bad_input_is_named(files, tmp_path, capsys, extra, code, message):
    out = tmp_path / "out"
    argv = [part.format(root=files, out=out) for part in extra]
    if "-o" not in argv:
        argv += ["-o", f"{out}.tsv"]
    returned, _, stderr = _run(["augment", files / "gold.tsv", "--model", files / "bi", *argv], capsys)
    assert returned == code and message in stderr
    if code == 1:
        assert stderr.startswith("hf-siamese: error: ") and stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())
