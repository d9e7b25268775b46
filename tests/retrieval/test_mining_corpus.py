"""Hard-negative mining over a streamed corpus (shards, memory-mapped vectors, neighbour search), its one
implementation: the rows of a brute-force reference (every anchor against every distinct text) for every kind of
source, shards reused by a later run, and the bad inputs named."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model
from datasets import Dataset

from hf_siamese.data.readers import DatasetLoadError
from hf_siamese.metrics import paired_similarities
from hf_siamese.retrieval import corpus_search, exact_search
from hf_siamese.retrieval.mining import corpus as mining_corpus
from hf_siamese.retrieval.mining.negatives import mine_hard_negatives


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 8)))


@pytest.fixture(scope="module")
def data() -> tuple[Dataset, list[str]]:
    """25 rows over a 65-line corpus: repeated anchors, positives in and out of the corpus, repeated documents."""
    rng = random.Random(0)
    corpus = [_sentence(rng) for _ in range(60)]
    anchors = [_sentence(rng) for _ in range(25)]
    anchors[3] = anchors[2]  # two positives of one anchor: neither is a negative of either row
    anchors[7] = corpus[10]  # an anchor that is a document: never its own negative
    positives = [rng.choice(corpus) if i % 3 else _sentence(rng) for i in range(25)]
    return Dataset.from_dict({"anchor": anchors, "positive": positives}), corpus + corpus[:5]


@pytest.fixture(scope="module")
def model():
    return make_tiny_model()


def brute_force(rows: Dataset, model, corpus: list[str], tokenizer, **settings) -> dict[str, list]:
    """`mine_hard_negatives`' rules by exhaustive search: each anchor scored against every distinct corpus text,
    ranks `range_min`..`range_max` of that full ranking, minus the anchor and all its positives, then `max_score`,
    `margin` (against the row's positive), then the top or a seeded random draw; rows left short are dropped."""
    num_negatives, range_min = settings.get("num_negatives", 3), settings.get("range_min", 0)
    range_max = settings.get("range_max") or range_min + max(100, 10 * num_negatives)
    margin, max_score = settings.get("margin"), settings.get("max_score")
    documents = list(dict.fromkeys(corpus))
    anchors, positives = list(rows["anchor"]), list(rows["positive"])
    encode = {"tokenizer": tokenizer, "convert_to_numpy": True, "show_progress_bar": False}
    document_vectors, anchor_vectors = model.encode(documents, **encode), model.encode(anchors, **encode)
    similarity = model.config.similarity
    scores, ranked = exact_search(anchor_vectors, document_vectors, top_k=len(documents), similarity=similarity)
    positive_scores = paired_similarities(anchor_vectors, model.encode(positives, **encode), similarity)
    rng = random.Random(settings.get("seed", 42))
    result: dict[str, list] = {"anchor": [], "positive": [], **{f"negative_{n + 1}": [] for n in range(num_negatives)}}
    for row, (anchor, positive) in enumerate(zip(anchors, positives, strict=True)):
        excluded = {anchor} | {p for a, p in zip(anchors, positives, strict=True) if a == anchor}
        window = zip(ranked[row, range_min:range_max].tolist(), scores[row, range_min:range_max].tolist(), strict=True)
        candidates = [
            documents[i]
            for i, score in window
            if documents[i] not in excluded
            and not (max_score is not None and score > max_score)
            and not (margin is not None and score > float(positive_scores[row]) - margin)
        ]
        if len(candidates) < num_negatives:
            continue
        chosen = (
            candidates[:num_negatives]
            if settings.get("sampling", "top") == "top"
            else rng.sample(candidates, num_negatives)
        )
        result["anchor"].append(anchor)
        result["positive"].append(positive)
        for n, text in enumerate(chosen):
            result[f"negative_{n + 1}"].append(text)
    return result


SETTINGS = [
    {"num_negatives": 3},
    {"num_negatives": 2, "range_min": 2, "range_max": 20, "margin": 0.0},
    {"num_negatives": 3, "sampling": "random", "max_score": 0.99, "seed": 3},
]


@pytest.mark.parametrize("settings", SETTINGS, ids=["top", "range-margin", "random-max-score"])
def test_every_source_gives_the_brute_force_rows(data, model, tiny_tokenizer, tmp_path: Path, settings: dict) -> None:
    rows, corpus = data
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, **settings}
    expected = brute_force(rows, model, corpus, tiny_tokenizer, **settings)
    assert len(expected["anchor"]) >= 5 and len(set(expected["negative_1"])) > 3  # a result worth comparing
    # a list: embedded into a temporary folder
    assert mine_hard_negatives(rows, model, corpus, **common).to_dict() == expected
    # a list with a kept folder, shards of 16 rows (5 shards)
    kept = mine_hard_negatives(rows, model, corpus, embeddings_dir=tmp_path / "shards", shard_size=16, **common)
    assert kept.to_dict() == expected
    assert len(list((tmp_path / "shards").glob("shard-*.parquet"))) == 5
    # a text file (no folder: a temporary one), and a Dataset with its own text column
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    assert mine_hard_negatives(rows, model, str(tmp_path / "corpus.txt"), **common).to_dict() == expected
    table = Dataset.from_dict({"body": corpus})
    assert mine_hard_negatives(rows, model, table, text_column="body", **common).to_dict() == expected


