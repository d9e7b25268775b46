"""Sparse siamese encoder configuration (learned term weights: SPLADE and inference-free SPLADE; CSR, a sparse top-k
autoencoder over a dense model's sentence embedding).

This file is copied next to the weights when a model is saved, so it must import only public libraries and its
remote-code siblings (text_encoding.py): Hub users load it as remote code with `trust_remote_code=True`, without
hf_siamese installed.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .text_encoding import check_encoder_config, max_tokens

SPARSE_ARCHITECTURES = ("splade", "inference_free", "csr")
CSR_FIELDS = ("hidden_dim", "k", "k_aux")
SPARSE_POOLINGS = ("max", "sum")
# How a vocabulary logit becomes a term weight: SPLADE's log(1 + ReLU(x)); "log1p_log1p_relu" applies log1p once more
# (sentence-transformers' SpladePooling names these "relu" and "log1p_relu").
SPARSE_ACTIVATIONS = ("log1p_relu", "log1p_log1p_relu")


class SparseSiameseConfig(PreTrainedConfig):
    r"""
    Configuration of a [`SparseSiameseModel`]: a masked-language-model encoder whose vocabulary logits become one
    weight per vocabulary term (a sparse vector as wide as the vocabulary), scored by dot product.

    Everything that decides the sparse vector lives here, so a saved `config.json` alone reproduces it.

    Attributes:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Config of the masked-language model (`AutoModelForMaskedLM`: bert, distilbert, roberta, ...); defaults to
            a `BertConfig()`.
        architecture (`str`, *optional*, defaults to `"splade"`):
            `"splade"`: queries and documents both through the encoder; `"inference_free"`: documents through the
            encoder, queries through a table of one weight per vocabulary term (`query_weights`, a model parameter),
            so a query costs a tokenization and a lookup, no encoder pass; `"csr"` (Contrastive Sparse
            Representation): a dense model's sentence embedding through a top-k sparse autoencoder, vectors
            `hidden_dim` wide (latent ids, not vocabulary terms).
        pooling (`str`, *optional*, defaults to `"max"`):
            How a text's per-token term weights become its vector: `"max"` over the tokens (SPLADE v2 and later) or
            `"sum"` (the first SPLADE).
        activation (`str`, *optional*, defaults to `"log1p_relu"`):
            `"log1p_relu"`: a term's weight is log(1 + ReLU(logit)); `"log1p_log1p_relu"`: log1p of that once more.
        max_active_dims (`int`, *optional*):
            Keep only this many largest weights of each vector (None: every weight above zero).
        prompts (`dict[str, str]`, *optional*):
            Text put before a query (`"query"`) or a document (`"document"`) before tokenizing.
        max_seq_length (`int`, *optional*):
            Texts are cut to this many tokens (None: the encoder's position limit).
        head_note (`str`, *optional*):
            Where the masked-language head's weights came from, for the model card (e.g. a fresh transform over the
            encoder's own word embeddings, for an encoder saved without one).
        query_ignore_ids (`list[int]`, *optional*):
            Token ids an inference-free query vector leaves out (the tokenizer's special tokens: [CLS], [SEP], ...),
            so a query tokenized with or without them gets the same vector.
    """

    model_type = "siamese-sparse"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder_config: dict | PreTrainedConfig | None = None
    architecture: str = "splade"
    pooling: str = "max"
    activation: str = "log1p_relu"
    max_active_dims: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    max_seq_length: int | None = None
    head_note: str | None = None
    query_ignore_ids: list[int] = field(default_factory=list)
    dense_config: dict | None = None
    hidden_dim: int | None = None
    k: int | None = None
    k_aux: int | None = None
    normalize: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        if self.dense_config is not None and not isinstance(self.dense_config, dict):
            to_dict = getattr(self.dense_config, "to_dict", None)  # a SiameseBertConfig
            self.dense_config = to_dict() if callable(to_dict) else self.dense_config
        check_encoder_config("SparseSiameseConfig", self.encoder_config)
        super().__post_init__(**kwargs)
        self.validate_sparse_fields()

    def validate_sparse_fields(self) -> None:
        """Raise `ValueError` naming the field and the accepted values for anything out of range."""
        for name, accepted in (
            ("architecture", SPARSE_ARCHITECTURES),
            ("pooling", SPARSE_POOLINGS),
            ("activation", SPARSE_ACTIVATIONS),
        ):
            if getattr(self, name) not in accepted:
                raise ValueError(f"SparseSiameseConfig: {name}={getattr(self, name)!r} is not one of {list(accepted)}.")
        for name in ("max_active_dims", "max_seq_length"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"SparseSiameseConfig: {name}={value!r} must be a positive whole number or None.")
        if not isinstance(self.prompts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.prompts.items()
        ):
            raise ValueError(f"SparseSiameseConfig: prompts={self.prompts!r} must map names to prompt strings.")
        self._validate_csr_fields()

    def _validate_csr_fields(self) -> None:
        if self.architecture != "csr":
            for name in (*CSR_FIELDS, "dense_config"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"SparseSiameseConfig: {name}={getattr(self, name)!r} is a CSR setting; "
                        f"architecture={self.architecture!r} takes none (use architecture='csr')."
                    )
            if self.normalize is not False:
                raise ValueError(
                    f"SparseSiameseConfig: normalize={self.normalize!r} is a CSR setting (architecture='csr')."
                )
            return
        dense = self.dense_config
        if not isinstance(dense, dict) or not isinstance(dense.get("encoder_config"), dict | PreTrainedConfig):
            raise ValueError(
                f"SparseSiameseConfig: dense_config={dense!r}; architecture='csr' needs the dense model's config "
                "(a SiameseBertConfig, or its to_dict() with an encoder_config)."
            )
        if not isinstance(self.normalize, bool):
            raise ValueError(f"SparseSiameseConfig: normalize={self.normalize!r} must be True or False.")
        size = self.dense_size
        defaults = {"hidden_dim": 4 * size, "k": max(size // 4, 1), "k_aux": max(size // 2, 1)}
        for name in CSR_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, defaults[name])
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SparseSiameseConfig: {name}={value!r} must be a positive whole number.")
        for name in ("k", "k_aux", "max_active_dims"):
            value = getattr(self, name)
            if value is not None and value > self.hidden_dim:
                raise ValueError(
                    f"SparseSiameseConfig: {name}={value} exceeds hidden_dim={self.hidden_dim} (the latents to "
                    "pick from)."
                )

    @property
    def dense_size(self) -> int:
        """CSR: the width of the dense model's sentence embedding (its truncate_dim, else its last projection's
        out_features, else its encoder's hidden size)."""
        dense = self.dense_config or {}
        if dense.get("truncate_dim"):
            return int(dense["truncate_dim"])
        if dense.get("projections"):
            return int(dense["projections"][-1]["out_features"])
        encoder = dense.get("encoder_config") or {}
        encoder = encoder if isinstance(encoder, dict) else encoder.to_dict()
        return int(encoder.get("hidden_size") or encoder["dim"])

    @property
    def vector_size(self) -> int:
        """The width of the sparse vectors: `hidden_dim` for CSR, else the encoder's vocabulary size."""
        return int(self.hidden_dim) if self.architecture == "csr" else self.vocab_size_of_encoder

    @property
    def vocab_size_of_encoder(self) -> int:
        """The width of the sparse vectors: the encoder's vocabulary size."""
        return int(self.encoder_config.vocab_size)

    @property
    def effective_max_seq_length(self) -> int:
        """Texts are cut to this many tokens: `max_seq_length`, at most the encoder's positions (less RoBERTa's
        offset), 512 where neither says."""
        return max_tokens(self.encoder_config, self.max_seq_length)

    # What the training collator reads from a model's config (a sparse model has no classifier head and keeps case).
    classifier_head = False
    do_lower_case = False


__all__ = ["CSR_FIELDS", "SPARSE_ACTIVATIONS", "SPARSE_ARCHITECTURES", "SPARSE_POOLINGS", "SparseSiameseConfig"]
