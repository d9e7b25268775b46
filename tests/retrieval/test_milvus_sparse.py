"""The learned-sparse part of an index in Milvus, tested against the real engine (Milvus Lite, in-process): exported as
a second sparse field, it gives the folder's sparse hits and scores (documents sharing no term with a query included,
at score 0), and the folder's hybrid over dense + BM25 + sparse; a document or query with no term; an inference-free
model's looked-up queries; a stopped export resumed; another sparse model, a collection without the field and weights
Milvus cannot hold are each refused in one line; the CLI builds and searches it. Tiny random models."""

from __future__ import annotations

import importlib.util
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForMaskedLM

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from hf_siamese import SparseSiameseConfig, SparseSiameseModel  # noqa: E402
from hf_siamese.cli import main  # noqa: E402
from hf_siamese.retrieval.stores import (
    build_index,  # noqa: E402
    load_index,  # noqa: E402
)
from hf_siamese.retrieval.stores.milvus import export as milvus_export  # noqa: E402
from hf_siamese.retrieval.stores.milvus.export import export_index  # noqa: E402
from hf_siamese.retrieval.stores.milvus.index import MilvusIndex  # noqa: E402
from hf_siamese.retrieval.stores.milvus.sparse import NO_TERM_KEY, SPARSE_FIELD, document_vectors  # noqa: E402

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell", "red car on the road"]
HAS_BM25 = importlib.util.find_spec("bm25s") is not None and importlib.util.find_spec("Stemmer") is not None


def _sparse_model(seed: int = 0, architecture: str = "splade") -> SparseSiameseModel:
    torch.manual_seed(seed)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    config = SparseSiameseConfig(encoder_config=encoder.config, architecture=architecture)
    return SparseSiameseModel(config, encoder=encoder).eval()