def test_the_default_corpus_is_the_distinct_positives(data, model, tiny_tokenizer) -> None:
    rows, _ = data
    # every row twice: the positives repeat, and each anchor has its positive twice
    rows = Dataset.from_dict({"anchor": list(rows["anchor"]) * 2, "positive": list(rows["positive"]) * 2})
    expected = brute_force(rows, model, list(rows["positive"]), tiny_tokenizer, num_negatives=2)
    assert len(expected["anchor"]) == 50
    assert mine_hard_negatives(rows, model, num_negatives=2, tokenizer=tiny_tokenizer).to_dict() == expected


def test_a_hub_dataset_id_is_opened_once(data, model, tiny_tokenizer, monkeypatch) -> None:
    rows, corpus = data
    calls = []

    def load_dataset(path, name=None, split=None, streaming=False):
        calls.append((path, name, split, streaming))
        if path != "someone/docs":
            raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub")
        return Dataset.from_dict({"text": corpus}).to_iterable_dataset()

    monkeypatch.setattr("datasets.load_dataset", load_dataset)
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, "num_negatives": 3}
    mined = mine_hard_negatives(rows, model, "someone/docs", **common)
    assert mined.to_dict() == brute_force(rows, model, corpus, tiny_tokenizer, num_negatives=3)
    assert calls == [("someone/docs", None, "train", True)]  # read three times, loaded once
    with pytest.raises(DatasetLoadError, match=r"corpus 'nobody/nothing' is not a local file .* doesn't exist"):
        mine_hard_negatives(rows, model, "nobody/nothing", **common)


def test_approximate_search_gives_the_same_rows(data, model, tiny_tokenizer, tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    rows, corpus = data
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, "num_negatives": 3}
    expected = brute_force(rows, model, corpus, tiny_tokenizer, num_negatives=3)
    mined = mine_hard_negatives(rows, model, corpus, embeddings_dir=tmp_path / "c", approximate=True, **common)
    assert mined.to_dict() == expected  # below 100k texts the faiss index is Flat: exact
    assert (tmp_path / "c" / "ann" / "ann.json").is_file()


class CountingModel:
    """The tiny model, counting the texts it embeds."""

    def __init__(self, model) -> None:
        self.model, self.texts = model, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def encode(self, texts, *args, **kwargs):
        self.texts += len(texts)
        return self.model.encode(texts, *args, **kwargs)


def test_resumed_shards_are_reused(data, model, tiny_tokenizer, tmp_path: Path) -> None:
    rows, corpus = data
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False, "num_negatives": 3, "shard_size": 16}
    counting = CountingModel(model)
    first = mine_hard_negatives(rows, counting, corpus, embeddings_dir=tmp_path / "c", **common).to_dict()
    unique_anchors = len(set(rows["anchor"]))
    extra = len({p for p in rows["positive"] if p not in corpus})  # positives outside the corpus, embedded apart
    assert counting.texts == len(corpus) + unique_anchors + extra
    shards = sorted((tmp_path / "c").glob("shard-*.parquet"))
    stamps = {path.name: path.stat().st_mtime_ns for path in shards}
    # Run again on the same folder: no corpus text is embedded again, no shard rewritten.
    counting.texts = 0
    shard_size = common.pop("shard_size")  # the folder's own is used
    assert mine_hard_negatives(rows, counting, corpus, embeddings_dir=tmp_path / "c", **common).to_dict() == first
    assert counting.texts == unique_anchors + extra
    assert {path.name: path.stat().st_mtime_ns for path in shards} == stamps
    # A lost shard is the only one embedded again.
    shards[2].unlink()
    counting.texts = 0
    assert mine_hard_negatives(rows, counting, corpus, embeddings_dir=tmp_path / "c", **common).to_dict() == first
    assert counting.texts == shard_size + unique_anchors + extra
    assert shards[2].is_file() and all(stamps[p.name] == p.stat().st_mtime_ns for p in shards if p != shards[2])


