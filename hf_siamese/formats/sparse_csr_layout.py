"""sentence-transformers' CSR `SparseEncoder` layout, both ways, for a `SparseSiameseModel` of architecture "csr":
the dense model's modules (Transformer, Pooling, [Dense ...], [Normalize]) then a `SparseAutoEncoder` module
(`config.json`: input_dim, hidden_dim, k, k_aux, normalize, dead_threshold; `model.safetensors`: pre_bias,
latent_bias and the tied weight as `encoder.weight` or `decoder.linear.weight`). Learned from sentence-transformers'
source; no code of it is used here. `sparse_layout.py` dispatches here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..storage import temporary_folder

SAE_TYPE = "sentence_transformers.sparse_encoder.modules.sparse_auto_encoder.SparseAutoEncoder"
SAE_FOLDER_SUFFIX = "_SparseAutoEncoder"
# sentence-transformers' SparseAutoEncoder default; it only matters to its training (dead-latent statistics)
DEAD_THRESHOLD = 30


def is_csr_modules(modules: list[dict[str, Any]]) -> bool:
    """Whether a SparseEncoder's `modules.json` ends in a SparseAutoEncoder (a CSR model)."""
    return bool(modules) and str(modules[-1].get("type", "")).endswith(".SparseAutoEncoder")


def read_csr_encoder(folder: Path, modules: list[dict[str, Any]], st_config: dict[str, Any], **kwargs: Any) -> Any:
    """A CSR `SparseSiameseModel` from a SparseEncoder folder whose last module is a SparseAutoEncoder."""
    from transformers import AutoTokenizer

    from ..modeling.configuration_sparse import SparseSiameseConfig
    from ..modeling.modeling_siamese import SiameseBertModel
    from ..modeling.modeling_sparse import SparseSiameseModel

    sae = folder / str(modules[-1].get("path", ""))
    settings = json.loads((sae / "config.json").read_text(encoding="utf-8"))
    weights = load_file(str(sae / "model.safetensors"))
    weight = weights.get("encoder.weight", weights.get("decoder.linear.weight"))
    if weight is None or "pre_bias" not in weights or "latent_bias" not in weights:
        raise ValueError(
            f"{sae / 'model.safetensors'}: holds {sorted(weights)}; a SparseAutoEncoder needs pre_bias, latent_bias "
            "and encoder.weight (or decoder.linear.weight)"
        )
    # The dense part is a sentence-transformers model of its own: read it from a view of the folder without the
    # autoencoder module (links to the files, a modules.json without the last entry).
    with temporary_folder("view") as view:
        for entry in folder.iterdir():
            if entry.name != "modules.json" and entry != sae:
                os.symlink(entry.resolve(), view / entry.name)
        (view / "modules.json").write_text(json.dumps(modules[:-1]), encoding="utf-8")
        dense = SiameseBertModel.from_encoder(str(view), **kwargs)
    dense.config.name_or_path = str(folder)
    prompts = {k: v for k, v in (st_config.get("prompts") or {}).items() if v}
    config = SparseSiameseConfig(
        architecture="csr",
        dense_config=dense.config.to_dict(),
        hidden_dim=int(settings.get("hidden_dim", weight.shape[0])),
        k=int(settings.get("k", 8)),
        k_aux=int(settings.get("k_aux", 512)),
        normalize=bool(settings.get("normalize", False)),
        max_active_dims=st_config.get("max_active_dims"),
        prompts=prompts,
    )
    if tuple(weight.shape) != (config.hidden_dim, config.dense_size):
        raise ValueError(
            f"{sae}: weight of shape {tuple(weight.shape)}; config.json and the dense model say "
            f"({config.hidden_dim}, {config.dense_size})"
        )
    model = SparseSiameseModel(config, dense=dense)
    state = {"pre_bias": weights["pre_bias"], "latent_bias": weights["latent_bias"], "encoder.weight": weight}
    model.autoencoder.load_state_dict({k: v.float() for k, v in state.items()})
    model.tokenizer = AutoTokenizer.from_pretrained(folder)
    model.config.name_or_path = str(folder)
    return model


def write_csr_encoder(model: Any, stage: Path, tokenizer: Any) -> list[dict[str, Any]]:
    """Write a CSR model's files into the staging folder `stage`: the dense model as a sentence-transformers model
    (its encoder at the root) plus the SparseAutoEncoder module; returns the modules.json entries."""
    from .sentence_transformers_save import write_layout

    dense = model.dense
    dense.encoder.save_pretrained(stage)
    write_layout(dense, stage, tokenizer, transformer_path="")
    modules = json.loads((stage / "modules.json").read_text(encoding="utf-8"))
    index = len(modules)
    path = f"{index}{SAE_FOLDER_SUFFIX}"
    (stage / path).mkdir()
    config = model.config
    settings = {
        "input_dim": config.dense_size,
        "hidden_dim": config.hidden_dim,
        "k": config.k,
        "k_aux": config.k_aux,
        "normalize": config.normalize,
        "dead_threshold": DEAD_THRESHOLD,
    }
    (stage / path / "config.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    autoencoder = model.autoencoder
    state = {
        "pre_bias": autoencoder.pre_bias,
        "latent_bias": autoencoder.latent_bias,
        "encoder.weight": autoencoder.encoder.weight,
    }
    state = {k: v.detach().float().cpu().contiguous() for k, v in state.items()}
    state["stats_last_nonzero"] = torch.zeros(config.hidden_dim, dtype=torch.long)
    save_file(state, str(stage / path / "model.safetensors"), metadata={"format": "pt"})
    return [*modules, {"idx": index, "name": str(index), "path": path, "type": SAE_TYPE}]


__all__ = ["is_csr_modules", "read_csr_encoder", "write_csr_encoder"]
