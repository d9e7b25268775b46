"""The training collator of a multi-vector model (`MultiVectorModel`): rows of (query, positive[, negatives...])
tokenized as the model encodes them, queries as queries and documents as documents.

`MultiVectorModel.encode(task="query")` puts the query prompt first, cuts to the query length and, with query
expansion, pads queries with [MASK] tokens up to the expansion length; documents get the document prompt and length.
The collator does the same through the model's own `tokenize` (run on the config alone: no weights are held), then
pads every text of the batch to one length into the grouped `(batch, num_texts, seq_len)` tensors the model's
forward reads (text 0 of each row a query). Expansion tokens need no mask of their own: the model finds them by their
token id within the expansion length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..data.columns import ColumnLayout
from ..modeling.configuration_multivector import MultiVectorConfig
from ..modeling.modeling_multivector import MultiVectorModel
from .collator import SiamesePairCollator, _check_text
from .streaming import stream_row_names


class _ModelTokenization:
    """`MultiVectorModel.tokenize` (and the helpers it calls) bound to a config instead of a model: the collator
    tokenizes exactly as `encode` does without holding (or sending to loader workers) the model's weights."""

    tokenize = MultiVectorModel.tokenize
    _resolve_tokenizer = MultiVectorModel._resolve_tokenizer
    _token_limit = MultiVectorModel._token_limit
    _expansion_token_id = MultiVectorModel._expansion_token_id

    def __init__(self, config: MultiVectorConfig) -> None:
        self.config = config
        self.tokenizer = None


class MultiVectorCollator(SiamesePairCollator):
    """Tokenize and pad rows of (query, positive[, negatives...]) for `MultiVectorModel` (see the module docstring).

    Returns `input_ids`, `attention_mask` (and `token_type_ids` when the tokenizer makes them) of shape `(batch,
    num_texts, seq_len)`, and `labels` (a teacher's score lists, `(batch, k)` float32) when the rows have them.

    Args:
        tokenizer: the encoder's tokenizer.
        config: the model's `MultiVectorConfig` (prompts, query and document lengths, query expansion).
        pad_to_multiple_of: round the padded length up to a multiple of this.
        columns: explicit layout, as `SiamesePairCollator`'s.
        prompts: None (default): the model's own, `config.prompts["query"]` before the first text column and
            `config.prompts["document"]` before the others; else per column (or one string for all), as
            `SiamesePairCollator`'s, in place of the model's.
    """

    def __init__(
        self,
        tokenizer: Any,
        config: MultiVectorConfig,
        pad_to_multiple_of: int | None = None,
        columns: Mapping[str, Any] | Sequence[str] | None = None,
        prompts: Mapping[str, str] | str | None = None,
    ) -> None:
        if not isinstance(config, MultiVectorConfig):
            raise ValueError(
                f"MultiVectorCollator: config is a {type(config).__name__}; expected the model's MultiVectorConfig"
            )
        super().__init__(
            tokenizer, config.effective_max_seq_length, pad_to_multiple_of, columns, prompts=prompts, lowercase=False
        )
        self.config = config
        self.tokenization = _ModelTokenization(config)
        self.query_column: str | None = None

    def layout(self, column_names: Sequence[str]) -> ColumnLayout:
        layout = super().layout(column_names)
        if len(layout.texts) < 2:
            raise ValueError(
                "MultiVectorCollator: a multi-vector model trains on rows of (query, positive[, negatives...]); the "
                f"text columns are {list(layout.texts)}"
            )
        self.query_column = layout.texts[0]
        return layout

    def task_of(self, column: str) -> str:
        """ "query" for the first text column of the rows, "document" for the others."""
        return "query" if column == self.query_column else "document"

    def prompt_for(self, column: str) -> str:
        """The prompt put before the texts of `column`: the collator's own where given, else the model's for the
        column's task."""
        if self.prompts is not None:
            return super().prompt_for(column)
        return (self.config.prompts or {}).get(self.task_of(column), "")

    def token_limit(self) -> int:
        """The most tokens a text may have: the document length (or the model's limit)."""
        return min(self.config.document_length or self.config.effective_max_seq_length, self.max_length or 512)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(rows) == 0:
            raise ValueError("MultiVectorCollator got an empty batch; is the dataset empty?")
        layout = self.layout(list(rows[0].keys()))
        names = stream_row_names(rows) or [f"batch row {position}" for position in range(len(rows))]
        columns = []
        for column in layout.texts:
            texts = [
                self.prepare(_check_text(row.get(column), column, name), column)
                for name, row in zip(names, rows, strict=True)
            ]
            tokens = self.tokenization.tokenize(texts, self.tokenizer, self.task_of(column))
            tokens.pop("expansion_mask", None)  # the model finds expansion tokens by their id
            columns.append(tokens)
        length = max(tokens["input_ids"].shape[1] for tokens in columns)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        pad_id = getattr(self.tokenizer, "pad_token_id", None) or 0
        batch: dict[str, torch.Tensor] = {}
        for key in columns[0]:
            value = pad_id if key == "input_ids" else 0
            parts = [F.pad(tokens[key], (0, length - tokens[key].shape[1]), value=value) for tokens in columns]
            batch[key] = torch.stack(parts, dim=1)
        if layout.label is not None:
            labels = [row.get(layout.label) for row in rows]
            batch["labels"] = self.labels_to_tensor(labels, layout.label, lambda i: names[i])
        return batch


__all__ = ["MultiVectorCollator"]
