"""What the lexical part refuses, in one line that says what to do: a k1 that zeroes every score (L1), a damaged array
file (L2), a BM25 package that does not import for a reason the ImportError does not name (L3)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import make_tiny_model

from hf_siamese.cli import main
from hf_siamese.retrieval.index import lexical
from hf_siamese.retrieval.index.lexical import LEXICAL_DIR, LexicalSettings, require_lexical
from hf_siamese.retrieval.stores import build_index, load_index

DOCS = ["the cat sat on the mat", "dogs run in the park", "a cat and a dog", "music in the park"]


@pytest.mark.parametrize("k1", [float("inf"), 1e400, float("nan"), True, -0.5])
def test_L1_settings_refuse_a_k1_that_breaks_bm25(k1) -> None:
    with pytest.raises(ValueError, match=r"BM25 k1=.*accepted: a finite number >= 0"):
        LexicalSettings(k1=k1)


@pytest.mark.parametrize("b", [float("inf"), float("nan"), True, False, 1.5])
def test_L1_settings_refuse_a_b_out_of_range_or_a_bool(b) -> None:
    with pytest.raises(ValueError, match=r"BM25 b=.*accepted: a number from 0 to 1"):
        LexicalSettings(b=b)


def test_L1_settings_keep_finite_numbers() -> None:
    assert LexicalSettings(k1=0, b=0).k1 == 0 and LexicalSettings(k1=2, b=1.0).b == 1.0


@pytest.mark.parametrize("k1", ["inf", "1e400", "nan"])
def test_L1_cli_index_refuses_k1_before_writing_anything(tmp_path: Path, tiny_tokenizer, capsys, k1: str) -> None:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "corpus.txt").write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    parent = tmp_path / "out"
    parent.mkdir()
    argv = ["index", tmp_path / "corpus.txt", "--model", tmp_path / "model", "-o", parent / "idx", "--k1", k1]
    assert main([str(part) for part in argv]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the model's save progress bar
    assert error.startswith("hf-siamese: error: ") and "k1" in error and "finite" in error
    assert list(parent.iterdir()) == []  # neither idx nor .idx.building


@pytest.fixture
def index_dir(tmp_path: Path, tiny_tokenizer) -> Path:
    bm25s = pytest.importorskip("bm25s")
    assert bm25s
    build_index(make_tiny_model(), DOCS, tmp_path / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False)
    return tmp_path / "idx"


@pytest.mark.parametrize("array", ["data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy"])
@pytest.mark.parametrize("keep", ["most", "header-part"])
def test_L2_truncated_array_names_the_file_and_the_rebuild(index_dir: Path, capsys, array: str, keep: str) -> None:
    path = index_dir / LEXICAL_DIR / array
    os.truncate(path, path.stat().st_size - 4 if keep == "most" else 20)
    with pytest.raises(ValueError) as caught:
        load_index(index_dir).lexical  # noqa: B018
    message = str(caught.value)
    assert f"corrupt lexical index {os.fspath(index_dir / LEXICAL_DIR)!r}: {array}: " in message
    assert f"'hf-siamese index --add-lexical {index_dir} --overwrite'" in message and "\n" not in message
    # the fix it gives works
    assert main(["index", "--add-lexical", str(index_dir), "--overwrite"]) == 0
    capsys.readouterr()
    scores, rows = load_index(index_dir).lexical.search(["cat"], 2)
    assert set(rows[0].tolist()) == {0, 2}


def test_L2_the_rebuild_names_the_settings_it_was_built_with(tmp_path: Path, tiny_tokenizer) -> None:
    pytest.importorskip("bm25s")
    settings = LexicalSettings(stemmer=False, k1=0.9)
    build_index(
        make_tiny_model(), DOCS, tmp_path / "idx", tokenizer=tiny_tokenizer, show_progress_bar=False,
        lexical_settings=settings,
    )  # fmt: skip
    path = tmp_path / "idx" / LEXICAL_DIR / "data.csc.index.npy"
    os.truncate(path, path.stat().st_size - 4)
    with pytest.raises(ValueError, match=r"--add-lexical \S+ --overwrite --no-stemmer --k1 0\.9'"):
        load_index(tmp_path / "idx").lexical  # noqa: B018


def _failing_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, raising: str) -> None:
    """Make `import module` raise `raising` (an ImportError built without a name) from a stand-in first on sys.path."""
    (tmp_path / f"{module}.py").write_text(f"raise {raising}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)


@pytest.mark.parametrize(
    ("module", "raising", "expected"),
    [
        ("bm25s", "ImportError()", "bm25s does not import: ImportError"),
        ("Stemmer", "ImportError()", "PyStemmer does not import: ImportError"),
        ("bm25s", "ImportError('libfoo.so: cannot open shared object file')", "bm25s does not import: libfoo.so"),
        ("Stemmer", "ModuleNotFoundError('No module named Stemmer', name='Stemmer')", "PyStemmer is missing"),
    ],
)
def test_L3_require_lexical_names_the_module_without_error_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, raising: str, expected: str
) -> None:
    pytest.importorskip("bm25s")
    _failing_module(tmp_path, monkeypatch, module, raising)
    with pytest.raises(ImportError) as caught:
        require_lexical()
    message = str(caught.value)
    assert expected in message and "None" not in message and lexical.INSTALL in message


def test_L3_require_lexical_without_stemmer_does_not_need_pystemmer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("bm25s")
    _failing_module(tmp_path, monkeypatch, "Stemmer", "ImportError()")
    require_lexical(stemmer=False)


def test_L3_require_lexical_names_the_module_when_the_import_hook_raises_a_bare_import_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins

    real_import = builtins.__import__

    def bare_failure(name, *args, **kwargs):
        if name == "Stemmer":
            raise ImportError()  # no name, no text
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", bare_failure)
    with pytest.raises(ImportError, match=r"\(PyStemmer does not import: ImportError\): pip install") as caught:
        require_lexical()
    assert "None" not in str(caught.value)
