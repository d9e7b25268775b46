"""What `index -o milvus...` and `search --index milvus...` are given, against the real engine (Milvus Lite,
in-process): a dense index the engine does not build, contradicting lexical flags, a missing or foreign database file,
the scheme in capitals, a text Milvus cannot hold, refusals that must come before the embedding, a work folder stale
by content, and connections that stay healthy while the corpus is embedded. Each is one line that names the value and
what would be accepted; nothing already saved is lost or half-written."""

from __future__ import annotations

import json
import os
import random
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
from hf_siamese.retrieval.stores.milvus.export import export_index  # noqa: E402
from hf_siamese.retrieval.stores.milvus.index import MilvusIndex, MilvusLocation  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A saved tiny model, a corpus of 40 texts and the folder index of it."""
    root = tmp_path_factory.mktemp("milvus_inputs")
    make_tiny_model().save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    rng = random.Random(5)
    texts = list(dict.fromkeys(" ".join(rng.choice(WORDS[:50]) for _ in range(6)) for _ in range(60)))[:40]
    (root / "corpus.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    build_index(make_tiny_model(), texts, root / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False)
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _refused(argv: list, capsys, *fragments: str) -> str:
    code, out, err = _run(argv, capsys)
    assert code != 0, out
    assert err.count("\n") == 1 and err.startswith("hf-siamese: "), err  # one line
    for fragment in fragments:
        assert fragment in err, err
    return err


class _CountingModel:
    """The tiny model, counting its `encode` calls: a refusal or a finished build must embed nothing."""

    def __init__(self) -> None:
        self.model, self.calls = make_tiny_model(), 0
        real = self.model.encode

        def encode(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        self.model.encode = encode


# -- 1. the dense index: what the engine builds ------------------------------------------------------------------------


def test_a_dense_index_the_engine_does_not_build_is_refused_before_any_work(files: Path, tmp_path: Path, capsys):
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    base = ["index", files / "corpus.txt", "--model", files / "model", "-o", location]
    _refused([*base, "--dense-index", "NOPE"], capsys, "dense index 'NOPE' (--dense-index): Milvus Lite", "FLAT")
    # a server's index type that this Milvus Lite does not build
    _refused([*base, "--dense-index", "HNSW_PQ"], capsys, "'HNSW_PQ'", "does not build it; accepted: FLAT, IVF_FLAT")
    assert not (tmp_path / "m.db").exists()  # refused before anything was made
    with pytest.raises(ValueError, match=r"dense index 'nope' \(--dense-index\).*accepted: .*FLAT"):
        export_index(load_index(files / "idx"), location, dense_index="nope")


def test_a_dense_index_the_engine_builds_is_the_one_recorded(files: Path, tmp_path: Path) -> None:
    index, location = load_index(files / "idx"), f"milvus-lite:{tmp_path}/ivf.db#docs"
    engine = export_index(index, location, dense_index="ivf_flat", dense_params={"nlist": 8})
    assert engine.backend == "IVF_FLAT" and engine.info["dense_index"]["recall"]["value"] >= 0.95
    again = export_index(index, location, dense_index="IVF_FLAT", dense_params={"nlist": 8})
    assert len(again) == 40  # complete already: the recall it measured is no difference from the same export
    from hf_siamese.retrieval.stores.milvus.index import dense_index_types

    offered = dense_index_types(lite=True)
    assert offered[:2] == ("FLAT", "IVF_FLAT")
    kind = "HNSW" if "HNSW" in offered else "FLAT"  # Milvus Lite 3 builds HNSW (with faiss), Milvus Lite 2 does not
    engine = export_index(index, f"milvus-lite:{tmp_path}/m.db#docs", dense_index=kind.lower())
    assert engine.backend == kind and len(engine.search_embeddings(index.embeddings[:2], 3)[0]) == 3


# -- 2. contradicting lexical flags ------------------------------------------------------------------------------------


def test_engine_lexical_with_no_lexical_is_refused_naming_both(files: Path, tmp_path: Path, capsys) -> None:
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    argv = ["index", files / "corpus.txt", "--model", files / "model", "-o", location, "--no-lexical"]
    _refused(
        [*argv, "--engine-lexical", "milvus"], capsys,
        "--engine-lexical milvus", "--no-lexical", "give one or the other",
    )  # fmt: skip
    assert not (tmp_path / "m.db").exists()
    with pytest.raises(ValueError, match=r"engine_lexical='ours' \(--engine-lexical ours\) sets the BM25 part"):
        build_index(make_tiny_model(), ["a text"], location, lexical=False, engine_options={"engine_lexical": "ours"})


# -- 3, 4, 5. where the database is ------------------------------------------------------------------------------------


def test_a_search_never_creates_a_database(tmp_path: Path, capsys) -> None:
    for location in (f"milvus-lite:{tmp_path}/missing.db#docs", f"milvus-lite:{tmp_path}/sub/missing.db#docs"):
        code, _, err = _run(["search", "--index", location, "--query", "dog"], capsys)
        assert code != 0 and sorted(p.name for p in tmp_path.iterdir()) == []  # no missing.db, no sub/
        assert f"no Milvus Lite database at {tmp_path}" in err and "build one with 'hf-siamese index CORPUS -o" in err


def test_a_file_that_is_not_a_database_is_one_line_at_once(files: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "junk.db").write_text("not a database\n")
    (tmp_path / "notes.db").mkdir()
    (tmp_path / "notes.db" / "todo.txt").write_text("x")
    began = time.monotonic()
    _refused(
        ["search", "--index", f"milvus-lite:{tmp_path}/junk.db#docs", "--query", "dog"], capsys,
        f"{tmp_path}/junk.db is a file, not a Milvus Lite database",
    )  # fmt: skip
    _refused(
        ["index", files / "corpus.txt", "--model", files / "model", "-o", f"milvus-lite:{tmp_path}/junk.db#docs"],
        capsys, "junk.db is a file, not a Milvus Lite database",
    )  # fmt: skip
    _refused(
        ["search", "--index", f"milvus-lite:{tmp_path}/notes.db#docs", "--query", "dog"], capsys,
        f"the folder {tmp_path}/notes.db is not a Milvus Lite database",
    )  # fmt: skip
    assert time.monotonic() - began < 20  # no connection attempt, no wait (the model load is most of it)
    assert (tmp_path / "junk.db").read_text() == "not a database\n"
    assert sorted(p.name for p in (tmp_path / "notes.db").iterdir()) == ["todo.txt"]


def test_the_scheme_in_any_case(files: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(
        ["index", files / "corpus.txt", "--model", files / "model", "-o", "MILVUS-LITE:m.db#docs"], capsys
    )
    assert code == 0 and "into MILVUS-LITE:m.db#docs" in out, err
    code, out, err = _run(["search", "--index", "Milvus-Lite:m.db#docs", "--query", "dog", "--top-k", "2"], capsys)
    assert code == 0 and out.count("\n  ") == 2, err
    _refused(
        ["index", files / "corpus.txt", "--model", files / "model", "-o", "milvus-lit:x.db#docs"], capsys,
        "'milvus-lit:x.db#docs' is not a Milvus location; expected milvus://HOST:PORT/COLLECTION or milvus-lite:",
    )  # fmt: skip
    assert MilvusLocation.parse("MILVUSS://host:19530/docs").uri == "https://host:19530"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]  # no folder named "MILVUS-LITE:..."


# -- 6, 7. what Milvus cannot hold, and refusals before the embedding --------------------------------------------------


def test_a_text_over_the_limit_is_refused_before_anything_is_written(files: Path, tmp_path: Path, capsys) -> None:
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    texts = (files / "corpus.txt").read_text().splitlines()
    long = tmp_path / "long.txt"
    long.write_text("\n".join([*texts[:5], "dogs" * 17_500, *texts[5:]]) + "\n")
    model = files / "model"
    for extra in ([], ["--overwrite"]):
        err = _refused(["index", long, "--model", model, "-o", location, *extra], capsys, "split long documents")
        _refused(["search", "--index", location, "--query", "dog"], capsys, "no ")  # nothing half-made
        assert "document 5 (row 5) has 70,000 bytes of text, over the 65,535 Milvus holds" in err
        assert "then run the command again (the collection was not touched)" in err
    code, _, err = _run(["index", files / "corpus.txt", "--model", model, "-o", location], capsys)
    assert code == 0, err
    _refused(["index", long, "--model", model, "-o", location, "--overwrite"], capsys, "70,000 bytes of text")
    code, out, err = _run(["search", "--index", location, "--query", "dog", "--top-k", "3"], capsys)
    assert code == 0 and len(MilvusIndex.open(location)) == 40, err  # what was there is kept whole


def test_refusals_and_a_finished_build_embed_nothing(files: Path, tmp_path: Path, tiny_tokenizer) -> None:
    location = f"milvus-lite:{tmp_path}/m.db#docs"
    texts = (files / "corpus.txt").read_text().splitlines()
    first = _CountingModel()
    build_index(first.model, texts, location, tokenizer=tiny_tokenizer, show_progress_bar=False)
    assert first.calls > 0
    again = _CountingModel()
    index = build_index(again.model, texts, location, tokenizer=tiny_tokenizer, show_progress_bar=False)
    assert len(index) == 40 and again.calls == 0  # complete already: nothing embedded
    other = _CountingModel()
    with pytest.raises(ValueError, match=r"holds another export \(differs in \['count', 'data'\]\); pass --overwrite"):
        build_index(other.model, texts[:30], location, tokenizer=tiny_tokenizer, show_progress_bar=False)
    with pytest.raises(ValueError, match="over the 65,535 Milvus holds"):
        build_index(other.model, [*texts, "a" * 70_000], f"milvus-lite:{tmp_path}/n.db#docs", tokenizer=tiny_tokenizer)
    assert other.calls == 0
    settings = _CountingModel()  # other embedding settings: refused before the embedding too
    with pytest.raises(ValueError, match=r"differs in \['settings'\]"):
        build_index(settings.model, texts, location, tokenizer=tiny_tokenizer, prompt="query: ")
    assert settings.calls == 0


# -- 8. a work folder stale by content ---------------------------------------------------------------------------------


def test_a_work_folder_edited_in_place_is_embedded_again(files: Path, tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    texts = (files / "corpus.txt").read_text().splitlines()
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    location, work = f"milvus-lite:{tmp_path}/m.db#docs", tmp_path / "work"
    argv = ["index", corpus, "--model", files / "model", "--id-column", "_id", "-o", location, "--work-dir", work]
    code, _, err = _run(argv, capsys)
    assert code == 0 and (work / "index.json").is_file(), err
    before = corpus.stat()
    edited = corpus.read_text().replace(texts[3], "zebra " + texts[3][6:] if len(texts[3]) > 6 else "zebras")
    assert len(edited) == len(corpus.read_text())
    corpus.write_text(edited)
    os.utime(corpus, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same time: only the content differs
    assert (corpus.stat().st_size, corpus.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    code, _, err = _run([*argv, "--overwrite"], capsys)
    assert code == 0, err
    code, out, err = _run(["search", "--index", location, "--first-stage", "lexical", "--query", "zebra"], capsys)
    assert code == 0 and "[d3] zebra" in out, out + err


# -- 9. connections: none left open, none closed by the engine while idle ----------------------------------------------


def test_a_closed_client_leaves_no_channel_open(files: Path, tmp_path: Path) -> None:
    manager_module = pytest.importorskip("pymilvus.client.connection_manager")
    manager = manager_module.ConnectionManager.get_instance()

    def channels() -> int:
        return len(manager._registry) + len(manager._dedicated)

    text, before = f"milvus-lite:{tmp_path}/m.db#docs", channels()
    export_index(load_index(files / "idx"), text).client.close()  # the export's own client is closed by it
    assert channels() == before
    client = MilvusLocation.parse(text).connect()
    options = client._handler._grpc_options
    client.close()
    assert channels() == before  # closed, not kept pinging the engine while the corpus is embedded
    # and no keepalive ping while no call runs: Milvus Lite's server closes a channel pinging idle ("too many pings")
    assert options.get("grpc.keepalive_permit_without_calls") == 0
