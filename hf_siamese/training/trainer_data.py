"""Training data loading for `SiameseTrainer`: length-grouped sampling, no-duplicates batches for ranking losses,
streamed datasets. A mixin, so `trainer.py` stays readable in one sitting."""

from __future__ import annotations

import logging
from typing import Any

import datasets
import torch
from torch.utils.data import DataLoader
from transformers.trainer_pt_utils import LengthGroupedSampler

from ..losses import SoftmaxLoss
from ..modeling.kinds import kind_of_model, model_kinds
from ..modeling.packing import can_pack
from .collator import SiamesePairCollator
from .pretokenize import TokenizedRows, is_tokenized, tokenize_dataset
from .sampler import NoDuplicatesBatchSampler
from .streaming import NoDuplicatesStreamBatcher, NumberedStream, first_rows, is_stream, stream_for_process

# The losses a sparse model (`SparseSiameseModel`, SPLADE or inference-free) trains with from rows: in-batch negatives
# on unlabelled rows, or a teacher's scores (`mine --teacher`) distilled by margins or listwise. (A CSR model's own,
# `csr`, the trainer picks for it.)
SPARSE_ROW_LOSSES: tuple[str, ...] = ("sparse_mnr", "sparse_margin_mse", "sparse_list_distill")
# The same for a multi-vector model (`MultiVectorModel`), scored by MaxSim; `cached_maxsim_mnr` (maxsim_mnr with a
# memory setting) trains it too.
MULTIVECTOR_ROW_LOSSES: tuple[str, ...] = ("maxsim_mnr", "maxsim_margin_mse", "maxsim_list_distill")


def check_kind(kind: str) -> str:
    """`kind` if the model-kind registry trains it (`modeling.kinds.model_kinds(trainable=True)`), else a
    `ValueError` naming it and them."""
    if kind not in model_kinds(trainable=True):
        raise ValueError(f"kind={kind!r}; accepted: {', '.join(model_kinds(trainable=True))}")
    return kind


def model_kind(model: Any) -> str:
    """The kind of the model being trained (`modeling.kinds.kind_of_model`: by its config, so the remote-code classes
    of saved ones count too): "dense", "sparse" or "multi-vector"."""
    return kind_of_model(model)


def loss_kind(loss: Any) -> str:
    """The kind of model a loss trains: "multi-vector" (`loss.multivector`), "sparse" (`loss.sparse`) or "dense"."""
    if getattr(loss, "multivector", False):
        return "multi-vector"
    return "sparse" if getattr(loss, "sparse", False) else "dense"


def default_loss(label: Any, sparse: bool = False, kind: str | None = None) -> str:
    """The loss a training set gets when none is named, from its first row's label (the one rule of `SiameseTrainer`
    and `hf-siamese train`): no label column (`label is None`) -> "mnr" ("sparse_mnr" for a sparse model, "maxsim_mnr"
    for a multi-vector one); a list of scores (a teacher's, from `mine --teacher`) -> "margin_mse"
    ("sparse_margin_mse", "maxsim_margin_mse"); a float score -> "cosine"; a class label -> "softmax". `kind` (one the
    registry trains, `model_kinds(trainable=True)`) names the model's kind; `sparse=True` is `kind="sparse"`. Sparse
    and multi-vector models train on unlabelled rows or on a teacher's score lists only."""
    kind = check_kind(kind or ("sparse" if sparse else "dense"))
    if kind != "dense":
        names = SPARSE_ROW_LOSSES if kind == "sparse" else MULTIVECTOR_ROW_LOSSES
        if label is None:
            return names[0]
        if isinstance(label, list | tuple):
            return names[1]
        raise ValueError(
            f"a {kind} model trains on rows of (query, positive[, negatives...]) without labels ({names[0]}) or with "
            f"a teacher's score list per row ({names[1]}, {names[2]}; 'mine --teacher' writes them); this set has a "
            f"label column ({label!r:.40} in its first row)"
        )
    if label is None:
        return "mnr"
    if isinstance(label, list | tuple):
        return "margin_mse"
    return "cosine" if isinstance(label, float) else "softmax"


logger = logging.getLogger(__name__)


