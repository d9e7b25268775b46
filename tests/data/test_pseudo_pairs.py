"""Pseudo pairs from unlabelled texts: crops are spans of 10-50% of the words, inverse cloze takes one sentence out
(kept in about 10% of the rows), `sentence` pairs a sentence with its whole passage, `title` a title with its body;
seeded; the corpus read lazily (titles from the same rows); bad input named."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from hf_siamese.data.pseudo_pairs import corpus_texts, crop_pair, pseudo_pairs, split_sentences
from hf_siamese.data.readers import DataFormatError

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
    with pytest.raises(ValueError, match=r"a text is 'a b c d'; title expects \(title, body\) pairs of strings"):
        list(pseudo_pairs(["a b c d"], "title"))
    with pytest.raises(ValueError, match=r"a text is \('t', 'a b c d'\); crop expects strings"):
        list(pseudo_pairs([("t", "a b c d")], "crop"))


def test_title_rows():
    items = [("Cell division", "The nucleus splits and walls form."), ("  ", "A body with no title here."),
             ("Short", "too short")]  # fmt: skip
    assert list(pseudo_pairs(items, "title")) == [
        {"anchor": "Cell division", "positive": "The nucleus splits and walls form."}
    ]


def test_corpus_texts_reads_titles_from_the_same_rows(tmp_path):
    rows = [{"title": f"T{i}", "text": f"body {i}" if i != 2 else "  "} for i in range(5)]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert list(corpus_texts(tmp_path / "c.jsonl", max_texts=3)) == ["body 0", "body 1", "body 3"]
    titled = list(corpus_texts(tmp_path / "c.jsonl", title_column="title"))
    assert titled == [("T0", "body 0"), ("T1", "body 1"), ("T3", "body 3"), ("T4", "body 4")]
    endless = (f"text {i}" for i in itertools.count())  # read lazily: an endless source gives its first texts
    assert list(corpus_texts(endless, max_texts=2)) == ["text 0", "text 1"]


def test_corpus_texts_without_a_title_column(tmp_path):
    (tmp_path / "c.txt").write_text("one\ntwo\n")
    with pytest.raises(ValueError, match=r"title_column='title': text_column / id_column .* not to \.txt"):
        corpus_texts(tmp_path / "c.txt", title_column="title")
    with pytest.raises(ValueError, match="title_column='title': titles are read from a table or dataset column"):
        corpus_texts(["one", "two"], title_column="title")
    (tmp_path / "c.jsonl").write_text('{"text": "body"}\n')
    with pytest.raises(DataFormatError, match="has no column 'title'"):
        list(corpus_texts(tmp_path / "c.jsonl", title_column="title"))
