"""MNR with a batch size no longer bound by memory: the GradCache method (Gao et al. 2021, "Scaling Deep Contrastive
Learning Batch Size under Memory Limited Setup").

1. Embed the whole batch without a graph, `mini_batch_size` rows at a time, recording the random state (dropout)
   before each chunk.
2. Compute the loss on those embeddings and its gradient with respect to them (cheap: no encoder in the graph).
3. When the trainer calls `backward()` on the loss, embed each chunk again, now with a graph and the recorded random
   state, and back-propagate the cached embedding gradients through it.

Memory then holds one chunk's activations at a time, plus the embeddings of the whole batch; the gradient is the one
plain MNR gives on the same batch with the same dropout draws (the encoder runs twice: about 1.3-1.5x the compute).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from ..modeling.modeling_siamese import SiameseBertOutput, filled_columns
from .ranking import MultipleNegativesRankingLoss


class _RandomState:
    """The CPU (and, on a GPU, the device's) random state at one point, to run a chunk again with the same dropout."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.accelerator = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextmanager
    def restored(self) -> Iterator[None]:
        devices = [self.device] if self.accelerator is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.accelerator is not None:
                torch.cuda.set_rng_state(self.accelerator, self.device)
            yield


class _AutocastState:
    """Whether autocast (bf16/fp16 mixed precision) was on for the first pass; the second pass runs in `backward()`,
    outside the trainer's autocast context, and must see the same precision."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.enabled = torch.is_autocast_enabled(device_type)
        self.dtype = torch.get_autocast_dtype(device_type)

    def entered(self) -> Any:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)


class _ReplayChunks(torch.autograd.Function):
    """Identity on the loss value whose backward runs `replay(grad_output)`: the second, chunked pass.

    `anchor` is an empty tensor that requires grad, so autograd calls `backward` although the loss value itself is
    detached from the encoder."""

    @staticmethod
    def forward(ctx, loss: torch.Tensor, anchor: torch.Tensor, replay: Callable[[torch.Tensor], None]) -> torch.Tensor:  # type: ignore[override]
        ctx.replay = replay
        return loss.clone()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[None, torch.Tensor, None]:  # type: ignore[override]
        ctx.replay(grad_output)
        return None, grad_output.new_zeros(0), None


def chunk_plan(inputs: dict[str, Any], mini_batch_size: int) -> list[tuple[int, torch.Tensor]]:
    """How a grouped batch is embedded: `(column, row indices)` per chunk of at most `mini_batch_size` texts. Each
    column's texts are sorted by length first, so a chunk holds texts of similar length and pads little."""
    mask = inputs["attention_mask"]
    plan = []
    for column in range(mask.shape[1]):
        order = torch.argsort(mask[:, column].sum(dim=-1), descending=True, stable=True)
        plan += [(column, order[start : start + mini_batch_size]) for start in range(0, len(order), mini_batch_size)]
    return plan


def embed_chunk(model: nn.Module, inputs: dict[str, Any], column: int, rows: torch.Tensor) -> torch.Tensor:
    """Embeddings `(len(rows), dim)` of the texts of `column` at `rows`, cut to their own longest text."""
    mask = inputs["attention_mask"][rows, column]
    span = filled_columns(mask)
    chunk: dict[str, Any] = {"attention_mask": mask[:, span]}
    for key in ("input_ids", "token_type_ids", "position_ids"):
        if inputs.get(key) is not None:
            chunk[key] = inputs[key][rows, column][:, span]
    prompt_length = inputs.get("prompt_length")
    if prompt_length is not None:
        chunk["prompt_length"] = (
            prompt_length[rows, column] if isinstance(prompt_length, torch.Tensor) else prompt_length
        )
    return model(**chunk).sentence_embedding


class CachedMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """`MultipleNegativesRankingLoss` for batches larger than memory allows (GradCache; see the module docstring).

    Same rows, options and gradient as `MultipleNegativesRankingLoss` (`scale`, `symmetric`, hard negatives,
    `gather_across_processes`, where the global batch is processes x per-device batch, still chunked per process);
    peak memory is that of `mini_batch_size` texts instead of the whole batch. Works with gradient accumulation and
    bf16/fp16 autocast. Each text column is sorted by length before it is cut into chunks, so chunks pad little; the
    dropout draws of the first pass are replayed in the second, so the gradient equals plain MNR's on the same batch
    embedded in the same chunks (`chunk_plan`). A batch that fits in one chunk per column is plain MNR.

    Args:
        mini_batch_size: texts embedded at once (as sentence-transformers counts it); smaller saves memory, larger
            runs faster. It need not divide the batch.
    """

    caches_embeddings = True

    def __init__(
        self,
        mini_batch_size: int = 32,
        scale: float = 20.0,
        symmetric: bool = False,
        gather_across_processes: bool = False,
    ) -> None:
        super().__init__(scale=scale, symmetric=symmetric, gather_across_processes=gather_across_processes)
        if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or mini_batch_size < 1:
            raise ValueError(
                f"CachedMultipleNegativesRankingLoss: mini_batch_size={mini_batch_size!r} must be a positive int."
            )
        self.mini_batch_size = mini_batch_size

    def embedding_loss(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The MNR loss of `(batch, num_texts, dim)` embeddings (anchor, positive, negatives...)."""
        return self(SiameseBertOutput(sentence_embedding=embeddings), None)

    def compute(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor],
        labels: torch.Tensor | None,
        embedding_loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """The first pass and the loss; the returned loss's `backward()` runs the second pass.

        `embedding_loss` replaces `self.embedding_loss` (used by `MatryoshkaLoss` to sum the loss over dims)."""
        embedding_loss = embedding_loss or self.embedding_loss
        if "attention_mask" not in inputs or inputs["attention_mask"].dim() != 3:
            raise ValueError(
                "CachedMultipleNegativesRankingLoss needs a grouped batch: attention_mask of shape (batch, num_texts, "
                "seq_len), as SiamesePairCollator makes it."
            )
        batch = inputs["attention_mask"].shape[0]
        if batch <= self.mini_batch_size:  # one chunk per column: nothing to cache, plain MNR is the same
            output = model(**inputs)
            return embedding_loss(output.sentence_embedding), output
        plan = chunk_plan(inputs, self.mini_batch_size)
        device = inputs["attention_mask"].device
        training = torch.is_grad_enabled()
        autocast = _AutocastState(device.type)
        states, pieces = [], []
        with torch.no_grad():
            for column, rows in plan:
                states.append(_RandomState(device))
                pieces.append(embed_chunk(model, inputs, column, rows))
        embeddings = pieces[0].new_empty((batch, inputs["attention_mask"].shape[1], pieces[0].shape[-1]))
        for (column, rows), piece in zip(plan, pieces, strict=True):
            embeddings[rows, column] = piece
        output = SiameseBertOutput(sentence_embedding=embeddings)
        if not training:  # evaluation: the loss value is all that is asked
            return embedding_loss(embeddings), output
        embeddings.requires_grad_()
        loss = embedding_loss(embeddings)
        (embedding_grad,) = torch.autograd.grad(loss, embeddings)

        def replay(grad_output: torch.Tensor) -> None:
            grads = embedding_grad * grad_output.to(embedding_grad.dtype)
            no_sync = getattr(model, "no_sync", None)  # DDP: synchronise gradients once, after the last chunk
            for index, ((column, rows), state) in enumerate(zip(plan, states, strict=True)):
                last = index == len(plan) - 1
                with nullcontext() if last or no_sync is None else no_sync():
                    with state.restored(), autocast.entered(), torch.enable_grad():
                        piece = embed_chunk(model, inputs, column, rows)
                    piece.backward(grads[rows, column].to(piece.dtype))

        anchor = torch.empty(0, device=loss.device, requires_grad=True)
        return _ReplayChunks.apply(loss.detach(), anchor, replay), SiameseBertOutput(
            sentence_embedding=embeddings.detach()
        )


__all__ = ["CachedMultipleNegativesRankingLoss", "chunk_plan", "embed_chunk"]
