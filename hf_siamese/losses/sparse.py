"""In-batch negatives for sparse vectors (SPLADE), with the FLOPS regulariser that keeps them sparse."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .base import SiameseLoss, non_negative_number, positive_number


def flops(vectors: torch.Tensor) -> torch.Tensor:
    """The FLOPS regulariser of a batch of term-weight vectors `(n, vocab)`: sum over terms of the squared mean
    weight, sum_j (mean_i w_ij)^2 (Paria et al. 2020), the expected cost of an inverted-index dot product; it pushes
    the weights of common terms to zero."""
    return (vectors.float().mean(dim=0) ** 2).sum()


class FlopsRegularizedLoss(SiameseLoss):
    """The base of the SPLADE-style losses: a ranking or distillation term (the subclass's `forward`) plus the FLOPS
    regulariser of the documents and, where queries run through the encoder (SPLADE; not an inference-free model,
    whose queries are looked up in its `query_weights`), of the queries:

        regularizer = f(progress) * (document_regularizer * FLOPS(d) + query_regularizer * FLOPS(q))

    f rises quadratically from 0 to 1 over the first `warmup_ratio` of the training steps (the regulariser at full
    weight from the first step collapses every weight to zero), as SPLADE trains; the trainer tells the loss its
    progress (`set_progress`). `compute` notes whether the model encodes its queries before the forward pass.

    Args:
        query_regularizer: the weight of the queries' FLOPS (ignored for an inference-free model).
        document_regularizer: the weight of the documents' FLOPS (positives and negatives together).
        warmup_ratio: the share of training over which f rises to 1 (0: full weight from the start).
    """

    sparse = True

    def __init__(
        self, query_regularizer: float = 5e-5, document_regularizer: float = 3e-5, warmup_ratio: float = 1 / 3
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.query_regularizer = non_negative_number(owner, "query_regularizer", query_regularizer)
        self.document_regularizer = non_negative_number(owner, "document_regularizer", document_regularizer)
        if isinstance(warmup_ratio, bool) or not isinstance(warmup_ratio, int | float) or not 0 <= warmup_ratio <= 1:
            raise ValueError(f"{owner}: warmup_ratio={warmup_ratio!r} must be in [0, 1].")
        self.warmup_ratio = float(warmup_ratio)
        self.progress = 1.0
        self._queries_encoded = True

    def set_progress(self, step: int, total: int) -> None:
        """The share of training done (step of total); the regulariser's warm-up follows it."""
        self.progress = min(max(step / total, 0.0), 1.0) if total and total > 0 else 1.0

    @property
    def regularizer_factor(self) -> float:
        """f(progress): (progress / warmup_ratio)^2, capped at 1."""
        if self.warmup_ratio == 0:
            return 1.0
        return min(self.progress / self.warmup_ratio, 1.0) ** 2

    def compute(self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> Any:
        inner = getattr(model, "module", model)
        self._queries_encoded = getattr(inner, "query_weights", None) is None
        return super().compute(model, inputs, labels)

    def regularizer(self, queries: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        """The warmed-up FLOPS term of query vectors `(n, vocab)` and document vectors `(m, vocab)`; the queries'
        part only where the last `compute` saw a model that encodes them."""
        term = self.document_regularizer * flops(documents)
        if self._queries_encoded:
            term = term + self.query_regularizer * flops(queries)
        return self.regularizer_factor * term

    def split_rows(self, output: Any, min_texts: int, rows: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(vectors `(batch, texts, vocab)`, the queries `(batch, vocab)` (text 0 of each row), the documents
        `(batch * (texts - 1), vocab)`: every row's positives first, then the rows' other documents) in float32, from
        an output of at least `min_texts` texts per row; else a `ValueError` naming the loss and the `rows` it needs."""
        vectors = output.sentence_embedding
        if vectors.dim() != 3 or vectors.shape[1] < min_texts:
            raise ValueError(
                f"{type(self).__name__} needs rows of {rows}: vectors of shape (batch, >={min_texts}, vocab), got "
                f"{tuple(vectors.shape)}."
            )
        documents = torch.cat([vectors[:, 1], vectors[:, 2:].reshape(-1, vectors.shape[-1])])
        return vectors, vectors[:, 0].float(), documents.float()


class SparseMultipleNegativesRankingLoss(FlopsRegularizedLoss):
    """Each query must pick its own positive among all positives and hard negatives of the batch, scored by the dot
    product of sparse vectors (`SparseSiameseModel`), plus the FLOPS regulariser (`FlopsRegularizedLoss`) of the
    documents (positives and negatives) and, where queries run through the encoder (SPLADE, not inference-free), of
    the queries:

        loss = CE(scale * q @ d.T) + f(step) * (document_regularizer * FLOPS(d) + query_regularizer * FLOPS(q))

    f rises quadratically from 0 to 1 over the first `warmup_ratio` of the training steps (the regulariser at full
    weight from the first step collapses every weight to zero), as SPLADE trains. Rows: `query, positive[, negative,
    ...]`, no labels. The trainer tells the loss its progress (`set_progress`).
    """

    label_kind = None
    num_texts = None

    def __init__(
        self,
        scale: float = 1.0,
        query_regularizer: float = 5e-5,
        document_regularizer: float = 3e-5,
        warmup_ratio: float = 1 / 3,
    ) -> None:
        super().__init__(query_regularizer, document_regularizer, warmup_ratio)
        if non_negative_number(type(self).__name__, "scale", scale) == 0:
            raise ValueError(f"{type(self).__name__}: scale={scale!r} must be positive.")
        self.scale = float(scale)

    def forward(self, output: Any, labels: torch.Tensor | None = None) -> torch.Tensor:
        _, queries, documents = self.split_rows(output, 2, "(query, positive[, negatives...])")
        scores = queries @ documents.T * self.scale
        loss = F.cross_entropy(scores, torch.arange(queries.shape[0], device=queries.device))
        return loss + self.regularizer(queries, documents)


def nmse(reconstruction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """MSE of `reconstruction` against `target`, over the MSE of the batch mean of `target` (1 where that is 0)."""
    baseline = F.mse_loss(target.mean(dim=0, keepdim=True).expand_as(target), target)
    error = F.mse_loss(reconstruction, target)
    return error / baseline if float(baseline) > 0 else error


class CSRLoss(SiameseLoss):
    """The loss of a CSR model (`SparseSiameseModel`, `architecture="csr"`): the autoencoder rebuilds the dense
    embedding from its top-k code, and the codes rank (Wen et al. 2025, as sentence-transformers' CSRLoss):

        loss = MSE(x, x_k) + MSE(x, x_4k) / 8 + beta * NMSE(e_aux, x - x_k) + gamma * CE(scale * q @ d.T)

    x is the dense embedding (standardised when the autoencoder `normalize`s), x_k and x_4k its reconstructions from
    the top k and 4k latents, e_aux the reconstruction of the residual from the top `k_aux` latents among the dead ones
    (no activation in the last `dead_threshold` steps; none at first), and the last term the in-batch ranking of the
    sparse codes by dot product (query first in each row, then positive[, negatives]). Rows: query, positive[, ...].
    """

    label_kind = None
    num_texts = None
    sparse = True

    def __init__(self, beta: float = 0.1, gamma: float = 1.0, scale: float = 1.0, dead_threshold: int = 30) -> None:
        super().__init__()
        for name, value in (("beta", beta), ("gamma", gamma)):
            non_negative_number("CSRLoss", name, value)
        positive_number("CSRLoss", "scale", scale)
        if isinstance(dead_threshold, bool) or not isinstance(dead_threshold, int) or dead_threshold < 0:
            raise ValueError(f"CSRLoss: dead_threshold={dead_threshold!r} must be a whole number >= 0.")
        self.beta, self.gamma, self.scale, self.dead_threshold = float(beta), float(gamma), float(scale), dead_threshold
        self._model: dict[str, Any] = {}  # the CSR model of the last `compute` (kept out of the module's children)
        self.inactive_steps: torch.Tensor | None = None  # per latent: steps since it last fired

    def compute(self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> Any:
        inner = getattr(model, "module", model)
        if getattr(getattr(inner, "config", None), "architecture", None) != "csr":
            raise ValueError(
                f"CSRLoss trains a CSR model (SparseSiameseModel, architecture='csr'), not {type(inner).__name__} "
                f"({getattr(getattr(inner, 'config', None), 'architecture', 'dense')}): use 'sparse_mnr' for it"
            )
        self._model["csr"] = inner
        return super().compute(model, inputs, labels)

    def forward(self, output: Any, labels: torch.Tensor | None = None) -> torch.Tensor:
        codes, dense, pre = output.sentence_embedding, output.dense_embedding, output.pre_activation
        if codes is None or codes.dim() != 3 or codes.shape[1] < 2 or dense is None or pre is None:
            raise ValueError(
                "CSRLoss needs a CSR model's output on rows of (query, positive[, negatives...]): codes, dense "
                "embeddings and pre-activations of shape (batch, >=2, ...)"
            )
        model = self._model["csr"]
        autoencoder, k, k_aux = model.autoencoder, int(model.config.k), int(model.config.k_aux)
        width = codes.shape[-1]
        flat_codes, flat_pre = codes.reshape(-1, width).float(), pre.reshape(-1, width).float()
        target, _ = autoencoder.standardise(dense.reshape(-1, dense.shape[-1]).float())
        recon_k = autoencoder.decode(flat_codes)
        loss = F.mse_loss(recon_k, target)
        loss = loss + F.mse_loss(autoencoder.decode(autoencoder.codes(flat_pre, 4 * k)), target) / 8
        dead = self._dead_latents(flat_codes)
        if self.beta > 0 and bool(dead.any()):
            aux = autoencoder.codes(flat_pre, k_aux, mask=dead.to(flat_pre.dtype))
            residual = target - recon_k.detach()
            loss = loss + self.beta * nmse(aux @ autoencoder.encoder.weight, residual)
        queries = codes[:, 0].float()
        documents = torch.cat([codes[:, 1], codes[:, 2:].reshape(-1, width)]).float()
        ranking = F.cross_entropy(queries @ documents.T * self.scale, torch.arange(len(queries), device=codes.device))
        return loss + self.gamma * ranking

    @torch.no_grad()
    def _dead_latents(self, codes: torch.Tensor) -> torch.Tensor:
        """Which latents count as dead (inactive for `dead_threshold` steps before this batch); then the counters move
        on: a latent that fired in this batch starts again from 0."""
        if self.inactive_steps is None or self.inactive_steps.shape[0] != codes.shape[-1]:
            self.inactive_steps = torch.zeros(codes.shape[-1], dtype=torch.long, device=codes.device)
        steps = self.inactive_steps.to(codes.device)
        dead = steps >= self.dead_threshold if self.dead_threshold > 0 else torch.ones_like(steps, dtype=torch.bool)
        fired = (codes > 0).any(dim=0)
        self.inactive_steps = torch.where(fired, torch.zeros_like(steps), steps + 1)
        return dead


__all__ = ["CSRLoss", "FlopsRegularizedLoss", "SparseMultipleNegativesRankingLoss", "flops", "nmse"]
