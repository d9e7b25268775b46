"""Compact vectors (`compact.py`): int8 codes within half a calibrated step of the vectors, binary codes the sign
bits, the compact scores as computed by hand (Hamming through faiss and numpy alike), rescoring giving exactly the
float32 ranking where it reads every candidate, the same best hits for every top_k, an index converted both ways
without re-encoding (a failed conversion keeps the old one), the CLI, and bad inputs refused naming the value."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.retrieval.exact import exact_search, unit_rows
from hf_siamese.retrieval.index import compact
from hf_siamese.retrieval.index.additions import set_precision
from hf_siamese.retrieval.index.compact import CompactPart, Quantizer, bytes_per_document, write_compact_part
from hf_siamese.retrieval.index.matrix import read_rows
from hf_siamese.retrieval.stores import build_index, load_index

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell"]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    rng = random.Random(5)
    texts = (" ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(4, 10))) for _ in range(80))
    return list(dict.fromkeys(texts))[:60]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer, corpus) -> Path:
    root = tmp_path_factory.mktemp("compact")
    model = make_tiny_model()
    model.save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    build_index(model, corpus, root / "float32", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False)
    return root


def _vectors(rows: int = 3000, dim: int = 96, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return unit_rows(rng.standard_normal((rows, dim)).astype(np.float32) + 0.3)


def test_int8_codes_within_half_a_step_and_binary_codes_are_the_sign_bits() -> None:
    vectors = _vectors()
    quantizer = Quantizer.fit(vectors, "int8", unit=True)
    codes = quantizer.encode(vectors)
    assert codes.dtype == np.int8 and codes.shape == vectors.shape
    restored = quantizer.centers + codes.astype(np.float32) * quantizer.steps
    inside = np.abs(vectors - quantizer.centers) <= 127 * quantizer.steps  # the calibrated range (99.98% of values)
    assert inside.mean() > 0.999
    half_step = np.broadcast_to(quantizer.steps / 2, vectors.shape)
    assert np.all(np.abs(restored - vectors)[inside] <= half_step[inside] + 1e-6)
    bits = Quantizer("binary", 96).encode(vectors)
    assert bits.shape == (len(vectors), bytes_per_document("binary", 96)) == (3000, 16)
    unpacked = np.unpackbits(bits, axis=1)
    assert np.array_equal(unpacked[:, :96], (vectors > 0).astype(np.uint8)) and not unpacked[:, 96:].any()
    assert [bytes_per_document(p, 384) for p in compact.PRECISIONS] == [1536, 768, 384, 48]


@pytest.mark.parametrize("use_faiss", [True, False])
def test_binary_scores_are_one_minus_twice_the_hamming_share_with_or_without_faiss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_faiss: bool
) -> None:
    vectors, queries = _vectors(500), _vectors(7, seed=1)
    if not use_faiss:
        monkeypatch.setattr(compact, "faiss_available", lambda: False)
    write_compact_part(tmp_path, vectors, "binary", "cosine", 0)
    scores, rows = CompactPart.load(tmp_path).search(queries, 20, vectors)
    hamming = ((queries[:, None, :] > 0) != (vectors[None, :, :] > 0)).sum(axis=2)
    expected = 1.0 - 2.0 * hamming / 96
    assert np.allclose(scores, np.take_along_axis(expected, rows, axis=1))
    assert np.allclose(scores, -np.sort(-expected, axis=1)[:, :20])  # the best 20 scores, whichever tied rows


@pytest.mark.parametrize("precision", ["float16", "int8", "binary"])
def test_rescoring_every_candidate_gives_the_float32_ranking_and_compact_scores_stay_close(
    tmp_path: Path, precision: str
) -> None:
    vectors, queries = _vectors(250), _vectors(9, seed=2)
    write_compact_part(tmp_path, vectors, precision, "cosine", None)
    part = CompactPart.load(tmp_path)
    assert part.rescore == compact.RESCORE[precision]
    exact_scores, exact_rows = exact_search(queries, vectors, 10)
    scores, rows = part.search(queries, 10, vectors, rescore=3)  # 300 candidates > 250 rows: all of them
    assert np.array_equal(rows, exact_rows) and np.allclose(scores, exact_scores, atol=1e-5)
    if precision != "binary":  # the compact scores alone: within the quantization error of the float ones
        scores, rows = part.search(queries, 10, vectors, rescore=0)
        true = np.take_along_axis(queries @ vectors.T, rows, axis=1)
        assert np.abs(scores - true).max() < (2e-3 if precision == "float16" else 2e-2)


def test_a_larger_top_k_never_reorders_the_best_hits(tmp_path: Path) -> None:
    vectors, queries = _vectors(3000), _vectors(5, seed=3)
    folder = tmp_path
    write_compact_part(folder, vectors, "binary", "cosine", 1)
    part = CompactPart.load(folder)
    _, five = part.search(queries, 5, vectors)
    _, fifty = part.search(queries, 50, vectors)
    assert np.array_equal(fifty[:, :5], five)


def test_an_index_built_and_converted_at_each_precision(built: Path, corpus: list[str], tiny_tokenizer) -> None:
    model = make_tiny_model()
    float32 = load_index(built / "float32")
    queries = model.encode(QUERIES, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    expected = float32.dense_rows(queries, 10)
    assert float32.precision == "float32" and float32.rescore is None and float32.info["compact"] is None
    index = build_index(
        model, corpus, built / "int8", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False,
        precision="int8", rescore=2,
    )  # fmt: skip
    assert index.precision == "int8" and index.rescore == 2
    assert index.info["compact"]["bytes_per_document"] == 32
    scores, rows = index.dense_rows(queries, 10)
    assert np.array_equal(rows, expected[1]) and np.allclose(scores, expected[0], atol=1e-5)
    converted = set_precision(built / "int8", "binary")
    assert converted.precision == "binary" and converted.rescore == compact.RESCORE["binary"]
    assert "precision: binary (8 bytes a document, float32 128)" in (built / "int8" / "README.md").read_text()
    assert np.array_equal(converted.dense_rows(queries, 10)[1], expected[1])
    converted.rescore = 0
    hits = converted.search(model, QUERIES, top_k=3, tokenizer=tiny_tokenizer)
    assert all(hit["score"] <= 1.0 for found in hits for hit in found)
    back = set_precision(built / "int8", "float32")
    assert back.precision == "float32" and not (built / "int8" / "compact").exists()


def test_a_failed_conversion_keeps_the_index_as_it_was(built: Path, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import shutil

    shutil.copytree(built / "float32", tmp_path / "index")
    set_precision(tmp_path / "index", "int8")

    def broken(folder, *args, **kwargs):
        (folder / "codes.npy").parent.mkdir(parents=True, exist_ok=True)
        (folder / "codes.npy").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr("hf_siamese.retrieval.index.additions.write_compact_part", broken)
    with pytest.raises(OSError, match="disk full"):
        set_precision(tmp_path / "index", "binary")
    index = load_index(tmp_path / "index")
    assert index.precision == "int8" and not (tmp_path / "index" / ".compact.building").exists()


def test_bad_inputs_are_refused_naming_the_value(built: Path, corpus: list[str], tiny_tokenizer, tmp_path) -> None:
    model = make_tiny_model()
    with pytest.raises(ValueError, match="precision='int4'; expected one of float32, float16, int8, binary"):
        build_index(model, corpus, tmp_path / "a", tokenizer=tiny_tokenizer, precision="int4")
    with pytest.raises(ValueError, match="rescore=-1"):
        build_index(model, corpus, tmp_path / "a", tokenizer=tiny_tokenizer, precision="binary", rescore=-1)
    with pytest.raises(ValueError, match="approximate=True .*precision='float16'.* serves precision int8 and binary"):
        build_index(model, corpus, tmp_path / "a", tokenizer=tiny_tokenizer, precision="float16", approximate=True)
    euclidean = make_tiny_model()
    euclidean.config.similarity = "euclidean"
    with pytest.raises(ValueError, match="'euclidean': keep precision='float32'"):
        build_index(euclidean, corpus, tmp_path / "b", tokenizer=tiny_tokenizer, precision="int8")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="rescore=3: the index .* searches its float32 vectors"):
        load_index(built / "float32", rescore=3)
    with pytest.raises(ValueError, match="rescore=True"):
        compact.check_rescore(True)
    with pytest.raises(ValueError, match="rescore=2 .*collection"):
        load_index("milvus-lite:x.db#c", rescore=2)


def test_corrupt_codes_are_named(built: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(built / "float32", tmp_path / "index")
    set_precision(tmp_path / "index", "binary")
    (tmp_path / "index" / "compact" / "codes.npy").unlink()
    with pytest.raises(ValueError, match="corrupt compact vectors .*rebuild the index"):
        load_index(tmp_path / "index")


def test_the_cli_builds_converts_and_searches(built: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "idx"
    corpus = built / "corpus.txt"
    assert main(["index", str(corpus), "-o", str(out), "--model", str(built / "model"), "--precision", "binary",
                 "--rescore", "2", "--no-lexical"]) == 0  # fmt: skip
    assert "binary vectors (8 bytes a document), rescore 2" in capsys.readouterr().out
    assert json.loads((out / "index.json").read_text())["compact"]["rescore"] == 2
    assert main(["search", "--index", str(out), "--query", QUERIES[0], "--top-k", "2", "--rescore", "0"]) == 0
    assert main(["index", "--set-precision", str(out), "--precision", "int8"]) == 0
    assert "int8 vectors (32 bytes a document), rescore 1" in capsys.readouterr().out
    for argv, message in (
        (["index", str(corpus), "-o", str(tmp_path / "x"), "--rescore", "2"], "--rescore 2 applies to compact"),
        (["index", "--set-precision", str(out)], "give --precision"),
        (["index", "--set-precision", str(out), "--precision", "int8", "-o", "y"], "give no -o"),
        (["search", "--corpus", str(corpus), "--query", "x", "--rescore", "1"], "--rescore applies to an --index"),
    ):
        assert main(argv) != 0
        assert message in capsys.readouterr().err
    assert main(["search", "--index", str(out), "--query", "x", "--rescore", "-1"]) != 0
    assert "expected an integer >= 0, got '-1'" in capsys.readouterr().err


def test_milvus_takes_int8_as_its_scalar_quantized_index_and_refuses_binary(
    built: Path, corpus: list[str], tiny_tokenizer, tmp_path: Path
) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from hf_siamese.retrieval.index.compact import describe_precision

    model = make_tiny_model()
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    engine = build_index(
        model, corpus, location, tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False, precision="int8",
        engine_options={"dense_params": {"nlist": 4}},
    )  # fmt: skip
    assert engine.info["dense_index"]["type"] == "IVF_SQ8" and engine.info["dense_index"]["recall"]["value"] >= 0.9
    assert describe_precision(engine) == ", int8 vectors (the engine's IVF_SQ8 index, 32 bytes a document)"
    queries = model.encode(QUERIES, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    _, rows = engine.dense_rows(queries, 5)
    _, exact = load_index(built / "float32").dense_rows(queries, 5)
    assert (rows[:, 0] == exact[:, 0]).mean() >= 2 / 3  # int8 and approximate: the best hit mostly the same
    for precision, options, message in (
        ("binary", None, "Milvus Lite has no binary or float16 vector field"),
        ("int8", {"dense_index": "FLAT"}, "dense_index='FLAT' .* accepted IVF_SQ8, HNSW_SQ"),
    ):
        with pytest.raises(ValueError, match=message):
            build_index(model, corpus, location, tokenizer=tiny_tokenizer, precision=precision, engine_options=options)
    with pytest.raises(ValueError, match="rescore=2 .*searches its own index"):
        build_index(model, corpus, location, tokenizer=tiny_tokenizer, precision="int8", rescore=2)


def test_rows_read_from_a_memory_mapped_file_are_the_rows(tmp_path: Path) -> None:
    vectors = _vectors(50, dim=12)
    np.save(tmp_path / "vectors.npy", vectors)
    mapped = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    rows = np.array([0, 7, 8, 49])
    assert np.array_equal(read_rows(mapped, rows), vectors[rows])
    assert np.array_equal(read_rows(vectors, rows), vectors[rows])  # an array in memory: indexed


def test_int8_scores_are_the_same_through_faiss_and_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("faiss")
    vectors, queries = _vectors(700), _vectors(6, seed=4)
    write_compact_part(tmp_path, vectors, "int8", "cosine", 0)
    through_faiss = CompactPart.load(tmp_path).search(queries, 15, vectors)
    monkeypatch.setattr(compact, "faiss_available", lambda: False)
    by_numpy = CompactPart.load(tmp_path).search(queries, 15, vectors)
    assert np.allclose(through_faiss[0], by_numpy[0], atol=1e-5)
    assert (through_faiss[1] == by_numpy[1]).mean() > 0.95  # the same rows but where two scores tie within rounding
