"""SiameseBert: a BERT-family encoder turned into a sentence encoder (Sentence-BERT).

The file reads top to bottom: pooling, the output dataclass, the pretrained base class, then `SiameseBertModel`.
It imports only public libraries and its own configuration file, because `save_pretrained` copies the pair
next to the weights: Hub users load them as remote code with `trust_remote_code=True`.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import ModelOutput, cached_file

from .configuration_siamese import SiameseBertConfig

logger = logging.getLogger(__name__)


def pool_token_states(hidden_states: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Turn token states into one vector per text.

    Args:
        hidden_states: `(batch, seq_len, hidden)` token states of the encoder's last layer.
        attention_mask: `(batch, seq_len)`, 1 for real tokens, 0 for padding. Padding never reaches the result.
        pooling: one of `mean`, `cls`, `max`, `mean_sqrt_len`.

    Returns:
        `(batch, hidden)` sentence vectors.
    """
    if pooling == "cls":
        return hidden_states[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
    if pooling == "max":
        padded = hidden_states.masked_fill(mask == 0, torch.finfo(hidden_states.dtype).min)
        return padded.max(dim=1).values
    summed = (hidden_states * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1.0)
    if pooling == "mean":
        return summed / counts
    if pooling == "mean_sqrt_len":
        return summed / counts.sqrt()
    raise ValueError(f"pooling={pooling!r} is not one of ['mean', 'cls', 'max', 'mean_sqrt_len'].")


def pair_features(u: torch.Tensor, v: torch.Tensor, features: Sequence[str]) -> torch.Tensor:
    """Concatenate the requested pair features of `u` and `v` (each `(batch, hidden)`) along the last axis."""
    parts = {"u": lambda: u, "v": lambda: v, "|u-v|": lambda: (u - v).abs(), "u*v": lambda: u * v}
    return torch.cat([parts[name]() for name in features], dim=-1)


@dataclass
class SiameseBertOutput(ModelOutput):
    r"""
    sentence_embedding (`torch.FloatTensor`, `(batch, hidden)`, or `(batch, num_texts, hidden)` for grouped input):
        Pooled (and, if configured, L2-normalized) sentence embeddings.
    last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden)`):
        Token states of the encoder's last layer (ungrouped input only: grouped texts are encoded column by column,
        each cut to its own length).
    similarity (`torch.FloatTensor` of shape `(batch,)`, *optional*):
        For pairs (`num_texts == 2`): similarity of the two sides under `config.similarity`, after the learned affine
        map when `config.cosine_affine` is set.
    logits (`torch.FloatTensor` of shape `(batch, num_labels)`, *optional*):
        For pairs with a classifier head: scores over `config.id2label`.
    hidden_states, attentions:
        Passed through from the encoder when requested (ungrouped input only).
    """

    sentence_embedding: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    similarity: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


class SiameseBertPreTrainedModel(PreTrainedModel):
    config_class = SiameseBertConfig
    config: SiameseBertConfig
    base_model_prefix = "siamese"
    # Losses live in hf_siamese.losses and average over their batch; Trainer must not pass token counts.
    accepts_loss_kwargs = False
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel and initialises itself; only our own layers land here.
        std = getattr(self.config.encoder_config, "initializer_range", 0.02) or 0.02
        if isinstance(module, nn.Linear):
            module.weight.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, SiameseBertModel) and module.cosine_affine_weight is not None:
            module.cosine_affine_weight.fill_(1.0)
            module.cosine_affine_bias.zero_()


