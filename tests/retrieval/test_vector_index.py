"""The vector index: build once (streamed, at every size), search many times, exact and approximate backends agreeing
with the model's own similarity; the model fingerprint refusing another model; reloads; failed and killed builds; bad
input; `hf-siamese index` / `search --index`."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import WORDS, make_tiny_model

import hf_siamese
from hf_siamese.cli import main
from hf_siamese.retrieval import exact_search
from hf_siamese.retrieval.index import build as index_build
from hf_siamese.retrieval.stores import build_index, load_index
from hf_siamese.retrieval.stores import folder as vector_index
from hf_siamese.retrieval.stores.folder import VectorIndex

_rng = random.Random(0)
CORPUS = [" ".join(_rng.choice(WORDS[:60]) for _ in range(_rng.randint(3, 9))) for _ in range(30)]
QUERIES = ["a dog in the park", "music", CORPUS[7], "the stock market fell today ."]
BACKENDS = ["exact", "approximate"]


def _needs(backend: str) -> bool:
    if backend == "approximate":
        pytest.importorskip("faiss")
        return True
    return False


def _reference(model, tokenizer, queries, corpus, **prompts) -> torch.Tensor:
    """(n_queries, n_corpus) similarities, in float64 and without the |a|^2 + |b|^2 - 2ab shortcut, of freshly
    computed embeddings under the model's similarity (checked against `model.similarity`)."""
    q = model.encode(queries, tokenizer=tokenizer, prompt_name=prompts.get("query"))
    c = model.encode(corpus, tokenizer=tokenizer, prompt_name=prompts.get("document"))
    a, b = q.double(), c.double()
    similarity = model.config.similarity
    if similarity == "cosine":
        scores = torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).T
    elif similarity == "dot":
        scores = a @ b.T
    else:
        scores = -(a[:, None] - b[None]).abs().pow(2 if similarity == "euclidean" else 1).sum(-1)
        scores = -(-scores).sqrt() if similarity == "euclidean" else scores
    torch.testing.assert_close(model.similarity(q, c).double(), scores, atol=1e-2, rtol=1e-4)
    return scores


def _assert_hits_match(hits, reference: torch.Tensor, top_k: int, corpus=CORPUS, atol=1e-4) -> None:
    """Each hit's score is the reference similarity of that document, the scores are the reference's top-k in
    order, ranks run 1..k, texts match ids (ids = positions here), and the ids agree up to ties."""
    assert len(hits) == len(reference)
    k = min(top_k, reference.shape[1])
    for row, query_hits in zip(reference, hits, strict=True):
        assert [hit["rank"] for hit in query_hits] == list(range(1, k + 1))
        expected = torch.topk(row, k).values
        np.testing.assert_allclose([hit["score"] for hit in query_hits], expected.numpy(), atol=atol, rtol=1e-4)
        for hit in query_hits:
            assert hit["text"] == corpus[hit["id"]]
            assert abs(hit["score"] - row[hit["id"]].item()) < atol
        untied = [i for i in range(k) if all(abs(expected[i] - expected[j]) > atol for j in range(k) if j != i)]
        top_ids = torch.topk(row, k).indices
        assert all(query_hits[i]["id"] == top_ids[i].item() for i in untied)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean", "manhattan"])
