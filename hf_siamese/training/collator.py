"""SiamesePairCollator: raw rows of text pairs, triplets or scored pairs -> one padded tensor batch.

Rows stay raw text in the dataset; the collator tokenizes on the fly and pads every text of the batch together, to
the longest text in the batch, in one `(batch, num_texts, seq_len)` tensor; the model then cuts each column (anchors,
positives, ...) to its own longest text before encoding it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..data.columns import ColumnLayout, detect_layout
from .pretokenize import ArrowRows, is_tokenized, pad_arrow, pad_tokenized
from .streaming import stream_row_names


class SiamesePairCollator:
    """Tokenize and pad rows of texts for `SiameseBertModel`.

    Accepted rows (found by column name, or given with `columns=`):

    | layout          | text columns                                   | label column                    |
    |-----------------|------------------------------------------------|---------------------------------|
    | scored pairs    | `sentence1`, `sentence2` (or `premise`/...)    | `score` / `label`: float        |
    | labelled pairs  | the same                                       | `label`: int, or str via label2id |
    | ranking rows    | `anchor`, `positive`[, `negative`, `negative_2`...] | none                        |

    Returns a dict with `input_ids`, `attention_mask` (and `token_type_ids` when the tokenizer makes them) of shape
    `(batch, num_texts, seq_len)`, `seq_len` being the longest text of the batch, `labels` of shape `(batch,)`
    (float32 for scores, int64 for class labels) when the rows have a label, and, with prompts, `prompt_length` of
    shape `(batch, num_texts)` (each column's prompt in tokens, for models that leave prompts out of the pooling).

    Args:
        tokenizer: the encoder's tokenizer.
        max_length: truncate texts to this many tokens; defaults to the tokenizer's `model_max_length`
            (`SiameseTrainer` sets it from the model's `max_seq_length`).
        pad_to_multiple_of: round the padded length up to a multiple of this (tensor cores like 8).
        columns: explicit layout, `{"texts": [...], "label": "..."}` or a list of text columns.
        label2id: maps string labels to class ids (`SiameseTrainer` fills it from the model config).
        prompts: a prompt put before the texts of each column, `{"anchor": "query: ", "positive": "passage: "}`, or
            one string for every column; train a model the way it will be queried (`encode(..., prompt_name=...)`).
        lowercase: lowercase texts first (`SiameseTrainer` sets it from the model's `do_lower_case`).
    """

    def __init__(
        self,
        tokenizer: Any,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        columns: Mapping[str, Any] | Sequence[str] | None = None,
        label2id: Mapping[str, int] | None = None,
        prompts: Mapping[str, str] | str | None = None,
        lowercase: bool | None = None,
    ) -> None:
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"SiamesePairCollator: max_length={max_length!r} must be a positive int or None.")
        if pad_to_multiple_of is not None and (not isinstance(pad_to_multiple_of, int) or pad_to_multiple_of < 1):
            raise ValueError(
                f"SiamesePairCollator: pad_to_multiple_of={pad_to_multiple_of!r} must be a positive int or None."
            )
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.columns = columns
        self.label2id = dict(label2id) if label2id is not None else None
        if prompts is not None and not isinstance(prompts, str):
            if not isinstance(prompts, Mapping) or not all(isinstance(v, str) for v in prompts.values()):
                raise ValueError(
                    f"SiamesePairCollator: prompts={prompts!r} must be a string or a dict of text column -> prompt."
                )
            prompts = dict(prompts)
        self.prompts = prompts
        self.lowercase = lowercase
        self._prompt_lengths: dict[str, int] = {}

    def layout(self, column_names: Sequence[str]) -> ColumnLayout:
        layout = detect_layout(column_names, self.columns)
        if isinstance(self.prompts, dict):
            unknown = sorted(set(self.prompts) - set(layout.texts))
            if unknown:
                raise ValueError(
                    f"SiamesePairCollator: prompts name columns {unknown} that are not text columns of the data "
                    f"(text columns: {list(layout.texts)})."
                )
        return layout

    def token_limit(self) -> int:
        """Texts are cut to this many tokens: `max_length`, else the tokenizer's `model_max_length`."""
        return self.max_length or _tokenizer_limit(self.tokenizer)

    def prompt_for(self, column: str) -> str:
        """The prompt put before the texts of `column` (`""` for none)."""
        if isinstance(self.prompts, str):
            return self.prompts
        return (self.prompts or {}).get(column, "")

    def prepare(self, text: str, column: str) -> str:
        """The string the tokenizer sees for `text` of `column`: its prompt, then the text, lowercased if asked."""
        text = self.prompt_for(column) + text
        return text.lower() if self.lowercase else text

    def prompt_length(self, column: str) -> int:
        """Tokens the prompt of `column` takes at the start of a tokenized text (0 without a prompt)."""
        prompt = self.prompt_for(column)
        if not prompt:
            return 0
        if prompt not in self._prompt_lengths:
            from ..modeling.encoding import prompt_token_count

            self._prompt_lengths[prompt] = prompt_token_count(self.tokenizer, self.prepare("", column))
        return self._prompt_lengths[prompt]

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(rows) == 0:
            raise ValueError("SiamesePairCollator got an empty batch; is the dataset empty?")
        # Rows of the train set tokenized before training (pretokenize.py): pad only.
        if isinstance(rows, ArrowRows):
            return pad_arrow(self, rows)
        if is_tokenized(rows[0]):
            return pad_tokenized(self, rows)
        layout = self.layout(list(rows[0].keys()))
        # Rows of a stream carry their position in it: errors name that, not the row's place in the batch.
        names = stream_row_names(rows) or [f"batch row {position}" for position in range(len(rows))]
        texts: list[str] = []
        for name, row in zip(names, rows, strict=True):
            for column in layout.texts:
                texts.append(self.prepare(_check_text(row.get(column), column, name), column))
        max_length = self.token_limit()
        encoded = self.tokenizer(
            texts,
            padding="longest",
            truncation=True,
            max_length=max_length,
            pad_to_multiple_of=self.pad_to_multiple_of,
            return_tensors="pt",
        )
        batch = {key: value.reshape(len(rows), len(layout.texts), -1) for key, value in encoded.items()}
        if getattr(self.tokenizer, "padding_side", "right") == "right":
            # Real tokens per text, known here on the host: packing reads nothing back from the device.
            batch["text_lengths"] = batch["attention_mask"].sum(dim=-1).tolist()
        if any(self.prompt_for(column) for column in layout.texts):
            lengths = [self.prompt_length(column) for column in layout.texts]
            batch["prompt_length"] = torch.tensor([lengths] * len(rows), dtype=torch.long)
        if layout.label is not None:
            labels = [row.get(layout.label) for row in rows]
            batch["labels"] = self.labels_to_tensor(labels, layout.label, lambda i: names[i])
        return batch

    def labels_to_tensor(self, labels: Sequence[Any], column: str, where: Callable[[int], str]) -> torch.Tensor:
        """Float scores -> float32; ints or strings (mapped through `label2id`) -> int64; lists of numbers (one per
        negative, e.g. a teacher's margins), all of one length -> float32 `(batch, k)`.

        `where(i)` names row `i` in error messages.
        """
        if labels and all(isinstance(x, (list, tuple)) for x in labels):
            width = len(labels[0])
            for index, value in enumerate(labels):
                numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
                if len(value) != width or width == 0 or not numbers or not all(math.isfinite(v) for v in value):
                    raise ValueError(
                        f"{where(index)}: label {value!r:.80} in column {column!r}: expected a list of {width or 1}+ "
                        "finite numbers, as long as row 0's"
                    )
            return torch.tensor([[float(v) for v in value] for value in labels], dtype=torch.float32)
        if all(isinstance(x, str) for x in labels):
            if self.label2id is None:
                raise ValueError(
                    f"Column {column!r} holds string labels (e.g. {labels[0]!r}) but no label2id is set; build "
                    "the model with label2id={...} or pass label2id= to SiamesePairCollator."
                )
            ids = []
            for index, value in enumerate(labels):
                if value not in self.label2id:
                    raise ValueError(
                        f"{where(index)}: label {value!r} in column {column!r} is not in label2id "
                        f"(accepted: {sorted(self.label2id)})."
                    )
                ids.append(self.label2id[value])
            return torch.tensor(ids, dtype=torch.long)
        for index, value in enumerate(labels):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(
                    f"{where(index)}: label {value!r} in column {column!r} must be a number (score or class id) or a "
                    "string in label2id."
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{where(index)}: label {value!r} in column {column!r} is not a finite number.")
        if all(isinstance(x, int) for x in labels):
            return torch.tensor(labels, dtype=torch.long)
        return torch.tensor(labels, dtype=torch.float32)


def _check_text(value: Any, column: str, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: column {column!r} holds {value!r} ({type(value).__name__}); expected a string.")
    return value


def _tokenizer_limit(tokenizer: Any) -> int:
    limit = getattr(tokenizer, "model_max_length", None)
    # Tokenizers without a known limit report a huge sentinel value.
    return limit if isinstance(limit, int) and 0 < limit < 100_000 else 512


def check_dataset(
    dataset: Any,
    collator: SiamesePairCollator,
    score_range: tuple[float, float] | None = None,
    name: str = "train_dataset",
) -> ColumnLayout:
    """Validate a whole `datasets.Dataset` once, before training, so an error names the dataset row index.

    Checks: not empty, a readable layout, every text a string, labels numeric/finite (and within `score_range` for
    float scores), string labels known to the collator's `label2id`.
    """
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty; it needs at least one row.")
    column_names = list(getattr(dataset, "column_names", None) or dataset[0].keys())
    try:
        layout = collator.layout(column_names)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    for column in layout.texts:
        for index, value in enumerate(_column(dataset, column)):
            _check_text(value, column, f"{name} row {index}")
    if layout.label is not None:
        labels = _column(dataset, layout.label)
        tensor = collator.labels_to_tensor(labels, layout.label, lambda i: f"{name} row {i}")
        if tensor.is_floating_point() and score_range is not None:
            low, high = score_range
            bad = ((tensor < low) | (tensor > high)).nonzero()
            if len(bad):
                index = int(bad[0][0])
                raise ValueError(
                    f"{name} row {index}: score {labels[index]!r} in column {layout.label!r} is outside the "
                    f"score range [{low}, {high}] given to the loss."
                )
    return layout


def _column(dataset: Any, column: str) -> list[Any]:
    # Arrow-backed datasets give a whole column at once, far faster than row access.
    try:
        return list(dataset[column])
    except (KeyError, TypeError):
        return [row[column] for row in dataset]
