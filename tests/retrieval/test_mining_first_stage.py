"""Hard-negative mining from a lexical (BM25) or hybrid (reciprocal-rank fusion) first stage: the rows of a
brute-force reference over bm25s's own scores and the model's, the model's similarity still filtering (margin,
max_score), the corpus embedded only where needed, the BM25 index kept in --embeddings-dir, and bad input named."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model
from datasets import Dataset

from hf_siamese.retrieval import exact_search
from hf_siamese.retrieval.index.lexical import LexicalSettings
from hf_siamese.retrieval.mining import corpus as mining_corpus
from hf_siamese.retrieval.mining.negatives import mine_hard_negatives

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

STOPWORDS = {"a", "is", "are", "the", "an", "on", "in", "of", "and"}


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 7)))


@pytest.fixture(scope="module")
def data() -> tuple[Dataset, list[str]]:
    """20 rows over a 45-line corpus: repeated anchors, positives in and out of the corpus, repeated documents."""
    rng = random.Random(5)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(40)))
    anchors = [_sentence(rng) for _ in range(20)]
    anchors[3] = anchors[2]  # two positives of one anchor
    anchors[7] = corpus[10]  # an anchor that is a document
    positives = [rng.choice(corpus) if i % 3 else _sentence(rng) for i in range(20)]
    return Dataset.from_dict({"anchor": anchors, "positive": positives}), corpus + corpus[:5]


@pytest.fixture(scope="module")
def model():
    return make_tiny_model()


def _terms(texts: list[str]) -> list[list[str]]:
    stemmer = Stemmer.Stemmer("english")
    return bm25s.tokenize(texts, stopwords="english", stemmer=stemmer, show_progress=False, return_ids=False)


def lexical_ranking(corpus: list[str], query: str) -> list[str]:
    """The distinct texts sharing a term with `query`, by bm25s's Lucene scores (ties: the earlier text)."""
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(
        bm25s.tokenize(corpus, stopwords="english", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    )
    terms = [term for term in _terms([query])[0] if term in retriever.vocab_dict]
    scores = retriever.get_scores(terms) if terms else np.zeros(len(corpus))
    first = {text: row for row, text in reversed(list(enumerate(corpus)))}
    return sorted((t for t, row in first.items() if scores[row] > 0), key=lambda t: (-scores[first[t]], first[t]))


def dense_ranking(model, tokenizer, corpus: list[str], query: str) -> list[str]:
    documents = list(dict.fromkeys(corpus))
    encode = {"tokenizer": tokenizer, "convert_to_numpy": True, "show_progress_bar": False}
    _, ranked = exact_search(
        model.encode([query], **encode), model.encode(documents, **encode), len(documents), model.config.similarity
    )
    return [documents[i] for i in ranked[0].tolist()]


def rrf(dense: list[str], lexical: list[str]) -> list[str]:
    """Reciprocal-rank fusion by hand: 1 / (60 + rank) summed over the lists holding a text; ties to the dense list."""
    d_rank = {t: r for r, t in enumerate(dense, 1)}
    l_rank = {t: r for r, t in enumerate(lexical, 1)}
    score = {t: sum(1 / (60 + ranks[t]) for ranks in (d_rank, l_rank) if t in ranks) for t in {*dense, *lexical}}
    return sorted(score, key=lambda t: (-score[t], d_rank.get(t, len(dense) + 1)))


def brute_force(rows: Dataset, ranking, num_negatives: int = 3, range_min: int = 0, range_max: int | None = None):
    """`mine_hard_negatives`' rules (no score filter, top sampling) over `ranking(anchor)`, every distinct text."""
    range_max = range_max or range_min + max(100, 10 * num_negatives)
    anchors, positives = list(rows["anchor"]), list(rows["positive"])
    result: dict[str, list] = {"anchor": [], "positive": [], **{f"negative_{n + 1}": [] for n in range(num_negatives)}}
    for anchor, positive in zip(anchors, positives, strict=True):
        excluded = {anchor} | {p for a, p in zip(anchors, positives, strict=True) if a == anchor}
        candidates = [t for t in ranking(anchor)[range_min:range_max] if t not in excluded]
        if len(candidates) < num_negatives:
            continue
        result["anchor"].append(anchor)
        result["positive"].append(positive)
        for n, text in enumerate(candidates[:num_negatives]):
            result[f"negative_{n + 1}"].append(text)
    return result


class CountingModel:
    """The tiny model, counting the texts it embeds."""

    def __init__(self, model) -> None:
        self.model, self.texts = model, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def encode(self, texts, *args, **kwargs):
        self.texts += len(texts)
        return self.model.encode(texts, *args, **kwargs)


@pytest.mark.parametrize("settings", [{}, {"num_negatives": 2, "range_min": 1, "range_max": 6}], ids=["top", "range"])
def test_lexical_negatives_are_bm25s_ranking(data, model, tiny_tokenizer, settings: dict) -> None:
    rows, corpus = data
    counting = CountingModel(model)
    mined = mine_hard_negatives(
        rows, counting, corpus, negatives_from="lexical", tokenizer=tiny_tokenizer, show_progress_bar=False, **settings
    ).to_dict()
    assert mined == brute_force(rows, lambda anchor: lexical_ranking(corpus, anchor), **settings)
    assert len(mined["anchor"]) >= 8
    assert counting.texts == 0  # BM25 alone, no score filter: nothing is embedded
    for n in range(settings.get("num_negatives", 3)):  # every negative shares a (non-stopword) word with its anchor
        for anchor, negative in zip(mined["anchor"], mined[f"negative_{n + 1}"], strict=True):
            assert set(_terms([anchor])[0]) & set(_terms([negative])[0])


def test_hybrid_negatives_fuse_the_dense_and_lexical_rankings(data, model, tiny_tokenizer) -> None:
    rows, corpus = data
    depth = 8  # each first stage's best 8 distinct texts are fused, then ranks 0..7 of the fusion are the candidates

    def ranking(anchor: str) -> list[str]:
        dense = dense_ranking(model, tiny_tokenizer, corpus, anchor)[:depth]
        return rrf(dense, lexical_ranking(corpus, anchor)[:depth])

    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, "num_negatives": 3, "range_max": depth}
    mined = mine_hard_negatives(rows, model, corpus, negatives_from="hybrid", **common).to_dict()
    expected = brute_force(rows, ranking, num_negatives=3, range_max=depth)
    assert mined == expected and len(expected["anchor"]) >= 15
    dense = mine_hard_negatives(rows, model, corpus, **common).to_dict()
    lexical = mine_hard_negatives(rows, model, corpus, negatives_from="lexical", **common).to_dict()
    assert mined not in (dense, lexical)


