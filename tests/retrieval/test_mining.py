"""Hard-negative mining: never the positive or a known positive; margin, max_score and the rank range respected. Every
corpus, a list too, goes through the one (streamed) implementation: embedded into a temporary folder."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SENTENCES, make_tiny_model
from datasets import Dataset

from hf_siamese.retrieval.mining.negatives import mine_hard_negatives

# Unit vectors at known angles from the anchor "q" (cosine = the first coordinate): documents d1 (0.99) .. d6 (0.0).
COSINES = {"p": 0.9, "p2": 0.97, "d1": 0.99, "d2": 0.95, "d3": 0.8, "d4": 0.6, "d5": 0.3, "d6": 0.0}


def unit(cosine: float) -> np.ndarray:
    vector = np.zeros(32, dtype=np.float32)  # the tiny model's dim; the scores live in the first two coordinates
    vector[:2] = cosine, np.sqrt(1 - cosine**2)
    return vector


class FakeModel:
    """The tiny model (its config and weights make the corpus folder's fingerprint), embedding texts to fixed vectors,
    so every score is known by hand."""

    def __init__(self) -> None:
        self.model = make_tiny_model()

    def __getattr__(self, name):
        return getattr(self.model, name)

    def encode(self, texts, prompt=None, **kwargs):
        return np.stack([unit(1.0) if t == "q" else unit(COSINES.get(t, 0.0)) for t in texts])


CORPUS = ["p", "p2", "d1", "d2", "d3", "d4", "d5", "d6"]


def mine(rows: dict, **kwargs) -> Dataset:
    return mine_hard_negatives(Dataset.from_dict(rows), FakeModel(), corpus=CORPUS, show_progress_bar=False, **kwargs)


def test_top_negatives_skip_the_positive_and_known_positives() -> None:
    # "q" has two positives (two rows); neither may be mined as a negative for either row.
    mined = mine({"anchor": ["q", "q"], "positive": ["p", "p2"]}, num_negatives=3)
    assert mined.column_names == ["anchor", "positive", "negative_1", "negative_2", "negative_3"]
    for row in mined:
        assert [row["negative_1"], row["negative_2"], row["negative_3"]] == ["d1", "d2", "d3"]  # by score


def test_margin_and_max_score_drop_likely_false_negatives() -> None:
    # Positive p scores 0.9; margin 0.05 drops everything above 0.85: d1 (0.99), d2 (0.95).
    mined = mine({"anchor": ["q"], "positive": ["p"]}, num_negatives=2, margin=0.05)
    assert [mined[0]["negative_1"], mined[0]["negative_2"]] == ["d3", "d4"]
    mined = mine({"anchor": ["q"], "positive": ["p"]}, num_negatives=2, max_score=0.7)
    assert [mined[0]["negative_1"], mined[0]["negative_2"]] == ["d4", "d5"]


def test_rank_range() -> None:
    # Ranking of q: d1, p2, d2, p, d3, d4, d5, d6 (ranks 0..7); range 3..6 holds p, d3, d4, of which p is positive.
    mined = mine({"anchor": ["q"], "positive": ["p"]}, num_negatives=2, range_min=3, range_max=6)
    assert [mined[0]["negative_1"], mined[0]["negative_2"]] == ["d3", "d4"]
    # Too few candidates left in the range: the row is dropped, and with no row left that is an error with the counts.
    with pytest.raises(ValueError, match=r"none of the 1 rows has 3 candidates left .*ranks 3..5 of 8 documents"):
        mine({"anchor": ["q"], "positive": ["p"]}, num_negatives=3, range_min=3, range_max=6)


def test_more_negatives_than_the_corpus_holds() -> None:
    with pytest.raises(ValueError, match=r"num_negatives=8 but the corpus has only 8 distinct documents; at most 7"):
        mine({"anchor": ["q"], "positive": ["p"]}, num_negatives=8)


def test_random_sampling_is_seeded_and_stays_in_the_candidates() -> None:
    rows = {"anchor": ["q"] * 20, "positive": ["p"] * 20}
    first = mine(rows, num_negatives=2, sampling="random", margin=0.05, seed=1)
    assert first.to_dict() == mine(rows, num_negatives=2, sampling="random", margin=0.05, seed=1).to_dict()
    drawn = {row[c] for row in first for c in ("negative_1", "negative_2")}
    assert drawn <= {"d3", "d4", "d5", "d6"} and len(drawn) > 2


def test_corpus_defaults_to_the_positives_and_the_model_is_real(tiny_tokenizer) -> None:
    model = make_tiny_model()
    model.tokenizer = tiny_tokenizer
    rows = Dataset.from_dict({"anchor": SENTENCES, "positive": SENTENCES[1:] + SENTENCES[:1]})
    mined = mine_hard_negatives(rows, model, num_negatives=2, show_progress_bar=False)
    assert len(mined) == len(SENTENCES)
    for row in mined:
        assert row["positive"] not in (row["negative_1"], row["negative_2"])
        assert {row["negative_1"], row["negative_2"]} <= set(rows["positive"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_negatives": 0}, r"num_negatives=0 must be a positive int"),
        ({"range_min": 4, "range_max": 2}, r"range_max=2 must be an int > range_min \(4\)"),
        ({"margin": -1}, r"margin=-1 must be a number >= 0"),
        ({"sampling": "best"}, r"sampling='best' is not one of \['top', 'random'\]"),
        ({"anchor_column": "question"}, r"column 'question' is not in the dataset"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mine({"anchor": ["q"], "positive": ["p"]}, **kwargs)


def test_empty_corpus_and_bad_rows() -> None:
    with pytest.raises(ValueError, match=r"the corpus is empty"):
        mine_hard_negatives(Dataset.from_dict({"anchor": ["q"], "positive": ["p"]}), FakeModel(), corpus=[])
    with pytest.raises(ValueError, match=r"row 1: column 'positive' holds None"):
        mine({"anchor": ["q", "q"], "positive": ["p", None]})


def test_embeddings_dir_keeps_the_folder_and_corpus_dir_is_its_deprecated_name(tmp_path) -> None:
    rows = {"anchor": ["q"], "positive": ["p"]}
    expected = mine(rows, num_negatives=2).to_dict()
    assert expected["negative_1"] == ["d1"]
    assert mine(rows, num_negatives=2, embeddings_dir=tmp_path / "emb").to_dict() == expected
    assert (tmp_path / "emb" / "corpus.json").is_file()  # kept, as 'hf-siamese embed -o' writes it
    with pytest.warns(FutureWarning, match=r"corpus_dir= is deprecated; use embeddings_dir="):
        assert mine(rows, num_negatives=2, corpus_dir=tmp_path / "emb").to_dict() == expected
    with pytest.raises(ValueError, match=r"give embeddings_dir= only"):
        mine(rows, num_negatives=2, corpus_dir=tmp_path / "a", embeddings_dir=tmp_path / "b")
