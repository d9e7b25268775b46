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

Every generator reads the texts once, lazily (any `open_corpus` source: a file, a glob, a Hub id, a list), and draws
from a seeded `random.Random`, so the same corpus and seed give the same rows.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from typing import Any

METHODS = ("simcse", "crop", "ict", "sentence")
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


def pseudo_pairs(texts: Iterable[str], method: str, *, seed: int = 42, min_words: int = 4) -> Iterator[dict[str, Any]]:
    """`{"anchor", "positive"}` rows made from `texts` by `method` (see the module docstring); texts of fewer than
    `min_words` words (or, for `ict`, of one sentence) give no row."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}; accepted: {list(METHODS)}")
    rng = random.Random(seed)
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"pseudo_pairs: a text is {text!r:.60}; expected strings")
        if len(text.split()) < min_words:
            continue
        if method == "simcse":
            pair: tuple[str, str] | None = (text, text)
        elif method == "crop":
            pair = crop_pair(text, rng)
        elif method == "ict":
            pair = ict_pair(text, rng)
        else:
            sentences = split_sentences(text)
            pair = (sentences[rng.randrange(len(sentences))], text) if len(sentences) > 1 else None
        if pair is not None:
            yield {"anchor": pair[0], "positive": pair[1]}


def pseudo_pair_needs(method: str) -> str:
    """What texts `method` needs to give rows, for error messages."""
    return "passages of two sentences or more" if method in ("ict", "sentence") else "texts of 4 words or more"


def pseudo_pair_dataset(source: Any, method: str, *, seed: int = 42, text_column: str = "text", **kwargs: Any) -> Any:
    """A `datasets.Dataset` of `pseudo_pairs` over a corpus source (`open_corpus`); a corpus that gives no row is a
    `ValueError` naming the method and what it needs."""
    from datasets import Dataset

    from .corpus_stream import open_corpus

    texts = (text for _, text in open_corpus(source, text_column=text_column, **kwargs))
    rows = list(pseudo_pairs(texts, method, seed=seed))
    if not rows:
        raise ValueError(f"the corpus gives no {method} pairs: {method} needs {pseudo_pair_needs(method)}")
    return Dataset.from_dict({"anchor": [r["anchor"] for r in rows], "positive": [r["positive"] for r in rows]})


__all__ = [
    "METHODS",
    "crop_pair",
    "ict_pair",
    "pseudo_pair_dataset",
    "pseudo_pair_needs",
    "pseudo_pairs",
    "split_sentences",
]
