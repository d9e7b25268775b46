"""CSR (Contrastive Sparse Representation, "Beyond Matryoshka", Wen et al. 2025): a top-k sparse autoencoder over a
dense model's sentence embedding, the third architecture of `SparseSiameseModel` (`architecture="csr"`).

This file is copied next to the weights when a sparse model is saved (remote code), so it imports only the model
files it needs (the dense `SiameseBertModel` and its set) and public libraries.

For a dense sentence embedding x (standardised first, (x - mean) / (std + 1e-5), when the config says `normalize`):

    pre = (x - pre_bias) @ W.T + latent_bias,   z = ReLU(topk(pre, k))   (the other latents zero)

z is the sparse vector, `hidden_dim` wide. The decoder is tied: x_hat = z @ W + pre_bias (then un-standardised).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_siamese import SiameseBertConfig
from .modeling_siamese import SiameseBertModel


class SparseAutoEncoder(nn.Module):
    """The autoencoder's parameters: `pre_bias` [d], `latent_bias` [h], `encoder.weight` [h, d] (the decoder is its
    transpose, tied)."""

    def __init__(self, input_dim: int, hidden_dim: int, normalize: bool = False) -> None:
        super().__init__()
        self.normalize = normalize
        self.pre_bias = nn.Parameter(torch.zeros(input_dim))
        self.latent_bias = nn.Parameter(torch.zeros(hidden_dim))
        self.encoder = nn.Linear(input_dim, hidden_dim, bias=False)

    def reset(self) -> None:
        """Fresh weights: both biases zero, the encoder as a new `nn.Linear` (uniform, bound 1 / sqrt(d))."""
        with torch.no_grad():
            self.pre_bias.zero_()
            self.latent_bias.zero_()
            nn.init.kaiming_uniform_(self.encoder.weight, a=math.sqrt(5))

    def standardise(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """x standardised along its last dimension when `normalize` (with the mean and std to undo it)."""
        if not self.normalize:
            return x, {}
        mean = x.mean(dim=-1, keepdim=True)
        centred = x - mean
        std = centred.std(dim=-1, keepdim=True)
        return centred / (std + 1e-5), {"mean": mean, "std": std}

    def pre_activation(self, x: torch.Tensor) -> torch.Tensor:
        """(x - pre_bias) @ W.T + latent_bias, for x already standardised."""
        return F.linear(x - self.pre_bias, self.encoder.weight, self.latent_bias)

    @staticmethod
    def codes(pre: torch.Tensor, k: int, mask: torch.Tensor | None = None) -> torch.Tensor:
        """ReLU of the `k` largest (signed) pre-activations of each row, zero elsewhere (`mask`: latents allowed)."""
        values = pre * mask if mask is not None else pre
        top = torch.topk(values, min(k, values.shape[-1]), dim=-1)
        return torch.zeros_like(values).scatter(-1, top.indices, top.values).relu()

    def decode(self, codes: torch.Tensor, stats: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The tied decoder: codes @ W + pre_bias, un-standardised when `stats` holds the mean and std."""
        decoded = codes @ self.encoder.weight + self.pre_bias
        if stats:
            decoded = decoded * stats["std"] + stats["mean"]
        return decoded

    def forward(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(sparse codes, pre-activations) of dense embeddings `(..., d)`."""
        prepared, _ = self.standardise(x)
        pre = self.pre_activation(prepared)
        return self.codes(pre, k), pre


def build_dense(config: Any) -> SiameseBertModel:
    """A fresh dense model from a CSR config's `dense_config`."""
    settings = dict(config.dense_config)
    if not settings.get("classifier_head"):  # saved label names alone would make SiameseBertConfig add a head
        settings.pop("id2label", None)
        settings.pop("label2id", None)
    return SiameseBertModel(SiameseBertConfig.from_dict(settings))


def load_dense(source: Any, **kwargs: Any) -> SiameseBertModel:
    """A dense model: `source` itself when it is one, else loaded from a folder or Hub id (a `SiameseBertModel`
    save, a sentence-transformers checkpoint or a plain encoder, through `SiameseBertModel.from_encoder`)."""
    if isinstance(source, SiameseBertModel):
        return source
    try:
        from transformers import AutoConfig

        is_ours = isinstance(AutoConfig.from_pretrained(source, **kwargs), SiameseBertConfig)
    except (OSError, ValueError):
        is_ours = False
    if is_ours:
        return SiameseBertModel.from_pretrained(source, **kwargs)
    return SiameseBertModel.from_encoder(source, **kwargs)


def csr_vectors(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
    """The CSR forward of a `SparseSiameseModel`: dense embeddings of `(batch[, texts], seq)` inputs, then the
    autoencoder. Returns `sparse_embedding`, `dense_embedding` (x) and `pre_activation`."""
    k = kwargs.pop("max_active_dims", None) or model.config.max_active_dims or model.config.k
    dense = model.dense(input_ids=input_ids, attention_mask=attention_mask, **kwargs).sentence_embedding
    codes, pre = model.autoencoder(dense, k)
    return {"sparse_embedding": codes, "dense_embedding": dense, "pre_activation": pre}


__all__ = ["SparseAutoEncoder", "build_dense", "csr_vectors", "load_dense"]
