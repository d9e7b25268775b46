"""sentence-transformers' `MultiVectorEncoder` layout (v6), both ways, for `MultiVectorModel`.

The folder (modules.json): a `Transformer` at the root (`config.json`, `model.safetensors`, the tokenizer, and
`sentence_bert_config.json` with `query_length`, `document_length` and `query_expansion` {strategy, attend, token,
length}), a token-level `Dense` (`1_Dense/`: `config.json` with in/out features, bias, an identity activation,
`module_input_name` "token_embeddings"; `model.safetensors` with `linear.weight` [and `linear.bias`]), a
`MultiVectorMask` (`2_MultiVectorMask/config.json`: `skiplist_words`, `skiplist_tasks`, `keep_only_token_ids`) and a
token-level `Normalize` (`3_Normalize/`); `config_sentence_transformers.json` has `model_type` "MultiVectorEncoder",
the prompts (ColBERT's query / document markers) and `similarity_fn_name` (maxsim, meanmaxsim or null).

Read (`read_multivector_encoder`) and write (`write_multivector_encoder`) so `MultiVectorEncoder(folder)` and the
model give the same token vectors and MaxSim scores. The format is learned from sentence-transformers' source; no
code of it is used here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..storage import move_files_into, staging_folder

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
ST_MODEL_TYPE = "MultiVectorEncoder"
# module type -> our name for it: the class paths of sentence-transformers 6 and the older ones it still reads.
_TYPES = {
    "sentence_transformers.base.modules.transformer.Transformer": "transformer",
    "sentence_transformers.models.Transformer": "transformer",
    "sentence_transformers.base.modules.dense.Dense": "dense",
    "sentence_transformers.models.Dense": "dense",
    "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask": "mask",
    "sentence_transformers.base.modules.normalize.Normalize": "normalize",
    "sentence_transformers.models.Normalize": "normalize",
}
_WRITTEN_TYPES = {
    "transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "dense": "sentence_transformers.base.modules.dense.Dense",
    "mask": "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask",
    "normalize": "sentence_transformers.base.modules.normalize.Normalize",
}
_IDENTITY = ("torch.nn.modules.linear.Identity", "torch.nn.Identity")
TOKEN_LEVEL = "token_embeddings"


def is_multivector_encoder_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder in sentence-transformers' MultiVectorEncoder layout."""
    folder = Path(path)
    config = folder / ST_CONFIG_FILE
    if not folder.is_dir() or not (folder / MODULES_FILE).is_file() or not config.is_file():
        return False
    return _json(config).get("model_type") == ST_MODEL_TYPE


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _modules(folder: Path) -> dict[str, Path]:
    """modules.json -> {our name: its folder}, checked to be transformer, dense, mask[, normalize] in that order."""
    where = folder / MODULES_FILE
    entries = _json(where)
    kinds = [_TYPES.get(entry.get("type", "")) for entry in entries]
    if kinds not in (["transformer", "dense", "mask", "normalize"], ["transformer", "dense", "mask"]):
        found = [entry.get("type") for entry in entries]
        raise ValueError(
            f"{where}: modules {found}; read: a Transformer, a token-level Dense, a MultiVectorMask and (optionally) "
            "a token-level Normalize, in that order (no token pooling, no model without a projection)"
        )
    return {kind: folder / entry.get("path", "") for kind, entry in zip(kinds, entries, strict=True)}


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise ValueError(f"{folder}: no model.safetensors (only safetensors weights are read, never pickles)")
    return load_file(str(weights))


