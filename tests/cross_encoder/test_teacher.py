"""Teacher scores as data: a cross-encoder's raw logits (one predict call, each distinct pair once) or a bi-encoder's
similarity written into a label column, as scores or margins, read back by the bi-encoder's MarginMSELoss; bad input
named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY, make_tiny_model
from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese import SiamesePairCollator
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.cross_encoder.teacher import teacher_scores

ROWS = {
    "anchor": ["who plays music", "what did the market do", "who plays music"],
    "positive": ["a man plays the guitar", "the stock market fell", "a man plays the guitar"],
    "negative_1": ["the dog runs", "soup is hot", "cats sleep"],
    "negative_2": ["cats sleep", "a man plays the guitar", "the dog runs"],
}


class LengthTeacher:
    """Scores a pair by the document's length; records its calls."""

    def __init__(self):
        self.calls = []

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        self.calls.append(list(pairs))
        return np.array([float(len(d)) for _, d in pairs], dtype=np.float32)


def test_scores_and_margins_of_ranking_rows_in_one_call():
    teacher = LengthTeacher()
    scored = teacher_scores(Dataset.from_dict(ROWS), teacher)
    expected = [[len(ROWS[c][row]) for c in ("positive", "negative_1", "negative_2")] for row in range(3)]
    assert scored["label"] == expected
    assert len(teacher.calls) == 1 and len(teacher.calls[0]) == 6  # 9 pairs; row 2 repeats row 0 s: scored once
    margins = teacher_scores(Dataset.from_dict(ROWS), LengthTeacher(), output="margins", column="teacher")
    assert margins["teacher"] == [[row[0] - row[1], row[0] - row[2]] for row in expected]


def test_a_cross_encoder_teacher_gives_its_raw_logits(tiny_tokenizer):
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    teacher = CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer)
    pairs = Dataset.from_dict({"sentence1": ROWS["anchor"], "sentence2": ROWS["positive"]})
    scored = teacher_scores(pairs, teacher)
    logits = teacher.predict(list(zip(ROWS["anchor"], ROWS["positive"], strict=True)), activation=False)
    np.testing.assert_allclose(scored["label"], logits, rtol=1e-5, atol=1e-6)
    assert any(value < 0 or value > 1 for value in scored["label"]) or np.ptp(scored["label"]) > 0


def test_a_bi_encoder_teacher_gives_its_similarity(tiny_tokenizer):
    teacher = make_tiny_model()
    teacher.tokenizer = tiny_tokenizer
    scored = teacher_scores(Dataset.from_dict(ROWS), teacher)
    anchor = teacher.encode(ROWS["anchor"][:1])
    documents = teacher.encode([ROWS[c][0] for c in ("positive", "negative_1", "negative_2")])
    expected = torch.nn.functional.cosine_similarity(anchor, documents).tolist()
    np.testing.assert_allclose(scored["label"][0], expected, rtol=1e-4, atol=1e-5)


def test_margins_feed_the_bi_encoder_collator(tiny_tokenizer):
    rows = teacher_scores(Dataset.from_dict(ROWS), LengthTeacher(), output="margins")
    batch = SiamesePairCollator(tiny_tokenizer)(rows.to_list())
    assert batch["labels"].shape == (3, 2) and batch["input_ids"].shape[:2] == (3, 4)


def test_bad_input_is_named():
    data = Dataset.from_dict(ROWS)
    with pytest.raises(ValueError, match=r"output='logits'; accepted: \['scores', 'margins'\]"):
        teacher_scores(data, LengthTeacher(), output="logits")
    labelled = data.add_column("label", [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="already has a 'label' column; pass overwrite=True"):
        teacher_scores(labelled, LengthTeacher())
    assert len(teacher_scores(labelled, LengthTeacher(), overwrite=True)["label"][0]) == 3
    pairs = Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"]})
    with pytest.raises(ValueError, match="output='margins' needs"):
        teacher_scores(pairs, LengthTeacher(), output="margins")
    with pytest.raises(ValueError, match="teacher is object; expected a cross-encoder"):
        teacher_scores(pairs, object())
    with pytest.raises(ValueError, match="expected a datasets.Dataset"):
        teacher_scores([("a", "b")], LengthTeacher())
    bad = Dataset.from_dict({"sentence1": ["a", None], "sentence2": ["b", "c"]})
    with pytest.raises(ValueError, match="row 1: column 'sentence1' holds None"):
        teacher_scores(bad, LengthTeacher())
