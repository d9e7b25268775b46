"""Writing the sentence-transformers checkpoint layout next to our own files (the reading half and the format's names
are in `sentence_transformers_read.py`): `save_pretrained` saves a `SiameseBertModel` so that both
`SiameseBertModel.from_pretrained(folder)` and `SentenceTransformer(folder)` load it, with the encoder weights written
once, in the Transformer's folder, and our `config.json` reaching them through `model.safetensors.index.json`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..storage import move_files_into, replace_file, staging_folder
from .sentence_transformers_read import (
    _ACTIVATIONS,
    _MODULE_TYPES,
    _POOLING,
    HEAD_WEIGHTS_FILE,
    TRANSFORMER_FOLDER,
    WEIGHTS_INDEX_FILE,
)

logger = logging.getLogger(__name__)


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
    # Staged inside the folder (it may be a training run's output, shared with its checkpoints: not swapped whole);
    # a killed save's staging folder is removed by the next save.
    stage = staging_folder(target / _STAGE_NAME, "save")
    try:
        super_save(stage, state_dict=encoder_state, **kwargs)
        (stage / TRANSFORMER_FOLDER).mkdir()
        encoder_index = _move_encoder_weights(stage, stage / TRANSFORMER_FOLDER)
        write_weights_index(stage, encoder_index, head_state)
        write_layout(model, stage, tokenizer)
        move_files_into(stage, target, stale=_is_stale)  # the earlier save's leftovers go once the new files are in
    finally:
        shutil.rmtree(stage, ignore_errors=True)


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
        replace_file(index_path, transformer / WEIGHTS_INDEX_FILE)
    else:
        with safe_open(str(stage / "model.safetensors"), framework="pt") as handle:
            weight_map = {name: "model.safetensors" for name in handle.keys()}  # noqa: SIM118 - not a dict
    for name in set(weight_map.values()):
        replace_file(stage / name, transformer / name)
    return {key: f"{TRANSFORMER_FOLDER}/{name}" for key, name in weight_map.items()}


_STALE = re.compile(r"^(model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|siamese_head\.safetensors)$")
_MODULE_FOLDER = re.compile(r"^\d+_(Transformer|Pooling|Dense|Normalize)$")
_STAGE_NAME = "saved_model"  # staging folders are `.saved_model.save-PID-XXXXXXXX` inside the saved folder


def _is_stale(path: Path) -> bool:
    """Weight files and module folders of an earlier save that the new one does not overwrite would shadow it
    (a root `model.safetensors` wins over our index) or describe another pipeline."""
    return bool(_STALE.match(path.name)) if path.is_file() else path.is_dir() and bool(_MODULE_FOLDER.match(path.name))


def write_layout(
    model: Any, folder: str | os.PathLike, tokenizer: Any = None, transformer_path: str = TRANSFORMER_FOLDER
) -> None:
    """Write the sentence-transformers files for `model` into `folder`, where the encoder's weight files already are
    (in `transformer_path`: `TRANSFORMER_FOLDER` beside our `config.json` in a `save_pretrained` folder, or `""`, the
    root, in an exported plain sentence-transformers folder, whose weights carry the encoder's own names)."""
    folder = Path(folder)
    config = model.config
    transformer = folder / transformer_path
    config.encoder_config.to_json_file(transformer / "config.json")
    # Our save keeps the encoder's parameters under `encoder.`; the map strips that prefix when they are loaded.
    model_kwargs: dict[str, Any] = {"key_mapping": {"^encoder\\.": ""}} if transformer_path else {}
    # We drop BERT's next-sentence pooler; without this the encoder class would build one and warn it is untrained.
    # Not in an exported plain layout: sentence-transformers' ONNX backend (optimum) refuses the argument, and the
    # pooler it then builds never reaches the embedding.
    if transformer_path and getattr(model.encoder, "pooler", "absent") is None:
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

    modules = [{"idx": 0, "name": "0", "path": transformer_path, "type": _MODULE_TYPES["Transformer"]}]

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


__all__ = ["save_pretrained", "write_layout", "write_weights_index"]
