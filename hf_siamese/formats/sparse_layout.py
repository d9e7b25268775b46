"""sentence-transformers' `SparseEncoder` layout, both ways, for `SparseSiameseModel`.

Read (`read_sparse_encoder`): a SPLADE folder (modules.json: a fill-mask `Transformer` (or the older `MLMTransformer`)
then `SpladePooling`) or an inference-free one (one `Router` module: a `SparseStaticEmbedding` query route and a
Transformer + SpladePooling document route, `router_config.json`) or a CSR one (a dense model's modules then a
SparseAutoEncoder: sparse_csr_layout.py). Write (`write_sparse_encoder`): the same files, so
that `SparseEncoder(folder)` gives the same vectors. The format is learned from sentence-transformers' source; no
code of it is used here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..storage import move_files_into, staging_folder
from .sparse_csr_layout import is_csr_modules, read_csr_encoder, write_csr_encoder

MODULES_FILE = "modules.json"
ROUTER_FILE = "router_config.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
# module type -> our name for it; the class paths of sentence-transformers 6 and the older ones it still reads.
_TYPES = {
    "sentence_transformers.base.modules.transformer.Transformer": "transformer",
    "sentence_transformers.models.Transformer": "transformer",
    "sentence_transformers.sparse_encoder.modules.mlm_transformer.MLMTransformer": "transformer",
    "sentence_transformers.sparse_encoder.models.MLMTransformer": "transformer",
    "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling": "splade_pooling",
    "sentence_transformers.sparse_encoder.models.SpladePooling": "splade_pooling",
    "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding": "static",
    "sentence_transformers.sparse_encoder.models.SparseStaticEmbedding": "static",
    "sentence_transformers.base.modules.router.Router": "router",
    "sentence_transformers.models.Router": "router",
    "sentence_transformers.models.Asym": "router",
}
# SpladePooling's activation names -> ours (sparse_layout writes the first spelling)
_ACTIVATIONS = {"relu": "log1p_relu", "log1p_relu": "log1p_log1p_relu"}
_WRITTEN_TYPES = {
    "transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "splade_pooling": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling",
    "static": "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding",
    "router": "sentence_transformers.base.modules.router.Router",
}


def is_sparse_encoder_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder in sentence-transformers' SparseEncoder layout."""
    folder = Path(path)
    config = folder / ST_CONFIG_FILE
    if not (folder / MODULES_FILE).is_file() or not config.is_file():
        return False
    return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "SparseEncoder"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _kind(entry: dict[str, Any], where: Path) -> str:
    kind = _TYPES.get(entry.get("type", ""))
    if kind is None:
        raise ValueError(
            f"{where}: module {entry.get('type')!r} is not one a SPLADE or inference-free SparseEncoder holds "
            f"(accepted: {', '.join(sorted(set(_TYPES)))}, or a dense model's modules then a SparseAutoEncoder)"
        )
    return kind


