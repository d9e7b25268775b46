"""Similar pairs and clusters of a corpus end to end (embed into shards, stack, search, texts back), and the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import SENTENCES, make_tiny_model
from datasets import Dataset

from hf_siamese.cli import main
from hf_siamese.retrieval.index.matrix import corpus_matrix
from hf_siamese.retrieval.similar import find_clusters, find_similar
from hf_siamese.storage import write_rows

# Exact repeats score 1.0 whatever the (random) model: the pairs above 0.9999 are known by hand.
LINES = [SENTENCES[0], SENTENCES[1], SENTENCES[0], SENTENCES[2], SENTENCES[1], SENTENCES[0], SENTENCES[3]]
REPEATS = {(0, 2), (0, 5), (2, 5), (1, 4)}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "news.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def test_find_similar_gives_the_repeats_with_texts(corpus: Path, tmp_path: Path, tiny_tokenizer) -> None:
    rows = find_similar(
        make_tiny_model(), str(corpus), tmp_path / "emb", threshold=0.9999, top_k=3, tokenizer=tiny_tokenizer,
        shard_size=3,
    )  # fmt: skip
    assert {(r["id_1"], r["id_2"]) for r in rows} == REPEATS
    assert all(r["text_1"] == r["text_2"] == LINES[r["id_1"]] and r["score"] >= 0.9999 for r in rows)


def test_find_clusters_by_threshold_and_by_k(corpus: Path, tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    rows = find_clusters(model, str(corpus), tmp_path / "emb", threshold=0.9999, tokenizer=tiny_tokenizer)
    groups: dict[int, list[int]] = {}
    for row in rows:
        groups.setdefault(row["cluster"], []).append(row["id"])
    assert list(groups.values()) == [[0, 2, 5], [1, 4]] and rows[0]["size"] == 3
    pytest.importorskip("faiss")
    every = find_clusters(model, str(corpus), tmp_path / "emb", k=2, min_size=1, tokenizer=tiny_tokenizer)
    assert sorted(row["id"] for row in every) == list(range(len(LINES)))
    with pytest.raises(ValueError, match="either threshold= .* or k="):
        find_clusters(model, str(corpus), tmp_path / "emb", threshold=0.9, k=2, tokenizer=tiny_tokenizer)


def test_corpus_matrix_is_stacked_once(corpus: Path, tmp_path: Path, tiny_tokenizer) -> None:
    find_similar(make_tiny_model(), str(corpus), tmp_path / "emb", threshold=0.99, tokenizer=tiny_tokenizer)
    stacked = tmp_path / "emb" / "vectors.npy"
    before = stacked.stat().st_mtime_ns
    ids, vectors = corpus_matrix(tmp_path / "emb")
    assert ids == list(range(len(LINES))) and vectors.shape == (len(LINES), 32)
    assert stacked.stat().st_mtime_ns == before


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_write_rows(tmp_path: Path, suffix: str) -> None:
    rows = [{"id_1": 0, "id_2": 2, "score": 1.0, "text_1": 'a "b", c', "text_2": "a\tb"}]
    path = tmp_path / f"out{suffix}"
    write_rows(path, rows, ("id_1", "id_2", "score", "text_1", "text_2"))
    if suffix == ".jsonl":
        assert json.loads(path.read_text(encoding="utf-8")) == rows[0]
    else:
        with open(path, encoding="utf-8", newline="") as handle:
            read = list(csv.DictReader(handle, delimiter="\t" if suffix == ".tsv" else ","))
        assert read[0]["text_1"] == 'a "b", c' and read[0]["text_2"] == "a\tb"
    with pytest.raises(ValueError, match=r"must end in one of .csv, .json, .jsonl, .tsv"):
        write_rows(tmp_path / "out.xlsx", rows, ("id_1",))


def _saved_model(tmp_path: Path, tiny_tokenizer) -> str:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    return str(tmp_path / "model")


def test_cli_similar_and_cluster(corpus: Path, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    model = _saved_model(tmp_path, tiny_tokenizer)
    pairs = tmp_path / "pairs.csv"
    common = ["--model", model, "--threshold", "0.9999", "--device", "cpu"]
    assert main(["similar", str(corpus), "-o", str(pairs), *common]) == 0
    with open(pairs, encoding="utf-8", newline="") as handle:
        assert {(int(r["id_1"]), int(r["id_2"])) for r in csv.DictReader(handle)} == REPEATS
    assert "4 pairs with cosine >= 0.9999" in capsys.readouterr().out
    groups = tmp_path / "groups.jsonl"
    assert main(["cluster", str(corpus), "-o", str(groups), *common]) == 0
    members = [json.loads(line) for line in groups.read_text(encoding="utf-8").splitlines()]
    assert [m["id"] for m in members] == [0, 2, 5, 1, 4]
    assert (tmp_path / "groups.jsonl.embeddings" / "corpus.json").exists()


def test_cli_bad_output_fails_before_embedding(corpus: Path, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    model = _saved_model(tmp_path, tiny_tokenizer)
    assert main(["similar", str(corpus), "-o", str(tmp_path / "pairs.xlsx"), "--model", model]) == 1
    assert "must end in one of .csv, .json, .jsonl, .tsv" in capsys.readouterr().err
    assert not (tmp_path / "pairs.xlsx.embeddings").exists()
    assert main(["similar", str(corpus), "-o", str(tmp_path / "p.csv"), "--model", model, "--threshold", "2"]) == 1
    assert "threshold=2.0 is outside the range of cosine scores" in capsys.readouterr().err
    assert not (tmp_path / "p.csv.embeddings").exists()


def test_approximate_neighbours_through_a_faiss_index(corpus: Path, tmp_path: Path, tiny_tokenizer) -> None:
    pytest.importorskip("faiss")
    rows = find_similar(
        make_tiny_model(), str(corpus), tmp_path / "emb", threshold=0.9999, top_k=3, tokenizer=tiny_tokenizer,
        approximate=True,
    )  # fmt: skip
    assert {(r["id_1"], r["id_2"]) for r in rows} == REPEATS
    info = json.loads((tmp_path / "emb" / "ann" / "ann.json").read_text(encoding="utf-8"))
    assert info["count"] == len(LINES)


def test_the_folders_own_shard_size_and_a_hub_id(corpus: Path, tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    model = make_tiny_model()
    find_similar(model, str(corpus), tmp_path / "emb", threshold=0.9999, tokenizer=tiny_tokenizer, shard_size=3)
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "emb").glob("shard-*.parquet")}
    assert len(stamps) == 3
    # without shard_size: the folder's own (3, not 10,000), so it is reused, not refused
    rows = find_clusters(model, str(corpus), tmp_path / "emb", threshold=0.9999, tokenizer=tiny_tokenizer)
    assert [row["id"] for row in rows] == [0, 2, 5, 1, 4]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "emb").glob("shard-*.parquet")} == stamps
    with pytest.raises(ValueError, match=r"shard_size"):
        find_similar(model, str(corpus), tmp_path / "emb", threshold=0.9999, tokenizer=tiny_tokenizer, shard_size=4)
    # a Hub dataset id: opened once, though the corpus is read twice (embedding, then the texts of the pairs)
    calls = []

    def load_dataset(path, name=None, split=None, streaming=False):
        calls.append((path, name, split, streaming))
        return Dataset.from_dict({"text": LINES}).to_iterable_dataset()

    monkeypatch.setattr("datasets.load_dataset", load_dataset)
    rows = find_similar(model, "someone/news", tmp_path / "hub", threshold=0.9999, top_k=3, tokenizer=tiny_tokenizer)
    assert {(r["id_1"], r["id_2"]) for r in rows} == REPEATS and rows[0]["text_1"] in LINES
    assert calls == [("someone/news", None, "train", True)]
