"""A masked-language head for an encoder saved without one (all-MiniLM-L6-v2, most sentence encoders), started so
that its term weights mean something before training.

BERT's head is transform (dense -> GELU -> LayerNorm) then a decoder tied to the word embeddings. A random transform
makes every vocabulary term active (about 30,500 of 30,522) with meaningless weights. The last hidden state of a
token, though, lies near the word embeddings of that token and its neighbours in meaning, so the head is started as a
pass-through: the dense layer the identity with a constant shift that keeps GELU in its linear range (the LayerNorm
removes the shift again), the LayerNorm plain, so the logits are LayerNorm(h) . E_v; and the decoder's bias one
negative constant, -5.5 x the root-mean-square norm of the word embeddings (about the logits' spread), so that only
the few terms nearest each token pass the ReLU: a few hundred a document of 250 tokens.
"""

from __future__ import annotations

import torch
from torch import nn

SHIFT = 10.0  # GELU(x + 10) = x + 10 to 1e-6 for the |x| < 6 of a BERT-family last hidden state
BIAS_SPREADS = 5.5  # the decoder bias, in root-mean-square word-embedding norms


@torch.no_grad()
def pass_through_head(encoder: nn.Module) -> bool:
    """Start `encoder`'s BERT-style masked-language head as a pass-through of the last hidden state (see the module
    docstring). Returns False, touching nothing, for a head of another shape (its random start is kept)."""
    head = getattr(getattr(encoder, "cls", None), "predictions", None)
    transform = getattr(head, "transform", None)
    dense = getattr(transform, "dense", None)
    norm = getattr(transform, "LayerNorm", None)
    decoder = getattr(head, "decoder", None)
    if not all(isinstance(m, nn.Module) for m in (dense, norm, decoder)):
        return False
    if dense.weight.shape[0] != dense.weight.shape[1] or getattr(head, "bias", None) is None:
        return False
    dense.weight.copy_(torch.eye(dense.weight.shape[0], dtype=dense.weight.dtype))
    dense.bias.fill_(SHIFT)
    norm.weight.fill_(1.0)
    norm.bias.zero_()
    spread = decoder.weight.float().norm(dim=1).pow(2).mean().sqrt()
    head.bias.fill_(float(-BIAS_SPREADS * spread))
    if getattr(decoder, "bias", None) is not None and decoder.bias is not head.bias:
        decoder.bias.copy_(head.bias)
    return True


__all__ = ["pass_through_head"]
