"""BM25 (Robertson et al.; Okapi weighting) over a list of texts: the lexical scorer Augmented SBERT samples pairs
with (`hf_siamese.cross_encoder.augment.bm25_pairs`), written here on numpy / scipy sparse matrices so it needs no
other package.

Terms are lower-cased runs of letters and digits. A document's weight for a term is
`idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / mean_length))` with `idf = ln(1 + (N - df + 0.5) / (df + 0.5))`;
a query's score for a document is the sum of the weights of the query's distinct terms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

_TERM = re.compile(r"[^\W_]+", re.UNICODE)


def terms(text: str) -> list[str]:
    """The lower-cased letter / digit runs of `text`."""
    return _TERM.findall(text.lower())


class BM25:
    """A BM25 index of `documents`; `scores(queries)` is the `(len(queries), len(documents))` score matrix and
    `top_k(queries, k)` each query's best `k` documents."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        from scipy import sparse

        if not k1 > 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25: k1={k1!r}, b={b!r}; expected k1 > 0 and 0 <= b <= 1")
        bad = next((text for text in documents if not isinstance(text, str)), None)
        if bad is not None:
            raise ValueError(f"BM25: a document is {bad!r:.60}; expected strings")
        if not documents:
            raise ValueError("BM25: no documents to index")
        self.vocabulary: dict[str, int] = {}
        rows, cols, counts = [], [], []
        lengths = np.zeros(len(documents), dtype=np.float64)
        for row, text in enumerate(documents):
            found = terms(text)
            lengths[row] = len(found)
            for term, count in zip(*np.unique(found, return_counts=True), strict=True) if found else ():
                rows.append(row)
                cols.append(self.vocabulary.setdefault(str(term), len(self.vocabulary)))
                counts.append(count)
        tf = sparse.csr_matrix(
            (np.asarray(counts, dtype=np.float64), (rows, cols)), shape=(len(documents), max(len(self.vocabulary), 1))
        )
        df = np.bincount(tf.indices, minlength=tf.shape[1]).astype(np.float64)
        idf = np.log1p((len(documents) - df + 0.5) / (df + 0.5))
        norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1e-9))
        weights = tf.tocoo()
        values = idf[weights.col] * weights.data * (k1 + 1) / (weights.data + norm[weights.row])
        # terms x documents, so a query's score row is a sum of term rows
        self.weights = sparse.csr_matrix((values, (weights.col, weights.row)), shape=(tf.shape[1], len(documents)))
        self.size = len(documents)

    def _query_matrix(self, queries: Sequence[str]):
        from scipy import sparse

        rows, cols = [], []
        for row, text in enumerate(queries):
            for term in set(terms(text)):
                col = self.vocabulary.get(term)
                if col is not None:
                    rows.append(row)
                    cols.append(col)
        data = np.ones(len(rows), dtype=np.float64)
        return sparse.csr_matrix((data, (rows, cols)), shape=(len(queries), self.weights.shape[0]))

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """float32 `(len(queries), len(documents))` BM25 scores."""
        return np.asarray((self._query_matrix(queries) @ self.weights).todense(), dtype=np.float32)

    def top_k(self, queries: Sequence[str], k: int, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """(scores, document indices), each `(len(queries), min(k, len(documents)))`, best first; `chunk` queries
        at a time bound the dense score block."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"top_k: k={k!r}; expected a positive int")
        k = min(k, self.size)
        all_scores, all_found = [], []
        for start in range(0, len(queries), chunk):
            block = self.scores(queries[start : start + chunk])
            found = np.argpartition(-block, k - 1, axis=1)[:, :k]
            values = np.take_along_axis(block, found, axis=1)
            order = np.argsort(-values, axis=1, kind="stable")
            all_found.append(np.take_along_axis(found, order, axis=1))
            all_scores.append(np.take_along_axis(values, order, axis=1))
        if not all_found:
            return np.zeros((0, k), dtype=np.float32), np.zeros((0, k), dtype=np.int64)
        return np.concatenate(all_scores), np.concatenate(all_found)


__all__ = ["BM25", "terms"]
