"""The vector index beyond the exact path: an approximate index (with ids, calibration queries, parts) giving the
exact index's hits on a small corpus, a stopped build resumed from its shards, and folders that are not indexes named
with what opens them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model

import hf_siamese
from hf_siamese.retrieval.corpus import encode_corpus
from hf_siamese.retrieval.index import build as index_build
from hf_siamese.retrieval.stores import build_index

load_index = hf_siamese.load_index

_rng = random.Random(0)
CORPUS = list(dict.fromkeys(" ".join(_rng.choice(WORDS[:60]) for _ in range(_rng.randint(3, 9))) for _ in range(30)))
QUERIES = ["a dog in the park", "music", CORPUS[7], "the stock market fell today ."]


def _hits(index, model, tokenizer, top_k: int = 5) -> list[list[tuple]]:
    found = index.search(model, QUERIES, top_k=top_k, tokenizer=tokenizer)
    return [[(hit["rank"], hit["id"], hit["text"], round(hit["score"], 4)) for hit in hits] for hits in found]


def test_approximate_index_and_ids(tmp_path: Path, tiny_tokenizer) -> None:
    pytest.importorskip("faiss")
    model = make_tiny_model()
    reference = build_index(model, CORPUS, tmp_path / "ref", tokenizer=tiny_tokenizer, approximate=False)
    expected = _hits(reference, model, tiny_tokenizer)
    rows = [{"doc": f"d{i}", "body": text} for i, text in enumerate(CORPUS)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    index = build_index(
        model, str(tmp_path / "docs.jsonl"), tmp_path / "idx", text_column="body", id_column="doc",
        tokenizer=tiny_tokenizer, approximate=True, calibration_queries=QUERIES,
    )  # fmt: skip
    assert index.backend == "approximate" and (tmp_path / "idx" / "embeddings" / "ann" / "ann.json").is_file()
    assert index.info["ann"]["recall"]["measured_on"] == "calibration queries"
    assert index.info["ann"]["recall"]["queries"] == len(QUERIES)
    renamed = [[(rank, f"d{doc}", text, score) for rank, doc, text, score in hits] for hits in expected]
    assert _hits(load_index(tmp_path / "idx"), model, tiny_tokenizer) == renamed
    # without faiss the approximate index is searched exactly, with a warning
    from hf_siamese.retrieval.stores import folder as vector_index

    original = vector_index.faiss_available
    vector_index.faiss_available = lambda: False
    try:
        assert load_index(tmp_path / "idx").backend == "exact"
    finally:
        vector_index.faiss_available = original


def test_ivf_parts_give_the_hits_of_one_index(tmp_path: Path) -> None:
    """An IVF index built in parts of a few hundred rows (each written and freed) searches as one index."""
    pytest.importorskip("faiss")
    from hf_siamese.retrieval.index.ann_build import build_ann_index

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(3000, 16)).astype(np.float32)
    chunks = [vectors[start : start + 700] for start in range(0, 3000, 700)]
    queries = rng.normal(size=(20, 16)).astype(np.float32)
    whole = build_ann_index(chunks, tmp_path / "whole", factory="IVF16,Flat", nprobe=4)
    parts = build_ann_index(chunks, tmp_path / "parts", factory="IVF16,Flat", nprobe=4, part_bytes=300 * (64 + 8))
    assert whole.info["parts"] == 1 and parts.info["parts"] == 10 and len(parts) == 3000
    assert sorted(p.name for p in (tmp_path / "parts").glob("part-*.faiss"))[-1] == "part-00009.faiss"
    for a, b in zip(whole.search(queries, 10), parts.search(queries, 10), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(parts.search(queries, 3, rerank=10)[0], whole.search(queries, 3, rerank=10)[0])
    # calibration queries (not corpus rows) measure the recall; the count given up front is checked
    calibrated = build_ann_index(chunks, tmp_path / "cal", factory="IVF16,Flat", recall_queries=queries, count=3000)
    assert (
        calibrated.info["recall"]["measured_on"] == "calibration queries" and calibrated.info["recall"]["queries"] == 20
    )
    with pytest.raises(ValueError, match="count=2999 but the chunks gave 3000 rows"):
        build_ann_index(chunks, tmp_path / "bad", factory="IVF16,Flat", count=2999)
    with pytest.raises(ValueError, match=r"recall_queries have dim 8; the vectors have dim 16"):
        build_ann_index(chunks, tmp_path / "bad", factory="IVF16,Flat", recall_queries=queries[:, :8])


def _shards_before_stacking(patch: pytest.MonkeyPatch, what) -> list:
    """`what` of each shard of the index's embeddings when the build stacks them (and then deletes them)."""
    seen, stack = [], index_build.keep_one_copy

    def record(folder: Path) -> None:
        seen.extend(what(path) for path in sorted(folder.glob("shard-*.parquet")))
        stack(folder)

    patch.setattr(index_build, "keep_one_copy", record)
    return seen


def test_stopped_build_resumes_its_shards(tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    model = make_tiny_model()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(index_build, "corpus_matrix", stopped)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=8)
    monkeypatch.undo()
    shards = sorted((tmp_path / ".idx.building" / "embeddings").glob("shard-*.parquet"))
    stamps = [path.stat().st_mtime_ns for path in shards]
    assert len(shards) == 4 and not (tmp_path / "idx").exists()
    seen = _shards_before_stacking(monkeypatch, lambda path: path.stat().st_mtime_ns)
    build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=8)
    assert seen == stamps  # kept, not computed again
    with pytest.raises(ValueError, match=r"is an existing index; pass overwrite=True"):
        build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer)


