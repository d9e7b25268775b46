"""Loading a model for inference from any checkpoint we read: a hf-siamese folder, a sentence-transformers
checkpoint or a plain encoder (local folder or Hub id), onto the device it will run on: `load_model` (a dense model)
and `load_sparse_model` (a learned-sparse one), the loaders the model-kind registry names (`modeling.kinds`).

The commands `encode`, `index`, `search`, `mine` and `eval` call them once each.
"""

from __future__ import annotations

from typing import Any

import torch

from ..modeling.checkpoints import check_model_source
from ..modeling.configuration_siamese import SiameseBertConfig
from ..modeling.devices import resolve_device
from ..modeling.kinds import get_kind, kind_of_config, kind_of_model, kind_of_path
from ..modeling.modeling_siamese import SiameseBertModel
from .sentence_transformers_read import has_layout


def encoder_defaults(path: str, pooling: str | None, normalize: bool | None) -> dict[str, Any]:
    """`from_encoder` arguments for `pooling` / `normalize`: what was given, else what a sentence-transformers
    checkpoint says (by leaving them out), else mean pooling and normalization for a plain encoder."""
    if not has_layout(path):  # from_encoder reads the layout itself; here only whether there is one
        pooling = pooling or "mean"
        normalize = True if normalize is None else normalize
    return {k: v for k, v in (("pooling", pooling), ("normalize", normalize)) if v is not None}


def source_max_seq_length(path: str) -> int | None:
    """The token limit a sentence-transformers checkpoint keeps (`sentence_bert_config.json`, or its tokenizer's
    `model_max_length`), for a sparse or multi-vector model built from it; None for a plain encoder."""
    from .sentence_transformers_read import read_layout

    try:
        layout = read_layout(path)
    except (OSError, ValueError):  # not a readable sentence-transformers layout: the model's own limit applies
        return None
    return None if layout is None else layout.settings.get("max_seq_length")


def load_model(
    path: str,
    *,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    quantize: str | None = None,
    device: str | torch.device | None = None,
) -> tuple[SiameseBertModel, Any]:
    """`(model, tokenizer)` for inference, the model in eval mode on `device`.

    A hf-siamese checkpoint keeps its own pooling and normalization (its config decides the embedding; giving
    `pooling` / `normalize` is an error); a sentence-transformers checkpoint brings its own (overridden by them when
    given); a plain encoder is wrapped with `pooling` (default mean) and `normalize` (default on).

    Args:
        device: `"auto"` / `None` (CUDA when available, this process's GPU under `accelerate launch`; else MPS; else
            the CPU), or an explicit device; see `hf_siamese.modeling.devices.resolve_device`.
        quantize: `"int8"`: a dynamically quantized int8 copy (`hf_siamese.quantize`), which runs on the CPU only.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    path = check_model_source(path)
    # An int8 copy runs on the CPU only: `auto` means the CPU for it.
    target = torch.device("cpu") if quantize is not None and device in (None, "auto") else resolve_device(device)
    if quantize is not None and target.type != "cpu":
        raise ValueError(
            f"quantize={quantize!r} makes an int8 copy for the CPU, but the device is {target}; use device='cpu' "
            "(--device cpu), or bfloat16 / float16 on a GPU (--dtype)."
        )
    config = AutoConfig.from_pretrained(path)
    kind = kind_of_path(path) or kind_of_config(config)
    if kind == "cross-encoder":
        raise ValueError(
            f"{path!r} is a cross-encoder ({config.architectures[0]}: it scores (query, document) pairs), not a "
            "bi-encoder: load it with hf_siamese.CrossEncoder.from_pretrained, or pass a sentence-embedding model here"
        )
    if kind == "multi-vector":
        raise ValueError(
            f"{path!r} is a multi-vector (ColBERT-style) model: one vector per token, scored by MaxSim, not one "
            "embedding per text; load it with hf_siamese.formats.multivector_layout.load_multivector_model"
        )
    if isinstance(config, SiameseBertConfig):
        given = [name for name, value in (("pooling", pooling), ("normalize", normalize)) if value is not None]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise ValueError(
                f"{' and '.join(given)} only {verb} to a plain encoder; {path!r} is a hf-siamese model, whose "
                f"config decides its embeddings (pooling={config.pooling}, normalize={config.normalize})"
            )
        model = AutoModel.from_pretrained(path)
        if max_seq_length is not None:
            model.config.max_seq_length = max_seq_length
    else:
        model = SiameseBertModel.from_encoder(
            path, **encoder_defaults(path, pooling, normalize), max_seq_length=max_seq_length
        )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    if quantize is not None:
        from ..modeling.quantization import quantize as quantize_model

        return quantize_model(model, quantize), tokenizer
    return model.to(target), tokenizer


def load_sparse_model(
    path: str, *, max_seq_length: int | None = None, device: str | torch.device | None = None
) -> tuple[Any, Any]:
    """`(model, tokenizer)` of a learned-sparse model for inference, in eval mode on `device`: a hf-siamese sparse
    folder or Hub id (`AutoModel`), or sentence-transformers' SparseEncoder folder (SPLADE, inference-free, CSR: read
    here). `max_seq_length` cuts its texts shorter than its config says."""
    from .sparse_layout import is_sparse_encoder_folder, read_sparse_encoder

    return load_kind_checkpoint(
        path, "sparse", read_sparse_encoder if is_sparse_encoder_folder(path) else None,
        max_seq_length=max_seq_length, device=device,
    )  # fmt: skip


def load_kind_checkpoint(
    path: str,
    kind: str,
    read_layout: Any = None,
    *,
    max_seq_length: int | None = None,
    device: str | torch.device | None = None,
) -> tuple[Any, Any]:
    """`(model, tokenizer)` of a checkpoint of `kind` (a sparse or multi-vector one) for inference, in eval mode on
    `device`: read by `read_layout(path)` where it is a sentence-transformers folder (the caller tells), else through
    `AutoModel`; a model of another kind is refused, naming what it is. `max_seq_length` cuts texts without a length
    of their own shorter than the config says."""
    from transformers import AutoModel, AutoTokenizer

    path = check_model_source(path)
    if read_layout is not None:
        model = read_layout(path)
        tokenizer = model.tokenizer
    else:
        model = AutoModel.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
    if kind_of_model(model) != kind:
        raise ValueError(f"{path}: expected a {kind} model ({get_kind(kind).model_type}), got {type(model).__name__}")
    model.tokenizer = tokenizer
    if max_seq_length is not None:
        model.config.max_seq_length = max_seq_length
    return model.to(resolve_device(device)).eval(), tokenizer
