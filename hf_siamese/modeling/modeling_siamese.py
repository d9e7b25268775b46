"""SiameseBert: a BERT-family encoder turned into a sentence encoder (Sentence-BERT).

The file reads top to bottom: pooling, the output dataclass, the pretrained base class, then `SiameseBertModel`
(its `encode()` lives in `encoding.py`, packed execution in `packing.py`). It imports only public libraries and
its own sibling files (configuration, encoding, packing), because `save_pretrained` copies them next to the weights:
Hub users load them as remote code with `trust_remote_code=True`.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_siamese import SiameseBertConfig
from .encoding import SiameseEncodingMixin
from .packing import can_pack, pack_for_encoder, unpack_states

logger = logging.getLogger(__name__)

# Parameters that never touch the sentence embedding: the softmax head and the cosine affine of regression losses.
HEAD_PARAMETER_PREFIXES = ("classifier.", "cosine_affine_")


def prompt_free_mask(attention_mask: torch.Tensor, prompt_length: int | torch.Tensor | None) -> torch.Tensor:
    """`attention_mask` with the first `prompt_length` real tokens of each row (after any left padding) set to 0,
    so a prompt is left out of the pooling. `prompt_length` is an int, or a tensor holding one value per row."""
    if prompt_length is None:
        return attention_mask
    if isinstance(prompt_length, torch.Tensor):
        prompt_length = prompt_length.reshape(-1, 1).to(attention_mask.device)
    if not isinstance(prompt_length, torch.Tensor) and prompt_length <= 0:
        return attention_mask
    start = attention_mask.to(torch.int32).argmax(dim=1, keepdim=True)  # first real token: after left padding
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).unsqueeze(0)
    return attention_mask.masked_fill(positions < start + prompt_length, 0)


def pool_token_states(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    pooling: str,
    prompt_length: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn token states into one vector per text.

    Args:
        hidden_states: `(batch, seq_len, hidden)` token states of the encoder's last layer.
        attention_mask: `(batch, seq_len)`, 1 for real tokens, 0 for padding (left or right). Padding never reaches
            the result.
        pooling: one of `mean`, `cls`, `max`, `mean_sqrt_len`, `weightedmean`, `lasttoken`.
        prompt_length: leave out this many leading real tokens (a prompt) from the pooling.

    Returns:
        `(batch, hidden)` sentence vectors.
    """
    mask = prompt_free_mask(attention_mask, prompt_length)
    if pooling in ("cls", "lasttoken"):
        seq_len = mask.shape[1]
        if pooling == "cls":  # the first pooled token: position 0 unless the batch is left-padded
            index = mask.to(torch.int32).argmax(dim=1)
        else:  # the last pooled token, whichever side the padding is on
            index = seq_len - 1 - mask.to(torch.int32).flip(1).argmax(dim=1)
        picked = hidden_states[torch.arange(len(index), device=index.device), index]
        return picked if pooling == "cls" else picked * mask.any(dim=1, keepdim=True).to(picked.dtype)
    if pooling == "max":
        empty = mask.unsqueeze(-1) == 0
        return hidden_states.masked_fill(empty, torch.finfo(hidden_states.dtype).min).max(dim=1).values
    # Sums and counts in float32 whatever the states' dtype: in float16 the weightedmean weights (up to L(L+1)/2) pass
    # 65504 from 362 tokens, bfloat16 rounds positions above 256, and clamp(min=1e-9) is 0 in both (an empty row
    # would divide 0 by 0). The result comes back in the states' dtype.
    weights = mask.unsqueeze(-1).to(torch.float32)
    if pooling == "weightedmean":
        # Weight 1, 2, 3, ... from the first real token on (left padding shifts the count, as in SGPT).
        start = attention_mask.to(torch.int32).argmax(dim=1).view(-1, 1, 1)
        positions = torch.arange(1, mask.shape[1] + 1, device=mask.device, dtype=torch.float32).view(1, -1, 1)
        weights = weights * (positions - start)
    summed = (hidden_states.to(torch.float32) * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    if pooling in ("mean", "weightedmean"):
        return (summed / counts).to(hidden_states.dtype)
    if pooling == "mean_sqrt_len":
        return (summed / counts.sqrt()).to(hidden_states.dtype)
    raise ValueError(
        f"pooling={pooling!r} is not one of ['mean', 'cls', 'max', 'mean_sqrt_len', 'weightedmean', 'lasttoken']."
    )


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


class SiameseProjection(nn.Module):
    """A dense layer after pooling: `activation(linear(x))` (sentence-transformers' `Dense`)."""

    ACTIVATIONS = {
        "identity": nn.Identity,
        "tanh": nn.Tanh,
        "relu": nn.ReLU,
        "gelu": nn.GELU,
        "sigmoid": nn.Sigmoid,
        "silu": nn.SiLU,
    }

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "identity") -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = self.ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


