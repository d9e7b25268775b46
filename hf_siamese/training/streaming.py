"""Training on streams (`datasets.IterableDataset`, e.g. `load_dataset(..., streaming=True)`): data larger than
memory or disk, read once, in order.

`SiameseTrainer` builds the train loader from the pieces here: each process reads its own part of the stream
(`stream_for_process`), rows carry their position in it so an error names the row (`NumberedStream`), and for ranking
losses batches without a repeated text are formed from a bounded buffer (`NoDuplicatesStreamBatcher`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import IterableDataset

logger = logging.getLogger(__name__)

# The key under which a row carries its position in (this process's part of) the stream; the collator names it in
# errors and leaves it out of the batch.
STREAM_ROW = "__stream_row__"


def is_stream(dataset: Any) -> bool:
    """Whether `dataset` is read by iteration only (a `datasets.IterableDataset` or any torch `IterableDataset`)."""
    return isinstance(dataset, IterableDataset)


def first_rows(dataset: Any, count: int) -> list[Mapping[str, Any]]:
    """The first `count` rows of a stream (fewer if it is shorter), read without consuming it for training."""
    rows = []
    for row in dataset.take(count) if hasattr(dataset, "take") else dataset:
        rows.append(row)
        if len(rows) >= count:
            break
    return rows


def stream_for_process(dataset: Any, rank: int, world_size: int) -> Any:
    """This process's part of the stream. A `datasets.IterableDataset` is split with `split_dataset_by_node`: whole
    shards (files) per process when their number divides evenly, else every `world_size`-th row. Other streams keep
    every `world_size`-th row."""
    if world_size <= 1:
        return dataset
    try:
        import datasets
        from datasets.distributed import split_dataset_by_node
    except ImportError:  # pragma: no cover - datasets is a dependency
        datasets = None
    if datasets is not None and isinstance(dataset, datasets.IterableDataset):
        return split_dataset_by_node(dataset, rank=rank, world_size=world_size)
    return _EveryNth(dataset, rank, world_size)


class _EveryNth(IterableDataset):
    def __init__(self, source: Iterable[Mapping[str, Any]], start: int, step: int) -> None:
        self.source, self.start, self.step = source, start, step

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for index, row in enumerate(self.source):
            if index % self.step == self.start:
                yield row


class NumberedStream(IterableDataset):
    """The rows of `source`, each with its position under `STREAM_ROW` (0, 1, 2, ... in this process's part)."""

    def __init__(self, source: Iterable[Mapping[str, Any]]) -> None:
        self.source = source

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index, row in enumerate(self.source):
            yield {**row, STREAM_ROW: index}


class NoDuplicatesStreamBatcher(IterableDataset):
    """Batches (lists of rows) from a stream in which no text occurs twice: a repeated text would be a false
    negative for in-batch-negatives losses.

    Rows are read into a buffer of at most `buffer_size` rows; each batch takes buffered rows in stream order, skipping
    a row whose texts are already in the batch; skipped rows wait in the buffer for a later batch. Memory stays
    bounded by the buffer, and every row is used once. If the buffer holds no `batch_size` rows without a repeat (a
    stream of near-identical rows), a smaller batch goes out rather than the buffer growing. At the end of the stream
    the buffer is emptied into batches; the last ones may be smaller (dropped when `drop_last`).
    """

    def __init__(
        self,
        rows: Iterable[Mapping[str, Any]],
        text_columns: Sequence[str],
        batch_size: int,
        buffer_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"NoDuplicatesStreamBatcher: batch_size={batch_size!r} must be a positive int.")
        buffer_size = 8 * batch_size if buffer_size is None else buffer_size
        if not isinstance(buffer_size, int) or buffer_size < batch_size:
            raise ValueError(
                f"NoDuplicatesStreamBatcher: buffer_size={buffer_size!r} must be an int >= batch_size ({batch_size})."
            )
        self.rows, self.text_columns = rows, list(text_columns)
        self.batch_size, self.buffer_size, self.drop_last = batch_size, buffer_size, drop_last

    def __iter__(self) -> Iterator[list[Mapping[str, Any]]]:
        source = iter(self.rows)
        buffer: list[Mapping[str, Any]] = []
        exhausted = False
        while True:
            while not exhausted and len(buffer) < self.buffer_size:
                row = next(source, None)
                if row is None:
                    exhausted = True
                else:
                    buffer.append(row)
            if not buffer:
                return
            batch, waiting, seen = [], [], set()
            for row in buffer:
                texts = {hash(row[column]) for column in self.text_columns}
                if len(batch) < self.batch_size and seen.isdisjoint(texts):
                    batch.append(row)
                    seen.update(texts)
                else:
                    waiting.append(row)
            buffer = waiting
            if len(batch) < self.batch_size and not exhausted:
                logger.info(
                    "No %d rows without a repeated text among the %d buffered; this batch has %d rows.",
                    self.batch_size,
                    self.buffer_size,
                    len(batch),
                )
            if len(batch) == self.batch_size or not self.drop_last:
                yield batch


def stream_row_names(rows: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """`stream row N` for each row of a batch from a numbered stream; None for rows of a map-style dataset."""
    if rows and STREAM_ROW in rows[0]:
        return [f"train_dataset stream row {row[STREAM_ROW]}" for row in rows]
    return None


__all__ = [
    "STREAM_ROW",
    "NoDuplicatesStreamBatcher",
    "NumberedStream",
    "first_rows",
    "is_stream",
    "stream_for_process",
    "stream_row_names",
]
