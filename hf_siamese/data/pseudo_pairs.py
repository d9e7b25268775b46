"""Training pairs from unlabelled texts: the rows of the corpus-only methods (`hf-siamese adapt`).

- `simcse`: (text, text). The two copies are encoded as two texts of the row, each with its own dropout mask
  (unsupervised SimCSE, Gao et al. 2021); `MultipleNegativesRankingLoss` with scale 20 (temperature 0.05) trains on
  them.
- `crop`: two spans cut independently from the same text, each 10-50% of its words (Contriever's independent
  cropping, Izacard et al. 2022): a pseudo query and a pseudo document that overlap in topic, not in wording.
- `ict`: one sentence of a passage as the query, the rest of the passage as its document (inverse cloze task, Lee et
  al. 2019); the sentence is left in the document 10% of the time, as the paper does, so lexical overlap is not
  always a shortcut. Passages of one sentence are skipped.
- `sentence`: one sentence of a passage as the query of the whole passage: GPL's pseudo-query with its source as the
  positive (the passage is then never mined as its own query's negative).
- `title`: a document's title as the query of its body, for corpora with a title column (`corpus_texts(...,
  title_column=)` gives the `(title, body)` items); rows with a blank title give none.

`corpus_texts` reads a corpus lazily (any `open_corpus` source: a file, a glob, a Hub id, a list) and `pseudo_pairs`
makes rows one text at a time, drawing from a seeded `random.Random`: the rows stream to disk with no list of them,
and the same corpus and seed give the same rows.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterable, Iterator
from typing import Any

import datasets

METHODS = ("simcse", "crop", "ict", "sentence", "title")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


_ABBREVIATIONS = {"dr.", "mr.", "mrs.", "ms.", "prof.", "st.", "fig.", "al.", "e.g.", "i.e.", "vs.", "no.", "ref."}


def split_sentences(text: str) -> list[str]:
    """`text` cut after `.`, `!` or `?` followed by space and a capital letter or digit, not after a common
    abbreviation (Dr., Fig., et al., e.g., ...): no nltk, no download."""
    sentences: list[str] = []
    for part in _SENTENCE_END.split(text.strip()):
        part = part.strip()
        if not part:
            continue
        if sentences and sentences[-1].split()[-1].lower() in _ABBREVIATIONS:
            sentences[-1] += " " + part
        else:
            sentences.append(part)
    return sentences


def _crop(words: list[str], rng: random.Random, low: float, high: float) -> str:
    size = max(1, round(len(words) * rng.uniform(low, high)))
    start = rng.randrange(len(words) - size + 1)
    return " ".join(words[start : start + size])


def crop_pair(text: str, rng: random.Random, low: float = 0.1, high: float = 0.5) -> tuple[str, str] | None:
    """Two independent spans of `low`..`high` of the text's words, or None for a text of fewer than 4 words."""
    words = text.split()
    if len(words) < 4:
        return None
    return _crop(words, rng, low, high), _crop(words, rng, low, high)


def ict_pair(text: str, rng: random.Random, keep_rate: float = 0.1) -> tuple[str, str] | None:
    """(a sentence, the rest of the passage; the sentence kept in it with probability `keep_rate`), or None for a
    passage of one sentence."""
    sentences = split_sentences(text)
    if len(sentences) < 2:
        return None
    chosen = rng.randrange(len(sentences))
    rest = sentences if rng.random() < keep_rate else sentences[:chosen] + sentences[chosen + 1 :]
    return sentences[chosen], " ".join(rest)


def pseudo_pairs(
    texts: Iterable[str | tuple[str, str]], method: str, *, seed: int = 42, min_words: int = 4
) -> Iterator[dict[str, Any]]:
    """`{"anchor", "positive"}` rows made from `texts` by `method` (see the module docstring), lazily; texts of fewer
    than `min_words` words (for `ict`, of one sentence; for `title`, bodies that short or blank titles) give no row.
    `title` takes `(title, body)` items, the other methods strings."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}; accepted: {list(METHODS)}")
    rng = random.Random(seed)
    for item in texts:
        title, text = item if method == "title" and isinstance(item, tuple) and len(item) == 2 else (None, item)
        if not isinstance(text, str) or not isinstance(title, str | None) or (method == "title") == (title is None):
            expected = "(title, body) pairs of strings" if method == "title" else "strings"
            raise ValueError(f"pseudo_pairs: a text is {item!r:.60}; {method} expects {expected}")
        if len(text.split()) < min_words:
            continue
        if method == "simcse":
            pair: tuple[str, str] | None = (text, text)
        elif method == "crop":
            pair = crop_pair(text, rng)
        elif method == "ict":
            pair = ict_pair(text, rng)
        elif method == "title":
            pair = (title.strip(), text) if title.strip() else None
        else:
            sentences = split_sentences(text)
            pair = (sentences[rng.randrange(len(sentences))], text) if len(sentences) > 1 else None
        if pair is not None:
            yield {"anchor": pair[0], "positive": pair[1]}


def pseudo_pair_needs(method: str) -> str:
    """What texts `method` needs to give rows, for error messages."""
    if method == "title":
        return "rows with a title and a body of 4 words or more"
    return "passages of two sentences or more" if method in ("ict", "sentence") else "texts of 4 words or more"


def corpus_texts(
    source: Any, *, text_column: str = "text", title_column: str | None = None, max_texts: int | None = None
) -> Iterator[str | tuple[str, str]]:
    """The non-blank texts of a corpus (`open_corpus`: a file or glob, a Hub id, a `Dataset`, a list), lazily, the
    first `max_texts` of them; with `title_column`, `(title, text)` pairs read from the same rows (a table or
    dataset with that column: a `.txt` file or a list of strings has no titles, a `ValueError`)."""
    import itertools

    from .corpus_stream import open_corpus, resolve_corpus

    source = resolve_corpus(source)
    texts: Iterator[Any] = (text for _, text in open_corpus(source, text_column=text_column))
    if title_column is not None:
        if not isinstance(source, str | os.PathLike | datasets.Dataset | datasets.IterableDataset):
            raise ValueError(
                f"title_column={title_column!r}: titles are read from a table or dataset column; the corpus is a "
                f"{type(source).__name__} of texts"
            )
        try:
            titles = (title for _, title in open_corpus(source, text_column=title_column))
        except ValueError as err:  # a .txt file: no columns
            raise ValueError(f"title_column={title_column!r}: {err}") from None
        texts = zip(titles, texts, strict=True)
    kept = (item for item in texts if (item[1] if title_column is not None else item).strip())
    return itertools.islice(kept, max_texts)


__all__ = [
    "METHODS",
    "corpus_texts",
    "crop_pair",
    "ict_pair",
    "pseudo_pair_needs",
    "pseudo_pairs",
    "split_sentences",
]