def filled_columns(attention_mask: torch.Tensor) -> slice | torch.Tensor:
    """The sequence positions where at least one row of `attention_mask` `(batch, seq_len)` has a token: a slice when
    they are contiguous from 0 (right padding), else their indices (left padding). Cutting to them drops only
    padding shared by the whole batch."""
    keep = attention_mask.bool().any(dim=0)
    width = int(keep.sum())
    return slice(0, width) if bool(keep[:width].all()) else keep.nonzero().squeeze(-1)


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


class SiameseBertModel(SiameseEncodingMixin, SiameseBertPreTrainedModel):
    """Encoder + pooling [+ L2 normalization] [+ softmax classifier head over pair features].

    Call it on `(batch, seq_len)` inputs to embed texts, or on `(batch, num_texts, seq_len)` inputs (a pair, a
    triplet, ... per row) to embed all of them; for pairs the output also holds their similarity and, with a head,
    the classifier logits. Grouped inputs run packed (all texts end to end in one encoder call, no padding work: see
    packing.py) when the encoder allows it and `model.packing` is True (the default), else one encoder call
    per column, each cut to its own longest text. Both give the same embeddings.
    """

    def __init__(self, config: SiameseBertConfig, encoder: PreTrainedModel | None = None) -> None:
        # PreTrainedModel.__init__ sets the attention implementation of sub-configs (the encoder's may be this
        # encoder's own config object) and can leave it None; the encoder then masks nothing in padded batches.
        encoder_attention = getattr(encoder.config, "_attn_implementation", None) if encoder is not None else None
        super().__init__(config)
        # from_pretrained(..., truncate_dim=...) sets fields after the config checked itself: check again.
        config.validate_siamese_fields()
        if encoder is None:
            encoder = AutoModel.from_config(config.encoder_config)
        config.encoder_config = encoder.config
        if getattr(encoder.config, "_attn_implementation", None) is None:
            fallback = "sdpa" if getattr(encoder, "_supports_sdpa", False) else "eager"
            encoder.config._attn_implementation = encoder_attention or fallback
        # Sentence embeddings never use BERT's next-sentence pooler; dropping it saves parameters and keeps
        # distributed training free of unused parameters.
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None
        self.encoder = encoder
        self._encoder_arguments = set(inspect.signature(encoder.forward).parameters)
        # Decoder encoders (Qwen2, Llama) would build a key/value cache on every call; embeddings never use it.
        if getattr(encoder.config, "use_cache", None):
            encoder.config.use_cache = False
        self.projections = nn.ModuleList(SiameseProjection(**projection) for projection in config.projections)
        if config.classifier_head:
            self.classifier = nn.Linear(len(config.classifier_features) * config.embedding_size, config.num_labels)
        else:
            self.classifier = None
        if config.cosine_affine:
            self.cosine_affine_weight = nn.Parameter(torch.ones(()))
            self.cosine_affine_bias = nn.Parameter(torch.zeros(()))
        else:
            self.cosine_affine_weight = None
            self.cosine_affine_bias = None
        self.tokenizer = None
        # Run grouped inputs packed where the encoder allows it (an execution choice: embeddings are the same).
        self.packing = True
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
        prompt_length: int | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> SiameseBertOutput:
        """Embed texts.

        Args:
            input_ids: `(batch, seq_len)`, or `(batch, num_texts, seq_len)` for grouped texts (pairs, triplets).
            attention_mask: same shape as `input_ids`; defaults to all ones.
            token_type_ids, position_ids: same shape as `input_ids`; passed to encoders that accept them.
            inputs_embeds: `(batch, [num_texts,] seq_len, hidden)` instead of `input_ids`.
            prompt_length: number of leading prompt tokens in each text: an int, or a `(batch,)` /
                `(batch, num_texts)` tensor. Left out of the pooling when `config.include_prompt` is False.
            text_lengths (keyword): real tokens per text of a right-padded grouped batch, computed on the host: packing
                then reads nothing back from the device (packing.py).
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None:
            raise ValueError("SiameseBertModel.forward needs `input_ids` or `inputs_embeds`.")
        grouped = reference.dim() == (4 if input_ids is None else 3)
        lead = reference.shape[:2] if grouped else reference.shape[:1]
        seq_len = reference.shape[2 if grouped else 1]
        if attention_mask is None:
            attention_mask = torch.ones(*lead, seq_len, dtype=torch.long, device=reference.device)
        text_lengths = kwargs.pop("text_lengths", None)
        extra = {"output_hidden_states": output_hidden_states, "output_attentions": output_attentions, **kwargs}
        if self.config.include_prompt:
            prompt_length = None
        if not grouped:
            embeddings, encoded = self._embed(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, prompt_length, **extra
            )
            return SiameseBertOutput(
                sentence_embedding=embeddings,
                last_hidden_state=encoded.last_hidden_state,
                hidden_states=encoded.hidden_states if output_hidden_states else None,
                attentions=encoded.attentions if output_attentions else None,
            )

        # Left-padded texts keep the padded path: BERT counts their positions from the padding, packing would not.
        packable = position_ids is None and inputs_embeds is None and not (output_hidden_states or output_attentions)
        right_padded = text_lengths is not None or bool(attention_mask[..., 0].all())
        if self.packing and packable and can_pack(self.encoder) and right_padded:
            embeddings = self._embed_packed(
                input_ids, attention_mask, token_type_ids, prompt_length, text_lengths, **kwargs
            )
        else:
            embeddings = self._embed_columns(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, prompt_length, **extra
            )

        similarity = logits = None
        if lead[1] == 2:
            u, v = embeddings[:, 0], embeddings[:, 1]
            similarity = self.pair_similarity(u, v)
            if self.classifier is not None:
                logits = self.classify(u, v)
        return SiameseBertOutput(sentence_embedding=embeddings, similarity=similarity, logits=logits)

    def _embed_columns(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        prompt_length: int | torch.Tensor | None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Grouped inputs, one encoder call per text column (anchors, positives, ...), each cut to its own longest
        text: the collator pads all texts of a batch together, and short hypotheses padded to long premises would
        double the work and the activation memory. -> `(batch, num_texts, embedding)`."""
        columns = []
        for j in range(attention_mask.shape[1]):
            column = [None if t is None else t[:, j] for t in (input_ids, token_type_ids, position_ids, inputs_embeds)]
            mask = attention_mask[:, j]
            index = filled_columns(mask)
            column = [None if t is None else t[:, index] for t in column]
            mask = mask[:, index]
            ids, types, positions, embeds = column
            column_prompt = prompt_length[:, j] if isinstance(prompt_length, torch.Tensor) else prompt_length
            columns.append(self._embed(ids, mask, types, positions, embeds, column_prompt, **kwargs)[0])
        return torch.stack(columns, dim=1)

    def _embed_packed(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        prompt_length: int | torch.Tensor | None,
        text_lengths: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Grouped inputs `(batch, num_texts, seq_len)`, all texts packed into one encoder call (on the route of the
        encoder's attention implementation: packing.py) -> `(batch, num_texts, embedding)`."""
        batch, num_texts = attention_mask.shape[:2]
        flat = [None if t is None else t.reshape(batch * num_texts, -1) for t in (input_ids, token_type_ids)]
        if "token_type_ids" not in self._encoder_arguments:
            flat[1] = None
        mask = attention_mask.reshape(batch * num_texts, -1)
        packed = pack_for_encoder(self.encoder, flat[0], mask, flat[1], text_lengths)
        encoder_inputs = {
            "input_ids": packed.input_ids,
            "attention_mask": packed.attention_mask,
            "position_ids": packed.position_ids,
            **packed.attention_kwargs,
            **kwargs,
        }
        if packed.token_type_ids is not None:
            encoder_inputs["token_type_ids"] = packed.token_type_ids
        states = self.encoder(**encoder_inputs, return_dict=True).last_hidden_state
        if isinstance(prompt_length, torch.Tensor):
            prompt_length = prompt_length.reshape(batch * num_texts)
        embeddings = self._head(unpack_states(states, packed), packed.text_mask, prompt_length)
        return embeddings.view(batch, num_texts, -1)

    def _head(
        self, states: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int | torch.Tensor | None
    ) -> torch.Tensor:
        """Pooling [+ projections] [+ truncation] [+ normalize] of token states -> sentence embeddings."""
        embeddings = pool_token_states(states, attention_mask, self.config.pooling, prompt_length)
        for projection in self.projections:
            embeddings = projection(embeddings)
        if self.config.truncate_dim is not None:
            embeddings = embeddings[..., : self.config.truncate_dim]
        if self.config.normalize:
            embeddings = F.normalize(embeddings, p=2, dim=-1)
        return embeddings

    def _embed(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        prompt_length: int | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Any]:
        """Encoder + pooling [+ projections] [+ normalize] on `(batch, seq_len)` inputs -> `(batch, embedding)`,
        encoder output."""
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
        return self._head(encoded.last_hidden_state, attention_mask, prompt_length), encoded

    def pair_similarity(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Row-wise similarity of `u` and `v` (`(batch, hidden)` each) -> `(batch,)`, with the affine map if any."""
        similarity = self.config.similarity
        if similarity == "cosine":
            scores = F.cosine_similarity(u, v, dim=-1)
        elif similarity == "dot":
            scores = (u * v).sum(dim=-1)
        else:  # distances, negated so that larger means more similar
            scores = -(u - v).norm(p=2 if similarity == "euclidean" else 1, dim=-1)
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
        """All-pairs similarity `(n, m)` of `a` `(n, hidden)` and `b` `(m, hidden)` under `config.similarity`
        (`euclidean` and `manhattan` as negative distances)."""
        similarity = self.config.similarity
        if similarity in ("euclidean", "manhattan"):
            return -torch.cdist(a.float(), b.float(), p=2.0 if similarity == "euclidean" else 1.0)
        if similarity == "cosine":
            a, b = F.normalize(a, p=2, dim=-1), F.normalize(b, p=2, dim=-1)
        return a @ b.transpose(-1, -2)

    @classmethod
    def from_encoder(
        cls,
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
    ) -> SiameseBertModel:
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
        try:
            from hf_siamese.formats.sentence_transformers_read import read_layout
        except ImportError:  # running as remote code without hf-siamese: a plain encoder checkpoint
            read_layout = None
        if read_layout is not None:
            hub_kwargs = {
                k: from_pretrained_kwargs[k]
                for k in ("revision", "token", "cache_dir", "local_files_only")
                if k in from_pretrained_kwargs
            }
            layout = read_layout(source, **hub_kwargs)
            if layout is not None:
                settings, projection_state, encoder_kwargs = (
                    layout.settings,
                    layout.projection_state,
                    layout.encoder_kwargs,
                )
        encoder = AutoModel.from_pretrained(source, **{**encoder_kwargs, **from_pretrained_kwargs})
        if isinstance(encoder, SiameseBertModel):
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


__all__ = ["SiameseBertModel", "SiameseBertPreTrainedModel", "SiameseBertOutput", "pool_token_states"]
