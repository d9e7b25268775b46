"""What a step does with the hardware, in the trainer's own logs: real (non-pad) tokens per second and, on a GPU whose
peak is known, useful MFU.

Useful MFU is `6 x non-embedding parameters x real tokens per second / peak FLOP/s` of the device for the dtype the
step runs in (bf16 / fp16, or tf32 for float32 matmuls): the matrix products a transformer needs for the tokens that
carry text, forward and backward, against what the chip could do (padding, recomputation and attention's own FLOPs
earn nothing). Where the device is not in `PEAK_TFLOPS` (a CPU, an unknown GPU) only tokens/s is logged.

Counting never waits for the device: a batch's real tokens come from what the collator knew on the host
(`text_lengths`) or, from an attention mask, are summed where it is and read back only when the trainer logs (once
every `logging_steps`, when it reads the loss back anyway). Under several processes the counts are summed across
them at log time.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# Dense (no sparsity) peak TFLOP/s by device name fragment, for bf16/fp16 and for tf32, from the vendors' data sheets.
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "tf32": 494.0},
    "H100": {"bf16": 989.0, "tf32": 494.0},  # SXM; the PCIe card is lower (756 / 378): named "H100 PCIe"
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0},
    "A100": {"bf16": 312.0, "tf32": 156.0},
    "L40S": {"bf16": 362.0, "tf32": 183.0},
    "L4": {"bf16": 121.0, "tf32": 60.0},
    "A10G": {"bf16": 70.0, "tf32": 35.0},
    "A10": {"bf16": 125.0, "tf32": 62.5},
    "T4": {"bf16": 65.0, "tf32": 8.1},  # fp16 tensor cores; no bf16 or tf32 units (fp32 peak)
}


def peak_flops(device: torch.device | str, precision: str) -> float | None:
    """The device's dense peak FLOP/s for `precision` ("bf16" covers fp16; "tf32" float32 matmuls), or None where
    the device is not a GPU in `PEAK_TFLOPS`."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    matches = [key for key in PEAK_TFLOPS if key in name]
    if not matches:
        return None
    return 1e12 * PEAK_TFLOPS[max(matches, key=len)][precision]


def non_embedding_parameters(model: torch.nn.Module) -> int:
    """Parameters outside embedding tables (their lookups are not matrix products)."""
    embedded = {
        id(p) for module in model.modules() if isinstance(module, torch.nn.Embedding) for p in module.parameters()
    }
    return sum(p.numel() for p in model.parameters() if id(p) not in embedded)


def real_tokens(inputs: dict[str, Any]) -> int | torch.Tensor:
    """The non-pad tokens of a batch: from the host where the collator knew them, else a device tensor (no sync)."""
    lengths = inputs.get("text_lengths")
    if lengths is not None:
        return int(sum(sum(row) if isinstance(row, list | tuple) else row for row in lengths))
    mask = inputs.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return mask.sum()  # kept a tensor (on the CPU too): read once a log, never once a step
    return 0


class ThroughputLogMixin:
    """Adds `tokens_per_second` (real tokens, all processes) and `mfu` (where the peak is known) to each training log
    and `train_tokens_per_second` / `train_mfu` to the final metrics (see the module docstring)."""

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None):
        counted = real_tokens(inputs)
        state = self.__dict__.setdefault("_throughput", {"host": 0, "device": None, "total": 0, "since": None})
        if state["since"] is None:
            state["since"] = state["start"] = time.perf_counter()
        if isinstance(counted, torch.Tensor):
            state["device"] = counted if state["device"] is None else state["device"] + counted
        else:
            state["host"] += counted
        return super().training_step(model, inputs, num_items_in_batch)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        state = self.__dict__.get("_throughput")
        if state is not None and state["since"] is not None and ("loss" in logs or "train_runtime" in logs):
            now = time.perf_counter()
            tokens = self._gathered_tokens(state)
            state["total"] += tokens
            if "loss" in logs:
                elapsed = max(now - state["since"], 1e-9)
                logs.update(self._rates(tokens / elapsed, prefix=""))
            if "train_runtime" in logs:
                logs["train_real_tokens"] = state["total"]
                logs.update(self._rates(state["total"] / max(now - state["start"], 1e-9), prefix="train_"))
            state["since"] = now
        super().log(logs, *args, **kwargs)

    def _gathered_tokens(self, state: dict[str, Any]) -> int:
        """Tokens counted since the last log, summed over the processes (one small all-reduce per log)."""
        count = torch.tensor(state["host"], dtype=torch.int64)
        if state["device"] is not None:
            count = count.to(state["device"].device) + state["device"].to(torch.int64)
        accelerator = getattr(self, "accelerator", None)
        if accelerator is not None and accelerator.num_processes > 1:
            count = accelerator.reduce(count.to(accelerator.device), reduction="sum")
        state["host"], state["device"] = 0, None
        return int(count)

    def _rates(self, tokens_per_second: float, prefix: str) -> dict[str, float]:
        rates = {f"{prefix}tokens_per_second": round(tokens_per_second, 1)}
        precision = "bf16" if self.args.bf16 or self.args.fp16 else "tf32"
        peak = peak_flops(self.args.device, precision)
        if peak is not None:
            if "_throughput_parameters" not in self.__dict__:
                self.__dict__["_throughput_parameters"] = non_embedding_parameters(self.model)
            processes = getattr(getattr(self, "accelerator", None), "num_processes", 1)
            flops = 6 * self.__dict__["_throughput_parameters"] * tokens_per_second
            rates[f"{prefix}mfu"] = round(flops / (peak * processes), 4)
        return rates


__all__ = ["PEAK_TFLOPS", "ThroughputLogMixin", "non_embedding_parameters", "peak_flops", "real_tokens"]
