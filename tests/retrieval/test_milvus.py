"""An index in Milvus, tested against the real engine (Milvus Lite, in-process): the same hits as the folder (our BM25
weights give the folder's scores exactly), what built it recorded and checked, resumable after SIGKILL at three
moments, a rerun with other data refused without --overwrite, and every bad location one line."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import WORDS, make_tiny_model

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from hf_siamese.cli import main  # noqa: E402
from hf_siamese.retrieval.stores import (
    build_index,  # noqa: E402
    load_index,  # noqa: E402
)
from hf_siamese.retrieval.stores.milvus.export import analyzer_of, export_index  # noqa: E402
from hf_siamese.retrieval.stores.milvus.index import MilvusIndex, MilvusLocation  # noqa: E402


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:50]) for _ in range(rng.randint(4, 10)))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A saved tiny model, its corpus and the folder index of it (with the lexical part)."""
    root = tmp_path_factory.mktemp("milvus")
    make_tiny_model().save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    rng = random.Random(3)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(90)))[:80]
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    build_index(make_tiny_model(), corpus, root / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False)
    return root


QUERIES = ["a man plays the guitar", "dog in the park", "the market price fell", "red car on the road"]


def _hits(index, model, tokenizer, first_stage: str, **kwargs) -> list[list[tuple]]:
    found = index.search(model, QUERIES, top_k=8, tokenizer=tokenizer, first_stage=first_stage, **kwargs)
    return [[(hit["id"], hit["text"], round(hit["score"], 4)) for hit in query] for query in found]


