"""Tokenization off the training step: a map-style train set is tokenized once, before training, and the collator
then only pads token ids.

`SiamesePairCollator` tokenizes raw rows on the fly, on the main process, between two steps: 28-56 ms a batch on
one CPU thread, while a BERT-base step on a GPU needs 10-20 ms. `tokenize_dataset` runs the same tokenization (the
collator's prompts, lowercasing and `max_length`) once over the whole set with `datasets.Dataset.map` (batched;
several processes for large sets; cached under the dataset's cache files by a fingerprint of the rows and of every
tokenization setting, so a second run on the same files tokenizes nothing). Each text column becomes a column of
unpadded token ids; `pad_tokenized` turns rows of those into the batch `SiamesePairCollator` makes from raw text,
with the texts' lengths (`text_lengths`, the packing layout's input) known on the host. The train loader reads the
set through `TokenizedRows`: a batch is taken from the Arrow table at once and padded with array operations
(`pad_arrow`), with no Python list per text.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    import datasets

TOKENS = "__hf_siamese_input_ids_"  # + the text column's position: its texts' token ids
TYPES = "__hf_siamese_token_type_ids_"
PROMPTS = "__hf_siamese_prompt_length"  # one int per text column, when the collator has prompts
# Rows per process when tokenizing in several processes (fewer rows: one process, no start-up cost).
ROWS_PER_PROCESS = 50_000


def is_tokenized(row_or_columns: Mapping[str, Any] | Sequence[str]) -> bool:
    return f"{TOKENS}0" in row_or_columns


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what the tokenizer does: its serialized pipeline and vocabulary (fast tokenizers), else its
    settings and vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = backend.to_str()
    else:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        text = repr((type(tokenizer).__name__, sorted(vocab.items()), getattr(tokenizer, "init_kwargs", {})))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenize_dataset(collator: Any, dataset: datasets.Dataset) -> datasets.Dataset:
    """`dataset`'s rows tokenized as `collator` (a `SiamesePairCollator`) would tokenize them: per text column (in
    the layout's order) the unpadded token ids (and token types when the tokenizer makes them), the label column kept,
    the prompts' token counts when there are prompts. Rows stay in their order, so a sampler built on `dataset` indexes
    this one."""
    layout = collator.layout(dataset.column_names)
    max_length = collator.token_limit()
    prompt_lengths = [collator.prompt_length(c) for c in layout.texts] if collator.prompts else None

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {}
        for j, column in enumerate(layout.texts):
            texts = [collator.prepare(text, column) for text in batch[column]]
            encoded = collator.tokenizer(texts, truncation=True, max_length=max_length)
            out[f"{TOKENS}{j}"] = encoded["input_ids"]
            if "token_type_ids" in encoded:
                out[f"{TYPES}{j}"] = encoded["token_type_ids"]
        if prompt_lengths is not None:
            out[PROMPTS] = [prompt_lengths] * len(batch[layout.texts[0]])
        return out

    settings = repr((layout.texts, max_length, collator.prompts, collator.lowercase, dataset._fingerprint))
    fingerprint = hashlib.sha256((settings + tokenizer_fingerprint(collator.tokenizer)).encode()).hexdigest()[:32]
    processes = min(os.cpu_count() or 1, len(dataset) // ROWS_PER_PROCESS)
    keep = {layout.label} if layout.label is not None else set()
    return dataset.map(
        tokenize,
        batched=True,
        batch_size=1000,
        remove_columns=[c for c in dataset.column_names if c not in keep],
        num_proc=processes if processes > 1 else None,
        new_fingerprint=fingerprint,
        desc="Tokenizing the train set",
    )


def pad_tokenized(collator: Any, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows of `tokenize_dataset` as dicts (a loop over the tokenized set) -> the batch `SiamesePairCollator` makes
    from raw rows: the rows become one Arrow table, padded by `pad_arrow`, the train loader's path."""
    import pyarrow as pa

    return pad_arrow(collator, ArrowRows(pa.Table.from_pylist([dict(row) for row in rows])))