def read_sparse_encoder(path: str | os.PathLike, **kwargs: Any) -> Any:
    """A `SparseSiameseModel` (and its tokenizer, as `model.tokenizer`) from a SparseEncoder folder: the same
    vectors as `SparseEncoder(path).encode(...)` (queries: `encode_query`)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ..modeling.configuration_sparse import SparseSiameseConfig
    from ..modeling.modeling_sparse import SparseSiameseModel

    folder = Path(path)
    modules = _json(folder / MODULES_FILE)
    if is_csr_modules(modules):
        return read_csr_encoder(folder, modules, _json(folder / ST_CONFIG_FILE), **kwargs)
    kinds = [_kind(entry, folder / MODULES_FILE) for entry in modules]
    query_weights = None
    if kinds == ["router"]:
        router_folder = folder / modules[0].get("path", "")
        router = _json(router_folder / ROUTER_FILE)
        structure, types = router["structure"], router["types"]
        document = [(name, _kind({"type": types[name]}, router_folder / ROUTER_FILE)) for name in structure["document"]]
        query = [(name, _kind({"type": types[name]}, router_folder / ROUTER_FILE)) for name in structure["query"]]
        if [k for _, k in document] != ["transformer", "splade_pooling"] or [k for _, k in query] != ["static"]:
            raise ValueError(
                f"{router_folder / ROUTER_FILE}: routes {structure!r}; read: a query route of one "
                "SparseStaticEmbedding "
                "and a document route of a Transformer and a SpladePooling"
            )
        transformer, pooling = (router_folder / name for name, _ in document)
        static = router_folder / query[0][0]
        query_weights = load_file(str(static / "model.safetensors"))["weight"]
        architecture = "inference_free"
    elif kinds == ["transformer", "splade_pooling"]:
        transformer, pooling = (folder / entry.get("path", "") for entry in modules)
        architecture = "splade"
    else:
        raise ValueError(f"{folder / MODULES_FILE}: modules {kinds}; read: transformer + splade_pooling, or a router")
    settings = _json(pooling / "config.json")
    strategy, activation = settings.get("pooling_strategy", "max"), settings.get("activation_function", "relu")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{pooling / 'config.json'}: activation_function {activation!r}; read: {list(_ACTIVATIONS)}")
    st_config = _json(folder / ST_CONFIG_FILE)
    encoder = AutoModelForMaskedLM.from_pretrained(transformer, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(transformer)
    limit = getattr(tokenizer, "model_max_length", None)
    prompts = {k: v for k, v in (st_config.get("prompts") or {}).items() if v}
    config = SparseSiameseConfig(
        encoder_config=encoder.config, architecture=architecture, pooling=strategy,
        activation=_ACTIVATIONS[activation], max_active_dims=st_config.get("max_active_dims"), prompts=prompts,
        max_seq_length=limit if isinstance(limit, int) and limit < 100_000 else None,
        query_ignore_ids=sorted(set(tokenizer.all_special_ids)),
    )  # fmt: skip
    model = SparseSiameseModel(config, encoder=encoder)
    if query_weights is not None:
        with torch.no_grad():
            model.query_weights.copy_(query_weights.to(model.query_weights.dtype))
    model.tokenizer = tokenizer
    model.config.name_or_path = str(folder)
    return model


def write_sparse_encoder(model: Any, path: str | os.PathLike, tokenizer: Any = None) -> Path:
    """Write `model` (a `SparseSiameseModel`) in sentence-transformers' SparseEncoder layout to the folder `path`,
    whole or not at all (staged, then moved in): `SparseEncoder(path)` then gives the same vectors."""
    tokenizer = model._resolve_tokenizer(tokenizer)
    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    stage = staging_folder(target / "sparse_encoder", "save")
    try:
        if model.config.architecture == "csr":
            _write_json(stage / MODULES_FILE, write_csr_encoder(model, stage, tokenizer))
            _write_st_config(model, stage)
            move_files_into(stage, target)
            return target
        inference_free = model.config.architecture == "inference_free"
        prefix = "document_" if inference_free else ""
        transformer = stage / (f"{prefix}0_Transformer" if inference_free else "")
        pooling = stage / f"{prefix}1_SpladePooling"
        transformer.mkdir(exist_ok=True)
        pooling.mkdir()
        model.encoder.save_pretrained(transformer)
        tokenizer.save_pretrained(transformer)
        if model.config.max_seq_length:  # sentence-transformers reads the limit from the tokenizer's config
            _set_json(transformer / "tokenizer_config.json", model_max_length=model.config.max_seq_length)
        _write_json(transformer / "sentence_bert_config.json", _transformer_config())
        names = {"log1p_relu": "relu", "log1p_log1p_relu": "log1p_relu"}
        _write_json(
            pooling / "config.json",
            {
                "pooling_strategy": model.config.pooling,
                "activation_function": names[model.config.activation],
                "embedding_dimension": model.config.vocab_size_of_encoder,
            },
        )
        if inference_free:
            _write_router(model, stage, tokenizer)
            modules = [{"idx": 0, "name": "0", "path": "", "type": _WRITTEN_TYPES["router"]}]
        else:
            modules = [
                {"idx": 0, "name": "0", "path": "", "type": _WRITTEN_TYPES["transformer"]},
                {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": _WRITTEN_TYPES["splade_pooling"]},
            ]
        _write_json(stage / MODULES_FILE, modules)
        _write_st_config(model, stage)
        move_files_into(stage, target)
    finally:
        import shutil

        shutil.rmtree(stage, ignore_errors=True)
    return target


def _write_st_config(model: Any, stage: Path) -> None:
    prompts = {"query": "", "document": "", **(model.config.prompts or {})}
    st_config: dict[str, Any] = {"model_type": "SparseEncoder", "prompts": prompts, "default_prompt_name": None}
    st_config["similarity_fn_name"] = "dot"
    if model.config.max_active_dims is not None:
        st_config["max_active_dims"] = model.config.max_active_dims
    _write_json(stage / ST_CONFIG_FILE, st_config)


def _write_router(model: Any, stage: Path, tokenizer: Any) -> None:
    static = stage / "query_0_SparseStaticEmbedding"
    static.mkdir()
    weight = model.query_weights.detach().float().cpu().contiguous()
    save_file({"weight": weight}, str(static / "model.safetensors"), metadata={"format": "pt"})
    _write_json(static / "config.json", {"frozen": False})
    tokenizer.save_pretrained(static)
    if model.config.max_seq_length:
        _set_json(static / "tokenizer_config.json", model_max_length=model.config.max_seq_length)
    _write_json(
        stage / ROUTER_FILE,
        {
            "types": {
                "query_0_SparseStaticEmbedding": _WRITTEN_TYPES["static"],
                "document_0_Transformer": _WRITTEN_TYPES["transformer"],
                "document_1_SpladePooling": _WRITTEN_TYPES["splade_pooling"],
            },
            "structure": {
                "query": ["query_0_SparseStaticEmbedding"],
                "document": ["document_0_Transformer", "document_1_SpladePooling"],
            },
            "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}},
        },
    )


def _transformer_config() -> dict[str, Any]:
    return {
        "transformer_task": "fill-mask",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
        "module_output_name": "token_embeddings",
    }


def _set_json(path: Path, **values: Any) -> None:
    _write_json(path, {**_json(path), **values})


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


__all__ = ["is_sparse_encoder_folder", "read_sparse_encoder", "write_sparse_encoder"]