def test_ours_gives_the_folders_hits_in_every_first_stage(folder: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index, model = load_index(folder / "idx"), make_tiny_model()
    engine = export_index(index, f"milvus-lite:{tmp_path}/m.db#docs")
    assert isinstance(engine, MilvusIndex) and len(engine) == len(index) == 80
    for first_stage in ("dense", "lexical", "hybrid"):
        assert _hits(engine, model, tiny_tokenizer, first_stage) == _hits(index, model, tiny_tokenizer, first_stage)
    weighted = {"first_stage": "hybrid", "fusion": "zscore", "dense_weight": 0.3}
    assert _hits(engine, model, tiny_tokenizer, **weighted) == _hits(index, model, tiny_tokenizer, **weighted)
    reranker = _ByLength()  # the reranker gets the same union of candidates, so it returns the same hits
    reranked = {"first_stage": "hybrid", "rerank": reranker, "rerank_top": 20}
    assert _hits(engine, model, tiny_tokenizer, **reranked) == _hits(index, model, tiny_tokenizer, **reranked)
    reopened = load_index(f"milvus-lite:{tmp_path}/m.db#docs")  # what `search --index URI` opens
    assert _hits(reopened, None, None, "lexical") == _hits(index, None, None, "lexical")


class _ByLength:
    """A reranker that prefers longer texts (any `.predict(pairs)` reranks)."""

    first_stage_weight = 0.0

    def predict(self, pairs, **kwargs):
        return [float(len(document)) for _, document in pairs]


def test_milvus_bm25_function_answers_lexical_and_hybrid(folder: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index, model = load_index(folder / "idx"), make_tiny_model()
    engine = export_index(index, f"milvus-lite:{tmp_path}/m.db#docs", lexical="milvus")
    lexical = engine.search(None, QUERIES, top_k=5, first_stage="lexical")
    assert all(query and all(hit["score"] > 0 for hit in query) for query in lexical)
    for query, hits in zip(QUERIES, lexical, strict=True):  # every hit shares a (stemmed) word with its query
        stems = {word[:4] for word in query.split() if word not in ("a", "the", "in", "on")}
        assert all(stems & {word[:4] for word in hit["text"].split()} for hit in hits), (query, hits)
    hybrid = engine.search(model, QUERIES, top_k=5, tokenizer=tiny_tokenizer)  # the default: hybrid
    assert [len(query) for query in hybrid] == [5] * len(QUERIES)


def test_analyzer_of_the_settings() -> None:
    from hf_siamese.retrieval.index.lexical import LexicalSettings

    analyzer = analyzer_of(LexicalSettings())
    assert analyzer["tokenizer"] == "standard" and analyzer["filter"][0] == "lowercase"
    assert "the" in analyzer["filter"][1]["stop_words"] and analyzer["filter"][2] == {
        "type": "stemmer",
        "language": "english",
    }
    assert analyzer_of(LexicalSettings(stemmer=False, stopwords=False))["filter"] == ["lowercase"]
    assert "und" in analyzer_of(LexicalSettings(language="german"))["filter"][1]["stop_words"]


def test_the_record_refuses_another_model_and_other_data(folder: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index = load_index(folder / "idx")
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    engine = export_index(index, location)
    assert engine.info["model"]["fingerprint"] == index.info["model"]["fingerprint"]
    assert engine.info["data"].startswith("80 documents, sha256 ")
    with pytest.raises(ValueError, match="this index was built with model"):
        engine.search(make_tiny_model(seed=1), QUERIES, tokenizer=tiny_tokenizer, first_stage="dense")
    other = build_index(make_tiny_model(), ["one text", "two texts"], tmp_path / "other", tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match=r"holds another export \(differs in \['corpus', 'count', 'data'"):
        export_index(other, location)
    assert len(export_index(other, location, overwrite=True)) == 2


def _killed_export(location: str, index_folder: Path, moment: str) -> int:
    script = f"""
import os, signal
import hf_siamese.retrieval.stores.milvus.export as export
from hf_siamese.retrieval.stores import load_index
export.FLUSH_EVERY = 1
moment, done = {moment!r}, []
def kill(*args):
    os.kill(os.getpid(), signal.SIGKILL)
if moment == "created":
    real_create = export._create
    export._create = lambda *args: (real_create(*args), kill())
real_batch = export._Uploader.batch
def batch(self, begin, end):
    real_batch(self, begin, end)
    done.append(end)
    if moment == "uploading" and len(done) == 3:
        self.client.upsert(self.where.collection, [])  # upserted, not flushed
        kill()
export._Uploader.batch = batch
if moment == "flushed":
    real_finish = export._Uploader.finish
    def finish(self):
        real_finish(self)
        if self.done == self.index.info["count"]:
            kill()
    export._Uploader.finish = finish
export.export_index(load_index({str(index_folder)!r}), {location!r}, batch_size=9)
"""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300).returncode


@pytest.mark.parametrize("moment", ["created", "uploading", "flushed"])
def test_a_killed_export_resumes_to_the_same_collection(folder: Path, tmp_path: Path, tiny_tokenizer, moment) -> None:
    index, model = load_index(folder / "idx"), make_tiny_model()
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    assert _killed_export(location, folder / "idx", moment) == -9
    with pytest.raises(ValueError, match="the export stopped at|complete") if moment != "flushed" else _nothing():
        MilvusIndex.open(location)
    resumed = export_index(index, location, batch_size=9)
    rows = resumed.client.query("docs", filter="row >= 0", output_fields=["row", "doc_id"], limit=1000)
    assert sorted(int(row["row"]) for row in rows) == list(range(80))
    assert sorted(row["doc_id"] for row in rows) == sorted(index.corpus["id"])
    for first_stage in ("dense", "hybrid"):
        assert _hits(resumed, model, tiny_tokenizer, first_stage) == _hits(index, model, tiny_tokenizer, first_stage)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args) -> bool:
        return False


def test_ivf_flat_chooses_nprobe_by_measured_recall(folder: Path, tmp_path: Path, tiny_tokenizer) -> None:
    index = load_index(folder / "idx")
    engine = export_index(index, f"milvus-lite:{tmp_path}/m.db#docs", dense_index="IVF_FLAT", dense_params={"nlist": 8})
    dense = engine.info["dense_index"]
    assert dense["type"] == "IVF_FLAT" and dense["recall"]["value"] >= 0.95 and dense["search"]["nprobe"] >= 1


def test_an_export_through_the_engines_own_process_writes_the_same_collection(
    folder: Path, tmp_path: Path, tiny_tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From `PROCESS_FROM` rows the engine runs in a child process during the export: the same rows, record and hits
    as an export through the in-process engine, the database left to no process, the index opened on first use."""
    from hf_siamese.retrieval.stores.milvus import lite_process as milvus_lite_process

    index, model = load_index(folder / "idx"), make_tiny_model()
    options = {"dense_index": "FLAT"}  # exact: the same hits whatever segments the engine made
    here = export_index(index, f"milvus-lite:{tmp_path}/here.db#docs", **options)
    monkeypatch.setattr(milvus_lite_process, "PROCESS_FROM", 0)
    ivf = export_index(index, f"milvus-lite:{tmp_path}/ivf.db#docs", dense_index="IVF_FLAT", dense_params={"nlist": 8})
    assert ivf.info["dense_index"]["recall"]["value"] >= 0.95  # nprobe chosen by recall in the engine's process too
    ivf.close()
    location = f"milvus-lite:{tmp_path}/apart.db#docs"
    apart = export_index(index, location, **options)
    assert not milvus_lite_process.served_here(MilvusLocation.parse(location))  # this process never held it
    assert apart.info == here.info and len(apart) == 80
    fields = ["row", "doc_id", "text", "dense", "lexical"]
    rows = [sorted(e.client.query("docs", filter="row >= 0", output_fields=fields, limit=1000), key=lambda r: r["row"])
            for e in (here, apart)]  # fmt: skip
    assert rows[0] == rows[1] and [int(row["row"]) for row in rows[1]] == list(range(80))
    for first_stage in ("dense", "lexical", "hybrid"):
        assert _hits(apart, model, tiny_tokenizer, first_stage) == _hits(here, model, tiny_tokenizer, first_stage)
    apart.close()
    again = export_index(index, location, **options)  # complete already; now served here, so exported through it
    assert again.info == here.info


@pytest.mark.parametrize(
    ("location", "fragment"),
    [
        ("milvus-lite:/tmp/x.sqlite#docs", "a file named *.db"),
        ("milvus://localhost/docs", "a host and a port"),
        ("milvus-lite:/tmp/x.db#9docs", "collection name '9docs'"),
        ("milvus:/localhost:1/docs", "is not a Milvus location"),
    ],
)
def test_bad_locations_are_one_line(location: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=None) as raised:
        MilvusLocation.parse(location)
    assert fragment in str(raised.value)


def test_an_unreachable_server_is_one_line_within_bounded_time() -> None:
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"milvus://127.0.0.1:9/docs: could not reach the Milvus server"):
        MilvusIndex.open("milvus://127.0.0.1:9/docs")
    assert time.monotonic() - start < 30


def test_a_wrong_or_foreign_collection_is_one_line(folder: Path, tmp_path: Path) -> None:
    export_index(load_index(folder / "idx"), f"milvus-lite:{tmp_path}/m.db#docs")
    with pytest.raises(ValueError, match=r"no collection 'nope' there \(collections: \['docs'\]\)"):
        MilvusIndex.open(f"milvus-lite:{tmp_path}/m.db#nope")
    from pymilvus import MilvusClient

    client = MilvusClient(f"{tmp_path}/m.db")
    client.create_collection("foreign", dimension=4)
    client.close()
    with pytest.raises(ValueError, match="was not written by 'hf-siamese index'"):
        MilvusIndex.open(f"milvus-lite:{tmp_path}/m.db#foreign")


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_index_search_and_eval_commands_through_milvus_lite(folder: Path, tmp_path: Path, capsys) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    texts = (folder / "corpus.txt").read_text().splitlines()
    rows = [{"_id": f"d{i}", "title": "", "text": text} for i, text in enumerate(texts)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    queries = {f"q{i}": " ".join(texts[i].split()[:3]) for i in range(6)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6))
    )
    location = f"milvus-lite:{tmp_path}/m.db#scifact_like"
    model = folder / "model"
    code, out, err = _run(["index", beir, "--model", model, "-o", location], capsys)
    assert code == 0 and f"into {location}" in out, err
    assert not any(p.name.endswith(".export") for p in tmp_path.iterdir())  # the work folder went
    code, out, err = _run(["search", "--index", location, "--query", "dog in the park", "--top-k", "3"], capsys)
    assert code == 0 and out.count("[d") == 3, err
    code, folder_out, err = _run(["index", beir, "--model", model, "-o", tmp_path / "idx"], capsys)
    assert code == 0, err
    for first_stage in ("dense", "lexical", "hybrid"):
        tables = []
        for where in (location, tmp_path / "idx", None):
            extra = [] if where is None else ["--index", where]
            code, out, err = _run(["eval", beir, "--model", model, "--first-stage", first_stage, *extra], capsys)
            if first_stage == "lexical":
                code, out, err = _run(["eval", beir, "--first-stage", first_stage, *extra], capsys)
            assert code == 0, err
            tables.append([line for line in out.splitlines() if line.startswith(("ndcg", "recall", "mrr"))])
        assert tables[0] == tables[1] == tables[2], first_stage
    code, _, err = _run(["index", beir, "--model", model, "-o", location, "--k1", "1.2"], capsys)
    assert code != 0 and "holds another export" in err and err.count("\n") == 1
    _, _, err = _run(["index", beir, "--model", model, "-o", tmp_path / "x", "--engine-lexical", "milvus"], capsys)
    assert "engine_options apply to a search engine's location" in err
    os.environ.pop("MILVUS_TOKEN", None)


def test_without_the_extra_one_line_names_the_install(monkeypatch: pytest.MonkeyPatch, capsys, folder: Path) -> None:
    monkeypatch.setitem(sys.modules, "pymilvus", None)  # import pymilvus -> ImportError
    code, _, err = _run(["search", "--index", "milvus-lite:/tmp/none.db#docs", "--query", "dog"], capsys)
    assert code != 0 and err.count("\n") == 1
    assert "pymilvus is missing" in err and "pip install 'hf-siamese[milvus]'" in err


def test_documents_without_a_term_are_exported(tmp_path: Path, tiny_tokenizer) -> None:
    """A document of stopwords only (or empty) has no BM25 term; Milvus refuses an empty sparse vector."""
    texts = ["the of and", "dog in the park", "", "a man plays the guitar"]
    index = build_index(make_tiny_model(), texts, tmp_path / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False)
    engine = export_index(index, f"milvus-lite:{tmp_path}/m.db#docs")
    assert len(engine) == 4
    assert [[hit["id"] for hit in query] for query in engine.search(None, ["dog", "the"], first_stage="lexical")] == [
        [1],
        [],
    ]
