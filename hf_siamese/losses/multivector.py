"""Losses of a multi-vector (ColBERT-style) model, `MultiVectorModel`: a query and a document score by MaxSim of their
token vectors (`modeling.multivector_scoring.maxsim`), and the dense objectives run on those scores.

The model's output on a grouped batch is `token_embeddings` `(batch, num_texts, seq, dim)` and `token_mask`
`(batch, num_texts, seq)` (text 0 of each row the query, the others its documents); MaxSim reads only the kept tokens.
`compute` notes whether the model scores by MeanMaxSim (`config.similarity == "meanmaxsim"`) so that training scores
as the model does at search time.

- `MultiVectorMultipleNegativesRankingLoss` ("maxsim_mnr"): in-batch negatives, each query against every positive
  and hard negative of the batch (of all processes with `gather_across_processes`).
- `CachedMultiVectorMultipleNegativesRankingLoss` ("cached_maxsim_mnr"): the same with GradCache (losses/cached.py).
- `MultiVectorMarginMSELoss` ("maxsim_margin_mse"), `MultiVectorListDistillationLoss` ("maxsim_list_distill"): the
  dense `MarginMSELoss` / `ListDistillationLoss` called on each row's MaxSim scores.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..modeling.distributed import gather_with_grad, rank_and_world
from ..modeling.modeling_siamese import SiameseBertOutput
from ..modeling.multivector_scoring import maxsim, maxsim_pairwise
from .base import SiameseLoss, positive_number
from .cached import _AutocastState, _RandomState, _ReplayChunks, chunk_plan
from .distillation import ListDistillationLoss, ListTeacher, MarginMSELoss, MarginTeacher

ROWS = "(query, positive, negative[, negative_2, ...])"


class MultiVectorLoss(SiameseLoss):
    """The base of the multi-vector losses: reads a `MultiVectorOutput` and scores by MaxSim (or MeanMaxSim, as the
    model of the last `compute` does). `multivector = True` marks them for the trainer's kind check."""

    label_kind = None
    num_texts = None
    multivector = True

    def __init__(self) -> None:
        super().__init__()
        self.length_normalize = False

    def compute(self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> Any:
        self.note_model(model)
        return super().compute(model, inputs, labels)

    def note_model(self, model: nn.Module) -> None:
        """Score as `model` does: MeanMaxSim where its config says so."""
        inner = getattr(model, "module", model)
        self.length_normalize = getattr(getattr(inner, "config", None), "similarity", "maxsim") == "meanmaxsim"

    def split_rows(self, output: Any, min_texts: int, rows: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(token vectors `(batch, texts, seq, dim)`, token mask `(batch, texts, seq)`) of an output of at least
        `min_texts` texts per row; else a `ValueError` naming the loss and the `rows` it needs."""
        vectors, mask = getattr(output, "token_embeddings", None), getattr(output, "token_mask", None)
        if vectors is None or mask is None:
            raise ValueError(
                f"{type(self).__name__} trains a MultiVectorModel: it needs token_embeddings and token_mask, got a "
                f"{type(output).__name__} without them"
            )
        if vectors.dim() != 4 or vectors.shape[1] < min_texts or tuple(mask.shape) != tuple(vectors.shape[:3]):
            raise ValueError(
                f"{type(self).__name__} needs rows of {rows}: token_embeddings of shape (batch, >={min_texts}, seq, "
                f"dim) and a token_mask of (batch, texts, seq), got {tuple(vectors.shape)} and {tuple(mask.shape)}."
            )
        return vectors, mask.bool()

    def row_scores(self, output: Any) -> torch.Tensor:
        """The `(batch, k)` MaxSim scores of each row's query with its own k documents (positive first)."""
        vectors, mask = self.split_rows(output, 3, ROWS)
        batch, texts, length, dim = vectors.shape
        queries = vectors[:, :1].expand(-1, texts - 1, -1, -1).reshape(-1, length, dim)
        query_mask = mask[:, :1].expand(-1, texts - 1, -1).reshape(-1, length)
        documents, document_mask = vectors[:, 1:].reshape(-1, length, dim), mask[:, 1:].reshape(-1, length)
        scores = maxsim_pairwise(queries, query_mask, documents, document_mask, length_normalize=self.length_normalize)
        return scores.view(batch, texts - 1)


def scores_as_output(scores: torch.Tensor) -> SiameseBertOutput:
    """`(batch, k)` scores as the output the dense distillation losses read: each row's query a 1-wide vector [1]
    and its documents [s_ij], so that their dot products (`similarity="dot"`) are the scores themselves."""
    query = scores.new_ones((scores.shape[0], 1, 1))
    return SiameseBertOutput(sentence_embedding=torch.cat([query, scores[:, :, None]], dim=1))


def gather_tokens(vectors: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`(rows, seq, dim)` token vectors and their `(rows, seq)` mask gathered from all processes (each padded to the
    longest seq of any), with the offset of this process's rows; gradients flow back to each row's owner. One
    process: as they are."""
    _, world = rank_and_world()
    if world == 1:
        return vectors, mask, 0
    import torch.distributed as dist

    length = torch.tensor([vectors.shape[1]], device=vectors.device)
    dist.all_reduce(length, op=dist.ReduceOp.MAX)
    pad = int(length) - vectors.shape[1]
    vectors, mask = F.pad(vectors, (0, 0, 0, pad)), F.pad(mask, (0, pad), value=False)
    gathered, offset = gather_with_grad(vectors)
    masks, _ = gather_with_grad(mask.to(vectors.dtype))
    return gathered, masks.bool(), offset


class MultiVectorMultipleNegativesRankingLoss(MultiVectorLoss):
    """Each query must pick its own positive among all positives and hard negatives of the batch, scored by MaxSim
    (PyLate's and sentence-transformers' contrastive ColBERT loss):

        loss = CE(scale * MaxSim(q_i, d_j)),  d = every row's positive, then every row's negatives

    Rows: `query, positive[, negative, ...]`, no labels. MaxSim is a sum over the query's tokens (up to the query
    length, 32 with ColBERT's expansion), not a cosine in [-1, 1]: `scale` 1 (a temperature of 1) as PyLate trains;
    with MeanMaxSim scoring (`similarity="meanmaxsim"`) about the query length instead.

    `gather_across_processes=True` (under `accelerate launch` / `torchrun`): every process scores its queries against
    the documents of all processes (token vectors padded to the longest of any process), gradients exact as the
    dense MNR's.
    """

    def __init__(self, scale: float = 1.0, gather_across_processes: bool = False) -> None:
        super().__init__()
        self.scale = positive_number(type(self).__name__, "scale", scale)
        self.gather_across_processes = bool(gather_across_processes)

    def forward(self, output: Any, labels: torch.Tensor | None = None) -> torch.Tensor:
        vectors, mask = self.split_rows(output, 2, "(query, positive[, negatives...])")
        batch, _, length, dim = vectors.shape
        documents = torch.cat([vectors[:, 1], vectors[:, 2:].reshape(-1, length, dim)])
        document_mask = torch.cat([mask[:, 1], mask[:, 2:].reshape(-1, length)])
        offset = 0
        if self.gather_across_processes:  # positives first within each process's block: targets shift by offset
            positives, positive_mask, offset = gather_tokens(vectors[:, 1], mask[:, 1])
            negatives, negative_mask, _ = gather_tokens(
                vectors[:, 2:].reshape(-1, length, dim), mask[:, 2:].reshape(-1, length)
            )
            width = max(positives.shape[1], negatives.shape[1])
            documents = torch.cat([F.pad(positives, (0, 0, 0, width - positives.shape[1])),
                                   F.pad(negatives, (0, 0, 0, width - negatives.shape[1]))])  # fmt: skip
            document_mask = torch.cat([F.pad(positive_mask, (0, width - positive_mask.shape[1])),
                                       F.pad(negative_mask, (0, width - negative_mask.shape[1]))])  # fmt: skip
        scores = maxsim(vectors[:, 0], mask[:, 0], documents, document_mask, length_normalize=self.length_normalize)
        targets = torch.arange(batch, device=scores.device) + offset
        return F.cross_entropy(scores * self.scale, targets)


def embed_token_chunk(
    model: nn.Module, inputs: dict[str, Any], column: int, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors `(len(rows), width, dim)` and mask of the texts of `column` at `rows` (column 0 as queries, the
    others as documents), cut to their own longest text (`width`; queries with expansion to at least the expansion
    length: their expansion tokens are not attended but keep vectors)."""
    config = getattr(getattr(model, "module", model), "config", None)
    mask, ids = inputs["attention_mask"][rows, column], inputs["input_ids"][rows, column]
    floor = config.query_expansion_length if column == 0 and getattr(config, "query_expansion", None) else 0
    keep = mask.bool().any(dim=0)
    width = int(keep.sum())
    # Right padding: cut after the longest text; else (left padding) keep every position.
    width = min(max(width, floor), mask.shape[1]) if bool(keep[:width].all()) else mask.shape[1]
    chunk: dict[str, Any] = {"input_ids": ids[:, :width], "attention_mask": mask[:, :width]}
    if inputs.get("token_type_ids") is not None:
        chunk["token_type_ids"] = inputs["token_type_ids"][rows, column][:, :width]
    output = model(**chunk, task="query" if column == 0 else "document")
    return output.token_embeddings, output.token_mask


class CachedMultiVectorMultipleNegativesRankingLoss(MultiVectorMultipleNegativesRankingLoss):
    """`MultiVectorMultipleNegativesRankingLoss` for batches larger than memory allows, by GradCache as the dense
    `CachedMultipleNegativesRankingLoss` (losses/cached.py): token vectors of `mini_batch_size` texts at a time
    without a graph, the loss and its gradient on those, then each chunk again with a graph and the same dropout
    draws in `backward()`. Memory holds the token vectors of the whole batch and one chunk's activations. Same rows,
    options and gradient as the plain loss on the same chunks."""

    caches_embeddings = True

    def __init__(self, mini_batch_size: int = 32, scale: float = 1.0, gather_across_processes: bool = False) -> None:
        super().__init__(scale=scale, gather_across_processes=gather_across_processes)
        if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or mini_batch_size < 1:
            raise ValueError(f"{type(self).__name__}: mini_batch_size={mini_batch_size!r} must be a positive int.")
        self.mini_batch_size = mini_batch_size

    def compute(self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> Any:
        from ..modeling.modeling_multivector import MultiVectorOutput

        self.note_model(model)
        if "attention_mask" not in inputs or inputs["attention_mask"].dim() != 3:
            raise ValueError(
                f"{type(self).__name__} needs a grouped batch: attention_mask of shape (batch, num_texts, seq_len), "
                "as the multi-vector collator makes it."
            )
        batch, texts, length = inputs["attention_mask"].shape
        if batch <= self.mini_batch_size:  # one chunk per column: the plain loss is the same
            output = model(**inputs)
            return self(output, labels), output
        plan, device = chunk_plan(inputs, self.mini_batch_size), inputs["attention_mask"].device
        autocast, states, pieces = _AutocastState(device.type), [], []
        with torch.no_grad():
            for column, rows in plan:
                states.append(_RandomState(device))
                pieces.append(embed_token_chunk(model, inputs, column, rows))
        vectors = pieces[0][0].new_zeros((batch, texts, length, pieces[0][0].shape[-1]))
        mask = torch.zeros((batch, texts, length), dtype=torch.bool, device=vectors.device)
        for (column, rows), (piece, piece_mask) in zip(plan, pieces, strict=True):
            vectors[rows, column, : piece.shape[1]] = piece.to(vectors.dtype)
            mask[rows, column, : piece.shape[1]] = piece_mask
        if not torch.is_grad_enabled():  # evaluation: the loss value is all that is asked
            output = MultiVectorOutput(token_embeddings=vectors, token_mask=mask)
            return self(output, labels), output
        vectors.requires_grad_()
        loss = self(MultiVectorOutput(token_embeddings=vectors, token_mask=mask), labels)
        (vector_grad,) = torch.autograd.grad(loss, vectors)
        replay = _replay(model, inputs, plan, states, autocast, vector_grad)
        anchor = torch.empty(0, device=loss.device, requires_grad=True)
        output = MultiVectorOutput(token_embeddings=vectors.detach(), token_mask=mask)
        return _ReplayChunks.apply(loss.detach(), anchor, replay), output


def _replay(
    model: nn.Module, inputs: dict[str, Any], plan: list, states: list, autocast: Any, vector_grad: torch.Tensor
) -> Callable[[torch.Tensor], None]:
    """The second pass of the cached loss: each chunk embedded again with a graph and its recorded random state, and
    the cached gradient of its token vectors back-propagated through it (DDP synchronised after the last chunk)."""

    def replay(grad_output: torch.Tensor) -> None:
        grads = vector_grad * grad_output.to(vector_grad.dtype)
        no_sync = getattr(model, "no_sync", None)
        for index, ((column, rows), state) in enumerate(zip(plan, states, strict=True)):
            last = index == len(plan) - 1
            with nullcontext() if last or no_sync is None else no_sync():
                with state.restored(), autocast.entered(), torch.enable_grad():
                    piece, _ = embed_token_chunk(model, inputs, column, rows)
                piece.backward(grads[rows, column, : piece.shape[1]].to(piece.dtype))

    return replay


class MultiVectorMarginMSELoss(MarginTeacher, MultiVectorLoss):
    """`MarginMSELoss` on MaxSim scores: each row's student margins MaxSim(q, p) - MaxSim(q, n_j), times `scale`,
    regress on the teacher's.

    Rows and labels as `MarginMSELoss`'s: `query, positive, negative` (or `negative_1..k`) and a `label` with the
    teacher's view of each row: one margin, `k` margins, or the `1 + k` scores (positive first; `mine --teacher`
    writes those). The dense loss (`similarity="dot"`) is called on the scores (`scores_as_output`).

    Args:
        scale: multiplies the student's margins (default 1).
    """

    label_kind = MarginMSELoss.label_kind

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self._distil_margins(scale)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        scores = self.row_scores(output)
        labels = self._margin_labels(labels, scores.shape[0], scores.shape[1] - 1)
        return self.distillation(scores_as_output(scores), labels)


class MultiVectorListDistillationLoss(ListTeacher, MultiVectorLoss):
    """`ListDistillationLoss` on MaxSim scores: KL(softmax(t_i / teacher_temperature) || softmax(scale * s_i)), s_i
    the MaxSim scores of row i's query with its `1 + k` documents, t_i the teacher's (positive first).

    Args:
        scale: the student's inverse temperature (default 1: MaxSim sums already spread over the query's tokens).
        teacher_temperature: divides the teacher's scores (default 1: its logits as they are).
    """

    label_kind = ListDistillationLoss.label_kind

    def __init__(self, scale: float = 1.0, teacher_temperature: float = 1.0) -> None:
        super().__init__()
        self._distil_lists(scale, teacher_temperature)

    def forward(self, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
        scores = self.row_scores(output)
        labels = self._list_labels(labels, scores.shape[0], scores.shape[1])
        return self.distillation(scores_as_output(scores), labels)


__all__ = [
    "CachedMultiVectorMultipleNegativesRankingLoss",
    "MultiVectorListDistillationLoss",
    "MultiVectorLoss",
    "MultiVectorMarginMSELoss",
    "MultiVectorMultipleNegativesRankingLoss",
    "embed_token_chunk",
    "gather_tokens",
    "scores_as_output",
]
