"""The lexical half of an index: BM25 (Lucene's weighting) over the texts of the vectors, through bm25s.

Texts are tokenized by `bm25s.tokenize` (lower-cased word runs of 2+ characters, the language's stopwords left out,
PyStemmer's stemmer for the language). The build reads the corpus once, shard by shard, beside the encoder
(`LexicalBuilder.add`): each shard's (document, term, count) triples go to flat int32 files on disk, so memory holds
one shard plus the vocabulary and 4 bytes a document while reading. `finish` then sorts those triples by term in
buckets of consecutive terms (a bucket's triples at a time, `BUCKET`) into bm25s's score matrix, written through a
memory map in bm25s's own format (numpy arrays, no pickle), which `bm25s.BM25.load(folder, mmap=True)` opens too.
A document's weight for a term is
`idf * tf / (tf + k1 * (1 - b + b * length / mean_length))`, `idf = ln(1 + (N - df + 0.5) / (df + 0.5))`, exactly
bm25s's `method="lucene"` (tested against it); a query scores the sum over its terms.

bm25s and PyStemmer come with `pip install 'hf-siamese[lexical]'`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..exact import top_k
from .parts import require_modules

LEXICAL_DIR = "lexical"
SETTINGS_FILE = "lexical.json"
INSTALL = "pip install 'hf-siamese[lexical]'"
_PARTS = ("docs", "terms", "counts")
CHUNK = 1 << 22  # (document, term, count) triples read at a time when the index is finished
BUCKET = 1 << 22  # triples sorted at a time
_STOPWORD_LANGUAGES = (
    "english", "german", "dutch", "french", "spanish", "portuguese", "italian", "russian", "swedish", "norwegian",
    "chinese", "turkish", "korean", "danish",
)  # fmt: skip


def require_lexical(stemmer: bool = True) -> None:
    """Raise `ImportError` naming the install command unless bm25s (and, for stemming, PyStemmer) import; the message
    names each package that does not, and why."""
    needed = {"bm25s": "bm25s", "Stemmer": "PyStemmer"} if stemmer else {"bm25s": "bm25s"}
    require_modules(needed, "lexical and hybrid search need bm25s and PyStemmer", INSTALL)


def wants_lexical(lexical: bool | None, settings: LexicalSettings | None, engine_lexical: str | None = None) -> bool:
    """Whether an index build makes its lexical part: the one rule for the lexical choices of a build. `lexical=None`
    builds it when bm25s (and PyStemmer) are installed, or where `engine_lexical` (an engine's BM25, "ours" /
    "milvus") asks for it (then an ImportError names the install where they are not); what sets the BM25 part
    (`settings`, `engine_lexical`) given with `lexical=False` is refused, naming both: it would set nothing."""
    given = []
    if settings is not None:
        given.append("lexical_settings (--language, --no-stemmer, --no-stopwords, --k1, --b)")
    if engine_lexical is not None:
        given.append(f"engine_lexical={engine_lexical!r} (--engine-lexical {engine_lexical})")
    if lexical is False and given:
        verb = "sets" if given == [given[-1]] and settings is None else "set"
        raise ValueError(
            f"{' and '.join(given)} {verb} the BM25 part, which lexical=False (--no-lexical) leaves out: give one or "
            "the other"
        )
    if lexical is None and engine_lexical is None:
        try:
            require_lexical((settings or LexicalSettings()).stemmer)
        except ImportError:
            return False
        return True
    if lexical is not False:
        require_lexical((settings or LexicalSettings()).stemmer)
    return lexical is not False


@dataclass(frozen=True)
class LexicalSettings:
    """How texts become terms and how BM25 weighs them; recorded in the index (`lexical/lexical.json`).

    Attributes:
        language: the stemmer's and the stopwords' language (PyStemmer's names: "english", "german", ...).
        stemmer: reduce words to their stem ("studies" and "studied" -> "studi").
        stopwords: leave out the language's stopwords (bm25s's lists).
        k1, b: BM25's term-frequency saturation (>= 0) and length normalization (0..1).
    """

    language: str = "english"
    stemmer: bool = True
    stopwords: bool = True
    k1: float = 1.5
    b: float = 0.75

    def __post_init__(self) -> None:
        # bool is an int; an infinite k1 turns every score into 0 (tf / (tf + inf)), NaN every score into NaN
        if not _is_number(self.k1) or not math.isfinite(self.k1) or not self.k1 >= 0:
            raise ValueError(f"BM25 k1={self.k1!r}; accepted: a finite number >= 0 (usual: 0.9-2.0; default 1.5)")
        if not _is_number(self.b) or not 0 <= self.b <= 1:
            raise ValueError(f"BM25 b={self.b!r}; accepted: a number from 0 to 1 (default 0.75)")
        if self.stopwords and self.language not in _STOPWORD_LANGUAGES:
            raise ValueError(
                f"no stopword list for language {self.language!r}; lists exist for {', '.join(_STOPWORD_LANGUAGES)} "
                "(or turn stopwords off: --no-stopwords / stopwords=False)"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LexicalSettings:
        return cls(**{key: values[key] for key in ("language", "stemmer", "stopwords", "k1", "b") if key in values})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class TermTokenizer:
    """Texts -> lists of terms, as `settings` says (the same for the corpus and for queries)."""

    def __init__(self, settings: LexicalSettings) -> None:
        require_lexical(settings.stemmer)
        self.settings = settings
        self.stemmer = None
        if settings.stemmer:
            import Stemmer

            if settings.language not in Stemmer.algorithms():
                raise ValueError(
                    f"no stemmer for language {settings.language!r}; PyStemmer has {', '.join(Stemmer.algorithms())} "
                    "(or turn stemming off: --no-stemmer / stemmer=False)"
                )
            self.stemmer = Stemmer.Stemmer(settings.language)

    def __call__(self, texts: Sequence[str]) -> list[list[str]]:
        import bm25s

        if not texts:
            return []
        stopwords = self.settings.language if self.settings.stopwords else None
        return bm25s.tokenize(
            list(texts), stopwords=stopwords, stemmer=self.stemmer, return_ids=False, show_progress=False
        )


class LexicalBuilder:
    """Builds the lexical index of a corpus read shard by shard into `folder` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike, settings: LexicalSettings | None = None) -> None:
        self.folder, self.settings = Path(folder), settings or LexicalSettings()
        self.tokenize = TermTokenizer(self.settings)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.vocabulary: dict[str, int] = {}
        self.documents = 0
        self.lengths: list[np.ndarray] = []
        self.files = {name: open(self.folder / f"{name}.part", "wb") for name in _PARTS}  # noqa: SIM115

    def add(self, texts: Sequence[str]) -> None:
        """Index the next `texts` of the corpus (documents keep the order they are added in)."""
        tokens = self.tokenize(texts)
        vocabulary = self.vocabulary
        ids = [vocabulary.setdefault(term, len(vocabulary)) for doc in tokens for term in doc]
        lengths = np.fromiter((len(doc) for doc in tokens), dtype=np.int64, count=len(tokens))
        owners = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
        keys, counts = np.unique(owners * (len(vocabulary) + 1) + np.asarray(ids, dtype=np.int64), return_counts=True)
        docs, terms = np.divmod(keys, len(vocabulary) + 1)
        for name, values in zip(_PARTS, (docs + self.documents, terms, counts), strict=True):
            values.astype(np.int32).tofile(self.files[name])
        self.lengths.append(lengths.astype(np.int32))
        self.documents += len(tokens)

    def finish(self) -> None:
        """Write the score matrix (bm25s's files) and `lexical.json`; the part files go.

        Bounded memory at any corpus size: the (document, term, count) triples are read `CHUNK` at a time and spread
        into files of consecutive terms of at most about `BUCKET` triples each; each such file is then sorted by term
        (documents stay ascending) and its scores written into the memory-mapped output."""
        for handle in self.files.values():
            handle.close()
        paths = {name: self.folder / f"{name}.part" for name in _PARTS}
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int32)
        vocab_size = len(self.vocabulary) + 1  # the last id is bm25s's empty token "" (queries with no known term)
        pairs = paths["terms"].stat().st_size // 4
        df = np.zeros(vocab_size, dtype=np.int64)
        for start in range(0, pairs, CHUNK):
            df += np.bincount(_read_part(paths["terms"], start), minlength=vocab_size)
        idf = lucene_idf(self.documents, df)
        mean_length = max(float(lengths.mean()) if len(lengths) else 0.0, 1e-9)
        indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
        # bucket j holds the terms bounds[j] .. bounds[j + 1] - 1
        bounds = [0]
        while bounds[-1] < vocab_size:
            end = int(np.searchsorted(indptr, indptr[bounds[-1]] + BUCKET, side="right")) - 1
            bounds.append(min(max(end, bounds[-1] + 1), vocab_size))
        bounds_array = np.asarray(bounds[1:-1], dtype=np.int64)
        buckets = [open(self.folder / f"bucket-{j}.part", "wb") for j in range(len(bounds) - 1)]  # noqa: SIM115
        try:
            for start in range(0, pairs, CHUNK):
                triples = np.stack([_read_part(paths[name], start) for name in _PARTS], axis=1)
                owner = np.searchsorted(bounds_array, triples[:, 1], side="right")
                order = np.argsort(owner, kind="stable")
                cuts = np.searchsorted(owner[order], np.arange(len(buckets) + 1))
                for j, handle in enumerate(buckets):
                    triples[order[cuts[j] : cuts[j + 1]]].tofile(handle)
        finally:
            for handle in buckets:
                handle.close()
        data = _npy_writer(self.folder / "data.csc.index.npy", np.float32, pairs)
        indices = _npy_writer(self.folder / "indices.csc.index.npy", np.int32, pairs)
        for j in range(len(buckets)):  # buckets in term order: the output is written front to back
            path = self.folder / f"bucket-{j}.part"
            triples = np.fromfile(path, dtype=np.int32).reshape(-1, 3)
            path.unlink()
            triples = triples[np.argsort(triples[:, 1], kind="stable")]
            docs, terms, tf = triples[:, 0], triples[:, 1], triples[:, 2].astype(np.float64)
            lucene_weights(tf, lengths[docs], mean_length, idf[terms], self.settings).tofile(data)
            docs.tofile(indices)
        data.close()
        indices.close()
        np.save(self.folder / "indptr.csc.index.npy", indptr)
        vocabulary = dict(self.vocabulary, **{"": vocab_size - 1})
        (self.folder / "vocab.index.json").write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
        params = {
            "k1": self.settings.k1, "b": self.settings.b, "delta": 0.5, "method": "lucene", "idf_method": "lucene",
            "dtype": "float32", "int_dtype": "int32", "num_docs": self.documents, "version": _bm25s_version(),
            "backend": "numpy",
        }  # fmt: skip
        (self.folder / "params.index.json").write_text(json.dumps(params, indent=1), encoding="utf-8")
        record = {
            "settings": asdict(self.settings), "count": self.documents, "terms": len(self.vocabulary),
            "mean_length": mean_length,
        }  # fmt: skip
        (self.folder / SETTINGS_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        for name in _PARTS:
            (self.folder / f"{name}.part").unlink()

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


def lucene_idf(documents: int, df: np.ndarray) -> np.ndarray:
    """bm25s's Lucene IDF of terms found in `df` of `documents` documents."""
    df = np.asarray(df, dtype=np.float64)
    return np.log(1 + (documents - df + 0.5) / (df + 0.5))


def lucene_weights(tf: Any, length: Any, mean_length: float, idf: Any, settings: LexicalSettings) -> np.ndarray:
    """A document's BM25 weight of a term (float32): `idf * tf / (tf + k1 * (1 - b + b * length / mean_length))`,
    the one formula of the score matrix and of the weights an engine stores (`milvus_export`)."""
    tf = np.asarray(tf, dtype=np.float64)
    norm = settings.k1 * ((1 - settings.b) + settings.b * np.asarray(length, dtype=np.float64) / mean_length)
    return (np.asarray(idf) * tf / (norm + tf)).astype(np.float32)


def _read_part(path: Path, start: int) -> np.ndarray:
    """`CHUNK` int32 values of a part file from value `start` (read, not mapped: memory stays a chunk's)."""
    return np.fromfile(path, dtype=np.int32, count=CHUNK, offset=4 * start)


def _npy_writer(path: Path, dtype: Any, length: int) -> Any:
    """An open .npy file of `length` values of `dtype`, its header written: the values follow with `tofile`."""
    handle = open(path, "wb")  # noqa: SIM115
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    np.lib.format.write_array_header_2_0(handle, header)
    return handle


def _bm25s_version() -> str:
    import bm25s

    return getattr(bm25s, "__version__", "unknown")


def build_lexical_index(
    texts: Sequence[str], folder: str | os.PathLike, settings: LexicalSettings | None = None, shard_size: int = 10_000
) -> LexicalIndex:
    """The lexical index of `texts` (row i <-> text i) written to `folder`, loaded."""
    builder = LexicalBuilder(folder, settings)
    try:
        for start in range(0, len(texts), shard_size):
            builder.add(list(texts[start : start + shard_size]))
        builder.finish()
    finally:
        builder.close()
    return LexicalIndex.load(folder)


class LexicalIndex:
    """A lexical index folder, memory-mapped; `search(queries, k)` -> (scores, rows), each `(n, k)`."""

    def __init__(self, folder: Path, record: dict[str, Any], retriever: Any) -> None:
        self.folder, self.record, self.retriever = folder, record, retriever
        self.settings = LexicalSettings.from_dict(record["settings"])
        self.tokenize = TermTokenizer(self.settings)

    @staticmethod
    def record_of(folder: str | os.PathLike) -> dict[str, Any]:
        """The `lexical.json` of a lexical index folder: settings, count, terms."""
        try:
            return json.loads((Path(folder) / SETTINGS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise _corrupt(Path(folder), SETTINGS_FILE, error, None) from None

    @classmethod
    def load(cls, folder: str | os.PathLike) -> LexicalIndex:
        """Open the index in `folder`, its arrays memory-mapped; a `ValueError` naming the damaged file and how to
        rebuild it where one is missing, truncated or unreadable."""
        folder = Path(folder)
        record = cls.record_of(folder)
        require_lexical(bool(record.get("settings", {}).get("stemmer", True)))
        import bm25s

        # bm25s maps the arrays with numpy, whose errors name no file ("mmap length is greater than file size")
        for path in sorted(folder.glob("*.npy")):
            try:
                np.load(path, mmap_mode="r")
            except (OSError, ValueError, EOFError) as error:
                raise _corrupt(folder, path.name, error, record) from None
        try:
            retriever = bm25s.BM25.load(folder, mmap=True)
        except (OSError, ValueError, EOFError, KeyError) as error:
            raise _corrupt(folder, None, error, record) from None
        return cls(folder, record, retriever)

    def __len__(self) -> int:
        return int(self.record["count"])

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's `k` best rows by BM25 (score > 0 only: a row sharing no term is no hit) as
        (scores, rows), `(n, k)` float32 / int64, best first, ties -> lower row first; missing hits have row -1."""
        k = min(k, len(self))
        scores_out = np.zeros((len(queries), k), dtype=np.float32)
        rows_out = np.full((len(queries), k), -1, dtype=np.int64)
        vocabulary = self.retriever.vocab_dict
        for q, terms in enumerate(self.tokenize(list(queries))):
            ids = [vocabulary[t] for t in terms if t in vocabulary]
            if not ids or k == 0:
                continue
            scores = np.asarray(self.retriever.get_scores_from_ids(ids), dtype=np.float32)
            found, rows = top_k(scores[None], k)
            hit = found[0] > 0
            scores_out[q, : hit.sum()], rows_out[q, : hit.sum()] = found[0][hit], rows[0][hit]
        return scores_out, rows_out


def _corrupt(folder: Path, file: str | None, error: BaseException, record: dict[str, Any] | None) -> ValueError:
    """The error for a lexical index whose `file` (None: some file) is missing or damaged, with how to rebuild it: the
    `--add-lexical` command where the folder is an index's lexical part (with the settings it was built with, where
    `record` still says them)."""
    where = f"corrupt lexical index {os.fspath(folder)!r}: " + (f"{file}: " if file else "")
    if folder.name != LEXICAL_DIR:
        fix = "build it again (build_lexical_index)"
    else:
        fix = f"rebuild the lexical part with 'hf-siamese index --add-lexical {os.fspath(folder.parent)} --overwrite"
        try:
            settings = LexicalSettings.from_dict((record or {})["settings"])
        except (KeyError, TypeError, ValueError):
            fix += "' (with the --language, --k1, ... options it was built with)"
        else:
            fix += "".join(f" {flag}" for flag in _setting_flags(settings)) + "'"
        fix += " or add_lexical(..., overwrite=True); the vectors are kept"
    text = " ".join(str(error).split()) or type(error).__name__
    return ValueError(f"{where}{text}; {fix}")


def _setting_flags(settings: LexicalSettings) -> list[str]:
    """The `hf-siamese index` options that give `settings` (only those that differ from the defaults)."""
    default = LexicalSettings()
    flags = [] if settings.language == default.language else [f"--language {settings.language}"]
    flags += [] if settings.stemmer else ["--no-stemmer"]
    flags += [] if settings.stopwords else ["--no-stopwords"]
    flags += [] if settings.k1 == default.k1 else [f"--k1 {settings.k1}"]
    flags += [] if settings.b == default.b else [f"--b {settings.b}"]
    return flags
