"""SiameseTrainer: `transformers.Trainer` with siamese losses, a no-duplicates sampler for ranking losses, and
STS evaluation. Everything else (checkpoints, resume, logging, accumulation, mixed precision, accelerate) is the
Trainer's own."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from transformers import Trainer, TrainingArguments

from ..data.columns import detect_layout
from ..losses import (
    MultipleNegativesRankingLoss,
    MultiVectorMultipleNegativesRankingLoss,
    QuantizationAwareLoss,
    SiameseLoss,
    SoftmaxLoss,
    SparseMultipleNegativesRankingLoss,
    get_loss,
)
from ..modeling import low_precision
from ..modeling.modeling_multivector import MultiVectorModel
from ..modeling.modeling_siamese import HEAD_PARAMETER_PREFIXES, SiameseBertModel
from ..modeling.modeling_sparse import SparseSiameseModel
from .arguments import NOT_GIVEN, SiameseTrainingArguments, as_training_arguments
from .collator import SiamesePairCollator
from .streaming import first_rows, is_stream
from .throughput import ThroughputLogMixin
from .trainer_data import SiameseDataMixin, check_loss_kind, default_loss, model_kind
from .trainer_evaluation import SiameseEvaluationMixin
from .trainer_inputs import STREAM_CHECK_ROWS, check_data, collator_for  # noqa: F401 - STREAM_CHECK_ROWS: its old home
from .trainer_setup import HostFreeStepMixin, prepare_step, start_trainer, text_column_args

logger = logging.getLogger(__name__)


class SiameseTrainer(ThroughputLogMixin, HostFreeStepMixin, SiameseEvaluationMixin, SiameseDataMixin, Trainer):
    """Fine-tune a `SiameseBertModel` with a siamese loss.

    Args:
        model: the `SiameseBertModel`, `SparseSiameseModel` or `MultiVectorModel` to train.
        args: `SiameseTrainingArguments`: the Trainer's settings plus the bi-encoder's options (`prompts`,
            `group_by_length`, `no_duplicates_sampler`, `stream_buffer_size`, `pretokenize`, `head_learning_rate`).
            A plain `TrainingArguments` is copied into one with those options at their defaults.
            `remove_unused_columns` is turned off: the collator needs the raw text columns.
        loss: a `hf_siamese.losses` object or a name: `"cosine"`, `"cosent"`, `"angle"`, `"softmax"`, `"mnr"`, ...,
            or a weighted sum of names such as `"cosent+0.5*angle"` (see `hf_siamese.losses.get_loss`). Defaults from
            the train data: ranking rows -> MNR, class labels -> softmax, float scores -> cosine.
        data_collator: defaults to `SiamesePairCollator(processing_class)` (for a `MultiVectorModel`, a
            `MultiVectorCollator`: queries tokenized as queries, documents as documents); its `max_length` and
            `label2id` default to the model's `max_seq_length` and `label2id`, its prompts to `args.prompts`.

    Other arguments are the Trainer's. Deprecated (removed in the next release): `head_learning_rate`,
    `no_duplicates_sampler`, `prompts`, `stream_buffer_size`, `group_by_length` and `pretokenize` as arguments; set
    them on `SiameseTrainingArguments`. Given here, they are set on `args` with a `FutureWarning`.

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
        head_learning_rate: float | None = NOT_GIVEN,
        no_duplicates_sampler: bool | None = NOT_GIVEN,
        prompts: dict[str, str] | str | None = NOT_GIVEN,
        stream_buffer_size: int | None = NOT_GIVEN,
        group_by_length: bool | str | None = NOT_GIVEN,
        pretokenize: bool | None = NOT_GIVEN,
        **kwargs: Any,
    ) -> None:
        if not isinstance(model, SiameseBertModel | SparseSiameseModel | MultiVectorModel):
            raise TypeError(
                f"SiameseTrainer needs a SiameseBertModel, SparseSiameseModel or MultiVectorModel, got "
                f"{type(model).__name__}; build one with SiameseBertModel.from_encoder(...) (or that of the others)."
            )
        deprecated = {
            "head_learning_rate": head_learning_rate,
            "no_duplicates_sampler": no_duplicates_sampler,
            "prompts": prompts,
            "stream_buffer_size": stream_buffer_size,
            "group_by_length": group_by_length,
            "pretokenize": pretokenize,
        }
        args = as_training_arguments(args, SiameseTrainingArguments, "siamese-output", deprecated, "SiameseTrainer")
        args = text_column_args(args, "siamese-output")
        processing_class, data_collator = collator_for(model, args, data_collator, processing_class)
        self.loss = check_loss_kind(self._resolve_loss(loss, train_dataset, data_collator, model), model)
        if isinstance(self.loss, SoftmaxLoss) and not model.config.classifier_head:
            raise ValueError(
                "loss='softmax' needs a model with a classifier head: SiameseBertModel.from_encoder(..., "
                "label2id={'entailment': 0, 'neutral': 1, 'contradiction': 2})."
            )
        if args.quantization_aware is not None:
            self.loss = QuantizationAwareLoss(self.loss, args.quantization_aware)
        ranking = self.loss
        while hasattr(ranking, "base_loss"):  # a wrapper (Matryoshka, quantization-aware): the loss it wraps decides
            ranking = ranking.base_loss
        self.no_duplicates_sampler = (
            isinstance(ranking, MultipleNegativesRankingLoss | SparseMultipleNegativesRankingLoss)
            or isinstance(ranking, MultiVectorMultipleNegativesRankingLoss)
            if args.no_duplicates_sampler is None
            else args.no_duplicates_sampler
        )
        check_data(args, train_dataset, eval_dataset, data_collator, self.loss.score_range)
        start_trainer(
            self, super().__init__, model, args, data_collator, train_dataset, eval_dataset, processing_class, kwargs
        )
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched > 1 and self.accelerator.num_processes == 1:
            logger.warning(
                "WORLD_SIZE=%d but this Trainer runs as a single process: every process trains its own copy. "
                "On CPU pass TrainingArguments(use_cpu=True) under accelerate launch / torchrun.",
                launched,
            )
        self.check_parallel_setup()
        prepare_step(self, model, model.encoder if getattr(model, "packing", False) else None)
        for flag, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            emulated = not low_precision.native_low_precision(dtype)
            if getattr(self.args, flag) and self.args.device.type == "cpu" and emulated:
                logger.warning(
                    "TrainingArguments(%s=True) on a CPU without native %s matrix instructions: PyTorch emulates "
                    "them, several times slower than float32 (bfloat16 encode measured 6x slower on an AVX2 CPU). "
                    "Drop %s=True on this machine.",
                    flag,
                    str(dtype).removeprefix("torch."),
                    flag,
                )

    def check_parallel_setup(self) -> None:
        """Refuse the parallel settings a loss cannot train under, naming the setting (a clear error now rather than a
        hang or DeepSpeed's assertion mid-step).

        - The cached MNR loss replays its chunks under DDP's `no_sync` so gradients are reduced once per step; FSDP
          and DeepSpeed shard or reduce gradients on their own schedule, which the replay does not follow (untested).
        - Ranking losses use only the embeddings: with `ddp_find_unused_parameters=False`, DDP raises on a softmax head
          or cosine affine left out of the graph.
        """
        if getattr(self.loss, "caches_embeddings", False):
            for setting, enabled in (("fsdp", self.is_fsdp_enabled), ("deepspeed", self.is_deepspeed_enabled)):
                if enabled:
                    raise ValueError(
                        f"{type(self.loss).__name__} cannot train under TrainingArguments({setting}=...): its chunk "
                        "replay reduces gradients once per step through DDP's no_sync, which FSDP and DeepSpeed do not "
                        "offer. Train it under DDP (accelerate launch --multi_gpu / torchrun), or use "
                        "MultipleNegativesRankingLoss(gather_across_processes=True) under FSDP/DeepSpeed."
                    )
        if self.args.ddp_find_unused_parameters is False and self.args.world_size > 1:
            if isinstance(self.loss, MultipleNegativesRankingLoss):
                unused = [
                    name
                    for name, parameter in self.model.named_parameters()
                    if parameter.requires_grad and name.startswith(HEAD_PARAMETER_PREFIXES)
                ]
                if unused:
                    raise ValueError(
                        f"TrainingArguments(ddp_find_unused_parameters=False) with {type(self.loss).__name__}: the "
                        f"loss never uses {unused}, and DDP raises on parameters outside the graph. Leave "
                        "ddp_find_unused_parameters unset (or True), or freeze them (requires_grad_(False))."
                    )

    @staticmethod
    def _resolve_loss(
        loss: str | SiameseLoss | None, train_dataset: Any, collator: Any, model: Any = None
    ) -> SiameseLoss:
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
        chosen = default_loss(None if layout.label is None else first[layout.label], kind=model_kind(model))
        if chosen == "sparse_mnr" and getattr(model.config, "architecture", None) == "csr":
            chosen = "csr"  # a CSR model's own: reconstruction and ranking
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
        if hasattr(self.loss, "set_progress"):  # a regulariser's warm-up (the sparse loss's FLOPS)
            self.loss.set_progress(self.state.global_step, self.state.max_steps)
        loss, outputs = self.loss.compute(model, model_inputs, labels)
        return (loss, outputs) if return_outputs else loss

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(model)
        unwrapped = self.accelerator.unwrap_model(self.model)
        # A loss with weights of its own (TSDAE's decoder) trains them with the model's learning rate.
        known = {id(p) for group in optimizer.param_groups for p in group["params"]}
        own = [p for p in self.loss.parameters() if p.requires_grad and id(p) not in known]
        if own:
            settings = {k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "initial_lr")}
            optimizer.add_param_group({**settings, "params": own, "lr": self.args.learning_rate})
        head = getattr(unwrapped, "classifier", None)
        if head is None or self.optimizer_cls_and_kwargs is not None:
            return optimizer
        # Move the head's parameters into groups of their own with a higher learning rate.
        head_params = {id(p) for p in head.parameters()}
        head_lr = self.args.head_learning_rate or self.args.learning_rate * 100
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
            commit_message: as in `hf_siamese.formats.hub.push_to_hub`.
            revision: as in `hf_siamese.formats.hub.push_to_hub`; defaults to `args.hub_revision`.
            private: as in `hf_siamese.formats.hub.push_to_hub`; defaults to `args.hub_private_repo`.
            create_pr: as in `hf_siamese.formats.hub.push_to_hub`.
            blocking: False returns a `Future` of the commit; the files are staged before it returns.
            token: defaults to `args.hub_token`, then the logged-in token.
            model_card: markdown to upload instead of the generated card.
            kwargs: card facts (`base_model`, `datasets`, `license`, `eval_results`, `tags`, `language`, `title`,
                `final_weights`);
                Trainer's `finetuned_from`, `dataset`, `dataset_tags` and `model_name` are understood too.

        Returns:
            The `CommitInfo` (or its `Future`); None on processes other than the main one.
        """
        from pathlib import Path

        from ..formats.hub import push_to_hub

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

        from ..formats.local_paths import is_hub_id
        from ..formats.model_card import write_model_card

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
        from ..formats.model_card_facts import _CARD_FACT_NAMES

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
