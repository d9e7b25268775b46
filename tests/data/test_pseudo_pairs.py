"""Pseudo pairs from unlabelled texts: crops are spans of 10-50% of the words, inverse cloze takes one sentence out
(kept in about 10% of the rows), `sentence` pairs a sentence with its whole passage; seeded; bad input named."""

from __future__ import annotations

import random

import pytest

from hf_siamese.data.pseudo_pairs import crop_pair, pseudo_pair_dataset, pseudo_pairs, split_sentences

PASSAGE = "Cells divide. The nucleus splits first! Then 3 new walls form? Dr. Smith saw it."


def test_split_sentences_without_nltk():
    assert split_sentences(PASSAGE) == ["Cells divide.", "The nucleus splits first!", "Then 3 new walls form?",
                                        "Dr. Smith saw it."]  # fmt: skip
    assert split_sentences("  one sentence only  ") == ["one sentence only"]


def test_crops_are_spans_of_the_words():
    words = [f"w{i}" for i in range(40)]
    text = " ".join(words)
    rng = random.Random(0)
    for _ in range(50):
        first, second = crop_pair(text, rng)
        for span in (first, second):
            size = len(span.split())
            assert 4 <= size <= 20 and f" {span} " in f" {text} "
    assert crop_pair("too few words", rng) is None


def test_ict_takes_the_sentence_out_most_of_the_time():
    rows = list(pseudo_pairs([PASSAGE] * 400, "ict", seed=1))
    assert len(rows) == 400
    kept = sum(row["anchor"] in row["positive"] for row in rows)
    assert 15 <= kept <= 70  # about 10%
    assert all(row["anchor"] in split_sentences(PASSAGE) for row in rows)


def test_simcse_and_sentence_rows_and_seeds():
    texts = [PASSAGE, "short text", "A cat sat on the mat. It purred."]
    simcse = list(pseudo_pairs(texts, "simcse"))
    assert [row["anchor"] for row in simcse] == [row["positive"] for row in simcse] == [texts[0], texts[2]]
    sentence = list(pseudo_pairs(texts, "sentence", seed=3))
    assert [row["positive"] for row in sentence] == [texts[0], texts[2]]
    assert list(pseudo_pairs(texts * 5, "crop", seed=7)) == list(pseudo_pairs(texts * 5, "crop", seed=7))


def test_bad_input():
    with pytest.raises(ValueError, match=r"method='mlm'; accepted"):
        list(pseudo_pairs(["a b c d"], "mlm"))
    with pytest.raises(ValueError, match="a text is 3"):
        list(pseudo_pairs(["a b c d", 3], "crop"))
    with pytest.raises(ValueError, match="gives no ict pairs: ict needs passages of two sentences"):
        pseudo_pair_dataset(["one sentence with many words here"], "ict")