def test_search_equals_exact_search(tmp_path: Path, tiny_tokenizer, backend: str, similarity: str) -> None:
    approximate = _needs(backend)
    model = make_tiny_model(similarity=similarity, normalize=similarity == "dot")
    if similarity == "manhattan" and approximate:
        with pytest.raises(ValueError, match="manhattan"):
            build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, approximate=True)
        approximate = None  # the default: exact search for manhattan even with faiss installed
    index = build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, approximate=approximate)
    assert (
        index.backend == ("approximate" if approximate else "exact") and len(index) == len(CORPUS) and index.dim == 32
    )
    assert (tmp_path / "idx" / "embeddings" / "ann").exists() == (index.backend == "approximate")
    reference = _reference(model, tiny_tokenizer, QUERIES, CORPUS)
    hits = index.search(model, QUERIES, first_stage="dense", top_k=5, tokenizer=tiny_tokenizer)
    _assert_hits_match(hits, reference, 5)
    assert hits[2][0]["id"] == 7  # a corpus text finds itself first
    # exact_search on the same embeddings, computed apart from the index
    vectors = model.encode(QUERIES, tokenizer=tiny_tokenizer)
    corpus_vectors = model.encode(CORPUS, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    scores, positions = exact_search(vectors.numpy(), corpus_vectors, 5, similarity=similarity)
    np.testing.assert_allclose([[hit["score"] for hit in row] for row in hits], scores, atol=1e-4, rtol=1e-4)
    assert [[hit["id"] for hit in row] for row in hits] == positions.tolist()
    # precomputed vectors give the same hits; top_k above the corpus size returns the whole corpus
    assert index.search_embeddings(vectors, top_k=5) == hits
    assert len(index.search_embeddings(vectors[0].numpy(), top_k=100)[0]) == len(CORPUS)


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_approximate_and_exact_agree_on_the_same_vectors(tmp_path: Path, tiny_tokenizer, similarity: str) -> None:
    pytest.importorskip("faiss")
    model = make_tiny_model(similarity=similarity)
    exact = build_index(model, CORPUS, tmp_path / "exact", tokenizer=tiny_tokenizer, approximate=False)
    fast = build_index(model, CORPUS, tmp_path / "faiss", tokenizer=tiny_tokenizer, approximate=True)
    np.testing.assert_array_equal(exact.embeddings, fast.embeddings)
    queries = np.random.default_rng(0).normal(size=(6, 32)).astype(np.float32)
    queries = np.concatenate([queries, exact.embeddings[:3] * 2.0])
    for a, b in zip(exact.search_embeddings(queries, 8), fast.search_embeddings(queries, 8), strict=True):
        np.testing.assert_allclose([h["score"] for h in a], [h["score"] for h in b], atol=2e-3, rtol=1e-4)
        assert [h["id"] for h in a][:3] == [h["id"] for h in b][:3]
    assert fast.info["ann"]["recall"]["measured_on"] == "held-out corpus rows"


def test_ids_reload_layout_and_exports(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    ids = np.array([f"doc-{i}" for i in range(len(CORPUS))])  # numpy strings become Python ones
    built = build_index(model, CORPUS, tmp_path / "idx", ids=ids, tokenizer=tiny_tokenizer, show_progress_bar=False)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == [
        "embeddings",
        "index.json",
        "lexical",
        "texts.arrow",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # no staging folder left behind
    info = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert info["format"] == "hf-siamese-vector-index" and info["format_version"] == 2 and info["ann"] is None
    assert info["count"] == len(CORPUS) and info["dim"] == 32 and info["id_type"] == "str"
    assert info["settings"] == {
        "pooling": "mean",
        "normalize": False,
        "similarity": "cosine",
        "max_seq_length": 64,
        "truncate_dim": None,
        "document_prompt": "",
        "dtype": "float32",
    }
    assert len(info["model"]["fingerprint"]) == 64 and info["model"]["config"]["pooling"] == "mean"
    # the vectors model.encode gives, memory-mapped
    assert isinstance(built.embeddings, np.memmap)
    np.testing.assert_array_equal(
        built.embeddings, model.encode(CORPUS, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    )

    hits = built.search(model, QUERIES, first_stage="dense", top_k=3, tokenizer=tiny_tokenizer)
    assert hits[2][0] == {"id": "doc-7", "text": CORPUS[7], "score": pytest.approx(1.0, abs=1e-5), "rank": 1}
    folder = tmp_path / "idx"
    for loaded in (load_index(folder), VectorIndex.load(str(folder)), hf_siamese.load_index(folder)):
        assert loaded.search(model, QUERIES, first_stage="dense", top_k=3, tokenizer=tiny_tokenizer) == hits
    assert hf_siamese.build_index is build_index and "count=30" in repr(built)
    assert (
        built.search(model, CORPUS[7], first_stage="dense", top_k=1, tokenizer=tiny_tokenizer)[0][0]["id"] == "doc-7"
    )  # one string
    assert built.search(model, [], first_stage="dense", tokenizer=tiny_tokenizer) == []


def test_faiss_index_opens_without_faiss(tmp_path: Path, tiny_tokenizer, monkeypatch, caplog) -> None:
    pytest.importorskip("faiss")
    model = make_tiny_model()
    built = build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, approximate=True)
    hits = built.search(model, QUERIES, first_stage="dense", top_k=4, tokenizer=tiny_tokenizer)
    monkeypatch.setattr(vector_index, "faiss_available", lambda: False)
    monkeypatch.setattr(index_build, "faiss_available", lambda: False)
    fallback = load_index(tmp_path / "idx")
    assert fallback.backend == "exact" and "faiss is not installed" in caplog.text
    again = fallback.search(model, QUERIES, first_stage="dense", top_k=4, tokenizer=tiny_tokenizer)
    for a, b in zip(hits, again, strict=True):
        assert [h["id"] for h in a] == [h["id"] for h in b]
        np.testing.assert_allclose([h["score"] for h in a], [h["score"] for h in b], atol=1e-5)
    with pytest.raises(ImportError, match="hf-siamese\\[index\\]"):
        build_index(model, CORPUS, tmp_path / "other", tokenizer=tiny_tokenizer, approximate=True)


def test_the_index_refuses_another_model(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(seed=0)
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    saved = hf_siamese.SiameseBertModel.from_pretrained(tmp_path / "model")
    index = build_index(saved, CORPUS, tmp_path / "idx")
    assert index.model_name == os.path.abspath(tmp_path / "model")
    # the in-memory model that was saved has the same fingerprint as the saved one
    assert index.search(model, QUERIES[:1], first_stage="dense", top_k=2, tokenizer=tiny_tokenizer)

    with pytest.raises(ValueError, match="same config, different weights") as error:
        index.search(make_tiny_model(seed=1), QUERIES, first_stage="dense", tokenizer=tiny_tokenizer)
    assert str(tmp_path / "model") in str(error.value) and "(an unnamed model)" in str(error.value)
    with pytest.raises(ValueError, match=r"pooling \('mean' in the index, 'cls' in this model\)"):
        index.search(make_tiny_model(seed=0, pooling="cls"), QUERIES, first_stage="dense", tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="max_seq_length"):
        index.search(make_tiny_model(seed=0, max_seq_length=16), QUERIES, first_stage="dense", tokenizer=tiny_tokenizer)
    with torch.no_grad():
        model.encoder.encoder.layer[1].output.dense.weight[3, 5] += 1e-3  # one value in a sampled tensor
    with pytest.raises(ValueError, match="different weights"):
        index.search(model, QUERIES, first_stage="dense", tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="weights are bfloat16 here"):
        index.search(saved.to(torch.bfloat16), QUERIES, first_stage="dense", tokenizer=tiny_tokenizer)


def test_bfloat16_build_and_prompts(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(prompts={"query": "someone : ", "passage": "the : "})
    index = build_index(model, CORPUS, tmp_path / "bf16", tokenizer=tiny_tokenizer, dtype="bfloat16", approximate=False)
    full = model.encode(CORPUS, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    assert index.settings["dtype"] == "bfloat16" and index.embeddings.dtype == np.float32
    np.testing.assert_allclose(index.embeddings, full, atol=5e-2)

    index = build_index(model, CORPUS, tmp_path / "p", tokenizer=tiny_tokenizer, prompt_name="passage")
    assert index.settings["document_prompt"] == "the : "
    reference = _reference(model, tiny_tokenizer, QUERIES, CORPUS, query="query", document="passage")
    hits = index.search(model, QUERIES, first_stage="dense", top_k=4, tokenizer=tiny_tokenizer, prompt_name="query")
    _assert_hits_match(hits, reference, 4)


BAD_BUILDS = [
    (dict(corpus=[]), "corpus is empty"),
    (dict(corpus="just one text"), "corpus 'just one text' is not a local file or glob"),
    (dict(corpus=["fine", None]), r"row 1: the text is NoneType"),
    (dict(corpus=["fine", None], ids=["a", "b"]), r"corpus\[1\] is NoneType"),
    (dict(corpus=iter(["a"]), ids=["a"]), "ids= applies to a list of texts"),
    (dict(corpus=["a"], calibration_queries=[""]), "calibration_queries: expected a non-empty list"),
    (dict(corpus=["a", "b"], ids=[1]), "ids has 1 entries but corpus has 2 texts"),
    (dict(corpus=["a", "b", "c"], ids=["x", "y", "x"]), r"duplicate id 'x' \(ids\[0\] and ids\[2\]\)"),
    (dict(corpus=["a", "b"], ids=["x", 2]), r"ids\[1\] is int .* all str or all int"),
    (dict(corpus=["a", "b"], ids=[1.5, 2.5]), r"ids\[0\] is float"),
    (dict(corpus=["a"], dtype="int8"), "dtype='int8': expected one of float32, bfloat16, float16"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_BUILDS, ids=[m[:24] for _, m in BAD_BUILDS])
def test_bad_build_input(tmp_path: Path, tiny_tokenizer, kwargs: dict, message: str) -> None:
    corpus = kwargs.pop("corpus")
    with pytest.raises((ValueError, RuntimeError), match=message):  # DatasetLoadError: a RuntimeError
        build_index(make_tiny_model(), corpus, tmp_path / "idx", tokenizer=tiny_tokenizer, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_output_folder_rules_and_failed_builds(tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    model = make_tiny_model()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="'.*busy' is not empty and not an index; pass overwrite=True"):
        build_index(model, CORPUS, tmp_path / "busy", tokenizer=tiny_tokenizer)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    build_index(model, CORPUS[:3], tmp_path / "empty", tokenizer=tiny_tokenizer)  # an empty folder is fine
    with pytest.raises(ValueError, match="is an existing index; pass overwrite=True"):
        build_index(model, CORPUS, tmp_path / "empty", tokenizer=tiny_tokenizer)
    assert len(build_index(model, CORPUS, tmp_path / "empty", tokenizer=tiny_tokenizer, overwrite=True)) == 30
    assert len(build_index(model, CORPUS[:2], tmp_path / "busy", tokenizer=tiny_tokenizer, overwrite=True)) == 2

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(index_build, "replace_folder", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build_index(model, CORPUS[:5], tmp_path / "empty", tokenizer=tiny_tokenizer, overwrite=True)
    # no half-written folder: the staging folder is kept, and the next build resumes from it
    assert sorted(p.name for p in tmp_path.iterdir()) == [".empty.building", "busy", "empty"]
    assert len(load_index(tmp_path / "empty")) == 30  # the previous index is untouched
    monkeypatch.undo()
    assert len(build_index(model, CORPUS[:5], tmp_path / "empty", tokenizer=tiny_tokenizer, overwrite=True)) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "empty"]


def test_a_failed_build_never_blocks_the_next(tmp_path: Path, tiny_tokenizer) -> None:
    """A bad line 12 with --overwrite left a staging folder that refused every later build (issue 32)."""
    model = make_tiny_model()
    rows = [json.dumps({"doc": f"d{i}", "text": text}) for i, text in enumerate(CORPUS[:20])]
    good, broken = tmp_path / "docs.jsonl", tmp_path / "broken.jsonl"
    good.write_text("\n".join(rows) + "\n")
    broken.write_text("\n".join(rows[:11] + ["{not json"] + rows[12:]) + "\n")
    run = dict(tokenizer=tiny_tokenizer, id_column="doc", shard_size=4, show_progress_bar=False)
    build_index(model, good, tmp_path / "idx", **run)
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text("\n".join(rows[:11] + [json.dumps({"doc": "d11", "text": "a fixed line"})] + rows[12:]) + "\n")
    # the same settings resume the staging folder's shards; others (shard size, another model) start afresh
    for settings in ({}, {"shard_size": 3}, {"model": make_tiny_model(seed=4)}):
        built_with = settings.get("model", model)
        options = {**run, **{k: v for k, v in settings.items() if k != "model"}}
        with pytest.raises(ValueError, match="broken.jsonl, line 12"):
            build_index(built_with, broken, tmp_path / "idx", overwrite=True, **options)
        assert len(load_index(tmp_path / "idx")) == 20  # the old index is intact
        index = build_index(built_with, fixed, tmp_path / "idx", overwrite=True, **options)
        assert len(index) == 20 and index.search_embeddings(index.embeddings[11], 1)[0][0]["text"] == "a fixed line"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_duplicate_ids_and_the_swap_window(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    rows = [json.dumps({"doc": f"d{i % 7}", "text": text}) for i, text in enumerate(CORPUS[:9])]
    (tmp_path / "dups.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"duplicate id 'd0': rows 0 and 7 of the corpus"):
        build_index(
            model, tmp_path / "dups.jsonl", tmp_path / "idx", tokenizer=tiny_tokenizer, id_column="doc", shard_size=4
        )
    assert not (tmp_path / "idx").exists()
    # killed between the two renames of the swap: the output is missing, the old copy renamed aside
    build_index(model, CORPUS[:4], tmp_path / "idx", tokenizer=tiny_tokenizer)
    (tmp_path / "idx").rename(tmp_path / ".idx.replaced")
    build_index(model, CORPUS[:6], tmp_path / "other", tokenizer=tiny_tokenizer)  # another output: untouched
    assert (tmp_path / ".idx.replaced").is_dir()
    with pytest.raises(ValueError, match="is an existing index"):  # the old index is back, and refuses
        build_index(model, CORPUS[:6], tmp_path / "idx", tokenizer=tiny_tokenizer)
    assert len(load_index(tmp_path / "idx")) == 4 and not (tmp_path / ".idx.replaced").exists()
    assert len(build_index(model, CORPUS[:6], tmp_path / "idx", tokenizer=tiny_tokenizer, overwrite=True)) == 6


def test_an_index_of_the_old_format_is_named_with_the_command_that_rebuilds_it(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    (folder / "corpus").mkdir(parents=True)
    (folder / "embeddings.safetensors").write_bytes(b"")
    (folder / "index.json").write_text(json.dumps({"format": "hf-siamese-vector-index", "format_version": 1}))
    with pytest.raises(ValueError, match=r"format version 1 \(an older hf-siamese\).*hf-siamese index CORPUS -o "):
        load_index(folder)


def test_bad_search_and_load_input(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    index = build_index(model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, approximate=False)
    for top_k in (0, -3, True, 2.5):
        with pytest.raises(ValueError, match=f"top_k={top_k!r}: expected a positive int"):
            index.search(model, QUERIES, first_stage="dense", top_k=top_k, tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match=r"shape \(2, 16\); this index expects \(n, 32\)"):
        index.search_embeddings(np.zeros((2, 16)))
    with pytest.raises(ValueError, match="NaN or inf"):
        index.search_embeddings(np.full(32, np.nan))

    with pytest.raises(FileNotFoundError, match="vector index not found: '.*nowhere'"):
        load_index(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileNotFoundError, match=r"is not a vector index \(no index.json\)"):
        load_index(tmp_path / "plain")
    info_file = tmp_path / "idx" / "index.json"
    info = json.loads(info_file.read_text())
    for text, message in [
        ("{not json", "index.json is not valid JSON"),
        (json.dumps({**info, "format_version": 99}), "format version 99 .* reads version 2"),
        (json.dumps({**info, "format": "other"}), "has format 'other', expected 'hf-siamese-vector-index'"),
        (json.dumps({**info, "count": 31}), "index.json says 31 x 32, the texts have 30 rows"),
        (json.dumps({k: v for k, v in info.items() if k != "dim"}), "dim missing"),
    ]:
        info_file.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_index(tmp_path / "idx")
    info_file.write_text(json.dumps(info))
    (tmp_path / "idx" / "texts.arrow").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt vector index"):
        load_index(tmp_path / "idx")
    (tmp_path / "idx" / "texts.arrow").unlink()
    with pytest.raises(ValueError, match="texts.arrow missing"):
        load_index(tmp_path / "idx")


# ---------------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli_files(tmp_path: Path, tiny_tokenizer) -> Path:
    model = make_tiny_model(normalize=True)
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    make_tiny_model(seed=3, normalize=True).save_pretrained(tmp_path / "other")
    tiny_tokenizer.save_pretrained(tmp_path / "other")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS[:10] + ["", "  "]) + "\n", encoding="utf-8")
    rows = [{"doc": f"d{i}", "body": text} for i, text in enumerate(CORPUS[:10])]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    dups = [{"doc": f"d{min(i, 1)}", "text": text} for i, text in enumerate(CORPUS[:3])]
    (tmp_path / "dups.jsonl").write_text("".join(json.dumps(row) + "\n" for row in dups), encoding="utf-8")
    return tmp_path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_index_then_search(cli_files: Path, capsys) -> None:
    w = cli_files
    code, out, err = _run(["index", str(w / "corpus.txt"), "--model", str(w / "model"), "-o", str(w / "idx")], capsys)
    assert code == 0, err
    assert "indexed 10 documents" in out and "32-dim" in out and str(w / "idx") in out
    assert "with its lexical part (BM25)" in out
    # --model defaults to the model recorded in the index; the id of a .txt line is its position
    code, out, err = _run(
        ["search", "--index", str(w / "idx"), "--query", CORPUS[4], "--top-k", "2", "--first-stage", "dense"], capsys
    )
    assert code == 0, err
    assert out.count("  1. ") == 1 and "  3. " not in out
    assert out.split("Query: ")[1].splitlines()[1] == f"   1. 1.0000  [4] {CORPUS[4]}"
    # the same hits as the corpus path, which embeds the corpus on every call
    argv = ["search", "--corpus", str(w / "corpus.txt"), "--model", str(w / "model"), "--query", "music"]
    _, by_corpus, _ = _run(argv, capsys)
    _, by_index, _ = _run(
        ["search", "--index", str(w / "idx"), "--query", "music", "--top-k", "5", "--first-stage", "dense"], capsys
    )
    by_corpus, by_index = by_corpus.splitlines()[2:], by_index.splitlines()[2:]
    assert len(by_corpus) == len(by_index) == 5
    assert [line.split("] ", 1)[1] for line in by_corpus] == [line.split("] ", 1)[1] for line in by_index]
    for a, b in zip(by_corpus, by_index, strict=True):
        assert abs(float(a.split()[1]) - float(b.split()[1])) <= 1e-4
    # a table corpus with its own ids, exact search, and --overwrite
    argv = ["index", str(w / "corpus.jsonl"), "--model", str(w / "model"), "-o", str(w / "idx")]
    argv += ["--text-column", "body", "--id-column", "doc", "--no-faiss"]
    code, _, err = _run(argv, capsys)
    assert code == 1 and "pass overwrite=True (--overwrite)" in err
    code, out, err = _run([*argv, "--overwrite"], capsys)
    assert code == 0 and "exact search" in out, err
    code, out, _ = _run(
        ["search", "--index", str(w / "idx"), "--query", CORPUS[2], "--top-k", "1", "--first-stage", "dense"], capsys
    )
    assert f"1.0000  [d2] {CORPUS[2]}" in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["search", "--index", "{w}/idx", "--corpus", "{w}/corpus.txt", "--query", "a"], "not allowed with"),
        (["search", "--query", "a"], "one of the arguments --corpus --index is required"),
        (["search", "--index", "{w}/nowhere", "--query", "a"], "vector index not found"),
        (["search", "--index", "{w}/idx", "--model", "{w}/other", "--query", "a"], "same config, different weights"),
        (["index", "{w}/corpus.txt", "--model", "{w}/model", "-o", "{w}/x", "--id-column", "doc"], "--id-column"),
        (["index", "{w}/corpus.jsonl", "--model", "{w}/model", "-o", "{w}/x", "--text-column", "nope"], "'nope'"),
        (["index", "{w}/dups.jsonl", "--model", "{w}/model", "-o", "{w}/x", "--id-column", "doc"], "duplicate id 'd1'"),
        (["index", "{w}/corpus.txt", "--model", "{w}/model"], "give a CORPUS and -o DIR"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_cli_bad_input_is_one_clear_line(cli_files: Path, capsys, argv: list[str], fragment: str) -> None:
    w = cli_files
    assert main(["index", str(w / "corpus.txt"), "--model", str(w / "model"), "-o", str(w / "idx")]) == 0
    capsys.readouterr()
    code, _, err = _run([part.format(w=w) for part in argv], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), err
    assert fragment in lines[0]
