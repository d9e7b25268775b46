"""The facts a model card is written from: what the model, its trainer and the caller say, with local paths scrubbed.

`collect_facts` gathers them into a `ModelCardFacts`; `model_card.render_model_card` writes the card from it.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from .local_paths import is_hub_id, looks_like_local_path

_METRIC_RE = re.compile(
    r"^(?:(?P<prefix>eval|test)_)?(?:(?P<set>.+?)_)?"
    r"(?P<metric>(?:spearman|pearson|mse|mae)(?:_(?:cosine|dot|euclidean|manhattan))?)$"
)
_METRIC_ORDER = ("spearman", "pearson", "mse", "mae")
_SIMILARITY_ORDER = ("cosine", "dot", "euclidean", "manhattan")
_VERSION_PACKAGES = (
    ("hf-siamese", "hf-siamese"),
    ("transformers", "transformers"),
    ("torch", "torch"),
    ("datasets", "datasets"),
    ("huggingface_hub", "huggingface-hub"),
)


@dataclass
class CardInputs:
    """What the caller tells a model card besides the model itself: `build_model_card`'s keywords (documented
    there), given once and passed along to `collect_facts`."""

    repo_id: str | None = None
    trainer: Any = None
    base_model: str | None = None
    datasets: str | Iterable[str] | None = None
    license: str | None = "apache-2.0"
    eval_results: Mapping[str, Any] | None = None
    training_args: Any = None
    loss_name: str | None = None
    tags: str | Iterable[str] | None = None
    language: str | Iterable[str] | None = None
    title: str | None = None
    final_weights: str | None = None
    data_source: str | None = None


# The card facts a caller may give with the model (`push_to_hub`, the trainer's card) besides the repo id.
_CARD_FACT_NAMES = tuple(item.name for item in fields(CardInputs) if item.name != "repo_id")


def card_inputs(where: str, card_facts: Mapping[str, Any]) -> CardInputs:
    """`CardInputs(**card_facts)`, refusing an unknown name with a `TypeError` that `where` (the function called)
    starts and that lists the accepted ones."""
    accepted = {"repo_id", *_CARD_FACT_NAMES}
    unknown = sorted(set(card_facts) - accepted)
    if unknown:
        raise TypeError(f"{where}: unknown argument {unknown[0]!r}; accepted: {sorted(accepted)}.")
    return CardInputs(**card_facts)


@dataclass
class ModelCardFacts:
    """Everything a card states. Unknown facts stay empty and their sections are left out of the card."""

    title: str
    model_id: str | None = None
    base_model: str | None = None
    datasets: list[str] = field(default_factory=list)
    license: str | None = "apache-2.0"
    language: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    architecture: dict[str, Any] = field(default_factory=dict)
    loss_name: str | None = None
    loss_details: dict[str, Any] = field(default_factory=dict)
    train_size: int | None = None
    train_columns: list[str] = field(default_factory=list)
    trained_steps: int | None = None
    trained_epochs: float | None = None
    final_weights: str | None = None
    data_source: str | None = None
    hyperparameters: dict[str, str] = field(default_factory=dict)
    eval_results: dict[str, dict[str, float]] = field(default_factory=dict)
    eval_step: int | None = None
    eval_epoch: float | None = None
    versions: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ facts


def parse_eval_metrics(metrics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """STS metrics by eval set from flat keys such as `eval_spearman_cosine`, `eval_dev_pearson_dot`,
    `spearman_cosine` or `test_mse_cosine`; other keys (loss, runtime) and non-finite values are skipped.

    The eval set of `eval_<metric>` is `"eval"`; of `eval_<set>_<metric>` it is `<set>`.
    """
    results: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):  # already grouped: {"dev": {"spearman_cosine": 0.8}}
            for name, metrics_of_set in parse_eval_metrics(value).items():
                label = str(key) if name in ("eval", "test") else f"{key}_{name}"
                results.setdefault(label, {}).update(metrics_of_set)
            continue
        match = _METRIC_RE.match(str(key))
        if match is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(float(value)):
            continue
        label = match["set"] or match["prefix"] or "eval"
        results.setdefault(label, {})[match["metric"]] = float(value)
    return {label: dict(sorted(m.items(), key=lambda kv: _metric_sort_key(kv[0]))) for label, m in results.items()}


def _metric_sort_key(metric: str) -> tuple[int, int]:
    kind, _, similarity = metric.partition("_")
    kind_index = _METRIC_ORDER.index(kind) if kind in _METRIC_ORDER else len(_METRIC_ORDER)
    sim_index = _SIMILARITY_ORDER.index(similarity) if similarity in _SIMILARITY_ORDER else -1
    return kind_index, sim_index


def eval_results_from_log_history(
    log_history: Sequence[Mapping[str, Any]], step: int | None = None
) -> tuple[dict[str, dict[str, float]], int | None, float | None]:
    """STS metrics of the last evaluation in a Trainer's `state.log_history` (or of the one at `step`, e.g. the best
    checkpoint's), with that evaluation's step and epoch. Several eval sets evaluated at one step are merged."""
    evaluations = [
        entry
        for entry in log_history
        if any(str(k).startswith("eval_") for k in entry) and parse_eval_metrics(_only_eval_keys(entry))
    ]
    if not evaluations:
        return {}, None, None
    steps = [entry.get("step") for entry in evaluations]
    chosen = step if step is not None and step in steps else steps[-1]
    results: dict[str, dict[str, float]] = {}
    epoch = None
    for entry in evaluations:
        if entry.get("step") == chosen:
            for label, metrics in parse_eval_metrics(_only_eval_keys(entry)).items():
                results.setdefault(label, {}).update(metrics)
            epoch = entry.get("epoch", epoch)
    return results, chosen, epoch


def _only_eval_keys(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if str(k).startswith("eval_")}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _format_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}"


def hyperparameters_from_args(training_args: Any, trainer: Any = None) -> dict[str, str]:
    """The hyperparameters worth stating, from `TrainingArguments` (or a plain dict), as display strings. Never
    paths, tokens or Hub settings."""
    if training_args is None:
        return {}
    if isinstance(training_args, Mapping):
        out = {}
        for key, value in training_args.items():
            value = _plain(value)
            lowered = str(key).lower()
            if any(word in lowered for word in ("token", "hub", "dir", "path", "push")):
                continue
            if isinstance(value, (str, int, float, bool)) and not (
                isinstance(value, str) and looks_like_local_path(value)
            ):
                out[str(key)] = _format_number(value)
        return out

    def get(name: str, default: Any = None) -> Any:
        return _plain(getattr(training_args, name, default))

    out: dict[str, str] = {}
    max_steps = get("max_steps", -1)
    if isinstance(max_steps, int) and max_steps > 0:
        out["max steps"] = str(max_steps)
    else:
        out["epochs"] = _format_number(get("num_train_epochs"))
    out["per-device train batch size"] = str(get("per_device_train_batch_size"))
    accumulation = get("gradient_accumulation_steps", 1) or 1
    if accumulation != 1:
        out["gradient accumulation steps"] = str(accumulation)
    world_size = get("world_size", 1) or 1
    per_device = get("per_device_train_batch_size")
    if isinstance(per_device, int) and (accumulation != 1 or world_size != 1):
        out["total train batch size"] = str(per_device * accumulation * world_size)
    out["learning rate"] = _format_number(get("learning_rate"))
    if trainer is not None and getattr(_unwrap(trainer), "classifier", None) is not None:
        head_lr = getattr(trainer, "head_learning_rate", None) or get("learning_rate") * 100
        out["classifier head learning rate"] = _format_number(head_lr)
    out["learning rate schedule"] = str(get("lr_scheduler_type"))
    warmup = get("warmup_steps", 0)
    if isinstance(warmup, float) and 0 < warmup < 1:
        out["warmup"] = f"{warmup:g} of the training steps"
    else:
        out["warmup steps"] = _format_number(warmup)
    out["weight decay"] = _format_number(get("weight_decay"))
    out["optimizer"] = str(get("optim"))
    out["max gradient norm"] = _format_number(get("max_grad_norm"))
    out["seed"] = str(get("seed"))
    if get("data_seed") is not None:
        out["data seed"] = str(get("data_seed"))
    out["mixed precision"] = "bf16" if get("bf16") else "fp16" if get("fp16") else "no (fp32)"
    if trainer is not None and getattr(trainer, "no_duplicates_sampler", False):
        out["batch sampler"] = "no duplicate texts within a batch"
    elif get("train_sampling_strategy") == "group_by_length":
        out["batch sampler"] = "group by length"
    return {k: v for k, v in out.items() if v not in ("None", "")}


def _unwrap(trainer: Any) -> Any:
    model = getattr(trainer, "model", None)
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None and model is not None:
        try:
            return accelerator.unwrap_model(model)
        except Exception:  # noqa: BLE001 - best effort: an odd wrapper just means no head facts
            return model
    return model


def architecture_facts(model: Any) -> dict[str, Any]:
    """Architecture facts from a `SiameseBertModel` (duck-typed: anything with a `SiameseBertConfig`), or from a
    `SparseSiameseModel` (`sparse_facts`)."""
    config = model.config
    encoder = config.encoder_config
    if getattr(config, "model_type", None) == "siamese-sparse":
        return sparse_facts(model)
    facts: dict[str, Any] = {
        "model_class": type(model).__name__,
        "encoder_type": getattr(encoder, "model_type", None),
        "layers": getattr(encoder, "num_hidden_layers", None) or getattr(encoder, "n_layers", None),
        "hidden_size": config.hidden_size,
        "embedding_size": config.embedding_size,
        "projections": [dict(p) for p in config.projections],
        "prompts": dict(config.prompts or {}),
        "default_prompt_name": config.default_prompt_name,
        "include_prompt": bool(config.include_prompt),
        "pooling": config.pooling,
        "normalize": bool(config.normalize),
        "similarity": config.similarity,
        "max_seq_length": config.effective_max_seq_length,
        "classifier_head": bool(config.classifier_head),
        "cosine_affine": bool(getattr(config, "cosine_affine", False)),
    }
    if hasattr(model, "num_parameters"):
        facts["parameters"] = int(model.num_parameters())
    if config.classifier_head:
        facts["labels"] = [config.id2label[i] for i in sorted(config.id2label)]
        facts["classifier_features"] = list(config.classifier_features)
    return facts


def sparse_facts(model: Any) -> dict[str, Any]:
    """`architecture_facts` of a `SparseSiameseModel`: the same keys (its output: vocabulary-wide term weights, dot
    product), and under "sparse" its architecture, activation, active-term limit and where its head came from."""
    config = model.config
    encoder = config.encoder_config
    facts: dict[str, Any] = {
        "model_class": type(model).__name__,
        "encoder_type": getattr(encoder, "model_type", None),
        "layers": getattr(encoder, "num_hidden_layers", None) or getattr(encoder, "n_layers", None),
        "hidden_size": getattr(encoder, "hidden_size", None) or getattr(encoder, "dim", None),
        "embedding_size": config.vocab_size_of_encoder,
        "projections": [],
        "prompts": dict(config.prompts or {}),
        "default_prompt_name": None,
        "include_prompt": True,
        "pooling": config.pooling,
        "normalize": False,
        "similarity": "dot",
        "max_seq_length": config.effective_max_seq_length,
        "classifier_head": False,
        "cosine_affine": False,
        "sparse": {
            "architecture": config.architecture,
            "activation": config.activation,
            "max_active_dims": config.max_active_dims,
            "head_note": config.head_note,
        },
    }
    if hasattr(model, "num_parameters"):
        facts["parameters"] = int(model.num_parameters())
    return facts


def _versions() -> dict[str, str]:
    versions = {}
    for label, distribution in _VERSION_PACKAGES:
        try:
            versions[label] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    versions["Python"] = platform.python_version()
    return versions


def _as_list(value: str | Iterable[str] | None, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = list(value)
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise TypeError(f"{name}={value!r}: every item must be a str, got {bad[0]!r}.")
    return items


def collect_facts(model: Any, inputs: CardInputs | None = None) -> ModelCardFacts:
    """Gather the facts of a card from the model and what the caller gave (`inputs`; see `build_model_card`)."""
    given = inputs if inputs is not None else CardInputs()
    _check_card_inputs(model, given)
    trainer, repo_id = given.trainer, given.repo_id
    args = given.training_args if given.training_args is not None else getattr(trainer, "args", None)
    base_model = given.base_model
    if base_model is None:
        base_model = getattr(model.config, "name_or_path", None) or None
        if base_model == repo_id:
            base_model = None
    datasets_list = [d for d in _as_list(given.datasets, "datasets") if is_hub_id(d)]
    facts = ModelCardFacts(
        title=given.title or _default_title(model, repo_id, trainer),
        model_id=repo_id,
        base_model=base_model if is_hub_id(base_model) else None,
        datasets=datasets_list,
        license=given.license,
        language=_as_list(given.language, "language"),
        architecture=architecture_facts(model),
        versions=_versions(),
    )
    _add_training_facts(facts, trainer, given.loss_name)
    facts.hyperparameters = hyperparameters_from_args(args, trainer)
    facts.final_weights = _sentence(given.final_weights, "final_weights")
    facts.data_source = _sentence(given.data_source, "data_source")
    state = getattr(trainer, "state", None)
    if given.eval_results is not None:
        facts.eval_results = parse_eval_metrics(given.eval_results)
    elif state is not None:
        best_step = None
        if getattr(args, "load_best_model_at_end", False):
            best_step = getattr(state, "best_global_step", None)
        facts.eval_results, facts.eval_step, facts.eval_epoch = eval_results_from_log_history(
            state.log_history, best_step
        )
    facts.tags = _card_tags(facts, trainer, given.tags)
    return facts


def _check_card_inputs(model: Any, given: CardInputs) -> None:
    """Refuse a model that is no `SiameseBertModel`, a repo id or a license the Hub would not take."""
    if not hasattr(model, "config") or not hasattr(model.config, "encoder_config"):
        raise TypeError(
            f"build_model_card needs a SiameseBertModel (a model with a SiameseBertConfig), got {type(model).__name__}."
        )
    if given.repo_id is not None and not is_hub_id(given.repo_id):
        raise ValueError(f"repo_id={given.repo_id!r} is not a Hub repo id; expected 'name' or 'namespace/name'.")
    hub_license = given.license
    if hub_license is not None and not (
        isinstance(hub_license, str) and re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", hub_license)
    ):
        raise ValueError(f"license={hub_license!r} must be a Hub license id such as 'apache-2.0', 'mit' or 'other'.")


def _add_training_facts(facts: ModelCardFacts, trainer: Any, loss_name: str | None) -> None:
    """The loss (its name and settings), the train set's size and columns, and the steps and epochs trained, as
    far as `trainer` (None: none) tells them."""
    loss = getattr(trainer, "loss", None)
    # A CombinedLoss is named by its parts: "CoSENTLoss + 0.5 * AnglELoss".
    facts.loss_name = loss_name or (getattr(loss, "summary", None) or type(loss).__name__ if loss is not None else None)
    if loss is not None:
        for attribute in ("score_range", "scale", "symmetric", "mini_batch_size", "dims"):
            value = getattr(loss, attribute, None)
            if value is not None:
                facts.loss_details[attribute] = value
    train_dataset = getattr(trainer, "train_dataset", None)
    if train_dataset is not None:
        try:
            facts.train_size = len(train_dataset)
        except TypeError:
            facts.train_size = None
        facts.train_columns = [str(c) for c in getattr(train_dataset, "column_names", None) or []]
    state = getattr(trainer, "state", None)
    if state is not None and getattr(state, "global_step", 0):
        facts.trained_steps = int(state.global_step)
        facts.trained_epochs = float(state.epoch) if state.epoch is not None else None


def _sentence(value: Any, name: str) -> str | None:
    """A sentence fact stripped (None when empty); refuses one that is not a str."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a sentence (str), got {type(value).__name__}")
    return (value or "").strip() or None


