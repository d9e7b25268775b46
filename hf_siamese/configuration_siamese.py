"""SiameseBert model configuration.

This file is copied next to the weights when a model is saved, so it must import only public libraries:
Hub users load it as remote code with `trust_remote_code=True`, without hf_siamese installed.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")
SIMILARITY_FUNCTIONS = ("cosine", "dot")
CLASSIFIER_FEATURES = ("u", "v", "|u-v|", "u*v")


class SiameseBertConfig(PreTrainedConfig):
    r"""
    Configuration of a [`SiameseBertModel`]: a BERT-family encoder, a pooling over its token states, optional L2
    normalization, and an optional softmax classifier head on a pair of sentence embeddings.

    Everything that decides the sentence embedding lives here, so a saved `config.json` alone reproduces it.

    Args:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Config of the encoder, any type `AutoModel` can build (bert, distilbert, roberta, xlm-roberta, mpnet,
            electra, ...). A dict needs a `model_type`; defaults to a `BertConfig()`.
        pooling (`str`, *optional*, defaults to `"mean"`):
            How token states become one vector: `"mean"` (over non-padding tokens; the Sentence-BERT ablation found it
            best), `"cls"` (first token), `"max"` (element-wise max over non-padding tokens) or `"mean_sqrt_len"` (sum
            divided by the square root of the number of tokens).
        normalize (`bool`, *optional*, defaults to `False`):
            L2-normalize sentence embeddings, so dot product equals cosine similarity.
        similarity (`str`, *optional*, defaults to `"cosine"`):
            The similarity the embeddings are meant for: `"cosine"` or `"dot"`.
        max_seq_length (`int`, *optional*):
            Texts are truncated to this many tokens by `encode` and the data collator. Defaults to the encoder's
            `max_position_embeddings` (capped at 512).
        classifier_head (`bool`, *optional*, defaults to `False`):
            Whether the model carries a softmax classifier over pair features. Set automatically when `num_labels`,
            `id2label` or `label2id` is given.
        classifier_features (`list[str]`, *optional*, defaults to `["u", "v", "|u-v|"]`):
            Which of `u`, `v`, `|u-v|`, `u*v` are concatenated as the classifier's input (Sentence-BERT uses the
            default).
        classifier_feature_scale (`float`, *optional*):
            Fixed factor applied to the pair features before the classifier. Unit-norm embeddings give features of
            size ~0.05 per dimension, too small for a classifier trained at an encoder learning rate; without a scale
            the encoder itself is pushed to spread embeddings apart, which wrecks their geometry. Defaults to
            `sqrt(hidden_size)` when `normalize` is set, else 1.
        cosine_affine (`bool`, *optional*, defaults to `False`):
            Learn `a * cos + b` (initialised to the identity) on top of the cosine similarity for regression losses.
            It is saved with the model but never changes the embedding itself.
    """

    model_type = "siamese-bert"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder_config: dict | PreTrainedConfig | None = None
    pooling: str = "mean"
    normalize: bool = False
    similarity: str = "cosine"
    max_seq_length: int | None = None
    classifier_head: bool = False
    classifier_features: list[str] = field(default_factory=lambda: ["u", "v", "|u-v|"])
    classifier_feature_scale: float | None = None
    cosine_affine: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        # Any explicit label information means the user wants a classifier head.
        if kwargs.get("num_labels") is not None or self.id2label is not None or self.label2id is not None:
            self.classifier_head = True
        if isinstance(self.encoder_config, dict) and "model_type" not in self.encoder_config:
            raise ValueError(
                "SiameseBertConfig: `encoder_config` is a dict without `model_type`; give the encoder's config "
                "(e.g. AutoConfig.from_pretrained(...)) or a dict with `model_type` such as 'bert' or 'roberta'."
            )
        if self.label2id is not None and self.id2label is None:
            ids = sorted(int(i) for i in self.label2id.values())
            if ids != list(range(len(ids))):
                raise ValueError(
                    f"SiameseBertConfig: label2id={self.label2id!r} must map each label to a distinct id "
                    f"0..{len(ids) - 1}."
                )
            self.id2label = {int(i): str(label) for label, i in self.label2id.items()}
        super().__post_init__(**kwargs)
        if self.label2id is not None:
            self.label2id = {str(k): int(v) for k, v in self.label2id.items()}
        if self.id2label is not None and (self.label2id is None or len(self.label2id) != len(self.id2label)):
            self.label2id = {label: idx for idx, label in self.id2label.items()}
        self.validate_siamese_fields()

    def validate_siamese_fields(self) -> None:
        """Raise `ValueError` naming the field and the accepted values for anything out of range."""
        if self.pooling not in POOLING_MODES:
            raise ValueError(f"SiameseBertConfig: pooling={self.pooling!r} is not one of {list(POOLING_MODES)}.")
        if self.similarity not in SIMILARITY_FUNCTIONS:
            raise ValueError(
                f"SiameseBertConfig: similarity={self.similarity!r} is not one of {list(SIMILARITY_FUNCTIONS)}."
            )
        for name in ("normalize", "classifier_head", "cosine_affine"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"SiameseBertConfig: {name}={getattr(self, name)!r} must be True or False.")
        if self.max_seq_length is not None and (
            isinstance(self.max_seq_length, bool) or not isinstance(self.max_seq_length, int) or self.max_seq_length < 1
        ):
            raise ValueError(
                f"SiameseBertConfig: max_seq_length={self.max_seq_length!r} must be a positive int or None."
            )
        limit = getattr(self.encoder_config, "max_position_embeddings", None)
        if self.max_seq_length is not None and isinstance(limit, int) and self.max_seq_length > limit:
            raise ValueError(
                f"SiameseBertConfig: max_seq_length={self.max_seq_length} exceeds the encoder's "
                f"max_position_embeddings={limit}; use a value <= {limit}."
            )
        features = list(self.classifier_features) if self.classifier_features is not None else []
        unknown = [f for f in features if f not in CLASSIFIER_FEATURES]
        if not features or unknown or len(set(features)) != len(features):
            raise ValueError(
                f"SiameseBertConfig: classifier_features={self.classifier_features!r} must be a non-empty list of "
                f"distinct items from {list(CLASSIFIER_FEATURES)}."
            )
        self.classifier_features = features
        if self.classifier_feature_scale is not None and not (
            isinstance(self.classifier_feature_scale, (int, float)) and self.classifier_feature_scale > 0
        ):
            raise ValueError(
                f"SiameseBertConfig: classifier_feature_scale={self.classifier_feature_scale!r} must be a "
                "positive number or None."
            )
        if self.classifier_head and (self.num_labels is None or self.num_labels < 2):
            raise ValueError(
                f"SiameseBertConfig: num_labels={self.num_labels!r}; a classifier head needs at least 2 labels."
            )

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        encoder = output.get("encoder_config")
        if isinstance(encoder, dict):
            # The encoder config remembers where its weights were loaded from, often an absolute local path;
            # that path means nothing to anyone else and must not reach a shared config.json.
            encoder.pop("_name_or_path", None)
        return output

    @property
    def hidden_size(self) -> int:
        """Width of the sentence embedding (the encoder's hidden size)."""
        encoder = self.encoder_config
        return getattr(encoder, "hidden_size", None) or encoder.dim  # distilbert calls it `dim`

    @property
    def effective_max_seq_length(self) -> int:
        """`max_seq_length`, or the encoder's position limit capped at 512 when it is unset."""
        if self.max_seq_length is not None:
            return self.max_seq_length
        limit = getattr(self.encoder_config, "max_position_embeddings", 512) or 512
        if getattr(self.encoder_config, "model_type", None) in ("roberta", "xlm-roberta", "camembert"):
            limit -= 2  # these offset position ids by padding_idx + 1
        return min(limit, 512)

    @property
    def effective_feature_scale(self) -> float:
        if self.classifier_feature_scale is not None:
            return float(self.classifier_feature_scale)
        return float(self.hidden_size) ** 0.5 if self.normalize else 1.0


__all__ = ["SiameseBertConfig", "POOLING_MODES", "SIMILARITY_FUNCTIONS", "CLASSIFIER_FEATURES"]