def test_bad_corpus_inputs(data, model, tiny_tokenizer, tmp_path: Path) -> None:
    rows, corpus = data
    common = {"tokenizer": tiny_tokenizer, "show_progress_bar": False}
    # More negatives than distinct documents (65 lines, 60 distinct): an error before anything is embedded.
    with pytest.raises(ValueError, match=r"num_negatives=60 but the corpus has only 60 distinct documents; at most 59"):
        mine_hard_negatives(rows, model, corpus, embeddings_dir=tmp_path / "many", num_negatives=60, **common)
    assert not (tmp_path / "many").exists()
    # Enough documents, too few candidates left in every row's range
    with pytest.raises(ValueError, match=r"none of the 25 rows has 3 candidates left .*ranks 1..2 of 60 documents"):
        mine_hard_negatives(
            rows, model, corpus, embeddings_dir=tmp_path / "c", num_negatives=3, range_min=1, range_max=3, **common
        )
    # An empty corpus: a list, and a file of blank lines (named)
    with pytest.raises(ValueError, match=r"mine_hard_negatives: the corpus is empty"):
        mine_hard_negatives(rows, model, [], embeddings_dir=tmp_path / "empty", **common)
    (tmp_path / "blank.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"blank.txt.*has no rows"):
        mine_hard_negatives(rows, model, str(tmp_path / "blank.txt"), **common)
    # A folder embedded with another model: the difference is named, nothing changes there
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "c").iterdir()}
    other = make_tiny_model(seed=3)
    with pytest.raises(ValueError, match=r"holds corpus embeddings made differently: model \(same config, different"):
        mine_hard_negatives(rows, other, corpus, embeddings_dir=tmp_path / "c", num_negatives=3, **common)
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "c").iterdir()} == stamps
    # The embeddings folder itself is no corpus (no texts); a one-shot iterator cannot be read three times
    with pytest.raises(ValueError, match=r"holds corpus embeddings .* not the texts: pass the corpus itself"):
        mine_hard_negatives(rows, model, str(tmp_path / "c"), **common)
    with pytest.raises(ValueError, match=r"one-shot iterator"):
        mine_hard_negatives(rows, model, iter(corpus), embeddings_dir=tmp_path / "it", **common)


def test_small_helpers(tmp_path: Path) -> None:
    with corpus_search.work_folder(None) as folder:
        assert not folder.exists() and folder.parent.is_dir()
    assert not folder.parent.exists()


def test_rankings_skip_repeats_and_empty_slots_and_search_wider() -> None:
    # rows 0..9; rows 1 and 2 repeat the text of row 0, row 4 that of row 3; the search leaves slot 2 empty (-1)
    keys = np.array([10, 10, 10, 13, 13, 15, 16, 17, 18, 19], dtype=np.int64)
    asked = []

    def search(queries, k):
        asked.append(k)
        rows = np.tile(np.arange(k), (len(queries), 1))
        rows[:, 2] = -1
        return -rows.astype(np.float32), rows

    rankings = mining_corpus._distinct_rankings(search, np.zeros((2, 4), np.float32), keys, depth=4)
    assert [row for row, _, _ in rankings[0]] == [0, 3, 5, 6] and rankings[0] == rankings[1]
    assert rankings[0][1] == (3, 13, -3.0)
    assert asked == [4, 8]  # 4 rows held 2 distinct texts: asked again, for twice as many
    asked.clear()
    shallow = mining_corpus._distinct_rankings(search, np.zeros((1, 4), np.float32), keys, depth=9)
    assert asked == [9, 10] and [row for row, _, _ in shallow[0]] == [0, 3, 5, 6, 7, 8, 9]  # all there is
