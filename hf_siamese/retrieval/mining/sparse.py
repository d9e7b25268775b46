"""A learned-sparse model's side of hard-negative mining (`mining_corpus.mine_corpus`): the corpus's term weights
(`SparseBuilder`: fed the texts of the hashes' pass a shard at a time, so the source is not read once more), the
anchors' (task "query"), the model's exact ranking (`sparse_search.sparse_search`: dot products, equal scores by
the lower row, as `eval` and an index's sparse part rank) and its scores of given rows (what `margin` / `max_score`
compare where the sparse model is the mining model)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ranking.sparse import encode_sparse, sparse_search, term_major


class SparseBuilder:
    """The corpus's `(rows, vocab)` CSR matrix, built from shards of texts in row order (`add`), one encoded batch
    held densely at a time; `finish()` returns it."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int, prompt: str | None) -> None:
        self.model, self.tokenizer, self.batch_size, self.prompt = model, tokenizer, batch_size, prompt
        self.blocks: list[Any] = []

    def add(self, texts: list[str]) -> None:
        self.blocks.append(
            encode_sparse(
                self.model,
                texts,
                task="document",
                tokenizer=self.tokenizer,
                batch_size=self.batch_size,
                prompt=self.prompt,
            )  # fmt: skip
        )

    def finish(self) -> Any:
        import scipy.sparse

        width = int(self.model.config.vocab_size_of_encoder)
        if not self.blocks:
            return scipy.sparse.csr_matrix((0, width), dtype=np.float32)
        matrix = scipy.sparse.vstack(self.blocks, format="csr", dtype=np.float32)
        self.blocks = []
        return matrix


class SparseSide:
    """The sparse model's corpus matrix and anchors (`anchors[i]`: the i-th distinct anchor), searched exactly."""

    def __init__(
        self, model: Any, tokenizer: Any, corpus: Any, anchors: Sequence[str], batch_size: int,
        anchor_prompt: str | None, document_prompt: str | None, show_progress_bar: bool = False,
    ) -> None:  # fmt: skip
        self.model, self.tokenizer, self.corpus, self.batch_size = model, tokenizer, corpus, batch_size
        self.by_term: Any = None
        self.document_prompt = document_prompt
        self.anchors = encode_sparse(
            model, anchors, task="query", tokenizer=tokenizer, batch_size=batch_size, prompt=anchor_prompt,
            show_progress_bar=show_progress_bar, total=len(anchors),
        )  # fmt: skip

    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the anchors' rows `queries` (a CSR slice of `anchors`), `k` each, best first."""
        if self.by_term is None:  # one transpose of the corpus for every chunk of anchors
            self.by_term = term_major(self.corpus)
        return sparse_search(queries, self.corpus, k, by_term=self.by_term)

    def scores(self, anchor: int, rows: np.ndarray) -> np.ndarray:
        """The model's scores (dot products) of the corpus `rows` to the distinct anchor number `anchor`."""
        return np.asarray((self.corpus[rows] @ self.anchors[anchor].T).toarray()).ravel().astype(np.float64)

    def scorer(self, anchor_row: dict[str, int]) -> Callable[[str, np.ndarray], np.ndarray]:
        """`scorer(anchor text, rows)`: `scores` by the anchor's text (`anchor_row`: text -> its number)."""
        return lambda anchor, rows: self.scores(anchor_row[anchor], rows)

    def positive_scores(
        self, anchors: Sequence[str], positives: Sequence[str], anchor_row: dict[str, int],
        positive_key: dict[str, int], positive_row: dict[int, int],
    ) -> np.ndarray:  # fmt: skip
        """Each row's positive scored against its anchor: a positive in the corpus by its row's weights, one outside
        it encoded here (task "document")."""
        extra = [text for text, key in positive_key.items() if key not in positive_row]  # scored, not mined
        extra_matrix = None
        if extra:
            extra_matrix = encode_sparse(
                self.model, extra, task="document", tokenizer=self.tokenizer, batch_size=self.batch_size,
                prompt=self.document_prompt,
            )  # fmt: skip
        extra_row = {text: i for i, text in enumerate(extra)}
        scores = np.zeros(len(anchors))
        for i, (anchor, positive) in enumerate(zip(anchors, positives, strict=True)):
            vector = extra_matrix[extra_row[positive]] if positive in extra_row else None
            if vector is None:
                vector = self.corpus[positive_row[positive_key[positive]]]
            scores[i] = float((vector @ self.anchors[anchor_row[anchor]].T).toarray().sum())
        return scores


__all__ = ["SparseBuilder", "SparseSide"]
