"""Batch sampling for ranking losses, where a text repeated inside a batch becomes a false negative."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class NoDuplicatesBatchSampler(Sampler[list[int]]):
    """Shuffled batches in which no text occurs twice.

    Rows are visited in a random order (seeded by `seed` and the epoch); a row whose texts already occur in the batch
    being filled waits for a later batch. Every row is used exactly once per epoch; only the last batches may be
    smaller than `batch_size` (dropped when `drop_last`).

    With `lengths` (a token length per row), the random order is cut into mega-batches of `MEGABATCH` batches and
    each is sorted by length before batches are filled, as transformers' `LengthGroupedSampler` does: batches then
    hold rows of similar length (little padding) and are still drawn at random from the whole set.

    Args:
        row_texts: for every dataset row, its texts (e.g. `(anchor, positive, negative)`).
        batch_size: rows per batch.
        drop_last: drop batches smaller than `batch_size`.
        seed: base seed; the permutation of epoch `e` uses `seed + e`.
        lengths: optional token length of every row, to group rows of similar length.
    """

    MEGABATCH = 50

    def __init__(
        self,
        row_texts: Sequence[Sequence[str]],
        batch_size: int,
        drop_last: bool = False,
        seed: int = 0,
        lengths: Sequence[int] | None = None,
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"NoDuplicatesBatchSampler: batch_size={batch_size!r} must be a positive int.")
        if lengths is not None and len(lengths) != len(row_texts):
            raise ValueError(
                f"NoDuplicatesBatchSampler: {len(lengths)} lengths for {len(row_texts)} rows; give one per row."
            )
        self.lengths = list(lengths) if lengths is not None else None
        # Hash texts once; comparing ints per step is much cheaper than comparing strings.
        self.row_keys = [frozenset(hash(t) for t in texts) for texts in row_texts]
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0
        self._cached: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        if self._cached is not None and self._cached[0] == self.epoch:
            return self._cached[1]
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        remaining = torch.randperm(len(self.row_keys), generator=generator).tolist()
        if self.lengths is not None:
            size = self.MEGABATCH * self.batch_size
            megabatches = [remaining[i : i + size] for i in range(0, len(remaining), size)]
            remaining = [i for mega in megabatches for i in sorted(mega, key=lambda i: -self.lengths[i])]
        batches: list[list[int]] = []
        while remaining:
            batch: list[int] = []
            seen: set[int] = set()
            deferred: list[int] = []
            position = 0
            for position, index in enumerate(remaining):  # noqa: B007 - position is used after the loop
                keys = self.row_keys[index]
                if seen.isdisjoint(keys):
                    batch.append(index)
                    seen.update(keys)
                    if len(batch) == self.batch_size:
                        break
                else:
                    deferred.append(index)
            remaining = deferred + remaining[position + 1 :]
            if len(batch) == self.batch_size or not self.drop_last:
                batches.append(batch)
        self._cached = (self.epoch, batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        yield from self._batches()

    def __len__(self) -> int:
        return len(self._batches())
