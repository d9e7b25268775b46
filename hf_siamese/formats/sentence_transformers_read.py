"""The sentence-transformers checkpoint layout, read into a `SiameseBertConfig` (its writing half, which imports
names from here and never the other way, is `sentence_transformers_save.py`).

A sentence-transformers checkpoint is a pipeline described by `modules.json`: a Transformer (the encoder, with
`sentence_bert_config.json`), a Pooling (`1_Pooling/config.json`), optional Dense layers (`2_Dense/config.json` +
`model.safetensors`) and an optional Normalize, with prompts and the similarity function in
`config_sentence_transformers.json`. `read_layout` turns that into `SiameseBertConfig` fields and projection weights.
The encoder weights are stored once, in the Transformer's folder; our `config.json` reaches them through
`model.safetensors.index.json`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers.utils import cached_file

from ..modeling.encoding import ENCODER_FOLDER
from ..modeling.weight_files import naming_damaged_weights

logger = logging.getLogger(__name__)

MODULE_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")
TRANSFORMER_FOLDER = ENCODER_FOLDER
HEAD_WEIGHTS_FILE = "siamese_head.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
# The oldest module paths: every sentence-transformers version since 2.x resolves them (v6 without a warning).
_MODULE_TYPES = {kind: f"sentence_transformers.models.{kind}" for kind in MODULE_KINDS}
# sentence-transformers pooling mode -> ours, and the legacy boolean key each one is saved under.
_POOLING = {
    "cls": ("cls", "pooling_mode_cls_token"),
    "max": ("max", "pooling_mode_max_tokens"),
    "mean": ("mean", "pooling_mode_mean_tokens"),
    "mean_sqrt_len_tokens": ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"),
    "weightedmean": ("weightedmean", "pooling_mode_weightedmean_tokens"),
    "lasttoken": ("lasttoken", "pooling_mode_lasttoken"),
}
_ACTIVATIONS = {
    "identity": "torch.nn.modules.linear.Identity",
    "tanh": "torch.nn.modules.activation.Tanh",
    "relu": "torch.nn.modules.activation.ReLU",
    "gelu": "torch.nn.modules.activation.GELU",
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
    "silu": "torch.nn.modules.activation.SiLU",
}
# Loading arguments that a checkpoint's own files may not choose for the user.
_UNSAFE_LOAD_KEYS = ("trust_remote_code",)


class SentenceTransformersFormatError(ValueError):
    """A sentence-transformers checkpoint we cannot represent or read; the message names the file and the value."""


@dataclass
class SentenceTransformersLayout:
    """What a sentence-transformers checkpoint says about its embedding.

    `settings` holds `SiameseBertConfig` fields (`pooling`, `include_prompt`, `projections`, `normalize`,
    `similarity`, `prompts`, `default_prompt_name`, `do_lower_case`, `max_seq_length`); `projection_state` the
    projection weights under our parameter names; `encoder_kwargs` what `AutoModel.from_pretrained` needs to find
    the encoder (its `subfolder`, and loading arguments saved in `sentence_bert_config.json`).
    """

    settings: dict[str, Any] = field(default_factory=dict)
    projection_state: dict[str, torch.Tensor] = field(default_factory=dict)
    encoder_kwargs: dict[str, Any] = field(default_factory=dict)
    embedding_dimension: int | None = None
    # The encoder's width, from the Transformer's config.json (None when it names none), and where it was read.
    hidden_size: int | None = None
    hidden_size_file: str = ""


def _fetch(source: str, name: str, hub_kwargs: dict[str, Any]) -> str | None:
    """Local path of `name` (may contain a subfolder) in a folder or Hub repo, or None when it does not exist."""
    folder, _, filename = name.rpartition("/")
    return cached_file(
        source,
        filename,
        subfolder=folder,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **hub_kwargs,
    )


def _read_json(path: str, where: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise SentenceTransformersFormatError(f"{where}: cannot read it as JSON ({error}).") from None


def _join(*parts: str) -> str:
    return "/".join(part.strip("/") for part in parts if part and part.strip("/"))


def has_layout(source: str | os.PathLike, **hub_kwargs: Any) -> bool:
    """Whether `source` (local folder or Hub id) is a sentence-transformers checkpoint (has a `modules.json`)."""
    return _fetch(str(source), "modules.json", hub_kwargs) is not None


def read_layout(source: str | os.PathLike, **hub_kwargs: Any) -> SentenceTransformersLayout | None:
    """Read a sentence-transformers checkpoint (local folder or Hub id); None when it has no `modules.json`.

    `hub_kwargs` (`revision`, `token`, `cache_dir`, ...) go to every file download.

    Raises:
        SentenceTransformersFormatError: a module type we cannot represent, a module folder or file that is missing,
            two pooling modes at once, a Dense layer saved only as a pickle, ... naming the file and the value.
    """
    source = str(source)
    modules_path = _fetch(source, "modules.json", hub_kwargs)
    if modules_path is None:
        return None
    where = f"{source}/modules.json"
    modules = _read_json(modules_path, where)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
        raise SentenceTransformersFormatError(
            f"{where}: expected a list of {{'path', 'type'}} entries, got {modules!r}."
        )
    kinds = [_module_kind(entry["type"], where) for entry in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Dense" for k in kinds[2:-1]) or kinds[-1] == "Transformer":
        raise SentenceTransformersFormatError(
            f"{where}: modules {kinds} are not Transformer -> Pooling -> [Dense ...] -> [Normalize], the pipelines "
            "a SiameseBertModel represents."
        )
    layout = SentenceTransformersLayout()
    settings = layout.settings
    settings["normalize"] = kinds[-1] == "Normalize"
    for index, (entry, kind) in enumerate(zip(modules, kinds, strict=True)):
        path = str(entry.get("path", "") or "")
        if ".." in Path(path).parts or os.path.isabs(path):
            raise SentenceTransformersFormatError(f"{where}: module {index} has path {path!r}, outside the model.")
        if kind == "Transformer":
            _read_transformer(source, path, hub_kwargs, layout)
        elif kind == "Pooling":
            _read_pooling(source, path, hub_kwargs, layout)
        elif kind == "Dense":
            _read_dense(source, path, hub_kwargs, layout)
        elif index != len(modules) - 1:
            raise SentenceTransformersFormatError(f"{where}: Normalize must be the last module, not module {index}.")
    _read_model_config(source, hub_kwargs, settings)
    return layout


def _module_kind(type_name: Any, where: str) -> str:
    name = str(type_name)
    kind = name.rsplit(".", 1)[-1]
    if not name.startswith("sentence_transformers.") or kind not in MODULE_KINDS:
        raise SentenceTransformersFormatError(
            f"{where}: module type {name!r} cannot be represented by a SiameseBertModel; supported module types are "
            f"sentence-transformers' {list(MODULE_KINDS)}."
        )
    return kind


def _module_file(source: str, path: str, name: str, hub_kwargs: dict[str, Any], kind: str) -> str:
    found = _fetch(source, _join(path, name), hub_kwargs)
    if found is None:
        raise SentenceTransformersFormatError(
            f"{source}/modules.json lists a {kind} module at path {path!r}, but {source}/{_join(path, name)} does "
            "not exist; the checkpoint is incomplete."
        )
    return found


def _read_transformer(source: str, path: str, hub_kwargs: dict[str, Any], layout: SentenceTransformersLayout) -> None:
    where = f"{source}/{_join(path, 'config.json')}"
    encoder_config = _read_json(_module_file(source, path, "config.json", hub_kwargs, "Transformer"), where)
    # hidden_size in most configs; DistilBERT says dim, T5-like encoders d_model.
    widths = (
        [encoder_config.get(key) for key in ("hidden_size", "dim", "d_model")]
        if isinstance(encoder_config, dict)
        else []
    )
    layout.hidden_size = next((w for w in widths if isinstance(w, int) and not isinstance(w, bool)), None)
    layout.hidden_size_file = where
    config: dict[str, Any] = {}
    for name in ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json"):
        found = _fetch(source, _join(path, name), hub_kwargs)
        if found is not None:
            config = _read_json(found, f"{source}/{_join(path, name)}")
            break
    settings = layout.settings
    settings["do_lower_case"] = bool(config.get("do_lower_case", False))
    max_seq_length = config.get("max_seq_length")
    if not (isinstance(max_seq_length, int) and max_seq_length > 0):
        # sentence-transformers 6 keeps the limit in the tokenizer's model_max_length.
        found = _fetch(source, _join(path, "tokenizer_config.json"), hub_kwargs)
        limit = _read_json(found, "tokenizer_config.json").get("model_max_length") if found else None
        max_seq_length = limit if isinstance(limit, int) and 0 < limit < 100_000 else None
    settings["max_seq_length"] = max_seq_length
    model_kwargs = dict(config.get("model_kwargs") or config.get("model_args") or {})
    for key in _UNSAFE_LOAD_KEYS:
        model_kwargs.pop(key, None)
    layout.encoder_kwargs = {**model_kwargs, **({"subfolder": path} if path else {})}


def _read_pooling(source: str, path: str, hub_kwargs: dict[str, Any], layout: SentenceTransformersLayout) -> None:
    where = f"{source}/{_join(path, 'config.json')}"
    config = _read_json(_module_file(source, path, "config.json", hub_kwargs, "Pooling"), where)
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for mode, (_, key) in _POOLING.items() if config.get(key)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1:
        raise SentenceTransformersFormatError(
            f"{where}: pooling modes {modes} are switched on at once (their outputs would be concatenated); a "
            f"SiameseBertModel pools with exactly one of {list(_POOLING)}."
        )
    if modes[0] not in _POOLING:
        raise SentenceTransformersFormatError(f"{where}: pooling_mode {modes[0]!r} is not one of {list(_POOLING)}.")
    layout.settings["pooling"] = _POOLING[modes[0]][0]
    layout.settings["include_prompt"] = bool(config.get("include_prompt", True))
    key = "embedding_dimension" if "embedding_dimension" in config else "word_embedding_dimension"
    layout.embedding_dimension = config.get(key)
    if layout.embedding_dimension is not None and layout.hidden_size is not None:
        if layout.embedding_dimension != layout.hidden_size:
            raise SentenceTransformersFormatError(
                f"{where}: {key}={layout.embedding_dimension!r}, but the encoder's hidden size is "
                f"{layout.hidden_size} ({layout.hidden_size_file}); the Pooling module was saved for another encoder "
                f"(set {key} to {layout.hidden_size} if the folder is otherwise right)."
            )


def _read_dense(source: str, path: str, hub_kwargs: dict[str, Any], layout: SentenceTransformersLayout) -> None:
    where = f"{source}/{_join(path, 'config.json')}"
    config = _read_json(_module_file(source, path, "config.json", hub_kwargs, "Dense"), where)
    activation_path = config.get("activation_function", _ACTIVATIONS["tanh"])
    activation = next((name for name, full in _ACTIVATIONS.items() if full == activation_path), None)
    if activation is None:
        raise SentenceTransformersFormatError(
            f"{where}: activation_function {activation_path!r} is not one of {sorted(_ACTIVATIONS.values())}."
        )
    for key, accepted in (("module_input_name", "sentence_embedding"), ("module_output_name", "sentence_embedding")):
        if config.get(key, accepted) not in (accepted, None):
            raise SentenceTransformersFormatError(f"{where}: {key}={config[key]!r}; only {accepted!r} is supported.")
    if config.get("use_residual", False):
        raise SentenceTransformersFormatError(f"{where}: use_residual=True Dense layers are not supported.")
    weights = _fetch(source, _join(path, "model.safetensors"), hub_kwargs)
    if weights is None:
        pickled = _fetch(source, _join(path, "pytorch_model.bin"), hub_kwargs)
        detail = (
            "holds only pytorch_model.bin, a pickle, which hf-siamese never loads; re-save it as safetensors "
            "(sentence-transformers' model.save(path) does by default)"
            if pickled is not None
            else "has no model.safetensors"
        )
        raise SentenceTransformersFormatError(f"{source}/{path}: the Dense layer {detail}.")
    with naming_damaged_weights(os.path.dirname(weights)):
        state = load_file(weights)
    index = len(layout.settings.setdefault("projections", []))
    layout.settings["projections"].append(
        {
            "in_features": int(config["in_features"]),
            "out_features": int(config["out_features"]),
            "bias": bool(config.get("bias", True)),
            "activation": activation,
        }
    )
    for name in ("weight", "bias"):
        if f"linear.{name}" in state:
            layout.projection_state[f"projections.{index}.linear.{name}"] = state[f"linear.{name}"]


def _read_model_config(source: str, hub_kwargs: dict[str, Any], settings: dict[str, Any]) -> None:
    found = _fetch(source, "config_sentence_transformers.json", hub_kwargs)
    if found is None:
        return
    config = _read_json(found, f"{source}/config_sentence_transformers.json")
    prompts = config.get("prompts") or {}
    # sentence-transformers 6 saves empty placeholder prompts ({"document": ""}); they change nothing.
    default = config.get("default_prompt_name")
    settings["prompts"] = {name: text for name, text in prompts.items() if text or name == default}
    settings["default_prompt_name"] = default
    if config.get("similarity_fn_name"):
        settings["similarity"] = config["similarity_fn_name"]


__all__ = [
    "SentenceTransformersFormatError",
    "SentenceTransformersLayout",
    "has_layout",
    "read_layout",
]
