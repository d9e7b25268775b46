"""Sparse siamese encoder configuration (learned term weights: SPLADE and inference-free SPLADE).

This file is copied next to the weights when a model is saved, so it must import only public libraries:
Hub users load it as remote code with `trust_remote_code=True`, without hf_siamese installed.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

SPARSE_ARCHITECTURES = ("splade", "inference_free")
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
            so a query costs a tokenization and a lookup, no encoder pass.
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

    def __post_init__(self, **kwargs: Any) -> None:
        if isinstance(self.encoder_config, dict) and "model_type" not in self.encoder_config:
            raise ValueError(
                "SparseSiameseConfig: `encoder_config` is a dict without `model_type`; give the encoder's config "
                "(e.g. AutoConfig.from_pretrained(...)) or a dict with `model_type` such as 'bert'."
            )
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

    @property
    def vocab_size_of_encoder(self) -> int:
        """The width of the sparse vectors: the encoder's vocabulary size."""
        return int(self.encoder_config.vocab_size)

    @property
    def effective_max_seq_length(self) -> int:
        """Texts are cut to this many tokens: `max_seq_length`, at most the encoder's positions (less RoBERTa's
        offset), 512 where neither says."""
        positions = getattr(self.encoder_config, "max_position_embeddings", 512) or 512
        if getattr(self.encoder_config, "model_type", None) in ("roberta", "xlm-roberta", "camembert"):
            positions -= 2
        return int(min(self.max_seq_length or positions, positions))

    # What the training collator reads from a model's config (a sparse model has no classifier head and keeps case).
    classifier_head = False
    do_lower_case = False


__all__ = ["SPARSE_ACTIVATIONS", "SPARSE_ARCHITECTURES", "SPARSE_POOLINGS", "SparseSiameseConfig"]
