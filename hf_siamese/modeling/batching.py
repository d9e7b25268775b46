"""Turning texts into padded batches for `encode()`: all at once, sorted by token length (the CPU path), or streamed
from a background thread a window at a time (accelerators), so tokenization overlaps the forward passes; and running
batches, several at a time on the CPU (`run_batches`: the dense and multi-vector models' `encode`, the exported
encoder's `encode` and the cross-encoder's scoring run their batches through it).

Part of the remote-code sets of the dense and the multi-vector kinds that `save_pretrained` copies next to the
weights: imports only public libraries.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

# Batches tokenized per window, and windows' batches queued ahead of the forward pass, in the streamed path.
WINDOW_BATCHES = 8
QUEUE_DEPTH = 16


def longest_first(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """The positions of `lengths` longest first, equal lengths in input order: the one order of length-sorted
    batching (encode's batches, a cross-encoder's pairs), so that each batch pads only to texts of like length."""
    return np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")


def tokenize_sorted(
    texts: Sequence[str], tokenizer: Any, max_length: int, batch_size: int
) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor, set[str]]:
    """Tokenize all texts once and group them, longest first, into padded batches.

    Returns the batches, `order` (the input index of each text in sorted order) and the truncated texts.
    """
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length, padding=False)
    truncated = truncated_texts(encoded, texts, tokenizer, max_length)
    lengths = np.fromiter((len(ids) for ids in encoded["input_ids"]), dtype=np.int64, count=len(texts))
    order = longest_first(lengths)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    left = getattr(tokenizer, "padding_side", "right") == "left"  # decoder embedders pool the last token
    keys = [k for k in ("input_ids", "token_type_ids") if k in encoded]
    # Every key's tokens end to end in one array; each batch gathers its rows from it (no per-row Python loop).
    flat = {
        k: np.fromiter(itertools.chain.from_iterable(encoded[k]), dtype=np.int64, count=int(lengths.sum()))
        for k in keys
    }
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    batches = []
    for first in range(0, len(texts), batch_size):
        index = order[first : first + batch_size]
        n = lengths[index][:, None]
        width = int(n[0, 0])
        column = np.arange(width)[None, :]
        offset = column - (width - n) if left else column  # token number of each cell in its text
        real = (offset >= 0) & (offset < n)
        gather = np.where(real, starts[index][:, None] + offset, 0)
        batch = {k: torch.from_numpy(np.where(real, flat[k][gather], pad_id if k == "input_ids" else 0)) for k in keys}
        batch["attention_mask"] = torch.from_numpy(real.astype(np.int64))
        batches.append(batch)
    return batches, torch.from_numpy(order), truncated


def truncated_texts(encoded: Any, texts: Sequence[str], tokenizer: Any, max_length: int) -> set[str]:
    """The texts of `encoded` that `max_length` cut."""
    encodings = getattr(encoded, "encodings", None)
    if encodings:
        return {text for text, e in zip(texts, encodings, strict=True) if e.overflowing}
    # Slow tokenizers keep no overflow record: compare against an untruncated pass on the full-length texts.
    candidates = [t for t, ids in zip(texts, encoded["input_ids"], strict=True) if len(ids) >= max_length]
    full = tokenizer(candidates, truncation=False)["input_ids"]
    return {text for text, ids in zip(candidates, full, strict=True) if len(ids) > max_length}


class SortedBatches:
    """All padded batches of `texts`, made at once and sorted by exact token length (the CPU path: a background thread
    would compete with the forward passes for the same cores). Iterating yields `(positions, batch)` as
    `StreamedBatches` does; `truncated` holds the texts cut to `max_length`."""

    def __init__(self, texts: Sequence[str], tokenizer: Any, max_length: int, batch_size: int) -> None:
        batches, order, self.truncated = tokenize_sorted(texts, tokenizer, max_length, batch_size)
        self.items = [(order[n * batch_size : (n + 1) * batch_size], batch) for n, batch in enumerate(batches)]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        return iter(self.items)


class StreamedBatches:
    """Padded batches of `texts`, made in a background thread while the caller runs the previous ones.

    Texts are ordered by character length (longest first: no tokenization needed to sort), then tokenized
    `WINDOW_BATCHES` batches at a time and sorted by token length within the window, so batches pad little. At most
    `QUEUE_DEPTH` batches wait in host memory (pinned with `pin_memory=True`, for non-blocking copies to a GPU).
    Iterating yields `(positions, batch)`: the indices in `texts` of the batch's rows, and the batch. `truncated`
    holds the texts cut to `max_length`, complete once iteration ends.
    """

    def __init__(
        self, texts: Sequence[str], tokenizer: Any, max_length: int, batch_size: int, pin_memory: bool = False
    ) -> None:
        self.texts, self.tokenizer, self.max_length, self.batch_size = texts, tokenizer, max_length, batch_size
        self.pin_memory = pin_memory
        characters = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        self.order = longest_first(characters)
        self.truncated: set[str] = set()

    def __len__(self) -> int:
        return math.ceil(len(self.texts) / self.batch_size)

    def _produce(self, out: queue.Queue, stop: threading.Event) -> None:
        def put(item: Any) -> bool:
            """Queue `item` unless the consumer stopped (then False): a full queue never blocks the join."""
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            step = self.batch_size * WINDOW_BATCHES
            for first in range(0, len(self.texts), step):
                window = self.order[first : first + step]
                batches, order, truncated = tokenize_sorted(
                    [self.texts[i] for i in window], self.tokenizer, self.max_length, self.batch_size
                )
                self.truncated |= truncated
                rows = torch.from_numpy(window)[order]
                for number, batch in enumerate(batches):
                    if self.pin_memory:
                        batch = {k: v.pin_memory() for k, v in batch.items()}
                    if not put((rows[number * self.batch_size : (number + 1) * self.batch_size], batch)):
                        return
            put(None)
        except BaseException as error:  # re-raised in the consuming thread
            put(error)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        out: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        stop = threading.Event()
        worker = threading.Thread(target=self._produce, args=(out, stop), name="encode-batches", daemon=True)
        worker.start()
        try:
            while (item := out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join()


def check_cpu_workers(cpu_workers: int | None) -> None:
    """Refuse a `cpu_workers` that is not a positive int (None: the default)."""
    if cpu_workers is not None and (
        isinstance(cpu_workers, bool) or not isinstance(cpu_workers, int) or cpu_workers < 1
    ):
        raise ValueError(f"encode(): cpu_workers={cpu_workers!r} must be a positive int (or None for the default).")


def run_batches(
    embed: Callable[[Any], Any], source: Iterable[tuple[Any, Any]], workers: int, progress: Any = None
) -> tuple[list, list]:
    """`(positions, results)` of every `(positions, batch)` of `source`, in order, `embed(batch)` giving each result.

    With `workers > 1` the batches run `workers` at a time on threads of one torch thread each: on the CPU,
    sentence-sized matmuls split badly across cores, so one batch per core beats one batch on all of them (measured
    1.3x the texts/s on 2 cores). Else they run one after the other on the caller's threads, lazily, so a streamed
    source is read as the batches run. Grad and autocast modes are per thread: `embed` sets them itself. torch's
    thread count is restored afterwards, whatever happens. `progress` (a tqdm bar, or None) advances per batch.
    """
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,)) if workers > 1 else None
    positions, results = [], []

    def run(item: tuple[Any, Any]) -> tuple[Any, Any]:
        return item[0], embed(item[1])

    try:
        with pool or contextlib.nullcontext():
            for rows, result in pool.map(run, source) if pool else map(run, source):
                positions.append(rows)
                results.append(result)
                if progress is not None:
                    progress.update()
    finally:
        torch.set_num_threads(threads)
    return positions, results
