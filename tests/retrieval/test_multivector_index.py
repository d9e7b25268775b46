"""The multi-vector part of an index folder and MaxSim as a second stage: the stored token vectors are encode()'s
(float16 within 1e-3, int8 within half its per-token scale), a MaxSim rerank orders the first stage's candidates as
MaxSim by hand does, a stopped write resumes its counted shards, the CLI (index, search, eval, the recorded
pipeline) gives the library's ranking, and bad inputs are refused naming the value. Tiny random models."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertModel

from hf_siamese import MultiVectorConfig, MultiVectorModel
from hf_siamese.cli import main
from hf_siamese.modeling.multivector_scoring import maxsim
from hf_siamese.retrieval.fusion.multivector_rerank import MultiVectorReranker
from hf_siamese.retrieval.fusion.rerank import fuse_scores
from hf_siamese.retrieval.index.additions import add_multivector, attach_reranker
from hf_siamese.retrieval.index.multivector_part import MULTIVECTOR_DIR, bytes_per_token, check_precision
from hf_siamese.retrieval.stores import build_index, load_index

QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell"]


def _mv_model(seed: int = 0) -> MultiVectorModel:
    torch.manual_seed(seed)
    encoder = BertModel(BertConfig(**TINY, max_position_embeddings=64))
    config = MultiVectorConfig(encoder_config=encoder.config, embedding_dim=16)
    return MultiVectorModel(config, encoder=encoder).eval()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("multivector_index")
    _mv_model().save_pretrained(root / "mv")
    tiny_tokenizer.save_pretrained(root / "mv")
    make_tiny_model().save_pretrained(root / "dense")
    tiny_tokenizer.save_pretrained(root / "dense")
    rng = random.Random(3)
    corpus = list(dict.fromkeys(" ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 9))) for _ in range(40)))
    (root / "corpus.txt").write_text("\n".join(corpus[:20]) + "\n", encoding="utf-8")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    rows = [{"_id": f"d{i}", "text": text} for i, text in enumerate(corpus[:20])]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    queries = {f"q{i}": " ".join(corpus[i].split()[:3]) for i in range(6)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6))
    )
    return root


def _texts(files: Path) -> list[str]:
    return (files / "corpus.txt").read_text(encoding="utf-8").splitlines()


def _build(files: Path, output: Path, tokenizer, **options):
    return build_index(
        make_tiny_model(), _texts(files), output, tokenizer=tokenizer, shard_size=6, show_progress_bar=False,
        lexical=False, **options,
    )  # fmt: skip


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_stored_token_vectors_are_encodes_at_each_precision(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    model, texts = _mv_model(), _texts(files)
    expected = model.encode(texts, tiny_tokenizer, task="document")
    index = _build(files, tmp_path / "idx", tiny_tokenizer, multivector_model=str(files / "mv"))
    record = index.info["multivector"]
    assert record["model"]["name_or_path"] == str(files / "mv") and len(record["model"]["fingerprint"]) == 64
    assert (record["count"], record["dim"], record["precision"]) == (20, 16, "float16")
    assert record["tokens"] == sum(len(v) for v in expected) and record["bytes_per_token"] == 32
    folder = tmp_path / "idx" / MULTIVECTOR_DIR
    assert sorted(p.name for p in folder.iterdir()) == ["multivector.json", "offsets.npy", "vectors.npy"]
    vectors = np.load(folder / "vectors.npy", mmap_mode="r")  # a plain .npy, memory-mapped
    assert vectors.dtype == np.float16 and vectors.shape == (record["tokens"], 16)
    for row, vectors in enumerate(expected):
        torch.testing.assert_close(index.multivector.document(row), vectors, atol=1e-3, rtol=0)
    plain = _build(files, tmp_path / "plain", tiny_tokenizer)
    added = add_multivector(tmp_path / "plain", model, tokenizer=tiny_tokenizer, precision="int8", shard_size=7)
    np.testing.assert_array_equal(np.array(added.embeddings), np.array(plain.embeddings))  # nothing re-encoded
    part = added.multivector
    assert part.record["precision"] == "int8" and part.record["scale"] == "per-token"
    assert part.record["bytes_per_token"] == bytes_per_token(16, "int8") == 16 + 4
    assert bytes_per_token(128, "float16") == 256 and bytes_per_token(128, "int8") == 132
    for row, vectors in enumerate(expected):
        start, end = int(part.offsets[row]), int(part.offsets[row + 1])
        scales = torch.from_numpy(np.array(part.scales[start:end]))
        assert torch.allclose(scales, vectors.abs().amax(dim=1) / 127)
        assert ((part.document(row) - vectors).abs() <= scales[:, None] / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="has a multi-vector part already"):
        add_multivector(tmp_path / "plain", model, tokenizer=tiny_tokenizer)
    # a sentence-transformers MultiVectorEncoder folder is a multi-vector model too (--rerank tells it by its files)
    from hf_siamese.formats.multivector_layout import write_multivector_encoder
    from hf_siamese.retrieval.fusion.multivector_rerank import is_multivector_model_path

    write_multivector_encoder(model, tmp_path / "st", tiny_tokenizer)
    assert is_multivector_model_path(tmp_path / "st") and is_multivector_model_path(files / "mv")
    assert not is_multivector_model_path(files / "dense") and not is_multivector_model_path(tmp_path / "missing")
    reader = MultiVectorReranker.load(tmp_path / "st")
    for row in (0, 7):
        torch.testing.assert_close(reader.model.encode(texts[row], task="document"), expected[row], atol=1e-5, rtol=0)
    assert record["dtype"] == part.record["dtype"] == "float32"


def test_the_index_dtype_encodes_the_multivector_part_too(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    model, texts = _mv_model(), _texts(files)
    full = model.encode(texts, tiny_tokenizer, task="document")
    low = model.encode(texts, tiny_tokenizer, task="document", dtype=torch.bfloat16)
    index = _build(files, tmp_path / "idx", tiny_tokenizer, multivector_model=str(files / "mv"), dtype="bfloat16")
    assert index.info["multivector"]["dtype"] == "bfloat16" and index.info["multivector"]["key"]["dtype"] == "bfloat16"
    assert any(not torch.equal(a, b) for a, b in zip(low, full, strict=True))
    for row, vectors in enumerate(low):
        torch.testing.assert_close(index.multivector.document(row), vectors, atol=1e-3, rtol=0)
    _build(files, tmp_path / "plain", tiny_tokenizer)
    added = add_multivector(tmp_path / "plain", model, tokenizer=tiny_tokenizer, dtype="bfloat16")
    assert added.multivector.record["dtype"] == "bfloat16"
    with pytest.raises(ValueError, match="dtype='float64'"):
        add_multivector(tmp_path / "plain", model, tokenizer=tiny_tokenizer, dtype="float64", overwrite=True)
    assert load_index(tmp_path / "plain").multivector.record["dtype"] == "bfloat16"  # the refused call changed nothing


def _by_hand(model, tokenizer, index, query: str, candidates: list[dict]) -> list[tuple]:
    """MaxSim of `query` against each candidate's stored vectors, best first (equal scores: first-stage order)."""
    query_vectors = model.encode([query], tokenizer, task="query")[0]
    rows = {text: row for row, text in enumerate(index.corpus["text"])}
    part = index.multivector
    scores = [
        float(maxsim(query_vectors[None], None, part.document(rows[hit["text"]])[None], None)[0, 0])
        for hit in candidates
    ]
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
    return [(candidates[i]["id"], scores[i]) for i in order]