class FakeModel:
    """The tiny model's config, embedding texts to unit vectors at known cosines from the anchor "red car"."""

    COSINES = {"red car": 1.0, "red car fast": 0.9, "red car old": 0.99, "red bus": 0.95, "car wash": 0.5}

    def __init__(self) -> None:
        self.model = make_tiny_model()

    def __getattr__(self, name):
        return getattr(self.model, name)

    def encode(self, texts, prompt=None, **kwargs):
        vectors = np.zeros((len(texts), 32), dtype=np.float32)
        cosines = np.array([self.COSINES.get(t, 0.0) for t in texts])
        vectors[:, 0], vectors[:, 1] = cosines, np.sqrt(1 - cosines**2)
        return vectors


def test_margin_and_max_score_use_the_model_whatever_ranks(tmp_path: Path) -> None:
    rows = Dataset.from_dict({"anchor": ["red car"], "positive": ["red car fast"]})
    corpus = ["blue sky", "red car old", "red bus", "car wash", "red car fast", "green tree"]

    def mine(**kwargs) -> list[str]:
        mined = mine_hard_negatives(rows, FakeModel(), corpus, num_negatives=1, show_progress_bar=False, **kwargs)
        return mined["negative_1"]

    assert mine(negatives_from="lexical") == ["red car old"]  # BM25's best: both words, then red bus, car wash
    assert mine() == ["red car old"]  # the model's best (0.99)
    # the positive scores 0.9: margin 0.05 drops the model's 0.99 and 0.95, in the BM25 order "car wash" is next
    assert mine(negatives_from="lexical", margin=0.05) == ["car wash"]
    assert mine(negatives_from="lexical", max_score=0.97) == ["red bus"]
    assert mine(negatives_from="hybrid", margin=0.05) == ["car wash"]
    assert mine(margin=0.05) == ["car wash"]
    # too few lexical candidates left (documents sharing no word are none): the named error
    with pytest.raises(ValueError, match=r"none of the 1 rows has 1 candidates left .* by lexical, margin=0.5"):
        mine(negatives_from="lexical", margin=0.5)


