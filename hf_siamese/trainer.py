"""SiameseTrainer: `transformers.Trainer` with siamese losses, a no-duplicates sampler for ranking losses, and
STS evaluation. Everything else (checkpoints, resume, logging, accumulation, mixed precision, accelerate) is the
Trainer's own."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import EvalLoopOutput

from .collator import SiamesePairCollator, check_dataset, detect_layout
from .losses import MultipleNegativesRankingLoss, SiameseLoss, SoftmaxLoss, get_loss
from .modeling_siamese import SiameseBertModel
from .sampler import NoDuplicatesBatchSampler
from .streaming import NoDuplicatesStreamBatcher, NumberedStream, first_rows, is_stream, stream_for_process

# Rows of a streamed train_dataset checked before training (later rows are checked as batches are built).
STREAM_CHECK_ROWS = 1000

logger = logging.getLogger(__name__)


class SiameseTrainer(Trainer):
    """Fine-tune a `SiameseBertModel` with a siamese loss.

    Args:
        model: the `SiameseBertModel` to train.
        args: ordinary `TrainingArguments`. `remove_unused_columns` is turned off: the collator needs the raw text
            columns.
        loss: a `hf_siamese.losses` object or a name: `"cosine"`, `"cosent"`, `"softmax"`, `"mnr"`. Defaults from
            the train data: ranking rows -> MNR, class labels -> softmax, float scores -> cosine.
        data_collator: defaults to `SiamesePairCollator(processing_class)`; its `max_length` and `label2id` default
            to the model's `max_seq_length` and `label2id`.
        head_learning_rate: learning rate of the softmax classifier head; defaults to 100x `args.learning_rate`
            (see `SoftmaxLoss` for why). Ignored when the model has no head.
        no_duplicates_sampler: for ranking losses, batch rows so that no text occurs twice in a batch (a repeated
            text would be a false negative). On by default for `MultipleNegativesRankingLoss`.
        prompts: a prompt per text column (`{"anchor": "query: ", "positive": "passage: "}`) or one for all, put
            before the texts in training and in STS evaluation; goes to the default collator.
        stream_buffer_size: for a streamed `train_dataset` (`datasets.IterableDataset`) and a ranking loss, the rows
            held to form batches without repeated texts (default 8 x the batch size).
        Other arguments are the Trainer's.

    Streams: `train_dataset` may be a `datasets.IterableDataset` (`load_dataset(..., streaming=True)`) with every
    loss; `TrainingArguments(max_steps=...)` is then required. Its first `STREAM_CHECK_ROWS` rows are checked before
    training; a bad row later is an error naming its position in the stream. Under several processes each reads its
    own part of the stream (whole shards when their number divides evenly). Resuming from a checkpoint reads the
    stream again from its start and skips the batches already trained on, so training continues where it stopped
    (for a shuffled stream, with the same seed).
    """

    def __init__(
        self,
        model: SiameseBertModel | None = None,
        args: TrainingArguments | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        loss: str | SiameseLoss | None = None,
        head_learning_rate: float | None = None,
        no_duplicates_sampler: bool | None = None,
        prompts: dict[str, str] | str | None = None,
        stream_buffer_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(model, SiameseBertModel):
            raise TypeError(
                f"SiameseTrainer needs a SiameseBertModel, got {type(model).__name__}; build one with "
                "SiameseBertModel.from_encoder(...)."
            )
        if args is None:
            args = TrainingArguments(output_dir="siamese-output")
        if args.remove_unused_columns:
            args.remove_unused_columns = False
        if processing_class is None:
            processing_class = getattr(data_collator, "tokenizer", None) or model.tokenizer
        if model.tokenizer is None and processing_class is not None:
            # save_pretrained (checkpoints, save_model) puts it with the encoder for sentence-transformers.
            model.tokenizer = processing_class
        if data_collator is None:
            if processing_class is None:
                raise ValueError("SiameseTrainer needs a tokenizer: pass processing_class= or data_collator=.")
            data_collator = SiamesePairCollator(processing_class)
        if prompts is not None:
            if not isinstance(data_collator, SiamesePairCollator):
                raise ValueError("SiameseTrainer(prompts=...) needs a SiamesePairCollator; give the prompts to yours.")
            if data_collator.prompts is not None and data_collator.prompts != prompts:
                raise ValueError(
                    f"SiameseTrainer(prompts={prompts!r}) conflicts with the collator's prompts "
                    f"{data_collator.prompts!r}; give them in one place."
                )
            data_collator.prompts = prompts
        if isinstance(data_collator, SiamesePairCollator):
            if data_collator.lowercase is None:
                data_collator.lowercase = model.config.do_lower_case
            if data_collator.max_length is None:
                data_collator.max_length = model.config.effective_max_seq_length
            if data_collator.label2id is None and model.config.classifier_head:
                data_collator.label2id = dict(model.config.label2id)
        pad_token_id = getattr(processing_class, "pad_token_id", None)
        if getattr(model.config, "pad_token_id", None) is None and pad_token_id is not None:
            # Trainer compares the tokenizer's special tokens with the model config's and warns when they differ.
            model.config.pad_token_id = pad_token_id

        self.loss = self._resolve_loss(loss, train_dataset, data_collator)
        if isinstance(self.loss, SoftmaxLoss) and not model.config.classifier_head:
            raise ValueError(
                "loss='softmax' needs a model with a classifier head: SiameseBertModel.from_encoder(..., "
                "label2id={'entailment': 0, 'neutral': 1, 'contradiction': 2})."
            )
        self.head_learning_rate = head_learning_rate
        if no_duplicates_sampler is None:
            no_duplicates_sampler = isinstance(self.loss, MultipleNegativesRankingLoss)
        self.no_duplicates_sampler = no_duplicates_sampler

        self.stream_buffer_size = stream_buffer_size
        if is_stream(train_dataset) and args.max_steps <= 0:
            raise ValueError(
                f"SiameseTrainer: train_dataset is a stream ({type(train_dataset).__name__}, no length), so the "
                "number of steps is unknown: set TrainingArguments(max_steps=N)."
            )
        eval_sets = eval_dataset if isinstance(eval_dataset, dict) else {"eval_dataset": eval_dataset}
        for name, dataset in eval_sets.items():
            if is_stream(dataset):
                raise ValueError(
                    f"SiameseTrainer: {name} is a stream ({type(dataset).__name__}); evaluation reads its set whole "
                    "and more than once: give a map-style dataset, e.g. Dataset.from_list(list(stream.take(n)))."
                )
        if isinstance(data_collator, SiamesePairCollator):
            score_range = self.loss.score_range
            if is_stream(train_dataset):
                check_dataset(first_rows(train_dataset, STREAM_CHECK_ROWS), data_collator, score_range, "train_dataset")
            elif train_dataset is not None:
                check_dataset(train_dataset, data_collator, score_range, name="train_dataset")
            for name, dataset in eval_sets.items():
                if dataset is not None:
                    check_dataset(dataset, data_collator, None, name=name)

        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        # Our losses average over the batch themselves; Trainer must not rescale by token counts.
        self.model_accepts_loss_kwargs = False
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched > 1 and self.accelerator.num_processes == 1:
            logger.warning(
                "WORLD_SIZE=%d but this Trainer runs as a single process: every process trains its own copy. "
                "On CPU pass TrainingArguments(use_cpu=True) under accelerate launch / torchrun.",
                launched,
            )

    @staticmethod
    def _resolve_loss(loss: str | SiameseLoss | None, train_dataset: Any, collator: Any) -> SiameseLoss:
        if loss is not None:
            return get_loss(loss)
        sample = first_rows(train_dataset, 1) if is_stream(train_dataset) else None
        if sample:
            first, columns = sample[0], list(sample[0])
        elif train_dataset is not None and hasattr(train_dataset, "column_names") and len(train_dataset):
            first, columns = train_dataset[0], train_dataset.column_names
        else:
            raise ValueError("SiameseTrainer: pass loss= ('cosine', 'cosent', 'softmax', 'mnr' or a loss object).")
        layout = collator.layout(columns) if isinstance(collator, SiamesePairCollator) else detect_layout(columns)
        if layout.label is None:
            chosen = "mnr"
        else:
            chosen = "cosine" if isinstance(first[layout.label], float) else "softmax"
        logger.info("SiameseTrainer: no loss given; using %r for columns %s.", chosen, columns)
        return get_loss(chosen)

    # ------------------------------------------------------------------------------------------------ training

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Run the model on the grouped batch and apply `self.loss`. `num_items_in_batch` is unused: every loss is
        a mean over its batch."""
        labels = inputs.get("labels")
        model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
        loss, outputs = self.loss.compute(model, model_inputs, labels)
        return (loss, outputs) if return_outputs else loss

    def prediction_step(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        inputs = self._prepare_inputs(inputs)
        if not self._loss_fits(inputs):
            # e.g. a softmax (NLI) run evaluated on scored STS pairs: the STS metrics apply, the loss does not.
            return None, None, None
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def _loss_fits(self, inputs: dict[str, torch.Tensor]) -> bool:
        """Whether the batch has the labels `self.loss` reads (float scores, class ids, or none needed)."""
        labels = inputs.get("labels")
        kind = self.loss.label_kind
        if kind is None:
            return True
        if labels is None:
            return False
        return labels.is_floating_point() == (kind == "score")

    def evaluation_loop(
        self,
        dataloader: DataLoader,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        """The Trainer's loop (it gives `{prefix}_loss`), plus STS metrics when the eval rows are scored pairs:
        `{prefix}_spearman_cosine`, `{prefix}_pearson_cosine`, the same for dot / euclidean / manhattan, and
        `{prefix}_mse_cosine` / `{prefix}_mae_cosine` (cosine against gold rescaled to [0, 1])."""
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        dataset = getattr(dataloader, "dataset", None)
        metrics = self.sts_metrics(dataset) if dataset is not None else {}
        output.metrics.update({f"{metric_key_prefix}_{k}": v for k, v in metrics.items()})
        return output

    def sts_metrics(self, dataset: Any) -> dict[str, float]:
        """STS correlations of the model's embeddings on a dataset of scored pairs; `{}` for other layouts.

        Under several processes each encodes a contiguous shard of the unique texts and the shards are gathered in
        rank order, so every process computes the metric once on the full set, exactly as one process would.
        """
        if not isinstance(self.data_collator, SiamesePairCollator) or not hasattr(dataset, "column_names"):
            return {}
        layout = self.data_collator.layout(dataset.column_names)
        if layout.label is None or len(layout.texts) != 2:
            return {}
        gold = np.asarray(dataset[layout.label])
        if gold.dtype.kind != "f" or len(gold) < 2:
            return {}
        from .metrics import sts_metrics_from_embeddings

        # Each text with its column's prompt, as in training; each (prompt, text) encoded once.
        first, second = ([(self.data_collator.prompt_for(c), text) for text in dataset[c]] for c in layout.texts)
        unique = list(dict.fromkeys(first + second))
        shards = np.array_split(np.arange(len(unique)), self.accelerator.num_processes)
        local = [unique[i] for i in shards[self.accelerator.process_index]]
        embeddings = self._encode_prompted(self.accelerator.unwrap_model(self.model), local)
        if self.accelerator.num_processes > 1:
            gathered: list[Any] = [None] * self.accelerator.num_processes
            torch.distributed.all_gather_object(gathered, embeddings)
            embeddings = np.concatenate(gathered)
        position = {text: i for i, text in enumerate(unique)}
        score_range = self.loss.score_range or (float(gold.min()), float(gold.max()))
        return sts_metrics_from_embeddings(
            embeddings[[position[t] for t in first]],
            embeddings[[position[t] for t in second]],
            gold,
            score_range=score_range,
        )

    def _encode_prompted(self, model: SiameseBertModel, items: list[tuple[str, str]]) -> np.ndarray:
        """Embeddings `(len(items), dim)` of `(prompt, text)` items, one `encode` call per distinct prompt."""
        embeddings = np.zeros((len(items), model.config.embedding_size), dtype=np.float32)
        for prompt in dict.fromkeys(prompt for prompt, _ in items):
            index = [i for i, (p, _) in enumerate(items) if p == prompt]
            embeddings[index] = model.encode(
                [items[i][1] for i in index],
                tokenizer=self.data_collator.tokenizer,
                batch_size=self.args.eval_batch_size,
                max_length=self.data_collator.max_length,
                convert_to_numpy=True,
                prompt=prompt,  # "" too: the model's default prompt would not match training
            )
        return embeddings

    def _get_train_sampler(self, train_dataset: Any = None) -> torch.utils.data.Sampler | None:
        """With `train_sampling_strategy="group_by_length"`, group rows of similar token length so batches carry
        little padding. Rows are raw text, so the lengths (longest text of each row) are computed here once."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if (
            self.args.train_sampling_strategy == "group_by_length"
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
        layout = self.data_collator.layout(dataset.column_names)
        tokenizer = self.data_collator.tokenizer
        longest = [0] * len(dataset)
        for column in layout.texts:
            texts = [self.data_collator.prepare(text, column) for text in dataset[column]]
            ids = tokenizer(texts, truncation=True, max_length=self.data_collator.max_length)
            longest = [max(a, len(b)) for a, b in zip(longest, ids["input_ids"], strict=True)]
        return longest

    def get_train_dataloader(self) -> DataLoader:
        if is_stream(self.train_dataset):
            return self._stream_dataloader()
        if not self.no_duplicates_sampler:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("SiameseTrainer: training requires a train_dataset.")
        layout = self.data_collator.layout(self.train_dataset.column_names)
        columns = [list(self.train_dataset[c]) for c in layout.texts]
        sampler = NoDuplicatesBatchSampler(
            list(zip(*columns, strict=True)),
            batch_size=self._train_batch_size,
            drop_last=self.args.dataloader_drop_last,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
        )
        loader = DataLoader(
            self.train_dataset,
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
            buffer_size=self.stream_buffer_size,
            drop_last=self.args.dataloader_drop_last,
        )
        return DataLoader(batches, batch_size=None, collate_fn=self.data_collator)

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(model)
        unwrapped = self.accelerator.unwrap_model(self.model)
        head = getattr(unwrapped, "classifier", None)
        if head is None or self.optimizer_cls_and_kwargs is not None:
            return optimizer
        # Move the head's parameters into groups of their own with a higher learning rate.
        head_params = {id(p) for p in head.parameters()}
        head_lr = self.head_learning_rate or self.args.learning_rate * 100
        new_groups = []
        for group in optimizer.param_groups:
            head_part = [p for p in group["params"] if id(p) in head_params]
            group["params"] = [p for p in group["params"] if id(p) not in head_params]
            if head_part:
                settings = {k: v for k, v in group.items() if k not in ("params", "initial_lr")}
                new_groups.append({**settings, "params": head_part, "lr": head_lr})
        optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
        for group in new_groups:
            optimizer.add_param_group(group)
        return optimizer

    # ------------------------------------------------------------------------------------------------ sharing

    def push_to_hub(
        self,
        repo_id: str | None = None,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        create_pr: bool = False,
        model_card: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Upload the trained model, its tokenizer (`processing_class`), the modeling code and hf-siamese's model card
        (architecture, loss, hyperparameters, the STS metrics of the last evaluation, usage) in one commit.

        Unlike `Trainer.push_to_hub`, nothing is saved into `args.output_dir`: the files are staged in a temporary
        folder (call `save_model()` for a local copy). `training_args.bin` (a pickle) is not uploaded.

        Args:
            repo_id: defaults to `args.hub_model_id`, else the name of `args.output_dir`.
            commit_message, revision, private, create_pr: as in `hf_siamese.hub.push_to_hub`; `revision` and
                `private` default to `args.hub_revision` and `args.hub_private_repo`.
            blocking: False returns a `Future` of the commit; the files are staged before it returns.
            token: defaults to `args.hub_token`, then the logged-in token.
            model_card: markdown to upload instead of the generated card.
            kwargs: card facts (`base_model`, `datasets`, `license`, `eval_results`, `tags`, `language`, `title`);
                Trainer's `finetuned_from`, `dataset`, `dataset_tags` and `model_name` are understood too.

        Returns:
            The `CommitInfo` (or its `Future`); None on processes other than the main one.
        """
        from pathlib import Path

        from .hub import push_to_hub

        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        if not self.is_world_process_zero():
            return None
        facts = self._model_card_facts(**kwargs)
        token = token if token is not None else self.args.hub_token
        private = private if private is not None else self.args.hub_private_repo
        revision = revision if revision is not None else self.args.hub_revision
        if repo_id is None:
            repo_id = self.hub_model_id or self.args.hub_model_id or Path(self.args.output_dir).absolute().name
        self._finish_current_push()
        return push_to_hub(
            self.accelerator.unwrap_model(self.model),
            repo_id,
            tokenizer=self.processing_class,
            private=private,
            revision=revision,
            commit_message=commit_message,
            token=token,
            create_pr=create_pr,
            model_card=model_card,
            run_as_future=not blocking,
            **(facts if model_card is not None else {"trainer": self, **facts}),
        )

    def create_model_card(
        self,
        language: str | None = None,
        license: str | None = None,  # noqa: A002 - Trainer's signature
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Write hf-siamese's model card to `args.output_dir/README.md` (in place of Trainer's generic card)."""
        import os

        from .model_card import is_hub_id, write_model_card

        if not self.is_world_process_zero():
            return
        facts = self._model_card_facts(
            language=language,
            license=license,
            tags=tags,
            model_name=model_name,
            finetuned_from=finetuned_from,
            tasks=tasks,
            dataset_tags=dataset_tags,
            dataset=dataset,
            dataset_args=dataset_args,
            **kwargs,
        )
        repo_id = self.hub_model_id or self.args.hub_model_id
        os.makedirs(self.args.output_dir, exist_ok=True)
        write_model_card(
            self.accelerator.unwrap_model(self.model),
            self.args.output_dir,
            repo_id=repo_id if is_hub_id(repo_id) else None,
            trainer=self,
            **facts,
        )

    @staticmethod
    def _model_card_facts(**kwargs: Any) -> dict[str, Any]:
        """Card facts from `push_to_hub` / `create_model_card` keywords, Trainer's names included; None is unset."""
        from .model_card import _CARD_FACT_NAMES

        renamed = {"finetuned_from": "base_model", "model_name": "title", "dataset": "datasets"}
        facts: dict[str, Any] = {}
        datasets: list[str] = []
        for key, value in kwargs.items():
            if value is None or key in ("tasks", "dataset_args"):  # Trainer-card-only settings
                continue
            if key in ("dataset", "dataset_tags", "datasets"):
                datasets.extend([value] if isinstance(value, str) else list(value))
                continue
            name = renamed.get(key, key)
            if name not in _CARD_FACT_NAMES or name == "trainer":
                raise TypeError(
                    f"SiameseTrainer: unknown model card argument {key!r}; accepted: "
                    f"{sorted(set(_CARD_FACT_NAMES) - {'trainer'} | set(renamed) | {'dataset_tags'})}."
                )
            facts[name] = value
        if datasets:
            facts["datasets"] = list(dict.fromkeys(datasets))
        return facts
