"""Augmented SBERT's silver pairs: nearest-neighbour pairs of the gold sentences (each unordered pair once, gold pairs
left out) checked against a brute-force reference, labelled by the teacher and mapped to the gold range; bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import make_tiny_model

from hf_siamese.cross_encoder.augment import neighbour_pairs, silver_pairs

SENTENCES = [
    f"{a} {b}" for a in ("a dog runs", "music plays", "the market fell") for b in ("today", "in the park", "!")
]


class LengthRatio:
    """A sigmoid-like teacher: the shorter text's length over the longer's (in [0, 1])."""

    num_labels = 1

    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        return np.array([min(len(a), len(b)) / max(len(a), len(b)) for a, b in pairs], dtype=np.float32)


@pytest.fixture
def bi(tiny_tokenizer):
    model = make_tiny_model()
    model.tokenizer = tiny_tokenizer
    return model


def test_neighbour_pairs_match_brute_force(bi):
    embeddings = torch.nn.functional.normalize(bi.encode(SENTENCES), dim=-1)
    similarity = embeddings @ embeddings.T
    expected = set()
    for i in range(len(SENTENCES)):
        order = [j for j in torch.argsort(similarity[i], descending=True).tolist() if j != i][:2]
        expected.update(frozenset((SENTENCES[i], SENTENCES[j])) for j in order)
    gold = [(SENTENCES[0], SENTENCES[1])]
    pairs = neighbour_pairs(SENTENCES, bi, 2, exclude=gold)
    assert {frozenset(p) for p in pairs} == expected - {frozenset(gold[0])}
    assert len(pairs) == len({frozenset(p) for p in pairs})  # each unordered pair once


def test_silver_pairs_are_labelled_on_the_gold_range(bi):
    silver = silver_pairs(SENTENCES + SENTENCES[:2], bi, LengthRatio(), 2, score_range=(0.0, 5.0))
    assert silver.column_names == ["sentence1", "sentence2", "score"]
    for a, b, score in zip(silver["sentence1"], silver["sentence2"], silver["score"], strict=True):
        assert score == pytest.approx(5 * min(len(a), len(b)) / max(len(a), len(b)), rel=1e-5)
    everything = {frozenset(p) for p in itertools.combinations(SENTENCES, 2)}
    assert {frozenset(p) for p in zip(silver["sentence1"], silver["sentence2"], strict=True)} <= everything


class Logits(LengthRatio):
    def predict(self, pairs, batch_size=32, show_progress_bar=False):
        return super().predict(pairs) * 10 - 5


def test_bad_input_is_named(bi):
    with pytest.raises(ValueError, match="neighbours=0: expected a positive int"):
        neighbour_pairs(SENTENCES, bi, 0)
    with pytest.raises(ValueError, match="1 distinct sentence"):
        neighbour_pairs(["a", "a"], bi)
    with pytest.raises(ValueError, match="a sentence is 3"):
        neighbour_pairs(["a", 3], bi)
    with pytest.raises(ValueError, match=r"score_range=\(5, 0\)"):
        silver_pairs(SENTENCES, bi, LengthRatio(), score_range=(5, 0))
    with pytest.raises(ValueError, match=r"not \[0, 1\]; give a cross-encoder with a sigmoid"):
        silver_pairs(SENTENCES, bi, Logits())
    with pytest.raises(ValueError, match="every sampled pair is a gold pair"):
        silver_pairs(SENTENCES[:2], bi, LengthRatio(), 1, gold_pairs=[(SENTENCES[1], SENTENCES[0])])
