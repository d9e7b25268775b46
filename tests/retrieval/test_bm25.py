"""BM25 against the formula written out by hand for a tiny corpus, top-k order, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_siamese.cross_encoder.augment import bm25_pairs
from hf_siamese.retrieval.bm25 import BM25, terms

DOCS = ["the cat sat on the mat", "a dog sat", "cats and dogs", "the the the cat"]


def reference(query: str, docs: list[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    tokenized = [terms(d) for d in docs]
    mean = sum(map(len, tokenized)) / len(docs)
    out = []
    for words in tokenized:
        total = 0.0
        for term in set(terms(query)):
            df = sum(term in other for other in tokenized)
            if not df:
                continue
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            tf = words.count(term)
            total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(words) / mean))
        out.append(total)
    return out


@pytest.mark.parametrize("query", ["the cat", "dog sat", "unknown words", "Cat, MAT!"])
def test_scores_match_the_formula(query):
    assert BM25(DOCS).scores([query])[0] == pytest.approx(reference(query, DOCS), rel=1e-5)


def test_top_k_is_best_first_in_chunks():
    index = BM25(DOCS)
    scores, found = index.top_k(["the cat", "dog sat", "cats"], 2, chunk=2)
    full = index.scores(["the cat", "dog sat", "cats"])
    assert found.shape == (3, 2)
    for row in range(3):
        assert np.all(np.diff(scores[row]) <= 0)
        assert scores[row] == pytest.approx(np.sort(full[row])[::-1][:2])


def test_bm25_pairs_pair_shared_words():
    sentences = ["red car on the road", "a red car", "soup in the kitchen", "kitchen soup is hot"]
    pairs = {frozenset(p) for p in bm25_pairs(sentences, 1)}
    assert frozenset(sentences[:2]) in pairs and frozenset(sentences[2:]) in pairs
    assert frozenset(sentences[:2]) not in {frozenset(p) for p in bm25_pairs(sentences, 1, exclude=[sentences[:2]])}


def test_bad_input():
    with pytest.raises(ValueError, match="no documents"):
        BM25([])
    with pytest.raises(ValueError, match="a document is 3"):
        BM25(["a", 3])
    with pytest.raises(ValueError, match="k1=0"):
        BM25(DOCS, k1=0)
    with pytest.raises(ValueError, match="k=0"):
        BM25(DOCS).top_k(["cat"], 0)
    with pytest.raises(ValueError, match="bm25 neighbours=0"):
        bm25_pairs(DOCS, 0)
