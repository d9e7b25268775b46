"""Inputs that used to be accepted silently (or read a stray error) and are refused now, each with a line that names
the value and what would be accepted."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY, make_tiny_model
from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese import CrossEncoder
from hf_siamese.cli import main
from hf_siamese.cross_encoder.teacher import teacher_scores
from hf_siamese.data.beir import read_beir
from hf_siamese.recipes.adapt import adapt
from hf_siamese.recipes.augmented import augmented_sbert
from hf_siamese.training.students import student_from_teacher


def _cross_encoder(tokenizer) -> CrossEncoder:
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, max_position_embeddings=64, num_labels=1))
    return CrossEncoder(model.eval(), tokenizer)


@pytest.mark.parametrize(("kwargs", "fragment"), [({"epochs": -1}, "epochs=-1"), ({"save_steps": 0}, "save_steps=0")])
def test_adapt_refuses_nonpositive_training_numbers(tmp_path, kwargs, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        adapt(["a text here"] * 40, tmp_path / "out", model="m", method="crop", **kwargs)
    assert not (tmp_path / "out").exists()


def test_augmented_sbert_refuses_negative_epochs(tmp_path) -> None:
    gold = Dataset.from_dict({"sentence1": ["a", "c"], "sentence2": ["b", "d"], "score": [0.5, 0.9]})
    with pytest.raises(ValueError, match=r"epochs=-1: expected a positive number"):
        augmented_sbert(gold, tmp_path / "out", model="m", epochs=-1)


def test_warmup_ratio_must_be_a_share(capsys) -> None:
    try:
        code = main(["train", "--warmup-ratio", "5"])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    assert "expected a share of the steps from 0 to below 1" in capsys.readouterr().err


@pytest.mark.parametrize("max_length", [0, -5, 2.5])
def test_predict_refuses_a_bad_max_length(tiny_tokenizer, max_length) -> None:
    with pytest.raises(ValueError, match=f"max_length={max_length!r}: expected a positive number of tokens"):
        _cross_encoder(tiny_tokenizer).predict([("a query", "a document")], max_length=max_length)


def test_student_layers_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match=r"layers=\[1, 0\]: out of order.*\[0, 1\]"):
        student_from_teacher(make_tiny_model(), [1, 0])


def test_teacher_scores_need_a_document_column(tiny_tokenizer) -> None:
    rows = Dataset.from_dict({"anchor": ["a", "b"]})
    with pytest.raises(ValueError, match=r"need a query and at least one document"):
        teacher_scores(rows, _cross_encoder(tiny_tokenizer), columns=["anchor"])


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_rerank_refuses_non_finite_first_stage_scores(tmp_path, capsys, bad) -> None:
    candidates = tmp_path / "candidates.jsonl"
    candidates.write_text(f'{{"query": "q", "documents": ["a", "b"], "scores": [0.5, {bad}]}}\n')
    assert main(["rerank", str(candidates), "--model", str(tmp_path / "ce")]) == 1
    assert 'line 1: "scores" must hold one finite number per document' in capsys.readouterr().err


def test_beir_duplicate_ids_are_named_with_both_lines(tmp_path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a question"}) + "\n")
    corpus = [{"_id": "d1", "text": "one"}, {"_id": "d2", "text": "two"}, {"_id": "d1", "text": "again"}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus))
    with pytest.raises(ValueError, match=r"lines 1 and 3 have the same _id 'd1'"):
        read_beir(tmp_path, split="test")


def test_a_missing_cross_encoder_folder_is_named_not_sent_to_the_hub(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"cross-encoder not found: '.*missing' is no folder here"):
        CrossEncoder.from_pretrained(tmp_path / "missing")


def test_saving_a_cross_encoder_onto_a_file_keeps_the_file(tmp_path, tiny_tokenizer) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    with pytest.raises(FileExistsError, match=r"notes\.txt' is a file; a cross-encoder is saved as a folder"):
        _cross_encoder(tiny_tokenizer).save_pretrained(target)
    assert target.read_text() == "mine"
