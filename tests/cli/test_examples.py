"""Smoke test of the scripts in examples/: each runs end to end, in-process, on a tiny model and tiny local files
laid out like the real ones (STS Benchmark files, the labelled NLI pairs and the NLI triplets)."""

from __future__ import annotations

import random
import runpy
import sys
from pathlib import Path

import pytest
import torch
from conftest import WORDS, tiny_encoder_config
from transformers import BertModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 7)))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("examples")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(root / "base")
    tiny_tokenizer.save_pretrained(root / "base")
    rng = random.Random(0)
    for split in ("train", "dev", "test"):
        lines = []
        for i in range(20):
            first, second = _sentence(rng), _sentence(rng)
            score = 5.0 if i % 3 == 0 else round(rng.uniform(0, 4), 2)
            lines.append(
                f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{first}\t{first if score == 5 else second}"
            )
        (root / f"sts-{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    labels = ("entailment", "neutral", "contradiction")
    pairs = ["source\tpairID\tpremise\thypothesis\tlabel"]
    pairs += [f"snli_dev\t{i}\t{_sentence(rng)}\t{_sentence(rng)}\t{labels[i % 3]}" for i in range(24)]
    (root / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    triplets = ["source\tanchor\tpositive\tnegative"]
    triplets += [f"snli_dev\t{_sentence(rng)} {i}\t{_sentence(rng)} {i}\t{_sentence(rng)}" for i in range(24)]
    (root / "triplets.tsv").write_text("\n".join(triplets) + "\n", encoding="utf-8")
    (root / "corpus.txt").write_text("a man plays a guitar\nthe stock market fell today\n", encoding="utf-8")
    return root


def run_example(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [name, *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        (
            "train_sts.py",
            ["--train", "{f}/sts-train.csv", "--dev", "{f}/sts-dev.csv", "--test", "{f}/sts-test.csv"],
            "STSb test Spearman",
        ),
        ("train_nli_softmax.py", ["--train", "{f}/pairs.tsv", "--sts-dev", "{f}/sts-dev.csv"], "STSb dev Spearman"),
        (
            "train_nli_mnr.py",
            ["--train", "{f}/triplets.tsv", "--sts-dev", "{f}/sts-dev.csv", "--batch-size", "8"],
            "STSb dev Spearman",
        ),
    ],
)
def test_training_examples(script: str, args: list, expected: str, files: Path, tmp_path: Path, monkeypatch, capsys):
    argv = [a.format(f=files) for a in args] + ["--model", str(files / "base"), "--max-train", "16", "--epochs", "1"]
    run_example(script, [*argv, "--output-dir", str(tmp_path / "out")], monkeypatch)
    out = capsys.readouterr().out
    assert expected in out and "before" in out and "after" in out
    assert (tmp_path / "out" / "model.safetensors.index.json").is_file()
    if script == "train_sts.py":  # the leading recipe's end: best epoch or mean, then a dev-chosen interpolation
        assert "Kept the " in out and "--interpolate auto" in out


def test_train_sts_example_rejects_bad_interpolate(files: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    args = ["--train", f"{files}/sts-train.csv", "--dev", f"{files}/sts-dev.csv", "--test", f"{files}/sts-test.csv"]
    args += ["--model", str(files / "base"), "--interpolate", "1.5", "--output-dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        run_example("train_sts.py", args, monkeypatch)
    err = capsys.readouterr().err
    assert "--interpolate: expected a number above 0 and at most 1" in err and "or auto, got '1.5'" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("corpus", ["corpus.txt", "sts-test.csv"])
def test_semantic_search_example(corpus: str, files: Path, monkeypatch, capsys) -> None:
    args = ["--model", str(files / "base"), "--corpus", str(files / corpus), "--query", "a man plays music"]
    run_example("semantic_search.py", [*args, "--top-k", "2"], monkeypatch)
    out = capsys.readouterr().out
    assert "Query: a man plays music" in out and out.count("\n  ") == 2
