"""SparseSiameseModel: a masked-language-model encoder whose vocabulary logits become learned term weights (SPLADE),
one sparse vector per text, as wide as the vocabulary and scored by dot product; and its inference-free form, where
queries skip the encoder and take one learned weight per vocabulary term they contain.

This file is copied next to the weights when a model is saved (remote code), so it imports only its own set (the
configuration, sparse_csr, sparse_head, sparse_pooling, the encoding it shares with the multi-vector model in
text_encoding.py), the dense set (for CSR) and public libraries.

The document (and SPLADE query) vector of a text with tokens t_1..t_n, for vocabulary term j:

    w_j = pool_i act(logit_ij),   act(x) = log(1 + ReLU(x)),   pool = max (or sum) over the text's real tokens

and `max_active_dims` keeps a vector's largest weights only. An inference-free query's vector is w_j = q_j for every
term j among its tokens (each counted once; no special tokens), q being the model's `query_weights`. A CSR model
(`architecture="csr"`) holds a dense `SiameseBertModel` and a top-k sparse autoencoder over its sentence embedding
instead (sparse_csr.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_sparse import SparseSiameseConfig
from .modeling_siamese import settle_attention
from .sparse_csr import SparseAutoEncoder, build_dense, csr_vectors, load_dense
from .sparse_head import pass_through_head
from .sparse_pooling import encoder_term_weights, keep_largest
from .text_encoding import (
    TextEncoding,
    checked_texts,
    evaluating,
    longest_first,
    rows_in_input_order,
    token_limit,
    used_width,
)

TASKS = ("query", "document")


@dataclass
class SparseSiameseOutput(ModelOutput):
    """`sparse_embedding`: `(batch, vocab)` term weights (a dense tensor, mostly zeros), `(batch, num_texts, vocab)`
    for grouped inputs; `sentence_embedding`: the same tensor, under the name the training losses read. CSR also
    gives `dense_embedding` (the dense model's sentence embedding) and `pre_activation` (the latents before top-k)."""

    sparse_embedding: torch.FloatTensor | None = None
    sentence_embedding: torch.FloatTensor | None = None
    dense_embedding: torch.FloatTensor | None = None
    pre_activation: torch.FloatTensor | None = None


def looked_up_weights(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    weights: torch.Tensor,
    ignore_ids: Sequence[int] | None,
    max_active_dims: int | None,
) -> torch.Tensor:
    """Inference-free query vectors: `weights` (one per vocabulary term) of each term the `(batch, seq_len)` ids hold
    (each counted once; padding and `ignore_ids` left out), then each row's `max_active_dims` largest kept."""
    present = torch.zeros(input_ids.shape[0], weights.shape[0], device=input_ids.device)
    present = present.scatter(1, input_ids, attention_mask.to(present.dtype))
    if ignore_ids:
        present[:, torch.tensor(ignore_ids, device=input_ids.device)] = 0
    return keep_largest(present * weights, max_active_dims)


class SparseSiamesePreTrainedModel(TextEncoding, PreTrainedModel):
    config_class = SparseSiameseConfig
    config: SparseSiameseConfig
    base_model_prefix = "sparse"
    accepts_loss_kwargs = False
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel and initialises itself; the query table starts at 1 for every term; a
        # CSR autoencoder starts as a new nn.Linear with zero biases.
        from transformers import initialization as init

        if isinstance(module, SparseSiameseModel) and module.query_weights is not None:
            init.ones_(module.query_weights)
        if isinstance(module, SparseAutoEncoder):
            init.zeros_(module.pre_bias)
            init.zeros_(module.latent_bias)
            init.kaiming_uniform_(module.encoder.weight, a=math.sqrt(5))


class SparseSiameseModel(SparseSiamesePreTrainedModel):
    """Masked-language encoder -> term weights -> pooled sparse vector (see the module docstring).

    Call it on `(batch, seq_len)` token ids for document (or SPLADE query) vectors; `query_vectors` gives an
    inference-free model's query vectors. `encode` tokenizes, batches and returns sparse tensors; `decode` shows a
    vector as its (token, weight) pairs.
    """

    def __init__(
        self, config: SparseSiameseConfig, encoder: PreTrainedModel | None = None, dense: PreTrainedModel | None = None
    ) -> None:
        # PreTrainedModel.__init__ sets the attention implementation of sub-configs and can leave it None (the
        # encoder's config may be this one's sub-config); the encoder then masks nothing in padded batches.
        encoder_attention = getattr(encoder.config, "_attn_implementation", None) if encoder is not None else None
        super().__init__(config)
        config.validate_sparse_fields()
        self.tokenizer = None
        if config.architecture == "csr":  # a dense model and an autoencoder, no masked-language encoder
            self.encoder = self.query_weights = None
            self.dense = dense if dense is not None else build_dense(config)
            config.dense_config = self.dense.config.to_dict()
            self.autoencoder = SparseAutoEncoder(config.dense_size, config.hidden_dim, config.normalize)
            self.post_init()
            return
        self.dense = self.autoencoder = None
        if encoder is None:
            encoder = AutoModelForMaskedLM.from_config(config.encoder_config)
        config.encoder_config = encoder.config
        settle_attention(encoder, encoder_attention)
        self.encoder = encoder
        vocab = int(encoder.config.vocab_size)
        self.query_weights = nn.Parameter(torch.ones(vocab)) if config.architecture == "inference_free" else None
        self.tokenizer = None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return (self.dense or self.encoder).get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        (self.dense or self.encoder).set_input_embeddings(value)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> SparseSiameseOutput:
        """Document (and SPLADE query) vectors of `(batch, seq_len)` inputs -> `(batch, vocab)` term weights.

        Grouped inputs `(batch, num_texts, seq_len)` (the training collator's rows: query, positive[, negatives])
        give `(batch, num_texts, vocab)`; the first text of each row is the query, which an inference-free model
        looks up in its query weights (the others run through the encoder)."""
        text_lengths = kwargs.pop("text_lengths", None)  # the collator's host lengths: each column's own width
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if self.autoencoder is not None:
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            vectors = csr_vectors(self, input_ids, attention_mask, **kwargs)
            return SparseSiameseOutput(sentence_embedding=vectors["sparse_embedding"], **vectors)
        kwargs.pop("max_active_dims", None)
        if input_ids.dim() == 3:
            return self._grouped(input_ids, attention_mask, token_type_ids, text_lengths, **kwargs)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, **kwargs}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        config = self.config
        vectors = encoder_term_weights(self.encoder, inputs, config.pooling, config.activation, config.max_active_dims)
        return SparseSiameseOutput(sparse_embedding=vectors, sentence_embedding=vectors)

    def _grouped(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        text_lengths: list[list[int]] | None = None,
        **kwargs: Any,
    ) -> SparseSiameseOutput:
        """The queries (column 0) and the documents (the other columns) encoded apart, each cut to its own longest
        text: the collator pads a row's texts to the longest of all, and a claim padded to an abstract's 256 tokens
        cost as much as the abstract (1.5x the step on SciFact)."""
        batch, texts, _ = input_ids.shape
        first = 1 if self.query_weights is not None else 0  # columns looked up rather than encoded
        parts = []
        if first:
            parts.append(self.query_vectors(input_ids[:, 0], attention_mask[:, 0])[:, None])
        for start, stop in ((0, 1), (1, texts)) if not first else ((1, texts),):
            if start >= stop:
                continue
            lengths = None if text_lengths is None else [n for row in text_lengths for n in row[start:stop]]
            pad_id = getattr(self.encoder.config, "pad_token_id", None)
            width = used_width(input_ids[:, start:stop], attention_mask[:, start:stop], pad_id, lengths)
            cut = [t[:, start:stop, :width].reshape(-1, width) if t is not None else None
                   for t in (input_ids, attention_mask, token_type_ids)]  # fmt: skip
            encoded = self(*cut, **kwargs).sparse_embedding
            parts.append(encoded.view(batch, stop - start, -1))
        vectors = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        return SparseSiameseOutput(sparse_embedding=vectors, sentence_embedding=vectors)

    def query_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """An inference-free model's query vectors: `query_weights` of each vocabulary term the query holds (each
        counted once; padding ignored), from `(batch, seq_len)` ids tokenized without special tokens."""
        if self.query_weights is None:
            raise ValueError(
                f"query_vectors: this model's architecture is {self.config.architecture!r}; its queries run through "
                "the encoder (call the model); only architecture='inference_free' has a query weight table"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        config = self.config
        return looked_up_weights(
            input_ids, attention_mask, self.query_weights, config.query_ignore_ids, config.max_active_dims
        )

    # ------------------------------------------------------------------------------------------------ encoding

    def _token_limit(self, tokenizer: Any) -> int:
        own = self.dense.config.effective_max_seq_length if self.dense is not None else None
        return token_limit(self.config, tokenizer, own)

    @torch.no_grad()
    def encode(
        self,
        texts: str | Sequence[str],
        tokenizer: Any = None,
        *,
        task: str = "document",
        batch_size: int = 32,
        max_active_dims: int | None = None,
        convert_to_sparse_tensor: bool = True,
        prompt: str | None = None,
    ) -> torch.Tensor:
        """Sparse vectors of `texts` (one string: one vector): a `(n, vocab)` coalesced sparse COO tensor on the CPU
        (`convert_to_sparse_tensor=False`: dense). `task`: "document" or "query" (an inference-free model's queries
        take its query weight table; the config's prompt for the task is put first unless `prompt` is given).
        `max_active_dims` overrides the config's."""
        single, items = checked_texts(texts, task, TASKS, batch_size)
        tokenizer = self._resolve_tokenizer(tokenizer)
        prefix = self._task_prompt(task, prompt)
        lookup = task == "query" and self.query_weights is not None
        limit = self._token_limit(tokenizer)
        device = next(self.parameters()).device
        rows = []
        batches = longest_first(items, batch_size)
        with evaluating(self):
            for chosen in batches:
                tokens = tokenizer(
                    [prefix + items[i] for i in chosen], padding=True, truncation=True, max_length=limit,
                    return_tensors="pt", add_special_tokens=not lookup,
                )  # fmt: skip
                tokens = {k: v.to(device) for k, v in tokens.items()}
                if lookup:
                    vectors = self.query_vectors(tokens["input_ids"], tokens["attention_mask"])
                elif self.autoencoder is not None:  # CSR's top-k takes the cap itself, as sentence-transformers'
                    vectors = self(**tokens, max_active_dims=max_active_dims).sparse_embedding
                else:
                    vectors = self(**tokens).sparse_embedding
                rows.append(keep_largest(vectors.float(), max_active_dims).cpu())
        dense = rows_in_input_order(rows, batches, self.config.vector_size)
        result = dense.to_sparse().coalesce() if convert_to_sparse_tensor else dense
        return result[0] if single else result

    @staticmethod
    def similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Dot products of two sets of vectors (sparse or dense, `(n, vocab)` and `(m, vocab)`) -> `(n, m)`."""
        a = a.to_dense() if a.is_sparse else a
        b = b.to_dense() if b.is_sparse else b
        return a.reshape(-1, a.shape[-1]).float() @ b.reshape(-1, b.shape[-1]).float().T

    def decode(self, vectors: torch.Tensor, tokenizer: Any = None, top_k: int | None = None) -> Any:
        """A vector as its (token, weight) pairs, largest first (`top_k`: the first so many); a `(n, vocab)` batch
        gives a list per row. Why a query matched a document: the tokens both hold."""
        if self.config.architecture == "csr":
            raise ValueError(
                "decode: a CSR model's vector dimensions are autoencoder latents, not vocabulary tokens; there are no "
                "tokens to show (architecture='csr')"
            )
        tokenizer = self._resolve_tokenizer(tokenizer)
        dense = vectors.to_dense() if vectors.is_sparse else vectors
        rows = dense.reshape(-1, dense.shape[-1]).float().cpu()
        decoded = []
        for row in rows:
            active = torch.nonzero(row, as_tuple=True)[0]
            order = active[torch.argsort(row[active], descending=True, stable=True)]
            order = order[:top_k] if top_k is not None else order
            tokens = tokenizer.convert_ids_to_tokens(order.tolist())
            decoded.append([(token, float(row[i])) for token, i in zip(tokens, order.tolist(), strict=True)])
        return decoded[0] if dense.dim() == 1 else decoded

    # ------------------------------------------------------------------------------------------------ building

    @classmethod
    def from_encoder(
        cls,
        path: str,
        *,
        architecture: str = "splade",
        pooling: str = "max",
        activation: str = "log1p_relu",
        max_active_dims: int | None = None,
        max_seq_length: int | None = None,
        **kwargs: Any,
    ) -> SparseSiameseModel:
        """A sparse model from an encoder checkpoint (Hub id or folder) with or without a masked-language head. One
        saved without a head (all-MiniLM-L6-v2, most sentence encoders) gets BERT's head with its decoder tied to the
        encoder's own word embeddings, started as a pass-through of the last hidden state (sparse_head.py), and
        `config.head_note` (and so the model card) says so."""
        encoder, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True, **kwargs)
        head_missing = [key for key in info.get("missing_keys", []) if not key.startswith(encoder.base_model_prefix)]
        note = None
        if head_missing and pass_through_head(encoder):
            note = (
                f"{path} has no masked-language head: its decoder is tied to the encoder's word embeddings and the "
                "head starts as a pass-through of the last hidden state (identity transform, a negative bias that "
                "leaves the few terms nearest each token active), trained from there"
            )
        elif head_missing:
            note = (
                f"{path} has no masked-language head: the head's transform is new (random) and its decoder is tied to "
                "the encoder's word embeddings; term weights mean little before training"
            )
        ignore: list[int] = []
        try:
            from transformers import AutoTokenizer

            ignore = sorted(set(AutoTokenizer.from_pretrained(path).all_special_ids))
        except (OSError, ValueError):  # no tokenizer beside the weights: queries are looked up as tokenized
            pass
        config = SparseSiameseConfig(
            encoder_config=encoder.config, architecture=architecture, pooling=pooling, activation=activation,
            max_active_dims=max_active_dims, max_seq_length=max_seq_length, head_note=note, query_ignore_ids=ignore,
        )  # fmt: skip
        model = cls(config, encoder=encoder)
        model.config.name_or_path = str(path)
        return model

    @classmethod
    def from_dense(
        cls,
        dense: Any,
        *,
        hidden_dim: int | None = None,
        k: int | None = None,
        k_aux: int | None = None,
        normalize: bool = False,
        max_active_dims: int | None = None,
        **kwargs: Any,
    ) -> SparseSiameseModel:
        """A CSR model over a dense one: `dense` a `SiameseBertModel` or its folder / Hub id (a sentence-transformers
        checkpoint or plain encoder too). The autoencoder is new (zero biases, the encoder weight as a new
        `nn.Linear`), as sentence-transformers converts a dense model: its vectors mean little before training.
        Defaults: `hidden_dim` 4 x the dense embedding size, `k` a quarter of it, `k_aux` half."""
        model_dense = load_dense(dense, **kwargs)
        config = SparseSiameseConfig(
            architecture="csr", dense_config=model_dense.config.to_dict(), hidden_dim=hidden_dim, k=k, k_aux=k_aux,
            normalize=normalize, max_active_dims=max_active_dims,
            prompts={t: p for t, p in (model_dense.config.prompts or {}).items() if t in TASKS},
        )  # fmt: skip
        model = cls(config, dense=model_dense)
        model.autoencoder.reset()
        model.tokenizer = getattr(model_dense, "tokenizer", None)
        model.config.name_or_path = str(model_dense.config.name_or_path or "")
        return model

    @torch.no_grad()
    def init_query_weights_from_idf(self, documents: Iterable[str], tokenizer: Any = None) -> None:
        """Set an inference-free model's query weights to each term's inverse document frequency over `documents`
        (BM25's idf, log(1 + (N - df + 0.5) / (df + 0.5))); terms no document holds get the largest idf."""
        if self.query_weights is None:
            raise ValueError("init_query_weights_from_idf: only architecture='inference_free' has query weights")
        tokenizer = self._resolve_tokenizer(tokenizer)
        counts = torch.zeros(self.query_weights.shape[0], dtype=torch.float64)
        total = 0
        for text in documents:
            ids = tokenizer(text, add_special_tokens=False, truncation=True, max_length=self._token_limit(tokenizer))
            counts[torch.tensor(sorted(set(ids["input_ids"])), dtype=torch.long)] += 1
            total += 1
        if total == 0:
            raise ValueError("init_query_weights_from_idf: no documents given")
        idf = torch.log1p((total - counts + 0.5) / (counts + 0.5))
        self.query_weights.copy_(idf.to(self.query_weights.dtype))


__all__ = ["SparseSiameseModel", "SparseSiameseOutput", "looked_up_weights"]
