"""Cross-process helpers for training under `accelerate launch` / `torchrun`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def rank_and_world(from_env: bool = False) -> tuple[int, int]:
    """(this process's rank, number of processes) of the torch.distributed process group; without one, (0, 1), or with
    `from_env` the RANK / WORLD_SIZE variables that torchrun and accelerate set (work split by rank needs no group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if from_env:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    return 0, 1


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward returns to each process the gradient that ALL processes computed
    for its slice (all-reduce sum, then keep the local slice). Works on gloo, which has no reduce-scatter."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, sizes: list[int]) -> torch.Tensor:  # type: ignore[override]
        rank, world_size = rank_and_world()
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
    rank, world_size = rank_and_world()
    if world_size == 1:
        return local, 0
    size = torch.tensor([local.shape[0]], device=local.device)
    sizes = [torch.zeros_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    sizes_list = [int(s.item()) for s in sizes]
    return _GatherWithGrad.apply(local, sizes_list), sum(sizes_list[:rank])


def encode_in_shards(
    items: Sequence[Any], encode: Callable[[list[Any]], np.ndarray], process_index: int, num_processes: int
) -> np.ndarray:
    """`encode(items)` with the work split over processes: each encodes a contiguous shard, and the shards are
    gathered in rank order, so every process ends with the rows of all items, exactly as one process would."""
    shard = np.array_split(np.arange(len(items)), num_processes)[process_index]
    local = encode([items[i] for i in shard])
    if num_processes == 1:
        return local
    gathered: list[Any] = [None] * num_processes
    dist.all_gather_object(gathered, local)
    return np.concatenate(gathered)


def shutdown_process_group(settle_s: float = 0.5) -> None:
    """Wait for every process, then destroy the default process group; a no-op without one (single process).

    Call it once at the very end of a script launched with `accelerate launch` / `torchrun`, after everything that
    talks to the other processes (`trainer.train()`, `trainer.evaluate()`, `trainer.save_model()`,
    `push_to_hub`): those fail once the group is gone. Calling it twice is harmless.

    Why not just `destroy_process_group()`: gloo runs collectives on worker threads, and a worker frees a finished
    collective's tensors only after the caller has already moved on; freeing a tensor whose Python object is gone
    needs the GIL. Under DDP the last owner of the process group is the DDP reducer, freed at interpreter exit while
    the main thread holds the GIL and joins the workers. A worker still freeing tensors then either deadlocks (the
    process hangs after training succeeded) or is killed by the finalizing interpreter (`terminate called without
    an active exception`). The barrier makes this process's last collective one that every process has finished,
    and `settle_s` seconds of sleep, with the GIL released, let the workers finish freeing before exit.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if dist.get_backend() == "nccl" and torch.cuda.is_available():
        # Name the device: NCCL otherwise guesses one for the barrier and warns that it may hang.
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()
    if settle_s > 0:
        time.sleep(settle_s)
    dist.destroy_process_group()