def _save(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """Saved models, a corpus, and the folder index of it with its sparse part (and BM25 where bm25s is here)."""
    root = tmp_path_factory.mktemp("milvus_sparse")
    _save(_sparse_model(), tiny_tokenizer, root / "sparse")
    _save(make_tiny_model(), tiny_tokenizer, root / "dense")
    rng = random.Random(5)
    corpus = list(dict.fromkeys(" ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 9))) for _ in range(40)))
    (root / "corpus.txt").write_text("\n".join(corpus[:24]) + "\n", encoding="utf-8")
    build_index(
        make_tiny_model(), corpus[:24], root / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False,
        sparse_model=str(root / "sparse"), lexical=HAS_BM25,
    )  # fmt: skip
    return root


def _export(folder, location: str, **options) -> MilvusIndex:
    """`export_index` with the folder's lexical part where it has one."""
    return export_index(folder, location, lexical="ours" if folder.has_lexical else None, **options)


def _hits(index, model, tokenizer, first_stage: str, top_k: int = 10) -> tuple[list, np.ndarray]:
    found = index.search(model, QUERIES, top_k=top_k, tokenizer=tokenizer, first_stage=first_stage)
    return [[hit["id"] for hit in query] for query in found], np.array([[h["score"] for h in q] for q in found])


def _same_hits(engine, folder, model, tokenizer, first_stage: str, top_k: int = 10) -> None:
    ids, scores = _hits(engine, model, tokenizer, first_stage, top_k)
    expected_ids, expected_scores = _hits(folder, model, tokenizer, first_stage, top_k)
    assert ids == expected_ids, first_stage
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)


def test_the_sparse_field_gives_the_folders_sparse_and_hybrid_hits(root: Path, tmp_path: Path, tiny_tokenizer) -> None:
    folder, model = load_index(root / "idx"), make_tiny_model()
    engine = _export(folder, f"milvus-lite:{tmp_path}/m.db#docs")
    assert engine.has_sparse and engine.info["sparse"]["model"] == folder.info["sparse"]["model"]
    fields = {field["name"] for field in engine.client.describe_collection("docs")["fields"]}
    assert SPARSE_FIELD in fields and ("lexical" in fields) == HAS_BM25
    assert engine.stage_lists("hybrid") == folder.stage_lists("hybrid")
    _same_hits(engine, folder, None, None, "sparse", top_k=len(folder))  # every document: those sharing no term too
    _same_hits(engine, folder, model, tiny_tokenizer, "hybrid")  # dense (+ BM25) + sparse, fused here
    reopened = load_index(f"milvus-lite:{tmp_path}/m.db#docs")  # what `search --index LOCATION` opens
    _same_hits(reopened, folder, None, None, "sparse", top_k=5)
    again = _export(folder, f"milvus-lite:{tmp_path}/m.db#docs")  # complete: returned as it is
    assert again.info["uploaded"] == len(folder) and again.info["sparse"] == engine.info["sparse"]
    with pytest.raises(ValueError, match=r"holds another export \(differs in \['sparse'\]\)"):
        _export(folder, f"milvus-lite:{tmp_path}/m.db#docs", sparse=False)


def test_documents_and_queries_without_a_term(tmp_path: Path, tiny_tokenizer) -> None:
    """A sparse model that weighs only a few terms: some documents (and queries) get no term at all."""
    model = _sparse_model(seed=2)
    bias = torch.full((TINY["vocab_size"],), -100.0)
    bias[5], bias[9] = -0.075, -0.105  # only these two terms can weigh, and only in some texts
    model.encoder.cls.predictions.bias.data.copy_(bias)
    texts = [" ".join(WORDS[i : i + 3]) for i in range(0, 36, 3)]
    folder = build_index(
        make_tiny_model(), texts, tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False, show_progress_bar=False,
        sparse_model=str(_save(model, tiny_tokenizer, tmp_path / "sparse")),
    )  # fmt: skip
    empty = np.diff(folder.sparse.matrix.indptr) == 0
    assert empty.any() and not empty.all(), "the test needs documents with and without terms"
    vectors = document_vectors(folder.sparse.matrix)
    assert all(vector == {NO_TERM_KEY: 1.0} for vector, none in zip(vectors, empty, strict=True) if none)
    engine = _export(folder, f"milvus-lite:{tmp_path}/m.db#docs")
    queries = [*QUERIES, *texts[:8]]
    no_term = np.diff(folder.sparse.encode_queries(queries).indptr) == 0
    assert no_term.any() and not no_term.all(), "the test needs queries with and without terms"
    expected = folder.search(None, queries, top_k=len(texts), first_stage="sparse")
    found = engine.search(None, queries, top_k=len(texts), first_stage="sparse")
    assert [[h["id"] for h in q] for q in found] == [[h["id"] for h in q] for q in expected]
    np.testing.assert_allclose(
        [[h["score"] for h in q] for q in found], [[h["score"] for h in q] for q in expected], rtol=1e-5, atol=1e-6
    )


def test_an_inference_free_model_looks_its_queries_up(root: Path, tmp_path: Path, tiny_tokenizer) -> None:
    model = _sparse_model(seed=3, architecture="inference_free")
    with torch.no_grad():
        model.query_weights.uniform_(0.0, 2.0)
        model.query_weights[tiny_tokenizer.convert_tokens_to_ids("dog")] = -0.5  # a weight Milvus cannot search
    texts = (root / "corpus.txt").read_text(encoding="utf-8").splitlines()
    folder = build_index(
        make_tiny_model(), texts, tmp_path / "idx", tokenizer=tiny_tokenizer, lexical=False, show_progress_bar=False,
        sparse_model=str(_save(model, tiny_tokenizer, tmp_path / "sparse")),
    )  # fmt: skip
    engine = _export(folder, f"milvus-lite:{tmp_path}/m.db#docs")
    queries = [query for query in QUERIES if "dog" not in query]
    expected = folder.search(None, queries, top_k=len(texts), first_stage="sparse")
    found = engine.search(None, queries, top_k=len(texts), first_stage="sparse")
    assert [[h["id"] for h in q] for q in found] == [[h["id"] for h in q] for q in expected]
    np.testing.assert_allclose(
        [[h["score"] for h in q] for q in found], [[h["score"] for h in q] for q in expected], rtol=1e-5, atol=1e-6
    )
    assert len(folder.search(None, ["dog"], first_stage="sparse")[0]) == 10  # the folder's exact search takes it
    with pytest.raises(
        ValueError, match=r"gives query 0 the weight -0\.5 for term \d+; Milvus searches finite, non-neg"
    ):
        engine.search(None, ["dog"], first_stage="sparse")


def test_a_stopped_export_resumes(root: Path, tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    folder, location = load_index(root / "idx"), f"milvus-lite:{tmp_path}/m.db#docs"
    monkeypatch.setattr(milvus_export, "FLUSH_EVERY", 1)
    real, calls = milvus_export._Uploader.batch, {"n": 0}

    def stops(self, begin: int, end: int) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real(self, begin, end)

    monkeypatch.setattr(milvus_export._Uploader, "batch", stops)
    with pytest.raises(KeyboardInterrupt):
        _export(folder, location, batch_size=5)
    with pytest.raises(ValueError, match="the export stopped at 10 of 24"):
        MilvusIndex.open(location)
    monkeypatch.setattr(milvus_export._Uploader, "batch", real)
    engine = _export(folder, location, batch_size=5)
    rows = engine.client.query("docs", filter="row >= 0", output_fields=["row", SPARSE_FIELD], limit=100)
    assert sorted(int(row["row"]) for row in rows) == list(range(24))
    assert all(row[SPARSE_FIELD] for row in rows)
    _same_hits(engine, folder, None, None, "sparse", top_k=len(folder))


def test_bad_inputs_are_one_line(root: Path, tmp_path: Path, tiny_tokenizer) -> None:
    folder = load_index(root / "idx")
    plain = _export(folder, f"milvus-lite:{tmp_path}/m.db#plain", sparse=False)
    assert not plain.has_sparse and SPARSE_FIELD not in plain.info
    accepted = "dense, lexical, hybrid" if HAS_BM25 else "dense"
    with pytest.raises(ValueError, match=rf"first stage 'sparse': the collection '.*#plain' has no learned-sparse "
                       rf"field \('learned_sparse'\); accepted here: {accepted}\. Build it"):  # fmt: skip
        plain.search(None, QUERIES, first_stage="sparse")
    if HAS_BM25:  # its hybrid is the folder's without a sparse part: dense + BM25
        assert plain.stage_lists("hybrid") == ("dense", "lexical")
    without = build_index(make_tiny_model(), ["one text", "two texts"], tmp_path / "w", tokenizer=tiny_tokenizer,
                          lexical=False, show_progress_bar=False)  # fmt: skip
    with pytest.raises(ValueError, match="sparse=True: the folder index .* has no sparse part to export"):
        _export(without, f"milvus-lite:{tmp_path}/m.db#w", sparse=True)
    with pytest.raises(ValueError, match=r"sparse='yes'; accepted: True, False or None"):
        _export(folder, f"milvus-lite:{tmp_path}/m.db#w", sparse="yes")
    # another sparse model at the recorded path: refused, naming both, as the folder refuses it
    shutil.copytree(root / "sparse", tmp_path / "sparse")
    copy = build_index(
        make_tiny_model(), ["one text", "two texts", "a dog"], tmp_path / "idx", tokenizer=tiny_tokenizer,
        lexical=False, show_progress_bar=False, sparse_model=str(tmp_path / "sparse"),
    )  # fmt: skip
    _export(copy, f"milvus-lite:{tmp_path}/m.db#copy")
    _save(_sparse_model(seed=1), tiny_tokenizer, tmp_path / "sparse")
    reopened = load_index(f"milvus-lite:{tmp_path}/m.db#copy")
    refused = r"built with sparse model '.*sparse' \(fingerprint \w{12}\), not '.*sparse' \(fingerprint \w{12}\)"
    with pytest.raises(ValueError, match=refused + r".*rebuild the collection with 'hf-siamese index CORPUS -o"):
        reopened.search(None, QUERIES, first_stage="sparse")
    with pytest.raises(ValueError, match="fingerprint"):
        reopened.search(make_tiny_model(), QUERIES, tokenizer=tiny_tokenizer)  # the hybrid reads the sparse list
    reopened.sparse.use_model(_sparse_model(), tiny_tokenizer)  # the model that built it: accepted
    assert len(reopened.search(None, QUERIES, top_k=2, first_stage="sparse")[0]) == 2
    # weights Milvus cannot hold: refused before the collection is touched
    shutil.copytree(tmp_path / "idx", tmp_path / "negative")
    data = np.load(tmp_path / "negative" / "sparse" / "data.npy")
    data[1] = -data[1]
    np.save(tmp_path / "negative" / "sparse" / "data.npy", data)
    with pytest.raises(ValueError, match=r"gives document row 0 the weight -[\d.e-]+ for term \d+; Milvus holds"):
        _export(load_index(tmp_path / "negative"), f"milvus-lite:{tmp_path}/m.db#negative")
    assert "negative" not in reopened.client.list_collections()


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_index_and_search_the_sparse_field(root: Path, tmp_path: Path, capsys) -> None:
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    base = ["index", root / "corpus.txt", "--model", root / "dense", "--no-lexical"]
    code, out, err = _run([*base, "-o", location, "--sparse-model", root / "sparse"], capsys)
    assert code == 0 and "with its sparse part" in out and f"into {location}" in out, err
    search = ["search", "--index", location, "--query", QUERIES[0], "--top-k", "5"]
    code, out, err = _run([*search, "--first-stage", "sparse"], capsys)
    assert code == 0, err
    folder = load_index(root / "idx")
    expected = folder.search(None, QUERIES[:1], top_k=5, first_stage="sparse")[0]
    printed = re.findall(r"^\s+\d+\. (\S+)  \[(\d+)\] ", out, flags=re.MULTILINE)
    assert [doc_id for _, doc_id in printed] == [str(hit["id"]) for hit in expected]
    np.testing.assert_allclose([float(score) for score, _ in printed], [hit["score"] for hit in expected], atol=2e-4)
    code, out, err = _run(search, capsys)  # the default: hybrid, dense + sparse
    assert code == 0 and out.count("[") == 5, err
    code, out, err = _run([*base, "-o", f"milvus-lite:{tmp_path}/m.db#plain"], capsys)
    assert code == 0, err
    plain = ["search", "--index", f"milvus-lite:{tmp_path}/m.db#plain", "--query", "dog", "--first-stage", "sparse"]
    code, out, err = _run(plain, capsys)
    assert code == 1 and "no learned-sparse field ('learned_sparse'); accepted here: dense" in err, err