def test_embeddings_dir_keeps_the_bm25_index(data, model, tiny_tokenizer, tmp_path: Path) -> None:
    rows, corpus = data
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, "num_negatives": 2}
    expected = mine_hard_negatives(rows, model, corpus, negatives_from="lexical", **common).to_dict()
    kept = tmp_path / "emb"
    counting = CountingModel(model)
    mined = mine_hard_negatives(rows, counting, corpus, negatives_from="lexical", embeddings_dir=kept, **common)
    assert mined.to_dict() == expected
    assert counting.texts == len(corpus)  # the folder is an embedded corpus, as always; no anchor is embedded
    assert (kept / "corpus.json").is_file() and (kept / "lexical" / "lexical.json").is_file()
    # a later run rebuilds the index in place, and a dense run reuses the embeddings beside it
    assert mine_hard_negatives(rows, model, corpus, negatives_from="hybrid", embeddings_dir=kept, **common)
    counting.texts = 0
    dense = mine_hard_negatives(rows, counting, corpus, embeddings_dir=kept, **common).to_dict()
    assert dense == mine_hard_negatives(rows, model, corpus, **common).to_dict()
    assert counting.texts < len(corpus)  # the anchors (and the positives outside the corpus) only
    # what is in the way of the index is named, not removed
    other = tmp_path / "other"
    mine_hard_negatives(rows, model, corpus, embeddings_dir=other, **common)
    (other / "lexical").mkdir()
    (other / "lexical" / "mine.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"lexical' is in the way of the corpus's lexical index"):
        mine_hard_negatives(rows, model, corpus, negatives_from="lexical", embeddings_dir=other, **common)
    assert (other / "lexical" / "mine.txt").is_file()


def test_lexical_settings_reach_the_index(model, tiny_tokenizer) -> None:
    rows = Dataset.from_dict({"anchor": ["the cat plays"], "positive": ["a cat"]})
    corpus = ["a cat", "the dog", "cats play", "music"]
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, "num_negatives": 1}
    assert mine_hard_negatives(rows, model, corpus, negatives_from="lexical", **common)["negative_1"] == ["cats play"]
    whole_words = LexicalSettings(stemmer=False, stopwords=False)
    mined = mine_hard_negatives(rows, model, corpus, negatives_from="lexical", lexical_settings=whole_words, **common)
    assert mined["negative_1"] == ["the dog"]  # "the" is a term now, "cats" / "play" no longer match


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"negatives_from": "bm25"}, ValueError, r"negatives_from='bm25'; accepted: 'dense', 'lexical', 'hybrid'"),
        ({"negatives_from": None}, ValueError, r"negatives_from=None; accepted"),
        (
            {"lexical_settings": LexicalSettings()},
            ValueError,
            r"--negatives-from dense\): lexical_settings, BM25's .* apply to the lexical and hybrid",
        ),
        ({"negatives_from": "lexical", "approximate": True}, ValueError, r"approximate=True is the dense search's"),
        ({"negatives_from": "hybrid", "lexical_settings": {"k1": 1}}, ValueError, r"expected a LexicalSettings"),
    ],
    ids=["unknown", "none", "settings-with-dense", "approximate-lexical", "settings-dict"],
)
def test_bad_first_stage(kwargs: dict, error: type, message: str) -> None:
    rows = Dataset.from_dict({"anchor": ["red car"], "positive": ["red car fast"]})
    with pytest.raises(error, match=message):
        mine_hard_negatives(rows, FakeModel(), ["a", "b", "c"], show_progress_bar=False, **kwargs)


@pytest.mark.parametrize("negatives_from", ["lexical", "hybrid"])
def test_missing_bm25s_is_one_import_error(monkeypatch: pytest.MonkeyPatch, negatives_from: str) -> None:
    monkeypatch.setitem(sys.modules, "bm25s", None)
    rows = Dataset.from_dict({"anchor": ["red car"], "positive": ["red car fast"]})
    calls = []
    monkeypatch.setattr(mining_corpus, "mine_corpus", lambda *args, **kwargs: calls.append(1))
    with pytest.raises(ImportError, match=r"need bm25s and PyStemmer \(bm25s is missing\): pip install 'hf-siamese\["):
        mine_hard_negatives(rows, FakeModel(), ["a", "b"], negatives_from=negatives_from, show_progress_bar=False)
    assert not calls  # before any work


def test_fused_rankings_count_a_repeated_text_once() -> None:
    # rows 0 and 1 hold one text (key 7): the dense list has row 0, the lexical list row 1; one candidate, row 0
    keys = np.array([7, 7, 8, 9], dtype=np.int64)
    dense = [[(0, 7, 0.9), (2, 8, 0.5)]]
    lexical = [[(3, 9, 4.0), (1, 7, 2.0)]]
    (fused,) = mining_corpus._fused_rankings(dense, lexical, keys)
    assert [(row, key) for row, key, _ in fused] == [(0, 7), (3, 9), (2, 8)]
    assert fused[0][2] == pytest.approx(1 / 61 + 1 / 62)
    assert mining_corpus._fused_rankings([[]], [[]], keys) == [[]]
