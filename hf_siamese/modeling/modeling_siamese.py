"""SiameseBert: a BERT-family encoder turned into a sentence encoder (Sentence-BERT).

The file reads top to bottom: the output dataclass, the pretrained base class, then `SiameseBertModel`. Its parts
live beside it: the layers after the encoder in `pooling.py`, `encode()` in `encoding.py`, packed execution in
`packing.py`, `from_encoder` / `save_pretrained` / `push_to_hub` in `checkpoints.py`. It imports only public libraries
and those sibling files, because `save_pretrained` copies them next to the weights: Hub users load them as remote code
with `trust_remote_code=True`.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

from .attention_kernels import register_varlen_attention  # noqa: F401 - importing registers attn_implementation="varlen_attn"
from .checkpoints import SiameseCheckpointMixin, check_model_source
from .configuration_siamese import SiameseBertConfig
from .encoding import SiameseEncodingMixin
from .packing import can_pack, pack_for_encoder, unpack_states
from .pooling import SiameseProjection, filled_columns, pair_features, pool_token_states

logger = logging.getLogger(__name__)

# Parameters that never touch the sentence embedding: the softmax head and the cosine affine of regression losses.
HEAD_PARAMETER_PREFIXES = ("classifier.", "cosine_affine_")


def settle_attention(encoder: nn.Module, before: str | None) -> None:
    """Give `encoder` an attention implementation where the wrapping model's `PreTrainedModel.__init__` left it None
    (it sets sub-configs' and can clear the encoder's own): `before` (what the encoder had), else SDPA where the encoder
    supports it, else eager. Without one the encoder would mask nothing in padded batches."""
    if getattr(encoder.config, "_attn_implementation", None) is None:
        fallback = "sdpa" if getattr(encoder, "_supports_sdpa", False) else "eager"
        encoder.config._attn_implementation = before or fallback


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


class SiameseBertModel(SiameseEncodingMixin, SiameseCheckpointMixin, SiameseBertPreTrainedModel):
    """Encoder + pooling (+ L2 normalization) (+ softmax classifier head over pair features).

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
        settle_attention(encoder, encoder_attention)
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
            token_type_ids: same shape as `input_ids`; passed to encoders that accept it.
            position_ids: same shape as `input_ids`; passed to encoders that accept it.
            inputs_embeds: `(batch, [num_texts,] seq_len, hidden)` instead of `input_ids`.
            prompt_length: number of leading prompt tokens in each text: an int, or a `(batch,)` /
                `(batch, num_texts)` tensor. Left out of the pooling when `config.include_prompt` is False.

        Keyword Args:
            text_lengths (torch.Tensor): real tokens per text of a right-padded grouped batch, computed on the host:
                packing then reads nothing back from the device (packing.py).
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
        states = self.encoder(**packed.encoder_inputs(), **kwargs, return_dict=True).last_hidden_state
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


# Names other modules import from here (the model file is where users and hf_siamese look for them).
__all__ = [
    "HEAD_PARAMETER_PREFIXES",
    "SiameseBertModel",
    "SiameseBertOutput",
    "SiameseBertPreTrainedModel",
    "SiameseProjection",
    "check_model_source",
    "filled_columns",
    "pool_token_states",
]