class ArrowRows:
    """A batch of rows of a tokenized set, as one Arrow table (what `TokenizedRows` hands the collator)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows


class TokenizedRows(torch.utils.data.Dataset):
    """The tokenized train set as the train loader reads it: `__getitems__` (the DataLoader's batch fetch) takes the
    batch's rows from the Arrow table in one call and returns them as `ArrowRows`."""

    def __init__(self, dataset: datasets.Dataset) -> None:
        self.dataset = dataset
        self.column_names = dataset.column_names

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> ArrowRows:
        return self.__getitems__([index])

    def __getitems__(self, indices: Sequence[int]) -> ArrowRows:
        from datasets.formatting import query_table

        return ArrowRows(query_table(self.dataset._data, list(indices), indices=self.dataset._indices))

    def longest(self) -> list[int]:
        """Token count of the longest text of every row."""
        table = query_table_all(self.dataset)
        counts = [_lengths(table.column(c)) for c in self.column_names if c.startswith(TOKENS)]
        return np.max(np.stack(counts), axis=0).tolist()


def query_table_all(dataset: datasets.Dataset) -> Any:
    from datasets.formatting import query_table

    return query_table(dataset._data, range(len(dataset)), indices=dataset._indices)


def _lengths(column: Any) -> np.ndarray:
    offsets = column.combine_chunks().offsets.to_numpy()
    return np.diff(offsets)


def pad_arrow(collator: Any, rows: ArrowRows) -> dict[str, Any]:
    """`pad_tokenized` for a batch fetched as one Arrow table: the same batch, built with array operations."""
    table = rows.table
    n = table.num_rows
    columns = sum(1 for name in table.column_names if name.startswith(TOKENS))
    left = getattr(collator.tokenizer, "padding_side", "right") == "left"
    flat = [table.column(f"{TOKENS}{j}").combine_chunks() for j in range(columns)]
    lengths = np.stack([np.diff(c.offsets.to_numpy()) for c in flat], axis=1)  # (rows, columns)
    width = max(int(lengths.max(initial=0)), 1)
    if collator.pad_to_multiple_of:
        width = -(-width // collator.pad_to_multiple_of) * collator.pad_to_multiple_of

    def padded(prefix: str, fill: int) -> torch.Tensor:
        out = np.full((n, columns, width), fill, dtype=np.int64)
        for j in range(columns):
            column = table.column(f"{prefix}{j}").combine_chunks()
            offsets = column.offsets.to_numpy()
            values = column.flatten().to_numpy(zero_copy_only=False)
            count = lengths[:, j]
            owner = np.repeat(np.arange(n), count)
            position = np.arange(len(values)) - np.repeat(offsets[:-1] - offsets[0], count)
            if left:
                position += width - count[owner]
            out[owner, j, position] = values
        return torch.from_numpy(out)

    steps = np.arange(width)[::-1] if left else np.arange(width)
    mask = (steps[None, None, :] < lengths[:, :, None]).astype(np.int64)
    batch: dict[str, Any] = {
        "input_ids": padded(TOKENS, collator.tokenizer.pad_token_id or 0),
        "attention_mask": torch.from_numpy(mask),
    }
    if f"{TYPES}0" in table.column_names:
        batch["token_type_ids"] = padded(TYPES, 0)
    if not left:
        batch["text_lengths"] = lengths.tolist()
    if PROMPTS in table.column_names:
        batch["prompt_length"] = torch.tensor(table.column(PROMPTS).to_pylist(), dtype=torch.long)
    labels = [name for name in table.column_names if not name.startswith((TOKENS, TYPES, PROMPTS))]
    if labels:
        (label,) = labels
        values = table.column(label).to_pylist()
        batch["labels"] = collator.labels_to_tensor(values, label, lambda i: f"batch row {i}")
    return batch