class SiameseDataMixin:
    """Train-loader methods of `SiameseTrainer` (which provides `data_collator`, `no_duplicates_sampler`,
    `stream_buffer_size`, `pretokenize` and the Trainer's state)."""

    _tokenized: tuple[Any, Any] | None = None

    def groups_by_length(self) -> bool:
        """Whether training batches are grouped by length (see `SiameseTrainingArguments(group_by_length=...)`)."""
        strategy = self.args.train_sampling_strategy
        if strategy in ("group_by_length", "sequential"):
            return strategy == "group_by_length"
        if self.args.group_by_length == "auto":
            # Grouping changes which rows share a batch; it was checked to keep STSb test within 0.2 for the cosine
            # and MNR recipes, not for softmax (-0.27 in benchmarks/RESULTS.md), which keeps random batches.
            if isinstance(self.loss, SoftmaxLoss):
                return False
            model = self.accelerator.unwrap_model(self.model)
            return not (getattr(model, "packing", False) and can_pack(model.encoder))
        return bool(self.args.group_by_length)

    def _get_train_sampler(self, train_dataset: Any = None) -> torch.utils.data.Sampler | None:
        """When grouping by length (`groups_by_length`), group rows of similar token length so batches carry
        little padding. Rows are raw text, so the lengths (longest text of each row) are computed here once."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if (
            self.groups_by_length()
            and isinstance(self.data_collator, SiamesePairCollator)
            and hasattr(dataset, "column_names")
            and self.args.length_column_name not in dataset.column_names
        ):
            return LengthGroupedSampler(
                self.args.train_batch_size * self.args.gradient_accumulation_steps,
                lengths=self.row_lengths(dataset),
            )
        return super()._get_train_sampler(train_dataset)

    def row_lengths(self, dataset: Any) -> list[int]:
        """Token count of the longest text of every row (truncated to the collator's `max_length`)."""
        if isinstance(dataset, TokenizedRows):
            return dataset.longest()
        layout = self.data_collator.layout(dataset.column_names)
        tokenizer = self.data_collator.tokenizer
        longest = [0] * len(dataset)
        for column in layout.texts:
            texts = [self.data_collator.prepare(text, column) for text in dataset[column]]
            ids = tokenizer(texts, truncation=True, max_length=self.data_collator.max_length)
            longest = [max(a, len(b)) for a, b in zip(longest, ids["input_ids"], strict=True)]
        return longest

    def training_rows(self) -> Any:
        """What the train loader reads: the train set tokenized once (`pretokenize.tokenize_dataset`) when it is a
        map-style `datasets.Dataset` read by a `SiamesePairCollator` (not a subclass with its own `__call__`) and
        `pretokenize` is on, else the set itself."""
        dataset = self.train_dataset
        collator = self.data_collator
        # A collator class with a __call__ of its own reads the raw rows itself: it gets them.
        if not (self.args.pretokenize and type(collator).__call__ is SiamesePairCollator.__call__):
            return dataset
        if not isinstance(dataset, datasets.Dataset) or is_tokenized(dataset.column_names):
            return dataset
        if self._tokenized is None or self._tokenized[0] is not dataset:
            with self.args.main_process_first(desc="tokenizing the train set"):
                self._tokenized = (dataset, TokenizedRows(tokenize_dataset(self.data_collator, dataset)))
        return self._tokenized[1]

    def get_train_dataloader(self) -> DataLoader:
        if is_stream(self.train_dataset):
            return self._stream_dataloader()
        if self.train_dataset is None:
            raise ValueError("SiameseTrainer: training requires a train_dataset.")
        rows = self.training_rows()
        if not self.no_duplicates_sampler:
            return self._get_dataloader(
                dataset=rows,
                description="Training",
                batch_size=self._train_batch_size,
                sampler_fn=self._get_train_sampler,
                is_training=True,
            )
        layout = self.data_collator.layout(self.train_dataset.column_names)
        columns = [list(self.train_dataset[c]) for c in layout.texts]
        grouped = self.groups_by_length() and isinstance(self.data_collator, SiamesePairCollator)
        sampler = NoDuplicatesBatchSampler(
            list(zip(*columns, strict=True)),
            batch_size=self._train_batch_size,
            drop_last=self.args.dataloader_drop_last,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            lengths=self.row_lengths(rows) if grouped else None,
        )
        loader = DataLoader(
            rows,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return self.accelerator.prepare(loader)

    def _stream_dataloader(self) -> DataLoader:
        """This process's part of the stream, numbered, batched (without repeated texts for ranking losses). It is
        not passed through `accelerator.prepare`, which would split it again or read it all on the main process;
        the Trainer moves each batch to the device."""
        if self.args.dataloader_num_workers:
            logger.warning("SiameseTrainer: a streamed train_dataset is read in the main process (num_workers=0).")
        stream = NumberedStream(
            stream_for_process(self.train_dataset, self.accelerator.process_index, self.accelerator.num_processes)
        )
        if not self.no_duplicates_sampler:
            return DataLoader(
                stream,
                batch_size=self._train_batch_size,
                collate_fn=self.data_collator,
                drop_last=self.args.dataloader_drop_last,
            )
        batches = NoDuplicatesStreamBatcher(
            stream,
            self.data_collator.layout(list(first_rows(self.train_dataset, 1)[0])).texts,
            batch_size=self._train_batch_size,
            buffer_size=self.args.stream_buffer_size,
            drop_last=self.args.dataloader_drop_last,
        )
        return DataLoader(batches, batch_size=None, collate_fn=self.data_collator)


def check_loss_kind(loss: Any, model: Any) -> Any:
    """`loss` if it trains `model`'s kind (`model_kind`, `loss_kind`): a sparse loss for a sparse model, a
    multi-vector loss for a multi-vector model, a dense one otherwise; else a `ValueError` naming both."""
    model_is, loss_trains = model_kind(model), loss_kind(loss)
    if model_is == loss_trains:
        return loss
    if model_is == "multi-vector":
        raise ValueError(
            f"{type(loss).__name__} trains {'sparse vectors' if loss_trains == 'sparse' else 'dense embeddings'}; a "
            "MultiVectorModel trains with 'maxsim_mnr' (MultiVectorMultipleNegativesRankingLoss: in-batch negatives "
            "by MaxSim) or 'cached_maxsim_mnr', or 'maxsim_margin_mse' / 'maxsim_list_distill' (a teacher's scores)"
        )
    own = {"dense": "mnr", "sparse": "sparse_mnr"}[model_is]
    if loss_trains == "multi-vector":
        raise ValueError(
            f"{type(loss).__name__} trains token vectors scored by MaxSim (a MultiVectorModel); this model is a "
            f"{type(model).__name__}: use '{own}' for it"
        )
    if model_is == "sparse":
        raise ValueError(
            f"{type(loss).__name__} trains dense embeddings; a SparseSiameseModel trains with 'sparse_mnr' "
            "(SparseMultipleNegativesRankingLoss: dot scores and the FLOPS regulariser), 'sparse_margin_mse' or "
            "'sparse_list_distill' (a teacher's scores and the FLOPS regulariser), or 'csr' (a CSR model)"
        )
    raise ValueError(
        f"{type(loss).__name__} trains sparse vectors (a SparseSiameseModel); this model is a "
        f"{type(model).__name__}: use 'mnr' for it"
    )
