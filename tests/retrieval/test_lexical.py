"""The lexical part of an index: bm25s's Lucene BM25 exactly, built shard by shard, in the index beside the vectors
or added later, and the first stages (dense, lexical, hybrid) of VectorIndex.search and 'hf-siamese search'."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_tiny_model

from hf_siamese.retrieval.fusion.hybrid import check_first_stage, choose_dense_weight, fuse
from hf_siamese.retrieval.index import lexical
from hf_siamese.retrieval.index.additions import add_lexical
from hf_siamese.retrieval.index.lexical import LexicalSettings, build_lexical_index
from hf_siamese.retrieval.stores import build_index, load_index

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

DOCS = [
    "The cat sat on the mat.",
    "Dogs are running in the park",
    "A cat and a dog play together",
    "Studies of cats, studied by scientists",
    "nothing relevant here",
    "dogs and dogs in the park",
    "the weather is sunny in the city",
    "a man plays the guitar in the park",
]
QUERIES = ["cat in the park", "dogs", "zebra", "studying cats", "guitar music"]


def _reference_scores(settings: LexicalSettings, query: str) -> np.ndarray:
    stemmer = Stemmer.Stemmer(settings.language) if settings.stemmer else None
    stop = settings.language if settings.stopwords else None
    reference = bm25s.BM25(method="lucene", k1=settings.k1, b=settings.b)
    reference.index(bm25s.tokenize(DOCS, stopwords=stop, stemmer=stemmer, show_progress=False), show_progress=False)
    terms = bm25s.tokenize([query], stopwords=stop, stemmer=stemmer, show_progress=False, return_ids=False)[0]
    if not any(term in reference.vocab_dict for term in terms):
        return np.zeros(len(DOCS))
    return reference.get_scores(terms)


@pytest.mark.parametrize(
    "settings", [LexicalSettings(), LexicalSettings(stemmer=False, stopwords=False, k1=0.9, b=0.4)], ids=str
)
def test_scores_are_bm25s_lucene_scores_whatever_the_shards(tmp_path, settings) -> None:
    index = build_lexical_index(DOCS, tmp_path / "lex", settings, shard_size=3)
    scores, rows = index.search(QUERIES, len(DOCS))
    for query, found_scores, found_rows in zip(QUERIES, scores, rows, strict=True):
        expected = _reference_scores(settings, query)
        hit = found_rows >= 0
        assert set(found_rows[hit].tolist()) == set(np.flatnonzero(expected > 0).tolist())
        np.testing.assert_allclose(found_scores[hit], expected[found_rows[hit]], rtol=1e-5)
        assert list(found_scores[hit]) == sorted(found_scores[hit], reverse=True)
    assert (rows[QUERIES.index("zebra")] == -1).all()  # no shared term: no hit
    # the folder is bm25s's own format, which bm25s itself opens (memory-mapped)
    opened = bm25s.BM25.load(tmp_path / "lex", mmap=True)
    assert opened.scores["num_docs"] == len(DOCS) and not list((tmp_path / "lex").glob("*.part"))


def test_small_buckets_and_chunks_give_the_same_index(tmp_path, monkeypatch) -> None:
    whole = build_lexical_index(DOCS, tmp_path / "whole").search(QUERIES, len(DOCS))
    monkeypatch.setattr(lexical, "CHUNK", 7)  # triples read 7 at a time
    monkeypatch.setattr(lexical, "BUCKET", 5)  # and sorted in buckets of about 5
    parts = build_lexical_index(DOCS, tmp_path / "parts", shard_size=2).search(QUERIES, len(DOCS))
    np.testing.assert_array_equal(parts[1], whole[1])
    np.testing.assert_allclose(parts[0], whole[0], rtol=1e-6)
    assert not list((tmp_path / "parts").glob("*.part"))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        (dict(k1=-1), "k1=-1"),
        (dict(b=1.5), "b=1.5"),
        (dict(language="klingon"), "no stopword list for language 'klingon'"),
    ],
)
def test_bad_settings_name_the_value(settings, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        LexicalSettings(**settings)


def test_an_unknown_stemmer_language_names_the_accepted_ones(tmp_path) -> None:
    with pytest.raises(ValueError, match="no stemmer for language 'esperant'.*english"):
        build_lexical_index(DOCS, tmp_path / "x", LexicalSettings(language="esperant", stopwords=False))


def test_missing_bm25s_names_the_install_command(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_bm25s(name, *args, **kwargs):
        if name == "bm25s":
            raise ImportError("No module named 'bm25s'", name="bm25s")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bm25s)
    with pytest.raises(ImportError, match=r"pip install 'hf-siamese\[lexical\]'"):
        lexical.require_lexical()


def test_rrf_fuses_the_union_and_zscore_follows_its_weight() -> None:
    dense = (np.array([[0.9, 0.8, 0.1]], np.float32), np.array([[4, 2, 7]]))
    lexical_hits = (np.array([[12.0, 3.0, 0.0]], np.float32), np.array([[2, 5, -1]]))
    scores, rows = fuse(dense, lexical_hits)
    assert rows.tolist() == [[2, 4, 5, 7]]  # 2 is in both lists; then the two first places, dense first on the tie
    np.testing.assert_allclose(scores[0, 0], 1 / 62 + 1 / 61, rtol=1e-6)
    assert fuse(dense, lexical_hits, "zscore", 1.0)[1][0, :3].tolist() == [4, 2, 7]  # dense alone
    assert fuse(dense, lexical_hits, "zscore", 0.0)[1][0, 0] == 2  # lexical alone: its best first
    relevant = {5}
    best, measured = choose_dense_weight(dense, lexical_hits, lambda rows: float(rows[0, 0] in relevant))
    assert measured[best] == max(measured.values())


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: check_first_stage("sparse"), "first stage 'sparse'; accepted: dense, lexical, hybrid"),
        (lambda: check_first_stage("hybrid", "max"), "fusion 'max'; accepted: rrf, zscore"),
        (lambda: check_first_stage("hybrid", "rrf", 0.5), "applies to fusion='zscore'"),
        (lambda: check_first_stage("hybrid", "zscore", 2), "dense_weight=2"),
    ],
)
def test_bad_first_stage_settings(call, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()


def test_index_holds_both_parts_and_searches_every_first_stage(tmp_path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    index = build_index(model, DOCS, tmp_path / "idx", tokenizer=tiny_tokenizer, shard_size=3, show_progress_bar=False)
    record = json.loads((tmp_path / "idx" / "index.json").read_text())["lexical"]
    assert record["count"] == len(DOCS) and record["settings"]["language"] == "english"
    assert index.default_first_stage() == "hybrid"
    lexical_hits = index.search(None, QUERIES, top_k=3, first_stage="lexical")
    assert [hit["text"] for hit in lexical_hits[1]][:2] == [DOCS[5], DOCS[1]]  # "dogs": the text with it twice first
    assert lexical_hits[2] == []  # zebra
    dense = index.search(model, QUERIES, top_k=8, first_stage="dense", tokenizer=tiny_tokenizer)
    hybrid = index.search(model, QUERIES, top_k=8, tokenizer=tiny_tokenizer)  # default: hybrid
    for d, h, lex in zip(dense, hybrid, index.search(None, QUERIES, top_k=8, first_stage="lexical"), strict=True):
        assert {hit["id"] for hit in h} <= {hit["id"] for hit in d} | {hit["id"] for hit in lex}
        assert [hit["rank"] for hit in h] == list(range(1, len(h) + 1))
    zscore = index.search(model, QUERIES, top_k=3, fusion="zscore", dense_weight=1.0, tokenizer=tiny_tokenizer)
    assert [hit["id"] for hit in zscore[0]] == [hit["id"] for hit in dense[0][:3]]


def test_an_index_without_lexical_part_names_the_command_that_adds_it(tmp_path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    index = build_index(model, DOCS, tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False)
    assert not index.has_lexical and index.default_first_stage() == "dense"
    with pytest.raises(ValueError, match=r"no lexical part.*'hf-siamese index --add-lexical .*idx'"):
        index.search(model, QUERIES, first_stage="hybrid", tokenizer=tiny_tokenizer)
    vectors = np.array(index.embeddings)
    added = add_lexical(tmp_path / "idx", LexicalSettings(stemmer=False))
    assert added.has_lexical and added.info["lexical"]["settings"]["stemmer"] is False
    np.testing.assert_array_equal(np.array(added.embeddings), vectors)  # nothing re-encoded
    assert added.search(None, ["dogs"], top_k=1, first_stage="lexical")[0][0]["text"] == DOCS[5]
    with pytest.raises(ValueError, match="has a lexical part already"):
        add_lexical(tmp_path / "idx")
    assert load_index(tmp_path / "idx").info["lexical"]["settings"]["stemmer"] is False  # the refusal kept it
    assert add_lexical(tmp_path / "idx", overwrite=True).info["lexical"]["settings"]["stemmer"] is True


def test_cli_index_search_every_stage_and_add_lexical(tmp_path, tiny_tokenizer, capsys) -> None:
    from hf_siamese.cli import main

    model = make_tiny_model()
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "corpus.txt").write_text("\n".join(DOCS) + "\n")
    base = ["index", str(tmp_path / "corpus.txt"), "--model", str(tmp_path / "model")]
    assert main([*base, "-o", str(tmp_path / "plain"), "--no-lexical"]) == 0
    assert "vectors only" in capsys.readouterr().out
    search = ["search", "--index", str(tmp_path / "plain"), "--query", "dogs", "--top-k", "2"]
    assert main([*search, "--first-stage", "hybrid"]) == 1
    assert f"'hf-siamese index --add-lexical {tmp_path / 'plain'}'" in capsys.readouterr().err
    assert main(["index", "--add-lexical", str(tmp_path / "plain")]) == 0
    assert "added the lexical part" in capsys.readouterr().out
    assert main([*search, "--first-stage", "lexical"]) == 0
    assert "[5] dogs and dogs in the park" in capsys.readouterr().out
    assert main([*search, "--first-stage", "hybrid", "--fusion", "zscore", "--dense-weight", "0.3"]) == 0
    assert "Query: dogs" in capsys.readouterr().out
    assert main(["index", "--add-lexical", str(tmp_path / "plain"), "-o", str(tmp_path / "x")]) == 1
    assert "give no CORPUS, -o" in capsys.readouterr().err
    assert main([*base, "-o", str(tmp_path / "bad"), "--k1", "-2"]) == 1
    assert "k1=-2" in capsys.readouterr().err
