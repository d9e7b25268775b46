"""Training arguments: `transformers.TrainingArguments` with hf-siamese's options, where users, `HfArgumentParser`,
the saved `training_args.bin` and the model card find them (sentence-transformers keeps its options the same way).

    args = SiameseTrainingArguments(output_dir="out", prompts={"anchor": "query: "}, group_by_length="auto")
    SiameseTrainer(model, args, train_dataset=rows, loss="mnr")

A plain `TrainingArguments` still works: the trainers copy it into theirs, with every hf-siamese option at its
default (`as_training_arguments`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from transformers import TrainingArguments

from ..losses.quantization_aware import QUANTIZATION_AWARE

_GROUP_BY_LENGTH = {"auto": "auto", "true": True, "false": False}


class _NotGiven:
    """The default of a trainer's deprecated keyword: not given (None is a value some of them refuse)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()

Arguments = TypeVar("Arguments", bound="HfSiameseTrainingArguments")


@dataclass
class HfSiameseTrainingArguments(TrainingArguments):
    """The options both trainers share, beside `TrainingArguments`' own. Use `SiameseTrainingArguments` or
    `CrossEncoderTrainingArguments` (in `hf_siamese.cross_encoder`, beside its trainer).

    Args:
        head_learning_rate: learning rate of the model's head (the bi-encoder's softmax classifier, the
            cross-encoder's classification head). The bi-encoder's default is 100x `learning_rate` (see
            `SoftmaxLoss` for why); the cross-encoder's default trains the head with the rest.
        pretokenize: tokenize a map-style `datasets.Dataset` train set once before training (batched, cached by its
            fingerprint), so a step only pads token ids; False tokenizes every batch in the collator. Streams are
            always tokenized batch by batch.
        cuda_graphs: replay the training step's encoder layers as CUDA graphs: packed batches are rounded up to a
            few sizes (shape buckets: geometric, 16 an octave, at most 4.2% padding, about 2% on average) and the
            layers compiled with static shapes, one graph a bucket (`torch_compile_mode`, default
            "reduce-overhead"), so the host launches one graph a layer instead of its dozens of kernels. None
            (default): on where it measured fastest, packed bf16/fp16 training on the varlen kernel in one process on
            one CUDA GPU without `torch_compile`, and with `torch_compile=True` and a CUDA-graph
            `torch_compile_mode`; off elsewhere. True: on (off CUDA the same static-shape step, without graphs);
            False: off.
    """

    head_learning_rate: float | None = field(
        default=None, metadata={"help": "learning rate of the model's head (default: the trainer's rule)"}
    )
    pretokenize: bool = field(
        default=True, metadata={"help": "tokenize a map-style train set once before training (False: every batch)"}
    )

    cuda_graphs: bool | None = field(
        default=None,
        metadata={"help": "replay the step's encoder layers as CUDA graphs (default: on for bf16/fp16 on one GPU)"},
    )

    def __new__(cls, *args: Any, **kwargs: Any) -> HfSiameseTrainingArguments:
        instance = super().__new__(cls)
        # The options given by name, whatever their value: a trainer's deprecated keyword that disagrees with one of
        # them is refused even where the value given is the default (`as_training_arguments`).
        instance._given_options = frozenset(kwargs)
        return instance

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_options()

    def check_options(self) -> None:
        """Refuse an hf-siamese option outside what it accepts, naming it (and normalize the command line's forms)."""
        name = type(self).__name__
        rate = self.head_learning_rate
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf
        ):
            raise ValueError(f"{name}: head_learning_rate={rate!r} must be a positive finite number or None.")
        if not isinstance(self.pretokenize, bool):
            raise ValueError(f"{name}: pretokenize={self.pretokenize!r}; accepted: True, False.")
        if self.cuda_graphs is not None and not isinstance(self.cuda_graphs, bool):
            raise ValueError(f"{name}: cuda_graphs={self.cuda_graphs!r}; accepted: True, False, None.")


