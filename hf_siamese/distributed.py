"""Cross-process helpers for training under `accelerate launch` / `torchrun`."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward returns to each process the gradient that ALL processes computed
    for its slice (all-reduce sum, then keep the local slice). Works on gloo, which has no reduce-scatter."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, sizes: list[int]) -> torch.Tensor:  # type: ignore[override]
        rank, world_size = _world()
        longest = max(sizes)
        padded = local.new_zeros((longest, *local.shape[1:]))
        padded[: local.shape[0]] = local
        parts = [torch.empty_like(padded) for _ in range(world_size)]
        dist.all_gather(parts, padded.contiguous())
        ctx.rank, ctx.longest, ctx.local_rows = rank, longest, local.shape[0]
        ctx.sizes = sizes
        return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.local_rows], None


def gather_with_grad(local: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenate `local` (`(rows, ...)`, rows may differ per process) from all processes along dim 0.

    Returns the gathered tensor and the offset of this process's rows in it. Gradients flow back to the owner of
    every row, summed over all processes. Without an initialised process group (one process) it is the identity.
    """
    rank, world_size = _world()
    if world_size == 1:
        return local, 0
    size = torch.tensor([local.shape[0]], device=local.device)
    sizes = [torch.zeros_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    sizes_list = [int(s.item()) for s in sizes]
    return _GatherWithGrad.apply(local, sizes_list), sum(sizes_list[:rank])
