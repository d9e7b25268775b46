"""A vector index streamed from a corpus of any size (`build_corpus_index`, `hf-siamese index --streamed`): the hits of
`build_index`'s index, a stopped build resumed, an approximate index when asked, and a shards folder that is not an
index named as such."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model

import hf_siamese
from hf_siamese.cli import main
from hf_siamese.retrieval import corpus_index
from hf_siamese.retrieval.corpus import encode_corpus
from hf_siamese.retrieval.corpus_index import build_corpus_index
from hf_siamese.retrieval.vector_index import build_index
from hf_siamese.retrieval.vector_index import load_index as load_plain_index

load_index = hf_siamese.load_index  # opens both kinds

_rng = random.Random(0)
CORPUS = list(dict.fromkeys(" ".join(_rng.choice(WORDS[:60]) for _ in range(_rng.randint(3, 9))) for _ in range(30)))
QUERIES = ["a dog in the park", "music", CORPUS[7], "the stock market fell today ."]


def _hits(index, model, tokenizer, top_k: int = 5) -> list[list[tuple]]:
    found = index.search(model, QUERIES, top_k=top_k, tokenizer=tokenizer)
    return [[(hit["rank"], hit["id"], hit["text"], round(hit["score"], 4)) for hit in hits] for hits in found]


@pytest.mark.parametrize("similarity", ["cosine", "euclidean", "manhattan"])
def test_streamed_index_gives_the_hits_of_build_index(tmp_path: Path, tiny_tokenizer, similarity: str) -> None:
    model = make_tiny_model(similarity=similarity)
    expected = _hits(build_index(model, CORPUS, tmp_path / "ref", tokenizer=tiny_tokenizer, use_faiss=False), model,
                     tiny_tokenizer)  # fmt: skip
    built = build_corpus_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=8)
    assert built.backend == "exact" and built.info["backend"] == "shards" and len(built) == len(CORPUS)
    index = load_index(tmp_path / "idx")
    assert type(index).__name__ == "CorpusVectorIndex" and index.dim == 32
    assert _hits(index, model, tiny_tokenizer) == expected
    assert expected[2][0][1] == 7  # a corpus text finds itself first
    assert len(index.search(model, QUERIES[:1], top_k=99, tokenizer=tiny_tokenizer)[0]) == len(CORPUS)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["embeddings", "index.json", "texts.arrow"]
    with pytest.raises(ValueError, match=r"is a streamed index .*open it with hf_siamese.load_index"):
        load_plain_index(tmp_path / "idx")  # vector_index cannot import the corpus modules, which import it
    assert load_plain_index(tmp_path / "ref").backend == "exact" == load_index(tmp_path / "ref").backend
    assert not list(tmp_path.glob(".idx.*"))  # the staging folder was renamed into place
    with pytest.raises(ValueError, match=r"this index was built with model .*same config, different weights"):
        index.search(make_tiny_model(seed=3, similarity=similarity), QUERIES, tokenizer=tiny_tokenizer)


def test_approximate_index_and_ids(tmp_path: Path, tiny_tokenizer) -> None:
    pytest.importorskip("faiss")
    model = make_tiny_model()
    expected = _hits(build_index(model, CORPUS, tmp_path / "ref", tokenizer=tiny_tokenizer), model, tiny_tokenizer)
    rows = [{"doc": f"d{i}", "body": text} for i, text in enumerate(CORPUS)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    index = build_corpus_index(
        model, str(tmp_path / "docs.jsonl"), tmp_path / "idx", text_column="body", id_column="doc",
        tokenizer=tiny_tokenizer, approximate=True,
    )  # fmt: skip
    assert index.backend == "approximate" and (tmp_path / "idx" / "embeddings" / "ann" / "ann.json").is_file()
    renamed = [[(rank, f"d{doc}", text, score) for rank, doc, text, score in hits] for hits in expected]
    assert _hits(load_index(tmp_path / "idx"), model, tiny_tokenizer) == renamed
    # without faiss the approximate index is searched exactly, with a warning
    original = corpus_index.faiss_available
    corpus_index.faiss_available = lambda: False
    try:
        assert load_index(tmp_path / "idx").backend == "exact"
    finally:
        corpus_index.faiss_available = original


def test_stopped_build_resumes_its_shards(tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    model = make_tiny_model()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus_index, "_write_texts", stopped)
    with pytest.raises(KeyboardInterrupt):
        build_corpus_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=8)
    monkeypatch.undo()
    shards = sorted((tmp_path / ".idx.building" / "embeddings").glob("shard-*.parquet"))
    stamps = [path.stat().st_mtime_ns for path in shards]
    assert len(shards) == 4 and not (tmp_path / "idx").exists()
    build_corpus_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=8)
    shards = sorted((tmp_path / "idx" / "embeddings").glob("shard-*.parquet"))
    assert [path.stat().st_mtime_ns for path in shards] == stamps  # kept, not computed again
    with pytest.raises(ValueError, match=r"is an existing index; pass overwrite=True"):
        build_corpus_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer)


def test_bad_folders(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    build_corpus_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer)
    (tmp_path / "idx" / "texts.arrow").unlink()
    with pytest.raises(ValueError, match=r"corrupt vector index .*texts.arrow missing"):
        load_index(tmp_path / "idx")
    # what 'embed' and build_ann_index write are not indexes: said, with what opens them
    encode_corpus(model, CORPUS, tmp_path / "shards", tokenizer=tiny_tokenizer)
    with pytest.raises(FileNotFoundError, match=r"holds corpus embeddings .* search --corpus FILE --corpus-dir"):
        load_index(tmp_path / "shards")
    pytest.importorskip("faiss")
    from hf_siamese.retrieval.ann_build import build_ann_index

    build_ann_index(np.eye(4, dtype=np.float32), tmp_path / "ann", recall_queries=0)
    with pytest.raises(FileNotFoundError, match=r"is an ANN index .*load_ann_index"):
        load_index(tmp_path / "ann")


def test_cli_index_streamed_then_search(tmp_path: Path, tiny_tokenizer, capsys) -> None:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    outputs = []
    for name, extra in (("plain", []), ("streamed", ["--streamed", "--shard-size", "8"])):
        argv = ["index", str(tmp_path / "corpus.txt"), "--model", str(tmp_path / "model"), "-o", str(tmp_path / name)]
        assert main([*argv, *extra]) == 0
        printed = capsys.readouterr().out
        assert f"indexed {len(CORPUS)} documents" in printed and ("search, streamed)" in printed) == bool(extra)
        assert main(["search", "--index", str(tmp_path / name), "--query", "music", "--top-k", "4"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].count("\n   ") == 4