@dataclass
class SiameseTrainingArguments(HfSiameseTrainingArguments):
    """`TrainingArguments` for `SiameseTrainer`: the Trainer's settings plus the bi-encoder's options.

    Args:
        no_duplicates_sampler: for ranking losses, batch rows so that no text occurs twice in a batch (a repeated
            text would be a false negative). None (default): on for `MultipleNegativesRankingLoss` and its kin.
        prompts: a prompt per text column (`{"anchor": "query: ", "positive": "passage: "}`) or one for all, put
            before the texts in training and in STS evaluation; goes to the default collator. From the command line
            (`HfArgumentParser`), a JSON object or a plain string.
        stream_buffer_size: for a streamed train set and a ranking loss, the rows held to form batches without
            repeated texts (default 8 x the batch size).
        group_by_length: batch rows of similar token length together, so that padded batches carry little padding.
            `"auto"` (default): only when the model cannot run packed (BERT-family encoders run a batch's texts end to
            end without padding, which measured faster on random batches than on grouped ones), and not for the
            softmax loss (grouped NLI batches cost 0.27 STSb test there). True: always; False: never.
            `train_sampling_strategy="group_by_length"` means True, `"sequential"` False.

        quantization_aware: "int8" or "binary": train through the quantizer of that precision
            (`losses.QuantizationAwareLoss` wraps the loss: the float embeddings' loss plus the codes' loss, straight
            through), so that an index of that precision (`index --precision`) ranks as the float one. A dense
            model's only. None (default): the float embeddings alone.

    `head_learning_rate` and `pretokenize`: see `HfSiameseTrainingArguments`.
    """

    quantization_aware: str | None = field(
        default=None,
        metadata={"help": "train through the int8 or binary quantizer (default: none)", "choices": QUANTIZATION_AWARE},
    )
    no_duplicates_sampler: bool | None = field(
        default=None, metadata={"help": "no text twice in a batch (default: on for ranking losses)"}
    )
    prompts: dict[str, str] | str | None = field(
        default=None, metadata={"help": 'a prompt for every text, or a JSON object {"anchor": "query: ", ...}'}
    )
    stream_buffer_size: int | None = field(
        default=None, metadata={"help": "rows a stream holds to form batches without repeats (default 8 x batch)"}
    )
    group_by_length: str = field(
        default="auto",
        metadata={
            "help": "batch texts of similar length together: auto, true or false",
            "choices": ["auto", "true", "false"],
        },
    )

    def check_options(self) -> None:
        super().check_options()
        name = type(self).__name__
        self.group_by_length = _group_by_length(self.group_by_length, name)
        self.prompts = _prompts(self.prompts, name)
        if self.no_duplicates_sampler is not None and not isinstance(self.no_duplicates_sampler, bool):
            raise ValueError(
                f"{name}: no_duplicates_sampler={self.no_duplicates_sampler!r}; accepted: True, False, None."
            )
        if self.quantization_aware is not None and self.quantization_aware not in QUANTIZATION_AWARE:
            raise ValueError(
                f"{name}: quantization_aware={self.quantization_aware!r}; accepted: 'int8', 'binary', None."
            )
        size = self.stream_buffer_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"{name}: stream_buffer_size={size!r} must be a positive whole number or None.")


def _group_by_length(value: Any, name: str) -> bool | str:
    key = value.lower() if isinstance(value, str) else value
    if isinstance(key, bool):
        return key
    if key in _GROUP_BY_LENGTH:
        return _GROUP_BY_LENGTH[key]
    raise ValueError(f"{name}: group_by_length={value!r}; accepted: True, False, 'auto'.")


def _prompts(value: Any, name: str) -> dict[str, str] | str | None:
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: prompts={value!r} is not a JSON object ({error}).") from None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    raise ValueError(f"{name}: prompts={value!r}; accepted: a string, or a dict of text column -> prompt string.")


def as_training_arguments(
    args: TrainingArguments | None, kind: type[Arguments], output_dir: str, options: Mapping[str, Any], trainer: str
) -> Arguments:
    """`args` as `kind`: itself when it is one, else a copy of a plain `TrainingArguments` (or a new one writing to
    `output_dir`) with hf-siamese's options at their defaults. `options` are the trainer's deprecated keywords
    (`NOT_GIVEN` where not given); each given one is set on the arguments with a `FutureWarning`, and one that
    disagrees with the arguments' own value (given to them by name, or other than the default) is refused."""
    if args is None:
        args = kind(output_dir=output_dir)
    elif not isinstance(args, kind):
        if isinstance(args, HfSiameseTrainingArguments):
            raise TypeError(f"{trainer} takes {kind.__name__}, got {type(args).__name__}.")
        own = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainingArguments) if f.init}
        args = kind(**own)
    given = {key: value for key, value in options.items() if value is not NOT_GIVEN}
    if not given:
        return args
    warnings.warn(
        f"{trainer}({', '.join(f'{k}=...' for k in given)}) is deprecated and will be removed in the next release: "
        f"pass {kind.__name__}({', '.join(f'{k}=...' for k in given)}) as args.",
        FutureWarning,
        stacklevel=3,
    )
    defaults = {f.name: f.default for f in dataclasses.fields(kind)}
    named = getattr(args, "_given_options", frozenset())
    changes: dict[str, Any] = {}
    for key, value in given.items():
        current = getattr(args, key)
        if (key in named or current != defaults[key]) and current != value:
            raise ValueError(
                f"{trainer}({key}={value!r}) conflicts with {kind.__name__}({key}={current!r}); give it in one place."
            )
        changes[key] = value
    for key, value in changes.items():
        setattr(args, key, value)
    args.check_options()
    return args