def _card_tags(facts: ModelCardFacts, trainer: Any, tags: str | Iterable[str] | None) -> list[str]:
    """The card's tags: the library's, the trainer's, the loss and the train set's size, then the caller's."""
    tag_list = ["sentence-transformers", "transformers", "sentence-similarity", "feature-extraction", "siamese"]
    tag_list.append("hf-siamese")
    if trainer is not None:
        tag_list.append("generated_from_trainer")
    if facts.loss_name:
        tag_list.append(f"loss:{facts.loss_name}")
    if facts.train_size:
        tag_list.append(f"dataset_size:{facts.train_size}")
    for tag in _as_list(tags, "tags"):
        if tag not in tag_list:
            tag_list.append(tag)
    return tag_list


def _default_title(model: Any, repo_id: str | None, trainer: Any) -> str:
    if repo_id:
        return repo_id.split("/")[-1]
    hub_model_id = getattr(getattr(trainer, "args", None), "hub_model_id", None)
    if isinstance(hub_model_id, str) and hub_model_id:
        return hub_model_id.split("/")[-1]
    encoder_type = getattr(model.config.encoder_config, "model_type", "encoder")
    if getattr(model.config, "model_type", None) == "siamese-sparse":
        return f"Sparse {encoder_type} encoder ({model.config.architecture})"
    return f"Siamese {encoder_type} sentence encoder"
