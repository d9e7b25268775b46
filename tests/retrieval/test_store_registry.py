"""A new store joins by one module and one registration (`hf_siamese.retrieval.stores.register_store`), with no other
module touched: this test module is the store. It keeps collections in memory (`memory:NAME`), and `build_index`,
`load_index`, `SearchIndex.search` and the `index` / `search` commands reach it through the registry alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.data.corpus_stream import open_corpus
from hf_siamese.retrieval import exact_search
from hf_siamese.retrieval.index.fingerprint import model_fingerprint
from hf_siamese.retrieval.stores import build_index, load_index, parse_location, register_store, registered_stores
from hf_siamese.retrieval.stores.base import SearchIndex

_WORDS = list(WORDS)
CORPUS = [" ".join(_WORDS[(7 * i + j * 5) % 60] for j in range(3 + i % 5)) for i in range(15)]
_COLLECTIONS: dict[str, MemoryIndex] = {}
_UNKEPT = ("sparse_model", "multivector_model", "calibration_queries", "embeddings_dir", "engine_options")


# -- the store: the four functions a store module defines ---------------------------------------------------------


def claims(text: str) -> bool:
    return text.lower().startswith("memory:")


def parse(text: str) -> str:
    name = text.partition(":")[2]
    if not name.isidentifier():
        raise ValueError(f"{text!r}: expected memory:NAME, NAME letters, digits and '_'")
    return name


def open_store(where: str, rescore: int | None = None) -> MemoryIndex:
    if where not in _COLLECTIONS:
        raise ValueError(f"memory:{where}: no such collection; build it first")
    return _COLLECTIONS[where]


def build_store(
    model: Any, corpus: Any, where: str, *, tokenizer: Any = None, text_column: str = "text",
    id_column: str | None = None, **options: Any,
) -> MemoryIndex:  # fmt: skip
    given = [name for name in _UNKEPT if options.get(name)]
    given += [name for name in ("lexical", "approximate") if options.get(name) is True]
    given += ["precision"] if options.get("precision", "float32") != "float32" else []
    if given:
        raise ValueError(f"memory:{where} keeps vectors only; it cannot keep {', '.join(given)}")
    rows = list(open_corpus(corpus, text_column, id_column))  # the one corpus reader: any source a folder takes
    ids = [row if found is None else found for row, (found, _) in enumerate(rows)]
    texts = [text for _, text in rows]
    vectors = model.encode(texts, tokenizer=tokenizer, convert_to_numpy=True)
    _COLLECTIONS[where] = MemoryIndex(where, model, ids, texts, np.asarray(vectors, dtype=np.float32))
    return _COLLECTIONS[where]


class MemoryIndex(SearchIndex):
    backend = "exact in-memory"

    def __init__(self, name: str, model: Any, ids: list[Any], texts: list[str], vectors: np.ndarray) -> None:
        self.location, self.ids, self.texts, self.vectors = f"memory:{name}", ids, texts, vectors
        self.dim, self.similarity = vectors.shape[1], model.config.similarity
        self.model_name, self.settings = model.config.name_or_path or None, {"max_seq_length": None}
        self.info = {"model": model_fingerprint(model), "settings": self.settings, "count": len(texts), "lexical": None}

    @property
    def has_lexical(self) -> bool:
        return False

    def dense_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return exact_search(queries, self.vectors, k, self.similarity)

    def lexical_rows(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise ValueError(self.missing_lexical_part())

    def rows_of(self, rows: list[int]) -> dict[int, tuple[Any, str]]:
        return {row: (self.ids[row], self.texts[row]) for row in rows}

    def missing_lexical_part(self) -> str:
        return f"{self.location} keeps vectors only (no BM25)"

    def save_info(self, info: dict[str, Any]) -> None:
        self.info = info


# -- the tests ----------------------------------------------------------------------------------------------------


@pytest.fixture()
def memory_store() -> Any:
    register_store("memory", __name__)
    yield
    from hf_siamese.retrieval import stores

    stores._STORES.pop("memory", None)
    _COLLECTIONS.clear()


def test_a_registered_store_builds_opens_and_searches_like_a_folder(
    memory_store: None, tmp_path: Path, tiny_tokenizer
) -> None:
    assert "memory" in registered_stores()
    assert parse_location("MEMORY:demo").store == "memory" and parse_location(tmp_path / "x").is_folder
    model = make_tiny_model(normalize=True)
    built = build_index(model, CORPUS, "memory:demo", tokenizer=tiny_tokenizer, show_progress_bar=False)
    folder = build_index(
        model, CORPUS, tmp_path / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False, lexical=False
    )
    assert load_index("memory:demo") is built
    queries = ["a dog plays music", "bread"]
    ours = built.search(model, queries, top_k=4, tokenizer=tiny_tokenizer)
    theirs = folder.search(model, queries, top_k=4, tokenizer=tiny_tokenizer)
    assert [[hit["text"] for hit in hits] for hits in ours] == [[hit["text"] for hit in hits] for hits in theirs]
    for mine, other in zip(ours, theirs, strict=True):
        assert np.allclose([hit["score"] for hit in mine], [hit["score"] for hit in other], atol=1e-5)
    # what the store cannot keep is refused by name; the folder's model check holds for it too
    with pytest.raises(ValueError, match="cannot keep precision"):
        build_index(model, CORPUS, "memory:other", precision="int8")
    with pytest.raises(ValueError, match="fingerprint"):
        built.search(make_tiny_model(seed=3, normalize=True), "bread", tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="expected memory:NAME"):
        load_index("memory:not a name")


def test_the_commands_reach_a_registered_store(memory_store: None, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    model = make_tiny_model(normalize=True)
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    code = main(["index", str(tmp_path / "corpus.txt"), "--model", str(tmp_path / "model"), "-o", "memory:cli"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"indexed {len(CORPUS)} documents" in out and "exact in-memory search" in out
    code = main(["search", "--index", "memory:cli", "--query", CORPUS[3], "--top-k", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"1.0000  [3] {CORPUS[3]}" in out
    code = main(["search", "--index", "memory:cli", "--query", "a", "--first-stage", "lexical"])
    assert code != 0 and "keeps vectors only" in capsys.readouterr().err


def test_a_store_module_must_define_the_four_functions() -> None:
    with pytest.raises(ValueError, match="lacks claims, parse, open_store, build_store"):
        register_store("broken", "hf_siamese.retrieval.exact")
    with pytest.raises(ValueError, match="store name 'folder'"):
        register_store("folder", __name__)
