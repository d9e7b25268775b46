"""Augmented SBERT's BM25 sampling (`bm25_pairs`) on the project's one BM25 (`retrieval.lexical`, bm25s's Lucene
weighting): each sentence's nearest others by bm25s's own scores, itself and the gold pairs left out, sentences that
share no term paired with none, and bad input named."""

from __future__ import annotations

import sys

import pytest

from hf_siamese.cross_encoder.augment import bm25_pairs, check_sampling
from hf_siamese.retrieval.index.lexical import LexicalSettings

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

DOCS = [
    "the cat sat on the mat",
    "a dog sat on the mat",
    "cats and dogs play",
    "the cat and the cat",
    "red car on the road",
    "a red car",
    "soup in the kitchen",
    "kitchen soup is hot",
    "studies of cats",
]


def reference_pairs(sentences: list[str], neighbours: int) -> set[frozenset]:
    """Each sentence's `neighbours` best others by bm25s's Lucene scores (score > 0; ties: the earlier sentence)."""
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(bm25s.tokenize(sentences, stopwords="english", stemmer=stemmer, show_progress=False))
    tokenized = bm25s.tokenize(sentences, stopwords="english", stemmer=stemmer, show_progress=False, return_ids=False)
    pairs = set()
    for row, terms in enumerate(tokenized):
        scores = retriever.get_scores(terms) if terms else [0.0] * len(sentences)
        others = sorted((j for j in range(len(sentences)) if j != row and scores[j] > 0), key=lambda j: (-scores[j], j))
        pairs.update(frozenset((sentences[row], sentences[j])) for j in others[:neighbours])
    return pairs


@pytest.mark.parametrize("neighbours", [1, 2, 3])
def test_bm25_pairs_rank_by_bm25s_lucene_scores(neighbours: int) -> None:
    found = bm25_pairs(DOCS, neighbours)
    assert {frozenset(pair) for pair in found} == reference_pairs(DOCS, neighbours)
    assert len(found) == len({frozenset(pair) for pair in found})  # each unordered pair once
    assert all(DOCS.index(a) < DOCS.index(b) for a, b in found)  # in sentence order


def test_bm25_pairs_pair_shared_words_and_leave_out_gold_pairs() -> None:
    sentences = ["red car on the road", "a red car", "soup in the kitchen", "kitchen soup is hot"]
    pairs = {frozenset(p) for p in bm25_pairs(sentences, 1)}
    assert frozenset(sentences[:2]) in pairs and frozenset(sentences[2:]) in pairs
    excluded = {frozenset(p) for p in bm25_pairs(sentences, 1, exclude=[tuple(reversed(sentences[:2]))])}
    assert frozenset(sentences[:2]) not in excluded and frozenset(sentences[2:]) in excluded
    # repeated sentences are one sentence: never paired with themselves
    assert all(a != b for a, b in bm25_pairs(sentences + sentences[:2], 3))


def test_a_sentence_sharing_no_term_pairs_with_none() -> None:
    # the search finds fewer hits than asked (-1 rows), which must not pair with the last sentence
    sentences = ["red car", "a red car on the road", "zebra"]
    assert bm25_pairs(sentences, 2) == [("red car", "a red car on the road")]


def test_settings_reach_the_index() -> None:
    sentences = ["studies of cats", "he studied dogs", "the the the"]
    assert bm25_pairs(sentences, 1) == [("studies of cats", "he studied dogs")]  # stemmed: studi
    assert bm25_pairs(sentences, 1, settings=LexicalSettings(stemmer=False)) == []
    assert bm25_pairs(["the the", "the end"], 1, settings=LexicalSettings(stopwords=False)) == [("the the", "the end")]


def test_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="bm25 neighbours=0"):
        bm25_pairs(DOCS, 0)
    with pytest.raises(ValueError, match="a sentence is 3"):
        bm25_pairs(["a", 3])
    with pytest.raises(ValueError, match=r"1 distinct sentence\(s\)"):
        bm25_pairs(["one", "one"])
    monkeypatch.setitem(sys.modules, "bm25s", None)
    for call in (lambda: bm25_pairs(DOCS, 1), lambda: check_sampling(0, 2)):
        with pytest.raises(ImportError, match=r"pip install 'hf-siamese\[lexical\]'"):
            call()
    check_sampling(2, 0)  # the bi-encoder's sampling alone needs no bm25s