def read_multivector_encoder(path: str | os.PathLike, **kwargs: Any) -> Any:
    """A `MultiVectorModel` (its tokenizer as `model.tokenizer`) from a MultiVectorEncoder folder: the same token
    vectors as `MultiVectorEncoder(path).encode_query / encode_document`. `kwargs` go to `AutoModel.from_pretrained`
    for the encoder."""
    from transformers import AutoModel, AutoTokenizer

    from ..modeling.configuration_multivector import MultiVectorConfig
    from ..modeling.modeling_multivector import MultiVectorModel, skiplist_ids_of

    folder = Path(path)
    modules = _modules(folder)
    transformer_settings = _json(modules["transformer"] / TRANSFORMER_CONFIG_FILE)
    task = transformer_settings.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise ValueError(f"{modules['transformer']}: transformer_task {task!r}; read: 'feature-extraction'")
    dense = _json(modules["dense"] / "config.json")
    problems = []
    if dense.get("activation_function", "torch.nn.modules.activation.Tanh") not in _IDENTITY:
        problems.append(f"activation_function={dense.get('activation_function')!r} (read: an identity)")
    if dense.get("use_residual", False):
        problems.append("use_residual=True (read: none)")
    if (dense.get("module_input_name"), dense.get("module_output_name", TOKEN_LEVEL)) != (TOKEN_LEVEL, TOKEN_LEVEL):
        problems.append(f"module_input_name={dense.get('module_input_name')!r} (read: {TOKEN_LEVEL!r})")
    if "normalize" in modules:
        normalize = (
            _json(modules["normalize"] / "config.json") if (modules["normalize"] / "config.json").is_file() else {}
        )
        if normalize.get("module_input_name", "sentence_embedding") != TOKEN_LEVEL:
            problems.append(
                f"Normalize module_input_name={normalize.get('module_input_name')!r} (read: {TOKEN_LEVEL!r})"
            )
    mask = _json(modules["mask"] / "config.json")
    if mask.get("keep_only_token_ids"):
        problems.append(f"MultiVectorMask keep_only_token_ids={mask['keep_only_token_ids']!r} (read: none)")
    if problems:
        raise ValueError(f"{folder}: cannot read {'; '.join(problems)}")
    projection = _weights(modules["dense"])
    st_config = _json(folder / ST_CONFIG_FILE)
    encoder = AutoModel.from_pretrained(modules["transformer"], **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(modules["transformer"])
    expansion = transformer_settings.get("query_expansion") or {}
    token = expansion.get("token")
    expansion_id = tokenizer.convert_tokens_to_ids(token) if token is not None else None
    limit = transformer_settings.get("max_seq_length") or getattr(tokenizer, "model_max_length", None)
    skiplist_tasks = mask.get("skiplist_tasks", ["document"])
    config = MultiVectorConfig(
        encoder_config=encoder.config, embedding_dim=int(dense["out_features"]),
        projection_bias=bool(dense.get("bias", True)), normalize="normalize" in modules,
        prompts={k: v for k, v in (st_config.get("prompts") or {}).items() if v and k in ("query", "document")},
        query_length=transformer_settings.get("query_length"),
        document_length=transformer_settings.get("document_length"),
        max_seq_length=limit if isinstance(limit, int) and limit < 100_000 else None,
        query_expansion=expansion.get("strategy"), query_expansion_length=int(expansion.get("length") or 32),
        query_expansion_attend=bool(expansion.get("attend", False)),
        query_expansion_token_id=expansion_id if expansion_id is not None else tokenizer.mask_token_id,
        skiplist_ids=skiplist_ids_of(tokenizer, mask.get("skiplist_words") or []),
        skiplist_tasks=[skiplist_tasks] if isinstance(skiplist_tasks, str) else list(skiplist_tasks),
        similarity=st_config.get("similarity_fn_name") or "maxsim",
    )  # fmt: skip
    if not expansion:
        config.query_expansion_token_id = None
    model = MultiVectorModel(config, encoder=encoder)
    state = {"projection.weight": projection["linear.weight"]}
    if config.projection_bias:
        state["projection.bias"] = projection["linear.bias"]
    with torch.no_grad():
        for name, value in state.items():
            model.get_parameter(name).copy_(value.to(model.get_parameter(name).dtype))
    model.tokenizer = tokenizer
    model.config.name_or_path = str(folder)
    return model


def write_multivector_encoder(model: Any, path: str | os.PathLike, tokenizer: Any = None) -> Path:
    """Write `model` (a `MultiVectorModel`) in sentence-transformers' MultiVectorEncoder layout to the folder `path`,
    whole or not at all (staged, then moved in): `MultiVectorEncoder(path)` then gives the same token vectors and
    MaxSim scores."""
    tokenizer = model._resolve_tokenizer(tokenizer)
    config = model.config
    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    stage = staging_folder(target / "multivector_encoder", "save")
    try:
        model.encoder.save_pretrained(stage)
        tokenizer.save_pretrained(stage)
        if config.max_seq_length:  # sentence-transformers reads the limit from the tokenizer's config
            _set_json(stage / "tokenizer_config.json", model_max_length=config.max_seq_length)
        expansion = None
        if config.query_expansion is not None:
            token = None
            if config.query_expansion_token_id is not None:
                token = tokenizer.convert_ids_to_tokens(int(config.query_expansion_token_id))
            expansion = {
                "strategy": config.query_expansion, "attend": config.query_expansion_attend, "token": token,
                "length": config.query_expansion_length,
            }  # fmt: skip
        _write_json(
            stage / TRANSFORMER_CONFIG_FILE,
            {
                "transformer_task": "feature-extraction",
                "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
                "module_output_name": TOKEN_LEVEL,
                "query_length": config.query_length,
                "document_length": config.document_length,
                "query_expansion": expansion,
            },
        )
        modules = [{"idx": 0, "name": "0", "path": "", "type": _WRITTEN_TYPES["transformer"]}]
        dense = stage / "1_Dense"
        dense.mkdir()
        weights = {"linear.weight": model.projection.weight.detach().float().cpu().contiguous()}
        if model.projection.bias is not None:
            weights["linear.bias"] = model.projection.bias.detach().float().cpu().contiguous()
        save_file(weights, str(dense / "model.safetensors"), metadata={"format": "pt"})
        _write_json(
            dense / "config.json",
            {
                "in_features": config.hidden_size_of_encoder, "out_features": config.embedding_dim,
                "bias": config.projection_bias, "activation_function": _IDENTITY[0],
                "module_input_name": TOKEN_LEVEL, "module_output_name": TOKEN_LEVEL,
            },
        )  # fmt: skip
        mask = stage / "2_MultiVectorMask"
        mask.mkdir()
        words = tokenizer.convert_ids_to_tokens([int(i) for i in config.skiplist_ids])
        _write_json(
            mask / "config.json",
            {"skiplist_words": words, "skiplist_tasks": list(config.skiplist_tasks), "keep_only_token_ids": None},
        )
        modules.append({"idx": 1, "name": "1", "path": "1_Dense", "type": _WRITTEN_TYPES["dense"]})
        modules.append({"idx": 2, "name": "2", "path": "2_MultiVectorMask", "type": _WRITTEN_TYPES["mask"]})
        if config.normalize:
            (stage / "3_Normalize").mkdir()
            _write_json(
                stage / "3_Normalize" / "config.json",
                {"module_input_name": TOKEN_LEVEL, "module_output_name": TOKEN_LEVEL},
            )
            modules.append({"idx": 3, "name": "3", "path": "3_Normalize", "type": _WRITTEN_TYPES["normalize"]})
        _write_json(stage / MODULES_FILE, modules)
        prompts = {"query": "", "document": "", **(config.prompts or {})}
        _write_json(
            stage / ST_CONFIG_FILE,
            {
                "model_type": ST_MODEL_TYPE, "prompts": prompts, "default_prompt_name": None,
                "similarity_fn_name": config.similarity,
            },
        )  # fmt: skip
        move_files_into(stage, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target


def load_multivector_model(
    path: str, *, max_seq_length: int | None = None, device: str | torch.device | None = None
) -> tuple[Any, Any]:
    """`(model, tokenizer)` of a multi-vector model for inference, in eval mode on `device`: a MultiVectorEncoder
    folder (read here) or a hf-siamese multi-vector folder / Hub id (`AutoModel`). `max_seq_length` cuts texts
    without a length of their own shorter than the config says."""
    from .loading import load_kind_checkpoint

    return load_kind_checkpoint(
        path, "multi-vector", read_multivector_encoder if is_multivector_encoder_folder(path) else None,
        max_seq_length=max_seq_length, device=device,
    )  # fmt: skip


def _set_json(path: Path, **values: Any) -> None:
    _write_json(path, {**_json(path), **values})


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


__all__ = [
    "is_multivector_encoder_folder",
    "load_multivector_model",
    "read_multivector_encoder",
    "write_multivector_encoder",
]
