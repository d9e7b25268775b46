"""Which device a model runs on. Part of the remote-code set copied next to the weights: imports only torch."""

from __future__ import annotations

import os

import torch


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The device to run on. `None` or `"auto"`: this process's CUDA GPU when there is one (`cuda:LOCAL_RANK` under
    `accelerate launch` / torchrun, so each process takes its own), else Apple's `mps`, else the CPU. An explicit
    device is checked: asking for CUDA or MPS where there is none is a `ValueError` naming what is available."""
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r} is not a device; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device={device!r}: no CUDA GPU is available here; use 'cpu' or 'auto'.")
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"device={device!r}: only {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1}).")
    if resolved.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device={device!r}: MPS is not available here; use 'cpu' or 'auto'.")
    return resolved