def test_a_maxsim_rerank_orders_the_candidates_as_maxsim_by_hand(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index = _build(files, tmp_path / "idx", tiny_tokenizer, multivector_model=str(files / "mv"))
    dense, model = make_tiny_model(), _mv_model()
    reranker = MultiVectorReranker(model, tiny_tokenizer)
    first = index.search(dense, QUERIES, 8, tokenizer=tiny_tokenizer, rerank=False)
    reranked = index.search(dense, QUERIES, 5, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=8)
    for query, candidates, hits in zip(QUERIES, first, reranked, strict=True):
        expected = _by_hand(model, tiny_tokenizer, index, query, candidates)[:5]
        assert [hit["id"] for hit in hits] == [doc for doc, _ in expected]
        np.testing.assert_allclose([hit["score"] for hit in hits], [score for _, score in expected], rtol=1e-5)
        assert all(hit["first_stage_rank"] <= 8 for hit in hits)
    # float16 storage keeps the order of MaxSim over encode()'s float32 vectors on these candidates
    query_vectors = model.encode(QUERIES[0], tiny_tokenizer, task="query")
    exact = model.similarity([query_vectors], model.encode([c["text"] for c in first[0]], tiny_tokenizer))[0]
    np.testing.assert_allclose(sorted(exact.tolist(), reverse=True)[:5], [h["score"] for h in reranked[0]], atol=1e-2)
    # its score joins the fusion as a cross-encoder's: a first-stage weight fuses the two z-scores
    fused = index.search(
        dense, QUERIES[:1], 8, tokenizer=tiny_tokenizer, rerank=reranker, rerank_top=8, first_stage_weight=0.5
    )[0]
    by_hand = dict(_by_hand(model, tiny_tokenizer, index, QUERIES[0], first[0]))
    combined = fuse_scores([by_hand[c["id"]] for c in first[0]], [c["score"] for c in first[0]], 0.5)
    order = sorted(range(8), key=lambda i: (-combined[i], i))
    assert [hit["id"] for hit in fused] == [first[0][i]["id"] for i in order]
    assert [hit["reranker_score"] for hit in fused] == pytest.approx([by_hand[h["id"]] for h in fused], rel=1e-5)


def test_a_stopped_write_resumes_its_counted_shards(files: Path, tmp_path: Path, tiny_tokenizer, monkeypatch) -> None:
    model, calls = _mv_model(), []
    real = model.encode

    def stops(texts, *args, **kwargs):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(model, "encode", stops)
    _build(files, tmp_path / "plain", tiny_tokenizer)
    with pytest.raises(KeyboardInterrupt):
        add_multivector(tmp_path / "plain", model, tokenizer=tiny_tokenizer, shard_size=6)
    index = load_index(tmp_path / "plain")
    assert not index.has_multivector and "multivector" not in index.info  # complete, or not at all
    staging = tmp_path / "plain" / f".{MULTIVECTOR_DIR}.building"
    assert json.loads((staging / "progress.json").read_text())["documents"] == 12
    with open(staging / "vectors.npy", "ab") as handle:  # bytes a kill left after the last counted shard: cut off
        handle.write(b"\x01" * 40)
    calls.clear()
    resumed = add_multivector(tmp_path / "plain", model, tokenizer=tiny_tokenizer, shard_size=6)
    assert calls == [6, 2] and not staging.exists()  # only the shards not yet counted
    whole = _build(files, tmp_path / "whole", tiny_tokenizer, multivector_model=_mv_model(),
                   multivector_tokenizer=tiny_tokenizer)  # fmt: skip
    for row in range(len(whole)):
        assert torch.equal(resumed.multivector.document(row), whole.multivector.document(row))
    # a stopped build resumes the part with its vectors; another precision starts it afresh
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        _build(files, tmp_path / "idx", tiny_tokenizer, multivector_model=model, multivector_tokenizer=tiny_tokenizer)
    assert not (tmp_path / "idx").exists()
    calls.clear()
    built = _build(
        files, tmp_path / "idx", tiny_tokenizer, multivector_model=model, multivector_tokenizer=tiny_tokenizer
    )
    assert calls == [6, 2] and built.has_multivector
    assert built.info["multivector"]["tokens"] == whole.info["multivector"]["tokens"]


def test_cli_index_search_eval_and_the_recorded_pipeline(files: Path, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    idx, mv = tmp_path / "idx", files / "mv"
    base = ["index", files / "corpus.txt", "--model", files / "dense", "--no-lexical"]
    code, out, err = _run([*base, "-o", idx, "--multi-vector-model", mv, "--multi-vector-precision", "int8"], capsys)
    assert code == 0, err
    assert "with the multi-vector part (20 documents" in out and "int8, 20 bytes a token" in out
    search = ["search", "--index", idx, "--query", QUERIES[1], "--top-k", "4"]
    code, out, err = _run([*search, "--rerank", mv, "--rerank-top", "10"], capsys)
    assert code == 0, err
    index = load_index(idx)
    reranker = MultiVectorReranker.load(mv)
    expected = index.search(make_tiny_model(), QUERIES[1:2], 4, tokenizer=tiny_tokenizer, rerank=reranker,
                            rerank_top=10)[0]  # fmt: skip
    printed = re.findall(r"^\s+\d+\. (\S+)  \[(\d+)\] .*\(first stage: #(\d+)", out, flags=re.MULTILINE)
    assert printed == [(f"{h['score']:.4f}", str(h["id"]), str(h["first_stage_rank"])) for h in expected]
    lines = re.findall(r"^\s+\d+\. .*$", out, re.MULTILINE)
    code, out, err = _run(["index", "--attach", idx, "--rerank", mv, "--rerank-top", "10"], capsys)
    assert code == 0 and "MaxSim of the stored token vectors" in out, err
    code, again, err = _run(search, capsys)  # the recorded pipeline: the same hits with no flags
    assert code == 0 and re.findall(r"^\s+\d+\. .*$", again, re.MULTILINE) == lines, err
    code, out, err = _run([*search, "--no-rerank"], capsys)
    assert code == 0 and "first stage:" not in out, err

    from hf_siamese.data.beir import read_beir
    from hf_siamese.evaluation.retrieval import evaluate_retrieval
    from hf_siamese.metrics import retrieval_metrics

    beir_idx = tmp_path / "beir_idx"
    code, out, err = _run(["index", files / "beir", "-o", beir_idx, "--model", files / "dense", "--no-lexical"], capsys)
    assert code == 0, err
    code, out, err = _run(["index", "--add-multi-vector", beir_idx, "--multi-vector-model", mv], capsys)
    assert code == 0 and "added the multi-vector part (20 documents" in out and "float16, 32 bytes" in out, err
    code, out, err = _run(["eval", files / "beir", "--index", beir_idx, "--rerank", mv, "--rerank-top", "6"], capsys)
    assert code == 0, err
    table = {
        m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(r"^(\S+@\d+) +(\S+) +(\S+)", out, re.M)
    }
    data, index, dense = read_beir(files / "beir"), load_index(beir_idx), make_tiny_model()
    metrics = evaluate_retrieval(
        dense, data, tokenizer=tiny_tokenizer, index=index, rerank=reranker, rerank_top=6, percent=True
    )
    assert table["ndcg@10"] == (round(metrics["ndcg@10"], 2), round(metrics["rerank_ndcg@10"], 2))
    # the evaluation ranks as the search does: the reranked top 6 of each query, then the first stage's order
    judged = sorted(data.qrels)
    searched = index.search(dense, [data.queries[q] for q in judged], 6, tokenizer=tiny_tokenizer, rerank=reranker,
                            rerank_top=6)  # fmt: skip
    rest = index.search(dense, [data.queries[q] for q in judged], 20, tokenizer=tiny_tokenizer, rerank=False)
    rankings = {}
    for q, hits, first in zip(judged, searched, rest, strict=True):
        ids = [str(h["id"]) for h in hits]
        rankings[q] = ids + [str(h["id"]) for h in first if str(h["id"]) not in ids]
    by_search = retrieval_metrics(rankings, data.qrels, list(data.k_values), percent=True)
    assert by_search["ndcg@10"] == pytest.approx(metrics["rerank_ndcg@10"])
    assert by_search["mrr@10"] == pytest.approx(metrics["rerank_mrr@10"])


def test_bad_inputs_are_refused_naming_the_value(files: Path, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    plain = _build(files, tmp_path / "plain", tiny_tokenizer)
    reranker = MultiVectorReranker(_mv_model(), tiny_tokenizer)
    with pytest.raises(ValueError, match=r"has no multi-vector part: add it with .*--add-multi-vector"):
        plain.search(make_tiny_model(), QUERIES, tokenizer=tiny_tokenizer, rerank=reranker)
    code, out, err = _run(["search", "--index", plain.location, "--query", "dog", "--rerank", files / "mv"], capsys)
    assert code == 1 and "has no multi-vector part" in err and "--add-multi-vector" in err
    with pytest.raises(ValueError, match=r"precision 'bf16': accepted: float16, int8"):
        check_precision("bf16")
    with pytest.raises(ValueError, match=r"precision 'fp8': accepted: float16, int8"):
        add_multivector(plain.location, _mv_model(), tokenizer=tiny_tokenizer, precision="fp8")
    code, out, err = _run(["index", "--add-multi-vector", plain.location, "--multi-vector-model", files / "mv",
                           "--multi-vector-precision", "half"], capsys)  # fmt: skip
    assert code != 0 and "invalid choice: 'half'" in err and "float16" in err and "int8" in err
    # a dense model given as the multi-vector model
    with pytest.raises(ValueError, match=r"dense.*expected a multi-vector model \(siamese-multivector\), got Siamese"):
        add_multivector(plain.location, str(files / "dense"))
    code, out, err = _run(["index", "--add-multi-vector", plain.location, "--multi-vector-model", files / "dense"],
                          capsys)  # fmt: skip
    assert code == 1 and "--multi-vector-model" in err and "expected a multi-vector model" in err
    with pytest.raises(ValueError, match="expected a multi-vector model .* got SiameseBertModel"):
        MultiVectorReranker(make_tiny_model())
    code, out, err = _run(["index", "--add-multi-vector", plain.location], capsys)
    assert code == 1 and "give --multi-vector-model MV" in err
    # another model than the recorded one
    other = tmp_path / "other"
    _mv_model(seed=1).save_pretrained(other)
    tiny_tokenizer.save_pretrained(other)
    add_multivector(plain.location, str(files / "mv"), shard_size=50)
    index = load_index(plain.location)
    with pytest.raises(ValueError, match=r"was built with '.*mv' \(fingerprint \w{12}\), not '.*other'"):
        index.search(make_tiny_model(), QUERIES, tokenizer=tiny_tokenizer, rerank=MultiVectorReranker.load(other))
    with pytest.raises(ValueError, match="was built with"):
        attach_reranker(plain.location, str(other))
    # where no index stores the vectors
    code, out, err = _run(["search", "--corpus", files / "corpus.txt", "--model", files / "dense", "--query", "dog",
                           "--rerank", files / "mv"], capsys)  # fmt: skip
    assert code == 1 and "is a multi-vector model" in err and "--multi-vector-model" in err
    code, out, err = _run(["eval", files / "beir", "--model", files / "dense", "--rerank", files / "mv"], capsys)
    assert code == 1 and "eval --index DIR" in err
    with pytest.raises(ValueError, match="not on bare pairs"):
        reranker.predict([("dog", "a dog")])
    with pytest.raises(ValueError, match="search engine's collection .* keeps no token vectors"):
        build_index(make_tiny_model(), ["a"], "milvus-lite:x.db#c", multivector_model=str(files / "mv"))


def test_search_corpus_ranks_by_maxsim_of_a_multivector_model(files: Path, tiny_tokenizer, capsys) -> None:
    """`search --corpus --model MV` (and `search_corpus`) rank every text exactly by MaxSim, as by hand; dense-only
    flags are refused naming the model kind."""
    from hf_siamese.retrieval.corpus_search import search_corpus

    model = MultiVectorModel.from_pretrained(files / "mv").eval()
    texts = (files / "corpus.txt").read_text(encoding="utf-8").split("\n")[:-1]
    hits = search_corpus(model, texts, QUERIES[:2], 5, tokenizer=tiny_tokenizer)
    docs = model.encode(texts, tiny_tokenizer, task="document")
    for query, found in zip(QUERIES[:2], hits, strict=True):
        q = model.encode([query], tiny_tokenizer, task="query")[0]
        scores = [
            float(
                maxsim(
                    q[None], torch.ones(1, len(q), dtype=torch.bool), d[None], torch.ones(1, len(d), dtype=torch.bool)
                )
            )
            for d in docs
        ]
        best = sorted(range(len(texts)), key=lambda i: (-scores[i], i))[:5]
        assert [hit["id"] for hit in found] == best
        assert [hit["score"] for hit in found] == pytest.approx([scores[i] for i in best], rel=1e-5, abs=1e-5)
    code = main(
        [
            "search",
            "--corpus",
            str(files / "corpus.txt"),
            "--model",
            str(files / "mv"),
            "--query",
            QUERIES[0],
            "--top-k",
            "5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and re.findall(r"^\s+\d+\. \S+  \[(\d+)\] ", out, flags=re.MULTILINE) == [
        str(h["id"]) for h in hits[0]
    ]
    flags = ["--corpus", str(files / "corpus.txt"), "--model", str(files / "mv"), "--query", "x", "--pooling", "mean"]
    assert main(["search", *flags]) == 1
    assert re.search(r"--pooling applies to a dense model; .* is a multi-vector model", capsys.readouterr().err)
