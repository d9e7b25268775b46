"""SiameseBert model configuration.

This file is copied next to the weights when a model is saved, so it must import only public libraries:
Hub users load it as remote code with `trust_remote_code=True`, without hf_siamese installed.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
# Activations a projection layer may use (the ones sentence-transformers' Dense layers are saved with), by the name
# stored in config.json.
PROJECTION_ACTIVATIONS = ("identity", "tanh", "relu", "gelu", "sigmoid", "silu")
CLASSIFIER_FEATURES = ("u", "v", "|u-v|", "u*v")


class SiameseBertConfig(PreTrainedConfig):
    r"""
    Configuration of a [`SiameseBertModel`]: a BERT-family encoder, a pooling over its token states, optional L2
    normalization, and an optional softmax classifier head on a pair of sentence embeddings.

    Everything that decides the sentence embedding lives here, so a saved `config.json` alone reproduces it.

    Attributes:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Config of the encoder, any type `AutoModel` can build (bert, distilbert, roberta, xlm-roberta, mpnet,
            electra, ...). A dict needs a `model_type`; defaults to a `BertConfig()`.
        pooling (`str`, *optional*, defaults to `"mean"`):
            How token states become one vector: `"mean"` (over non-padding tokens; the Sentence-BERT ablation found it
            best), `"cls"` (first token), `"max"` (element-wise max over non-padding tokens), `"mean_sqrt_len"` (sum
            divided by the square root of the number of tokens), `"weightedmean"` (token i weighted by i, SGPT) or
            `"lasttoken"` (the last non-padding token, for decoder embedders; left or right padding).
        include_prompt (`bool`, *optional*, defaults to `True`):
            Whether the tokens of a prompt (see `prompts`) count in the pooling; `False` leaves them out.
        projections (`list[dict]`, *optional*):
            Dense layers applied after pooling, in order, each `{"in_features", "out_features", "bias",
            "activation"}` with `activation` one of `identity`, `tanh`, `relu`, `gelu`, `sigmoid`, `silu`.
        truncate_dim (`int`, *optional*):
            Keep only the first `truncate_dim` dims of the embedding (after the projections, before normalizing): for
            models trained with `MatryoshkaLoss`. Also settable at load time, `from_pretrained(..., truncate_dim=128)`.
        normalize (`bool`, *optional*, defaults to `False`):
            L2-normalize sentence embeddings (after the projections), so dot product equals cosine similarity.
        similarity (`str`, *optional*, defaults to `"cosine"`):
            The similarity the embeddings are meant for: `"cosine"`, `"dot"`, `"euclidean"` or `"manhattan"` (the
            last two as negative distances, so larger is more similar).
        prompts (`dict[str, str]`, *optional*):
            Named texts put before the input, e.g. `{"query": "query: ", "passage": "passage: "}`; chosen with
            `encode(..., prompt_name="query")`.
        default_prompt_name (`str`, *optional*):
            The prompt `encode` uses when none is named.
        do_lower_case (`bool`, *optional*, defaults to `False`):
            Lowercase texts before tokenizing them.
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
    include_prompt: bool = True
    projections: list[dict] = field(default_factory=list)
    truncate_dim: int | None = None
    normalize: bool = False
    similarity: str = "cosine"
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    do_lower_case: bool = False
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
        for name in ("normalize", "classifier_head", "cosine_affine", "include_prompt", "do_lower_case"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"SiameseBertConfig: {name}={getattr(self, name)!r} must be True or False.")
        if self.max_seq_length is not None and (
            isinstance(self.max_seq_length, bool) or not isinstance(self.max_seq_length, int) or self.max_seq_length < 1
        ):
            raise ValueError(
                f"SiameseBertConfig: max_seq_length={self.max_seq_length!r} must be a positive int or None."
            )
        self.projections = [self._checked_projection(i, p) for i, p in enumerate(self.projections or [])]
        if self.truncate_dim is not None:
            full = self.projections[-1]["out_features"] if self.projections else self.hidden_size
            value = self.truncate_dim
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= full:
                raise ValueError(
                    f"SiameseBertConfig: truncate_dim={value!r} must be an int from 1 to the embedding size {full}."
                )
            if self.classifier_head:
                raise ValueError(
                    f"SiameseBertConfig: truncate_dim={value!r} with a classifier head; the head reads the whole "
                    "embedding, so truncation is for models without one."
                )
        self._check_prompts()
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

    def _checked_projection(self, index: int, projection: Any) -> dict[str, Any]:
        keys = {"in_features", "out_features", "bias", "activation"}
        if not isinstance(projection, dict) or not {"in_features", "out_features"} <= set(projection) <= keys:
            raise ValueError(
                f"SiameseBertConfig: projections[{index}]={projection!r} must be a dict with in_features and "
                f"out_features and optionally bias and activation (keys {sorted(keys)})."
            )
        checked = {"bias": True, "activation": "identity", **projection}
        expected_in = self.projections[index - 1]["out_features"] if index else self.hidden_size
        for name in ("in_features", "out_features"):
            value = checked[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SiameseBertConfig: projections[{index}].{name}={value!r} must be a positive int.")
        if checked["in_features"] != expected_in:
            raise ValueError(
                f"SiameseBertConfig: projections[{index}].in_features={checked['in_features']} does not match the "
                f"width of its input ({expected_in})."
            )
        if not isinstance(checked["bias"], bool):
            raise ValueError(f"SiameseBertConfig: projections[{index}].bias={checked['bias']!r} must be True or False.")
        if checked["activation"] not in PROJECTION_ACTIVATIONS:
            raise ValueError(
                f"SiameseBertConfig: projections[{index}].activation={checked['activation']!r} is not one of "
                f"{list(PROJECTION_ACTIVATIONS)}."
            )
        return checked

    def _check_prompts(self) -> None:
        prompts = self.prompts if self.prompts is not None else {}
        valid = isinstance(prompts, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items())
        if not valid:
            raise ValueError(f"SiameseBertConfig: prompts={self.prompts!r} must be a dict of prompt name -> text.")
        self.prompts = dict(prompts)
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(
                f"SiameseBertConfig: default_prompt_name={self.default_prompt_name!r} is not one of the prompts "
                f"{sorted(self.prompts)}."
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
        """Width of the encoder's token states (its hidden size)."""
        encoder = self.encoder_config
        return getattr(encoder, "hidden_size", None) or encoder.dim  # distilbert calls it `dim`

    @property
    def embedding_size(self) -> int:
        """Width of the sentence embedding: `truncate_dim`, else the last projection's `out_features`, else the
        encoder's hidden size."""
        if self.truncate_dim is not None:
            return self.truncate_dim
        return self.projections[-1]["out_features"] if self.projections else self.hidden_size

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
        return float(self.embedding_size) ** 0.5 if self.normalize else 1.0


def is_cross_encoder_config(config: Any) -> bool:
    """Whether a model config (a transformers config, or a config.json read as a dict) is a cross-encoder's: its
    `architectures` name a `...ForSequenceClassification`. The one rule every loader and command asks."""
    names = config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)
    return any(str(name).endswith("ForSequenceClassification") for name in names or [])


__all__ = [
    "is_cross_encoder_config",
    "SiameseBertConfig",
    "POOLING_MODES",
    "PROJECTION_ACTIVATIONS",
    "SIMILARITY_FUNCTIONS",
    "CLASSIFIER_FEATURES",
]