class SiameseBertModel(SiameseBertPreTrainedModel):
    """Encoder + pooling [+ L2 normalization] [+ softmax classifier head over pair features].

    Call it on `(batch, seq_len)` inputs to embed texts, or on `(batch, num_texts, seq_len)` inputs (a pair, a
    triplet, ... per row) to embed all of them, one encoder call per column; for pairs the output also holds their
    similarity and, with a head, the classifier logits.
    """

    def __init__(self, config: SiameseBertConfig, encoder: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        if encoder is None:
            encoder = AutoModel.from_config(config.encoder_config)
        config.encoder_config = encoder.config
        # Sentence embeddings never use BERT's next-sentence pooler; dropping it saves parameters and keeps
        # distributed training free of unused parameters.
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None
        self.encoder = encoder
        self._encoder_arguments = set(inspect.signature(encoder.forward).parameters)
        if config.classifier_head:
            self.classifier = nn.Linear(len(config.classifier_features) * config.hidden_size, config.num_labels)
        else:
            self.classifier = None
        if config.cosine_affine:
            self.cosine_affine_weight = nn.Parameter(torch.ones(()))
            self.cosine_affine_bias = nn.Parameter(torch.zeros(()))
        else:
            self.cosine_affine_weight = None
            self.cosine_affine_bias = None
        self.tokenizer = None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.encoder.set_input_embeddings(value)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs: Any,
    ) -> SiameseBertOutput:
        """Embed texts.

        Args:
            input_ids: `(batch, seq_len)`, or `(batch, num_texts, seq_len)` for grouped texts (pairs, triplets).
            attention_mask: same shape as `input_ids`; defaults to all ones.
            token_type_ids, position_ids: same shape as `input_ids`; passed to encoders that accept them.
            inputs_embeds: `(batch, [num_texts,] seq_len, hidden)` instead of `input_ids`.
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None:
            raise ValueError("SiameseBertModel.forward needs `input_ids` or `inputs_embeds`.")
        grouped = reference.dim() == (4 if input_ids is None else 3)
        lead = reference.shape[:2] if grouped else reference.shape[:1]
        seq_len = reference.shape[2 if grouped else 1]
        if attention_mask is None:
            attention_mask = torch.ones(*lead, seq_len, dtype=torch.long, device=reference.device)
        extra = {"output_hidden_states": output_hidden_states, "output_attentions": output_attentions, **kwargs}
        if not grouped:
            embeddings, encoded = self._embed(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **extra
            )
            return SiameseBertOutput(
                sentence_embedding=embeddings,
                last_hidden_state=encoded.last_hidden_state,
                hidden_states=encoded.hidden_states if output_hidden_states else None,
                attentions=encoded.attentions if output_attentions else None,
            )

        # One encoder call per text column (anchors, positives, ...), each cut to its own longest text: the
        # collator pads all texts of a batch together, and short hypotheses padded to long premises would double
        # the work and the activation memory.
        columns = []
        for j in range(lead[1]):
            column = [None if t is None else t[:, j] for t in (input_ids, token_type_ids, position_ids, inputs_embeds)]
            mask = attention_mask[:, j]
            keep = mask.bool().any(dim=0)
            width = int(keep.sum())
            if width < mask.shape[1]:
                index = slice(0, width) if bool(keep[:width].all()) else keep.nonzero().squeeze(-1)
                column = [None if t is None else t[:, index] for t in column]
                mask = mask[:, index]
            ids, types, positions, embeds = column
            columns.append(self._embed(ids, mask, types, positions, embeds, **extra)[0])
        embeddings = torch.stack(columns, dim=1)

        similarity = logits = None
        if lead[1] == 2:
            u, v = embeddings[:, 0], embeddings[:, 1]
            similarity = self.pair_similarity(u, v)
            if self.classifier is not None:
                logits = self.classify(u, v)
        return SiameseBertOutput(sentence_embedding=embeddings, similarity=similarity, logits=logits)

    def _embed(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Any]:
        """Encoder + pooling [+ normalize] on `(batch, seq_len)` inputs -> `(batch, hidden)`, encoder output."""
        encoder_inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "position_ids": position_ids,
            "inputs_embeds": inputs_embeds,
            **kwargs,
        }
        # Encoders differ in what they accept (DistilBERT has no token types); pass only what this one takes.
        encoder_inputs = {k: v for k, v in encoder_inputs.items() if v is not None and k in self._encoder_arguments}
        encoded = self.encoder(**encoder_inputs, return_dict=True)
        embeddings = pool_token_states(encoded.last_hidden_state, attention_mask, self.config.pooling)
        if self.config.normalize:
            embeddings = F.normalize(embeddings, p=2, dim=-1)
        return embeddings, encoded

    def pair_similarity(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Row-wise similarity of `u` and `v` (`(batch, hidden)` each) -> `(batch,)`, with the affine map if any."""
        if self.config.similarity == "cosine":
            scores = F.cosine_similarity(u, v, dim=-1)
        else:
            scores = (u * v).sum(dim=-1)
        if self.cosine_affine_weight is not None:
            scores = self.cosine_affine_weight * scores + self.cosine_affine_bias
        return scores

    def classify(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Classifier logits `(batch, num_labels)` for sentence embeddings `u`, `v` (`(batch, hidden)` each)."""
        if self.classifier is None:
            raise ValueError(
                "This SiameseBertModel has no classifier head; build it with num_labels=... (or label2id=...)."
            )
        features = pair_features(u, v, self.config.classifier_features) * self.config.effective_feature_scale
        return self.classifier(features)

    def similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """All-pairs similarity `(n, m)` of `a` `(n, hidden)` and `b` `(m, hidden)` under `config.similarity`."""
        if self.config.similarity == "cosine":
            a, b = F.normalize(a, p=2, dim=-1), F.normalize(b, p=2, dim=-1)
        return a @ b.transpose(-1, -2)

    def _resolve_tokenizer(self, tokenizer: Any) -> Any:
        if tokenizer is not None:
            return tokenizer
        if self.tokenizer is None:
            source = self.config.name_or_path
            if not source:
                raise ValueError(
                    "encode() needs a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...), or set "
                    "model.tokenizer, or load the model from a folder or Hub id that holds the tokenizer files."
                )
            # Running as Hub remote code means the user already trusted this repository; without that flag
            # AutoTokenizer would stop at a trust prompt because config.json names our remote config class.
            trusted = type(self).__module__.startswith("transformers_modules") or None
            self.tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trusted)
        return self.tokenizer

    @torch.inference_mode()
    def encode(
        self,
        texts: str | Sequence[str],
        tokenizer: Any = None,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        convert_to_numpy: bool = False,
        max_length: int | None = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
    ) -> torch.Tensor | np.ndarray:
        """Embed texts for inference.

        Texts are tokenized once, sorted by length and batched so that each batch pads only to its own longest text;
        results come back in the input order. No gradients are kept.

        Args:
            texts: a string or a sequence of strings (an empty string is fine; `None` is not).
            tokenizer: the encoder's tokenizer; defaults to `model.tokenizer` or the one saved with the model.
            batch_size: texts per forward pass.
            show_progress_bar: show a tqdm bar over batches.
            convert_to_numpy: return a float32 `np.ndarray` instead of a tensor on the CPU.
            max_length: truncate to this many tokens; defaults to `config.max_seq_length`.
            dtype: run the encoder under autocast with this dtype (`torch.bfloat16`, `torch.float16`).
            device: where to run; defaults to the model's device.

        Returns:
            `(len(texts), hidden)` embeddings, or `(hidden,)` for a single string.
        """
        single = isinstance(texts, str)
        if single:
            texts = [texts]
        if not isinstance(texts, Sequence):
            raise TypeError(f"encode() takes a string or a sequence of strings, got {type(texts).__name__}.")
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"encode(): texts[{index}] is {type(text).__name__} ({text!r}); expected str.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"encode(): batch_size={batch_size!r} must be a positive int.")
        if len(texts) == 0:
            empty = torch.empty(0, self.config.hidden_size)
            return empty.numpy() if convert_to_numpy else empty

        tokenizer = self._resolve_tokenizer(tokenizer)
        max_length = max_length or self.config.effective_max_seq_length
        device = torch.device(device) if device is not None else self.device
        # Repeated texts (common in pair datasets) are encoded once.
        unique = list(dict.fromkeys(texts))
        batches, order, truncated = self._tokenize_sorted(unique, tokenizer, max_length, batch_size)
        if truncated:
            logger.warning(
                "%d of %d texts were longer than max_length=%d tokens and were truncated.",
                sum(1 for text in texts if text in truncated),
                len(texts),
                max_length,
            )

        was_training = self.training
        self.eval()
        chunks = []
        iterator = batches
        if show_progress_bar:
            from tqdm.auto import tqdm

            iterator = tqdm(batches, desc="Encoding", unit="batch")
        autocast = (
            torch.autocast(device_type=device.type, dtype=dtype)
            if dtype is not None and dtype != torch.float32
            else torch.autocast(device_type=device.type, enabled=False)
        )
        try:
            with autocast:
                for batch in iterator:
                    batch = {k: v.to(device) for k, v in batch.items()}
                    chunks.append(self(**batch).sentence_embedding.float().cpu())
        finally:
            self.train(was_training)
        sorted_embeddings = torch.cat(chunks)
        embeddings = torch.empty_like(sorted_embeddings)
        embeddings[order] = sorted_embeddings
        if len(unique) != len(texts):
            position = {text: i for i, text in enumerate(unique)}
            embeddings = embeddings[[position[text] for text in texts]]
        if single:
            embeddings = embeddings[0]
        return embeddings.numpy() if convert_to_numpy else embeddings

    def _tokenize_sorted(
        self, texts: Sequence[str], tokenizer: Any, max_length: int, batch_size: int
    ) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor, set[str]]:
        """Tokenize all texts once and group them, longest first, into padded batches.

        Returns the batches, `order` (the input index of each text in sorted order) and the truncated texts.
        """
        encoded = tokenizer(list(texts), truncation=True, max_length=max_length, padding=False)
        truncated = self._truncated_texts(encoded, texts, tokenizer, max_length)
        lengths = torch.tensor([len(ids) for ids in encoded["input_ids"]])
        order = torch.argsort(lengths, descending=True, stable=True)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        keys = [k for k in ("input_ids", "token_type_ids") if k in encoded]
        batches = []
        for start in range(0, len(texts), batch_size):
            index = order[start : start + batch_size].tolist()
            width = int(lengths[index[0]])
            batch = {k: torch.full((len(index), width), pad_id if k == "input_ids" else 0) for k in keys}
            batch["attention_mask"] = torch.zeros(len(index), width, dtype=torch.long)
            for row, i in enumerate(index):
                n = len(encoded["input_ids"][i])
                for k in keys:
                    batch[k][row, :n] = torch.tensor(encoded[k][i])
                batch["attention_mask"][row, :n] = 1
            batches.append(batch)
        return batches, order, truncated

    @staticmethod
    def _truncated_texts(encoded: Any, texts: Sequence[str], tokenizer: Any, max_length: int) -> set[str]:
        encodings = getattr(encoded, "encodings", None)
        if encodings:
            return {text for text, e in zip(texts, encodings, strict=True) if e.overflowing}
        # Slow tokenizers keep no overflow record: compare against an untruncated pass on the full-length texts.
        candidates = [t for t, ids in zip(texts, encoded["input_ids"], strict=True) if len(ids) >= max_length]
        full = tokenizer(candidates, truncation=False)["input_ids"]
        return {text for text, ids in zip(candidates, full, strict=True) if len(ids) > max_length}

    @classmethod
    def from_encoder(
        cls,
        model_name_or_path: str | os.PathLike,
        pooling: str = "mean",
        normalize: bool = False,
        similarity: str = "cosine",
        max_seq_length: int | None = None,
        num_labels: int | None = None,
        label2id: dict[str, int] | None = None,
        classifier_features: Sequence[str] | None = None,
        classifier_feature_scale: float | None = None,
        cosine_affine: bool = False,
        **from_pretrained_kwargs: Any,
    ) -> SiameseBertModel:
        """Build a siamese model around an existing encoder checkpoint (local folder or Hub id), keeping its weights.

        `from_pretrained_kwargs` (`revision`, `token`, `cache_dir`, `dtype`, ...) go to `AutoModel.from_pretrained`.
        When the checkpoint is a sentence-transformers folder, its `max_seq_length` is used unless one is given.
        """
        source = str(model_name_or_path)
        encoder = AutoModel.from_pretrained(source, **from_pretrained_kwargs)
        if isinstance(encoder, SiameseBertModel):
            encoder = encoder.encoder
        if max_seq_length is None:
            max_seq_length = _sentence_transformers_max_seq_length(source, from_pretrained_kwargs)
        limit = getattr(encoder.config, "max_position_embeddings", None)
        if max_seq_length is not None and isinstance(limit, int):
            max_seq_length = min(max_seq_length, limit)
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
            pooling=pooling,
            normalize=normalize,
            similarity=similarity,
            max_seq_length=max_seq_length,
            classifier_features=list(classifier_features or ["u", "v", "|u-v|"]),
            classifier_feature_scale=classifier_feature_scale,
            cosine_affine=cosine_affine,
            **head_kwargs,
        )
        encoder.config._attn_implementation = attention_implementation
        model = cls(config, encoder=encoder)
        model.config.name_or_path = source
        return model

    def push_to_hub(self, repo_id: str, tokenizer: Any = None, **kwargs: Any) -> Any:
        """Share the model on the Hub: weights, config, modeling code, tokenizer and a generated model card, in one
        commit. `tokenizer` defaults to `model.tokenizer`.

        With hf-siamese installed this is `hf_siamese.hub.push_to_hub` (keywords: `private`, `revision`, `token`,
        `create_pr`, `commit_message`, `model_card`, and card facts such as `base_model`, `datasets`,
        `eval_results`). Loaded as Hub remote code without hf-siamese, it falls back to transformers' own push (its
        generic card), and the tokenizer goes up in a commit of its own.
        """
        if tokenizer is None:
            tokenizer = self.tokenizer
        try:
            from hf_siamese.hub import push_to_hub
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


def _sentence_transformers_max_seq_length(source: str, hub_kwargs: dict[str, Any]) -> int | None:
    """Read `max_seq_length` from a sentence-transformers checkpoint's `sentence_bert_config.json`, if it has one."""
    download_kwargs = {k: hub_kwargs[k] for k in ("revision", "token", "cache_dir") if k in hub_kwargs}
    try:
        path = cached_file(
            source,
            "sentence_bert_config.json",
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **download_kwargs,
        )
    except OSError:
        return None
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        value = json.load(handle).get("max_seq_length")
    return int(value) if isinstance(value, int) and value > 0 else None


__all__ = ["SiameseBertModel", "SiameseBertPreTrainedModel", "SiameseBertOutput", "pool_token_states"]
