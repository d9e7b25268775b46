"""MarginMSE from the command line: `mine --teacher` writes each row's teacher scores (the cross-encoder's raw
logits, positive first), `train` infers `margin_mse` from those lists (or takes `--loss list_distill`) and trains;
bad input named in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cross_encoder import CrossEncoder
from tests.cli.test_corpus_commands import _run, files  # noqa: F401  (the fixture)


@pytest.fixture
def teacher(files: Path, tiny_tokenizer) -> Path:  # noqa: F811
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(files / "ce")
    return files / "ce"


def test_mine_with_a_teacher_then_train_margin_mse(files, teacher, capsys):  # noqa: F811
    w = files
    mine = ["mine", str(w / "pairs.jsonl"), "--model", str(w / "model"), "--corpus", str(w / "corpus.txt")]
    code, out, err = _run(
        [*mine, "-o", str(w / "rows.jsonl"), "--num-negatives", "2", "--teacher", str(teacher)], capsys
    )
    assert code == 0, err
    assert "scored by the teacher" in out and not (w / "rows.jsonl.scores").exists()
    rows = [json.loads(line) for line in (w / "rows.jsonl").read_text().splitlines()]
    ce = CrossEncoder.from_pretrained(str(teacher))
    for row in rows[:3]:
        documents = [row["positive"], row["negative_1"], row["negative_2"]]
        expected = ce.predict([(row["anchor"], d) for d in documents], activation=False)
        assert row["label"] == pytest.approx(expected.tolist(), abs=0.05)  # bf16 where the CPU has it
    train = ["train", "--train", str(w / "rows.jsonl"), "--model", str(w / "model"), "--batch-size", "4"]
    code, out, err = _run([*train, "--output-dir", str(w / "student"), "--margin-scale", "5"], capsys)
    assert code == 0, err
    assert "MarginMSELoss" in out and (w / "student" / "config.json").is_file()
    code, out, err = _run([*train, "--output-dir", str(w / "listwise"), "--loss", "list_distill"], capsys)
    assert code == 0, err
    assert "ListDistillationLoss" in out
    code, _, err = _run([*train, "--output-dir", str(w / "mixed"), "--loss", "margin_mse+cosine"], capsys)
    assert code == 1 and "cosine needs one score per row" in err and err.count("\n") == 1


def test_mine_teacher_scores_need_json_lines(files, teacher, capsys):  # noqa: F811
    w = files
    argv = ["mine", str(w / "pairs.jsonl"), "--model", str(w / "model"), "--corpus", str(w / "corpus.txt")]
    code, _, err = _run([*argv, "-o", str(w / "rows.csv"), "--num-negatives", "2", "--teacher", str(teacher)], capsys)
    assert code == 1 and "write JSON lines (-o rows.jsonl)" in err and not (w / "rows.csv").exists()


def test_rows_with_lists_are_not_written_as_csv(tmp_path):
    from datasets import Dataset

    from hf_siamese.storage import write_rows

    rows = Dataset.from_dict({"anchor": ["a"], "positive": ["b"], "label": [[0.5, 0.1]]})
    with pytest.raises(ValueError, match=r"\['label'\] hold lists.*\.jsonl"):
        write_rows(tmp_path / "rows.tsv", rows)
    write_rows(tmp_path / "rows.jsonl", rows)
    assert json.loads((tmp_path / "rows.jsonl").read_text())["label"] == [0.5, 0.1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--teacher", "{w}/model"], "is a bi-encoder"),
        (["--teacher", "{w}/missing"], "no such folder"),
    ],
)
def test_mine_bad_teacher(files, capsys, extra, message):  # noqa: F811
    w = files
    argv = ["mine", str(w / "pairs.jsonl"), "--model", str(w / "model"), "-o", str(w / "rows.jsonl")]
    code, _, err = _run([*argv, *[part.format(w=w) for part in extra]], capsys)
    assert code == 1 and message in err and err.count("\n") == 1
    assert not (w / "rows.jsonl").exists()


def test_train_margin_scale_needs_margin_mse(files, capsys):  # noqa: F811
    w = files
    argv = ["train", "--train", str(w / "pairs.jsonl"), "--model", str(w / "model"), "--margin-scale", "5"]
    code, _, err = _run([*argv, "--output-dir", str(w / "out")], capsys)
    assert code == 1 and "--margin-scale applies to --loss margin_mse, not mnr" in err