def test_bad_folders(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer)
    (tmp_path / "idx" / "texts.arrow").unlink()
    with pytest.raises(ValueError, match=r"corrupt vector index .*texts.arrow missing"):
        load_index(tmp_path / "idx")
    # what 'embed' and build_ann_index write are not indexes: said, with what opens them
    encode_corpus(model, CORPUS, tmp_path / "shards", tokenizer=tiny_tokenizer)
    with pytest.raises(FileNotFoundError, match=r"holds corpus embeddings .* search --corpus FILE --embeddings-dir"):
        load_index(tmp_path / "shards")
    pytest.importorskip("faiss")
    from hf_siamese.retrieval.index.ann_build import build_ann_index

    build_ann_index(np.eye(4, dtype=np.float32), tmp_path / "ann", recall_queries=0)
    with pytest.raises(FileNotFoundError, match=r"is an ANN index .*load_ann_index"):
        load_index(tmp_path / "ann")


def test_an_embeddings_folder_is_reused_by_the_index(tmp_path: Path, tiny_tokenizer) -> None:
    """The folder 'hf-siamese embed -o DIR' writes (e.g. on N GPUs) becomes the index's vectors without re-embedding."""
    model = make_tiny_model()
    encode_corpus(model, CORPUS, tmp_path / "emb", tokenizer=tiny_tokenizer, shard_size=8)
    shards = sorted((tmp_path / "emb").glob("shard-*.parquet"))
    inodes = [path.stat().st_ino for path in shards]
    with pytest.MonkeyPatch.context() as patch:
        linked = _shards_before_stacking(patch, lambda path: path.stat().st_ino)
        index = build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, embeddings_dir=tmp_path / "emb")
    assert linked == inodes  # the same files: hard links, nothing embedded again
    reference = build_index(model, CORPUS, tmp_path / "ref", tokenizer=tiny_tokenizer)
    assert _hits(index, model, tiny_tokenizer) == _hits(reference, model, tiny_tokenizer)
    # another model is refused, as every command that reuses an embeddings folder refuses it
    with pytest.raises(ValueError, match="holds corpus embeddings made differently"):
        build_index(make_tiny_model(seed=9), CORPUS, tmp_path / "other", tokenizer=tiny_tokenizer,
                    embeddings_dir=tmp_path / "emb")  # fmt: skip
    assert [path.stat().st_ino for path in sorted((tmp_path / "emb").glob("shard-*.parquet"))] == inodes


def test_an_index_keeps_one_copy_of_its_vectors(tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    """The Parquet shards go once stacked into vectors.npy; the folder still reads shard by shard, and an index of the
    earlier layout (shards beside vectors.npy) opens and searches the same."""
    from hf_siamese.retrieval.corpus import read_corpus_shards

    model = make_tiny_model()
    index = build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=8)
    embeddings = tmp_path / "idx" / "embeddings"
    assert not list(embeddings.glob("shard-*.parquet")) and (embeddings / "vectors.npy").is_file()
    assert json.loads((embeddings / "corpus.json").read_text())["stacked"] is True
    stacked = np.load(embeddings / "vectors.npy")
    shards = list(read_corpus_shards(embeddings))
    assert [len(ids) for ids, _ in shards] == [8, 8, 8, len(CORPUS) - 24]
    np.testing.assert_array_equal(np.concatenate([v for _, v in shards]), stacked)
    monkeypatch.setattr(index_build, "keep_one_copy", lambda folder: None)  # the earlier layout
    old = build_index(model, CORPUS, tmp_path / "old", tokenizer=tiny_tokenizer, shard_size=8)
    assert len(list((tmp_path / "old" / "embeddings").glob("shard-*.parquet"))) == 4
    assert _hits(load_index(tmp_path / "old"), model, tiny_tokenizer) == _hits(index, model, tiny_tokenizer)
    assert _hits(old, model, tiny_tokenizer) == _hits(load_index(tmp_path / "idx"), model, tiny_tokenizer)


def test_search_corpus_gives_the_index_hits_without_an_index(tmp_path: Path, tiny_tokenizer) -> None:
    """`search_corpus` (what `search --corpus` calls) embeds into a temporary folder or a kept one and gives the hits
    an index of the same corpus gives; a kept embeddings folder is reused, not embedded again."""
    from hf_siamese.retrieval.corpus_search import search_corpus

    model = make_tiny_model()
    index = build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False)
    want = index.search(model, QUERIES, top_k=5, tokenizer=tiny_tokenizer)
    found = search_corpus(model, CORPUS, QUERIES, 5, tokenizer=tiny_tokenizer)
    strip = [[(h["rank"], h["id"], h["text"], round(h["score"], 5)) for h in hits] for hits in want]
    assert [[(h["rank"], h["id"], h["text"], round(h["score"], 5)) for h in hits] for hits in found] == strip
    kept = tmp_path / "kept"
    search_corpus(model, CORPUS, QUERIES, 5, tokenizer=tiny_tokenizer, embeddings_dir=kept)
    stamps = [path.stat().st_mtime_ns for path in sorted(kept.glob("shard-*.parquet"))]
    again = search_corpus(model, CORPUS, QUERIES[:1], 3, tokenizer=tiny_tokenizer, embeddings_dir=kept)
    assert [path.stat().st_mtime_ns for path in sorted(kept.glob("shard-*.parquet"))] == stamps and stamps
    assert [h["id"] for h in again[0]] == [h["id"] for h in want[0][:3]]
