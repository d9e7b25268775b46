"""The sentence-transformers checkpoint layout, read into a `SiameseBertConfig` and written next to our own files.

A sentence-transformers checkpoint is a pipeline described by `modules.json`: a Transformer (the encoder, with
`sentence_bert_config.json`), a Pooling (`1_Pooling/config.json`), optional Dense layers (`2_Dense/config.json` +
`model.safetensors`) and an optional Normalize, with prompts and the similarity function in
`config_sentence_transformers.json`. `read_layout` turns that into `SiameseBertConfig` fields and projection weights;
`write_layout` writes the same files for a `SiameseBertModel`, so `SentenceTransformer(folder)` builds the same
pipeline. The encoder weights are written once, in the Transformer's folder; our `config.json` reaches them through
`model.safetensors.index.json`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers.utils import cached_file

from .encoding import ENCODER_FOLDER

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
    _module_file(source, path, "config.json", hub_kwargs, "Transformer")
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
    layout.embedding_dimension = config.get("embedding_dimension", config.get("word_embedding_dimension"))


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


# ------------------------------------------------------------------------------------------------------ writing


def save_pretrained(
    model: Any,
    save_directory: str | os.PathLike,
    *,
    super_save: Callable[..., Any],
    tokenizer: Any = None,
    state_dict: dict[str, torch.Tensor] | None = None,
    **kwargs: Any,
) -> None:
    """`SiameseBertModel.save_pretrained`: our `config.json` (with `auto_map` and the modeling code) plus the
    sentence-transformers files, the encoder weights stored once, in `TRANSFORMER_FOLDER`.

    `super_save` is `PreTrainedModel.save_pretrained` bound to the model: it writes the config, the code and the
    encoder weights (sharded when large) into a staging folder; only once everything is written are the files moved
    into `save_directory`, so a failure leaves an earlier save there intact.
    """
    if kwargs.get("push_to_hub"):
        raise ValueError("save_pretrained(push_to_hub=True) is not supported; call model.push_to_hub(repo_id) instead.")
    if kwargs.get("variant"):
        raise ValueError(
            f"save_pretrained(variant={kwargs['variant']!r}) is not supported: sentence-transformers reads one weights "
            "file name; save a copy in the dtype you want instead (model.to(dtype).save_pretrained(folder))."
        )
    if not kwargs.get("is_main_process", True):
        return  # as in transformers: under several processes only the main one writes
    target = Path(save_directory)
    if target.is_file():
        raise ValueError(f"save_pretrained: {str(target)!r} is a file; give a folder (it is created if missing).")
    target.mkdir(parents=True, exist_ok=True)
    state_dict = model.state_dict() if state_dict is None else state_dict
    encoder_state = {k: v for k, v in state_dict.items() if k.startswith("encoder.")}
    head_state = {k: v for k, v in state_dict.items() if not k.startswith("encoder.")}
    if tokenizer is None:
        tokenizer = _find_tokenizer(model)
    with tempfile.TemporaryDirectory(dir=target, prefix=".staging-") as staging:
        stage = Path(staging)
        super_save(stage, state_dict=encoder_state, **kwargs)
        (stage / TRANSFORMER_FOLDER).mkdir()
        encoder_index = _move_encoder_weights(stage, stage / TRANSFORMER_FOLDER)
        write_weights_index(stage, encoder_index, head_state)
        write_layout(model, stage, tokenizer)
        _remove_stale_files(target)
        for path in sorted(p for p in stage.rglob("*") if p.is_file()):
            destination = target / path.relative_to(stage)
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, destination)


def _find_tokenizer(model: Any) -> Any:
    try:
        return model._resolve_tokenizer(None)
    except Exception as error:  # noqa: BLE001 - without one the folder is still complete for AutoModel
        logger.warning(
            "save_pretrained: no tokenizer known for this model (%s); SentenceTransformer(folder) needs one in "
            "%s/: pass save_pretrained(folder, tokenizer=tok) or set model.tokenizer.",
            error,
            TRANSFORMER_FOLDER,
        )
        return None


def _move_encoder_weights(stage: Path, transformer: Path) -> dict[str, str]:
    """Move the weight files `save_pretrained` wrote into the Transformer folder; map each parameter to its file."""
    index_path = stage / WEIGHTS_INDEX_FILE
    if index_path.is_file():
        weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
        os.replace(index_path, transformer / WEIGHTS_INDEX_FILE)
    else:
        with safe_open(str(stage / "model.safetensors"), framework="pt") as handle:
            weight_map = {name: "model.safetensors" for name in handle.keys()}  # noqa: SIM118 - not a dict
    for name in set(weight_map.values()):
        os.replace(stage / name, transformer / name)
    return {key: f"{TRANSFORMER_FOLDER}/{name}" for key, name in weight_map.items()}


_STALE = re.compile(r"^(model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|siamese_head\.safetensors)$")
_MODULE_FOLDER = re.compile(r"^\d+_(Transformer|Pooling|Dense|Normalize)$")


def _remove_stale_files(target: Path) -> None:
    """Weight files and module folders of an earlier save that the new one does not overwrite would shadow it
    (a root `model.safetensors` wins over our index) or describe another pipeline."""
    for path in target.iterdir():
        if path.is_file() and _STALE.match(path.name):
            path.unlink()
        elif path.is_dir() and _MODULE_FOLDER.match(path.name):
            shutil.rmtree(path)


def write_layout(model: Any, folder: str | os.PathLike, tokenizer: Any = None) -> None:
    """Write the sentence-transformers files for `model` into `folder`, where `save_pretrained` has already put our
    `config.json` and the encoder's weight files (in `TRANSFORMER_FOLDER`)."""
    folder = Path(folder)
    config = model.config
    transformer = folder / TRANSFORMER_FOLDER
    config.encoder_config.to_json_file(transformer / "config.json")
    model_kwargs: dict[str, Any] = {"key_mapping": {"^encoder\\.": ""}}
    # We drop BERT's next-sentence pooler; without this the encoder class would build one and warn it is untrained.
    if getattr(model.encoder, "pooler", "absent") is None:
        model_kwargs["add_pooling_layer"] = False
    _write_json(
        transformer / "sentence_bert_config.json",
        {
            "max_seq_length": config.effective_max_seq_length,
            "do_lower_case": config.do_lower_case,
            "model_args": model_kwargs,
        },
    )
    if tokenizer is not None:
        tokenizer.save_pretrained(transformer)

    modules = [{"idx": 0, "name": "0", "path": TRANSFORMER_FOLDER, "type": _MODULE_TYPES["Transformer"]}]

    def add(kind: str) -> Path:
        index = len(modules)
        path = f"{index}_{kind}"
        modules.append({"idx": index, "name": str(index), "path": path, "type": _MODULE_TYPES[kind]})
        (folder / path).mkdir(exist_ok=True)
        return folder / path

    st_mode = next(mode for mode, (ours, _) in _POOLING.items() if ours == config.pooling)
    pooling = {"word_embedding_dimension": config.hidden_size}
    pooling.update({key: mode == st_mode for mode, (_, key) in _POOLING.items()})
    pooling["include_prompt"] = config.include_prompt
    _write_json(add("Pooling") / "config.json", pooling)
    dense_layers = [
        (spec, {k: v.detach() for k, v in projection.linear.state_dict().items()})
        for projection, spec in zip(model.projections, config.projections, strict=True)
    ]
    if config.truncate_dim is not None:
        # sentence-transformers saves no truncate_dim; a Dense layer holding the first rows of the identity matrix
        # (no bias, no activation) cuts the embedding exactly, so its pipeline gives the same vectors.
        full = dense_layers[-1][0]["out_features"] if dense_layers else config.hidden_size
        spec = {"in_features": full, "out_features": config.truncate_dim, "bias": False, "activation": "identity"}
        dense_layers.append((spec, {"weight": torch.eye(full)[: config.truncate_dim]}))
    for spec, weights in dense_layers:
        dense = add("Dense")
        _write_json(
            dense / "config.json",
            {
                "in_features": spec["in_features"],
                "out_features": spec["out_features"],
                "bias": spec["bias"],
                "activation_function": _ACTIVATIONS[spec["activation"]],
            },
        )
        state = {f"linear.{k}": v.contiguous().cpu() for k, v in weights.items()}
        save_file(state, str(dense / "model.safetensors"), metadata={"format": "pt"})
    if config.normalize:
        _write_json(add("Normalize") / "config.json", {})
    _write_json(folder / "modules.json", modules)

    import transformers

    _write_json(
        folder / "config_sentence_transformers.json",
        {
            # The oldest sentence-transformers that reads every field below (similarity_fn_name came in 3.0).
            "__version__": {
                "sentence_transformers": "3.0.0",
                "transformers": transformers.__version__,
                "pytorch": torch.__version__,
            },
            "model_type": "SentenceTransformer",
            "prompts": dict(config.prompts or {}),
            "default_prompt_name": config.default_prompt_name,
            "similarity_fn_name": config.similarity,
        },
    )


def write_weights_index(
    folder: str | os.PathLike, encoder_index: dict[str, str], head: dict[str, torch.Tensor]
) -> None:
    """Write our own parameters to `HEAD_WEIGHTS_FILE` (when there are any) and the index that maps every parameter
    name to its file, so `from_pretrained(folder)` reads the encoder from the Transformer folder."""
    folder = Path(folder)
    weight_map = dict(encoder_index)
    if head:
        state = {k: v.detach().contiguous().cpu() for k, v in head.items()}
        save_file(state, str(folder / HEAD_WEIGHTS_FILE), metadata={"format": "pt"})
        weight_map.update({name: HEAD_WEIGHTS_FILE for name in state})
    total = sum(os.path.getsize(folder / name) for name in set(weight_map.values()))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    _write_json(folder / WEIGHTS_INDEX_FILE, index)


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


__all__ = [
    "SentenceTransformersFormatError",
    "SentenceTransformersLayout",
    "has_layout",
    "read_layout",
    "save_pretrained",
    "write_layout",
    "write_weights_index",
]
