"""`hf-siamese train-reranker`: a tiny BEIR folder (train and dev qrels), tiny random models, 1-2 training steps; the
dev reranking printed before and after, the saved cross-encoder loadable; pairs files; every bad input in one line."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY, make_tiny_model
from helpers import RERANK_DOCUMENTS
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder

CORPUS = RERANK_DOCUMENTS
QUERIES = {"q1": "music", "q2": "a dog in the park", "q3": "the market", "q4": "food", "q5": "a game", "q6": "rain"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("train-reranker")
    make_tiny_model().save_pretrained(root / "bi")
    tiny_tokenizer.save_pretrained(root / "bi")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(root / "ce")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(CORPUS))
    )
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    header = "query-id\tcorpus-id\tscore\n"
    (beir / "qrels" / "train.tsv").write_text(header + "q1\td0\t1\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    (beir / "qrels" / "dev.tsv").write_text(header + "q4\td4\t1\nq5\td7\t1\nq6\td8\t1\n")
    pairs = [{"query": "music", "positive": CORPUS[0]}, {"query": "food", "positive": CORPUS[4]}]
    (root / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pairs))
    labelled = [
        {"query": "music", "document": CORPUS[0], "label": 3.0},
        {"query": "food", "document": CORPUS[1], "label": 0.0},
    ]
    (root / "labelled.jsonl").write_text("".join(json.dumps(row) + "\n" for row in labelled))
    (root / "no-config").mkdir()
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


TRAIN = ["--negatives", "2", "--random-negatives", "1", "--batch-size", "8", "--lr", "1e-3", "--max-length", "48"]
TRAIN += ["--range-min", "0"]  # the tiny corpus has no rank 10


def test_beir_folder_from_a_bi_encoder_evaluates_and_saves(files, tmp_path, capsys, tiny_tokenizer):
    out = tmp_path / "reranker"
    code, stdout, stderr = _run(["train-reranker", files / "beir", "--model", files / "bi", "-o", out, *TRAIN], capsys)
    assert code == 0, stderr
    # the default loss (plistmle) reads tuples: 4 pairs x (positive, 2 hard + 1 random negatives)
    assert "training rows: 4 (query, positive, negative_1, negative_2, negative_3)" in stdout
    # negatives mined by the first stage the reranker will rerank: hybrid where bm25s is installed
    stage = "hybrid" if importlib.util.find_spec("bm25s") else "dense"
    assert f"hard negatives mined by: {stage} (--negatives-from)" in stdout
    # the head is new: before training only the first stage is measured (a random head's scores mean nothing)
    before = r"before training \(dev, top 100\): first stage nDCG@10 [\d.]+ MRR@10 [\d.]+ \| the new head is not"
    assert re.search(before, stdout)
    assert "best epoch (dev, top 100)" in stdout and "change" in stdout
    chosen = re.search(r"fusion \(dev, nDCG@10\): .* two scores \(first-stage weight (\d\.\d)\)", stdout)
    assert chosen, stdout
    reranker = CrossEncoder.from_pretrained(out)
    assert reranker.first_stage_weight == pytest.approx(float(chosen.group(1)))
    # the weights are saved with the corpus they were chosen on: they rank that corpus only
    from hf_siamese.retrieval.index.fingerprint import corpus_fingerprint

    ids = [json.loads(line)["_id"] for line in (files / "beir" / "corpus.jsonl").read_text().splitlines()]
    assert reranker.fusion_corpus == {"name": "beir", "split": "dev", "fingerprint": corpus_fingerprint(ids)}
    assert json.loads((out / "config.json").read_text())["first_stage_weight"] == reranker.first_stage_weight
    assert reranker.num_labels == 1 and reranker.max_length == 48
    assert reranker.predict(("music", CORPUS[0])).shape == ()
    assert reranker.tokenizer.get_vocab() == tiny_tokenizer.get_vocab()
    assert not [p for p in tmp_path.iterdir() if "checkpoints" in p.name]
    print(stdout)


def test_beir_folder_without_dev_lends_training_queries(files, tmp_path, capsys):
    beir = tmp_path / "beir"
    shutil.copytree(files / "beir", beir)
    (beir / "qrels" / "dev.tsv").unlink()
    out = tmp_path / "reranker"
    argv = ["train-reranker", beir, "--model", files / "bi", "-o", out, *TRAIN, "--loss", "bce", "--dev-share", "0.5"]
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    # q1..q3 train: 2 held out (int(3 * 0.5) = 1 query; q1 has 2 pairs): 2 or 3 pairs left x 4 rows each
    assert re.search(r"training rows: (8|12) \(query, document, label\)", stdout), stdout
    assert "before training (1 held-out train queries, top 100): first stage nDCG@10" in stdout
    assert "first-stage weight" in stdout and "fusion (1 held-out train queries, nDCG@10)" in stdout


@pytest.mark.parametrize("loss", ["mnr", "lambda", "plistmle"])
def test_tuple_losses_continue_a_cross_encoder(files, tmp_path, capsys, loss):
    out = tmp_path / "reranker"
    argv = ["train-reranker", files / "beir", "--model", files / "ce", "--first-stage", files / "bi", "-o", out]
    code, stdout, stderr = _run([*argv, *TRAIN, "--loss", loss, "--eval-split", "none", "--head-lr", "1e-2"], capsys)
    assert code == 0, stderr
    assert "(query, positive, negative_1, negative_2, negative_3)" in stdout
    assert "before training" not in stdout
    assert CrossEncoder.from_pretrained(out).num_labels == 1


def test_negatives_from_both_stages_or_bm25(files, tmp_path, capsys):
    pytest.importorskip("bm25s")
    out = tmp_path / "reranker"
    argv = ["train-reranker", files / "beir", "--model", files / "ce", "--first-stage", files / "bi", "-o", out]
    argv += [*TRAIN, "--loss", "plistmle", "--eval-split", "none", "--range-min", "0"]
    code, stdout, stderr = _run([*argv, "--negatives-from", "hybrid"], capsys)
    assert code == 0, stderr
    assert "training rows:" in stdout and CrossEncoder.from_pretrained(out).num_labels == 1
    assert "hard negatives mined by: hybrid" in stdout
    # no --negatives-from: the first stage of --candidates mines them
    code, stdout, stderr = _run([*argv, "--candidates", "dense", "-o", tmp_path / "dense"], capsys)
    assert code == 0, stderr
    assert "hard negatives mined by: dense (--negatives-from)" in stdout
    # BM25 alone finds too few documents sharing words with these tiny queries: one line that says so
    code, _, stderr = _run([*argv, "--negatives-from", "lexical", "-o", tmp_path / "other"], capsys)
    assert code == 1 and "documents by lexical" in stderr.splitlines()[-1]
    # the trained model is not replaced without --overwrite
    code, _, stderr = _run([*argv, "--negatives-from", "dense"], capsys)
    assert code == 1 and "pass --overwrite to replace it" in stderr and CrossEncoder.from_pretrained(out)


def test_bf16_runs_on_a_cpu_only_machine(files, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "reranker"
    argv = ["train-reranker", files / "beir", "--model", files / "ce", "--first-stage", files / "bi", "-o", out]
    code, _, stderr = _run([*argv, *TRAIN, "--eval-split", "none", "--bf16"], capsys)
    assert code == 0, stderr
    assert CrossEncoder.from_pretrained(out).num_labels == 1


def test_pairs_file_with_random_negatives_only(files, tmp_path, capsys):
    out = tmp_path / "reranker"
    argv = ["train-reranker", files / "pairs.jsonl", "--model", files / "ce", "--negatives", "0"]
    code, stdout, stderr = _run(
        [*argv, "--random-negatives", "1", "--corpus", files / "beir" / "corpus.jsonl", "-o", out], capsys
    )
    assert code == 0, stderr
    assert "training rows: 2 (query, positive, negative_1)" in stdout  # the default loss (plistmle) reads tuples
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["{beir}", "--split", "test"], "qrels/test.tsv not found (splits found: ['dev', 'train'])"),
        (["{beir}", "--model", "{root}/no-config"], "neither a cross-encoder"),
        (["{root}/labelled.jsonl", "--model", "{ce}", "--negatives", "0"], "row 0"),
        (
            ["{beir}", "--negatives", "0", "--random-negatives", "0", "--loss", "mnr"],
            "--loss mnr needs at least one negative",
        ),
        (["{beir}", "--model", "{ce}"], "is a cross-encoder, not a bi-encoder: give --first-stage BI"),
        (["{beir}", "--model", "{bi}", "--first-stage", "{ce}"], "--first-stage {ce}:"),
        (["{beir}", "--loss", "mnr", "--pos-weight", "5"], "--pos-weight applies to --loss bce"),
        (["{root}/labelled.jsonl", "--model", "{ce}", "--loss", "lambda"], "labelled (query, document, label) pairs"),
        (["{beir}", "--dev-share", "1.5"], "--dev-share 1.5: expected a share in [0, 1)"),
    ],
)
def test_bad_input_is_one_line(files, tmp_path, capsys, extra, message):
    names = {"beir": files / "beir", "root": files, "ce": files / "ce", "bi": files / "bi"}
    argv = [part.format(**names) for part in extra]
    if "--model" not in argv:
        argv += ["--model", str(files / "bi")]
    code, _, stderr = _run(["train-reranker", *argv, "-o", tmp_path / "out", *TRAIN[4:]], capsys)
    assert code == 1
    assert stderr.startswith("hf-siamese: error: ") and stderr.count("\n") == 1
    assert message.format(**names) in stderr
    assert not (tmp_path / "out").exists()
