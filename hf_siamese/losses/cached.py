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

from ..modeling_siamese import SiameseBertOutput
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


def _rows(inputs: dict[str, Any], rows: slice, batch: int) -> dict[str, Any]:
    """The chunk `rows` of every per-row tensor of a grouped batch (others, e.g. an int prompt length, as they are)."""
    return {
        k: v[rows] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == batch else v for k, v in inputs.items()
    }


class CachedMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """`MultipleNegativesRankingLoss` for batches larger than memory allows (GradCache; see the module docstring).

    Same rows, options and gradient as `MultipleNegativesRankingLoss` (`scale`, `symmetric`, hard negatives,
    `gather_across_processes`, where the global batch is processes x per-device batch, still chunked per process);
    peak memory is that of `mini_batch_size` rows instead of the whole batch. Works with gradient accumulation and
    bf16/fp16 autocast. Dropout draws of the first pass are replayed in the second, so the gradient equals plain
    MNR's on the same batch embedded in the same chunks.

    Args:
        mini_batch_size: rows embedded at once (each row holds all its texts); smaller saves memory, larger runs
            faster. It need not divide the batch.
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
        reference = inputs["input_ids"] if inputs.get("input_ids") is not None else inputs["inputs_embeds"]
        batch = reference.shape[0]
        chunks = [slice(start, start + self.mini_batch_size) for start in range(0, batch, self.mini_batch_size)]
        training = torch.is_grad_enabled()
        autocast = _AutocastState(reference.device.type)
        states, pieces = [], []
        with torch.no_grad():
            for rows in chunks:
                states.append(_RandomState(reference.device))
                pieces.append(model(**_rows(inputs, rows, batch)).sentence_embedding)
        embeddings = torch.cat(pieces).detach()
        output = SiameseBertOutput(sentence_embedding=embeddings)
        if not training:  # evaluation: the loss value is all that is asked
            return embedding_loss(embeddings), output
        embeddings.requires_grad_()
        loss = embedding_loss(embeddings)
        (embedding_grad,) = torch.autograd.grad(loss, embeddings)

        def replay(grad_output: torch.Tensor) -> None:
            grads = embedding_grad * grad_output.to(embedding_grad.dtype)
            no_sync = getattr(model, "no_sync", None)  # DDP: synchronise gradients once, after the last chunk
            for index, (rows, state) in enumerate(zip(chunks, states, strict=True)):
                last = index == len(chunks) - 1
                with nullcontext() if last or no_sync is None else no_sync():
                    with state.restored(), autocast.entered(), torch.enable_grad():
                        piece = model(**_rows(inputs, rows, batch)).sentence_embedding
                    piece.backward(grads[rows].to(piece.dtype))

        anchor = torch.empty(0, device=loss.device, requires_grad=True)
        return _ReplayChunks.apply(loss.detach(), anchor, replay), output


__all__ = ["CachedMultipleNegativesRankingLoss"]
