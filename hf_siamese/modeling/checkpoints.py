"""Where a `SiameseBertModel` comes from and goes to: `from_encoder` (around an encoder checkpoint, reading a
sentence-transformers layout when there is one), `save_pretrained` and `push_to_hub`, as `SiameseCheckpointMixin`,
which `SiameseBertModel` inherits before `PreTrainedModel` (so `super()` here is transformers' own method).

Part of the remote-code set (see `modeling/__init__.py`). Its only references to the rest of hf_siamese are three
optional hooks, each behind `except ImportError`: reading and writing the sentence-transformers layout and the Hub push
with a model card; without hf_siamese (a Hub user's remote code), transformers' own save and push run instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from transformers import AutoModel

from .configuration_siamese import SiameseBertConfig
from .weight_files import HUB_KEYS, naming_damaged_weights

logger = logging.getLogger(__name__)

_Model = TypeVar("_Model", bound="SiameseCheckpointMixin")


def check_model_source(source: str) -> str:
    """Fail early, and clearly, for a local model folder that does not exist.

    Hub ids are ``name`` or ``owner/name``; anything else (``./x``, ``/x``, ``a/b/c``) is meant locally, and
    transformers would otherwise answer with a confusing complaint about the repo id format.
    """
    if os.path.exists(source):
        return source
    if source.startswith((".", "/", "~")) or "\\" in source or source.count("/") > 1:
        raise FileNotFoundError(2, f"model folder not found: {source!r}", source)
    return source


class SiameseCheckpointMixin:
    """`from_encoder`, `from_pretrained`, `save_pretrained` and `push_to_hub` of `SiameseBertModel`."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | None, *args: Any, **kwargs: Any) -> Any:
        """`PreTrainedModel.from_pretrained`, with a truncated or corrupt weights file named (`DamagedWeightsError`)
        instead of safetensors' bare error."""
        hub_kwargs = {k: kwargs[k] for k in HUB_KEYS if k in kwargs}
        with naming_damaged_weights(pretrained_model_name_or_path, **hub_kwargs):
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_encoder(
        cls: type[_Model],
        model_name_or_path: str | os.PathLike,
        pooling: str | None = None,
        normalize: bool | None = None,
        similarity: str | None = None,
        max_seq_length: int | None = None,
        num_labels: int | None = None,
        label2id: dict[str, int] | None = None,
        classifier_features: Sequence[str] | None = None,
        classifier_feature_scale: float | None = None,
        cosine_affine: bool = False,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        include_prompt: bool | None = None,
        **from_pretrained_kwargs: Any,
    ) -> _Model:
        """Build a siamese model around an existing encoder checkpoint (local folder or Hub id), keeping its weights.

        A sentence-transformers checkpoint (one with `modules.json`: BGE, E5, all-MiniLM, ...) brings its pooling,
        Dense projections, normalization, prompts, similarity function, max length and lowercasing, so the model gives
        the embedding `SentenceTransformer` gives. Arguments given here override what the checkpoint says; a plain
        transformers checkpoint gets `pooling="mean"`, `normalize=False`, `similarity="cosine"`.

        `from_pretrained_kwargs` (`revision`, `token`, `cache_dir`, `dtype`, ...) go to `AutoModel.from_pretrained`
        (and the hub ones to every file read).
        """
        source = check_model_source(str(model_name_or_path))
        settings: dict[str, Any] = {}
        projection_state: dict[str, torch.Tensor] = {}
        encoder_kwargs: dict[str, Any] = {}
        hub_kwargs = {k: from_pretrained_kwargs[k] for k in HUB_KEYS if k in from_pretrained_kwargs}
        try:
            from hf_siamese.formats.sentence_transformers_read import read_layout
        except ImportError:  # running as remote code without hf-siamese: a plain encoder checkpoint
            read_layout = None
        if read_layout is not None:
            layout = read_layout(source, **{k: v for k, v in hub_kwargs.items() if k != "subfolder"})
            if layout is not None:
                settings, projection_state, encoder_kwargs = (
                    layout.settings,
                    layout.projection_state,
                    layout.encoder_kwargs,
                )
        loading = {**encoder_kwargs, **from_pretrained_kwargs}
        with naming_damaged_weights(source, **{k: loading[k] for k in HUB_KEYS if k in loading}):
            encoder = AutoModel.from_pretrained(source, **loading)
        if isinstance(encoder, SiameseCheckpointMixin):  # a SiameseBertModel's folder: its encoder
            encoder = encoder.encoder
        explicit = {
            "pooling": pooling,
            "normalize": normalize,
            "similarity": similarity,
            "max_seq_length": max_seq_length,
            "prompts": prompts,
            "default_prompt_name": default_prompt_name,
            "include_prompt": include_prompt,
        }
        settings.update({k: v for k, v in explicit.items() if v is not None})
        limit = getattr(encoder.config, "max_position_embeddings", None)
        if settings.get("max_seq_length") is not None and isinstance(limit, int):
            settings["max_seq_length"] = min(settings["max_seq_length"], limit)
        head_kwargs: dict[str, Any] = {}
        if label2id is not None:
            head_kwargs["label2id"] = dict(label2id)
            head_kwargs["id2label"] = {int(i): str(label) for label, i in label2id.items()}
        elif num_labels is not None:
            head_kwargs["num_labels"] = num_labels
        # Building the outer config resets the attention implementation of nested configs; keep the encoder's.
        attention_implementation = encoder.config._attn_implementation
        config = SiameseBertConfig(
            encoder_config=encoder.config,
            classifier_features=list(classifier_features or ["u", "v", "|u-v|"]),
            classifier_feature_scale=classifier_feature_scale,
            cosine_affine=cosine_affine,
            **settings,
            **head_kwargs,
        )
        encoder.config._attn_implementation = attention_implementation
        model = cls(config, encoder=encoder)
        if projection_state:
            model.load_state_dict(projection_state, strict=False)
        model.config.name_or_path = source
        return model

    def save_pretrained(self, save_directory: str | os.PathLike, tokenizer: Any = None, **kwargs: Any) -> None:
        """Save config, weights and modeling code, plus, with hf-siamese installed, the sentence-transformers files
        (`modules.json`, `0_Transformer/`, `1_Pooling/`, ...) so `SentenceTransformer(save_directory)` gives the same
        embedding. The encoder weights are stored once, in `0_Transformer/`. `tokenizer` (default `model.tokenizer`,
        or the one where the model came from) is saved into `0_Transformer/`, where sentence-transformers reads it.
        Other keywords (`max_shard_size`, `state_dict`, ...) are `PreTrainedModel.save_pretrained`'s.
        """
        if getattr(self, "is_quantized_copy", False):
            raise ValueError(
                "save_pretrained(): this is an int8 quantized copy for CPU inference (hf_siamese.quantize); its packed "
                "weights cannot be saved as safetensors. Save the float model and quantize again after loading."
            )
        try:
            from hf_siamese.formats.sentence_transformers_save import save_pretrained as save_with_layout
        except ImportError:  # remote code without hf-siamese: transformers' own layout
            return super().save_pretrained(save_directory, **kwargs)
        save_with_layout(
            self, save_directory, super_save=super().save_pretrained, tokenizer=tokenizer or self.tokenizer, **kwargs
        )

    def push_to_hub(self, repo_id: str, tokenizer: Any = None, **kwargs: Any) -> Any:
        """Share the model on the Hub: weights, config, modeling code, tokenizer and a generated model card, in one
        commit. `tokenizer` defaults to `model.tokenizer`.

        With hf-siamese installed this is `hf_siamese.formats.hub.push_to_hub` (keywords: `private`, `revision`,
        `token`, `create_pr`, `commit_message`, `model_card`, and card facts such as `base_model`, `datasets`,
        `eval_results`). Loaded as Hub remote code without hf-siamese, it falls back to transformers' own push (its
        generic card), and the tokenizer goes up in a commit of its own.
        """
        if tokenizer is None:
            tokenizer = self.tokenizer
        try:
            from hf_siamese.formats.hub import push_to_hub
        except ImportError as error:
            # This file also runs as remote code, where hf_siamese may be absent: keep the push working.
            accepted = {"commit_message", "commit_description", "private", "token", "revision", "create_pr", "tags"}
            unsupported = sorted(set(kwargs) - accepted - {"max_shard_size"})
            if unsupported:
                raise TypeError(
                    f"push_to_hub: {unsupported[0]!r} needs hf-siamese installed (pip install hf-siamese); without "
                    f"it the accepted keywords are {sorted(accepted)}."
                ) from error
            if tokenizer is not None and kwargs.get("create_pr"):
                raise ValueError(
                    "push_to_hub(create_pr=True) with a tokenizer needs hf-siamese installed (pip install hf-siamese) "
                    "to upload both in one pull request; without it, push the model and the tokenizer separately."
                ) from error
            logger.warning(
                "hf_siamese is not importable (%s): pushing with transformers' push_to_hub; the model card is the "
                "generic one and the tokenizer is a separate commit.",
                error,
            )
            if tokenizer is not None:
                tokenizer.push_to_hub(repo_id, **{k: v for k, v in kwargs.items() if k != "max_shard_size"})
            return super().push_to_hub(repo_id, **kwargs)
        return push_to_hub(self, repo_id, tokenizer=tokenizer, **kwargs)


__all__ = ["SiameseCheckpointMixin", "check_model_source"]
