"""reranker_training_rows: hard negatives mined by a tiny random bi-encoder plus seeded random negatives, as labelled
pairs or tuples; never a positive of the query; bad input named."""

from __future__ import annotations

import pytest
from datasets import Dataset
from helpers import RERANK_DOCUMENTS

from hf_siamese.cross_encoder.data import reranker_training_rows
from hf_siamese.retrieval.mining.negatives import mine_hard_negatives

CORPUS = RERANK_DOCUMENTS[:10]
PAIRS = [
    ("who plays music", "a man plays the guitar"),
    ("who plays music", "someone sings a song"),  # a second positive of the same query
    ("what did the market do", "the stock market fell today"),
    ("food in the kitchen", "a woman cooks soup in the kitchen"),
]


def rows() -> Dataset:
    return Dataset.from_dict({"query": [q for q, _ in PAIRS], "positive": [p for _, p in PAIRS]})


def positives_of(query: str) -> set[str]:
    return {p for q, p in PAIRS if q == query}


def test_labelled_pairs_mix_hard_and_random_negatives(tiny_model, tiny_tokenizer):
    out = reranker_training_rows(
        rows(), tiny_model, CORPUS, num_negatives=2, random_negatives=2, tokenizer=tiny_tokenizer, shuffle=False
    )
    assert out.column_names == ["query", "document", "label"]
    assert len(out) == len(PAIRS) * 5
    assert out["label"] == [1.0, 0.0, 0.0, 0.0, 0.0] * len(PAIRS)
    for start in range(0, len(out), 5):
        group = out[start : start + 5]
        query = group["query"][0]
        assert set(group["query"]) == {query}
        negatives = group["document"][1:]
        assert len(set(negatives)) == 4
        assert not set(negatives) & positives_of(query)
    # the first negatives of each row are the mined ones
    mined = mine_hard_negatives(
        rows(), tiny_model, CORPUS, num_negatives=2, anchor_column="query", positive_column="positive",
        tokenizer=tiny_tokenizer, show_progress_bar=False,
    )  # fmt: skip
    assert [out[5 * i + 1]["document"] for i in range(len(PAIRS))] == mined["negative_1"]
    assert [out[5 * i + 2]["document"] for i in range(len(PAIRS))] == mined["negative_2"]


def test_tuples_are_seeded(tiny_model, tiny_tokenizer):
    def make(seed):
        return reranker_training_rows(
            PAIRS, tiny_model, {str(i): t for i, t in enumerate(CORPUS)}, num_negatives=1, random_negatives=3,
            output="tuples", tokenizer=tiny_tokenizer, seed=seed,
        )  # fmt: skip

    first = make(1)
    assert first.column_names == ["query", "positive", "negative_1", "negative_2", "negative_3", "negative_4"]
    assert len(first) == len(PAIRS)
    assert first.to_list() == make(1).to_list()
    assert first.to_list() != make(2).to_list()
    for row in first:
        negatives = [row[f"negative_{n}"] for n in range(1, 5)]
        assert not set(negatives) & positives_of(row["query"])


def test_random_negatives_only_need_no_bi_encoder():
    out = reranker_training_rows(PAIRS, None, CORPUS, num_negatives=0, random_negatives=3, output="tuples")
    assert len(out) == len(PAIRS)
    for row in out:
        assert not {row["negative_1"], row["negative_2"], row["negative_3"]} & positives_of(row["query"])


def test_bad_input_is_named(tiny_model):
    with pytest.raises(ValueError, match="num_negatives=0 and random_negatives=0"):
        reranker_training_rows(PAIRS, tiny_model, CORPUS, num_negatives=0, random_negatives=0)
    with pytest.raises(ValueError, match="output='lists'"):
        reranker_training_rows(PAIRS, tiny_model, CORPUS, output="lists")
    with pytest.raises(ValueError, match="needs a bi_encoder"):
        reranker_training_rows(PAIRS, None, CORPUS, num_negatives=2)
    with pytest.raises(ValueError, match="random_negatives=-1"):
        reranker_training_rows(PAIRS, None, CORPUS, random_negatives=-1)
    with pytest.raises(ValueError, match="row 1: the positive is 3"):
        reranker_training_rows([("q", "d"), ("q", 3)], None, CORPUS, num_negatives=0)
    with pytest.raises(ValueError, match="fewer than 3 random negatives"):
        reranker_training_rows(PAIRS, None, CORPUS[:2], num_negatives=0, random_negatives=3)
