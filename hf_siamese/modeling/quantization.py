"""Int8 dynamic quantization of a `SiameseBertModel` for CPU inference.

`quantize(model, "int8")` returns a copy whose linear layers hold int8 weights (one scale per output channel) and
quantize their inputs on the fly; matmuls run in int8 (fbgemm on x86, qnnpack on ARM). On all-MiniLM-L6-v2 and the
STS Benchmark test set (`benchmarks/bench_encode.py`) this encodes faster than float32 at a small cost in Spearman.

The FFN output projection of every layer (the linear after GELU, `layer.N.output.dense`) stays float32 by default
(`KEEP_FLOAT`): its inputs carry the large outlier activations that per-tensor int8 rounds away (Bondarenko et al.,
2021, "Understanding and overcoming the challenges of efficient Transformer quantization"); quantizing it too is
faster and costs more quality (`keep_float=()`).

It uses PyTorch's eager dynamic quantization (`torch.ao.quantization.quantize_dynamic`), which PyTorch has marked
deprecated in favour of torchao but still ships (2.13 here); its deprecation warnings are silenced inside `quantize`.

The copy is for `encode` (and `model(...)`) on the CPU only: it cannot be trained, moved to a GPU or saved (its
weights are packed int8, not tensors safetensors can store); quantize again after loading the float model.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

MODES = ("int8",)
# Linear layers kept in float32 by default: the FFN output projection of BERT-family layers.
KEEP_FLOAT = (r"layer\.\d+\.output\.dense$",)


def quantize(model: Any, mode: str = "int8", keep_float: Sequence[str] = KEEP_FLOAT) -> Any:
    """A copy of `model` with int8 dynamically quantized linear layers, for CPU inference.

    Args:
        model: a `SiameseBertModel` on the CPU (float32).
        mode: `"int8"` (the only mode).
        keep_float: regular expressions of module names to keep in float32 (matched with `re.search`). `()`
            quantizes every linear layer.

    Returns:
        The quantized copy (in eval mode); `model` itself is unchanged.
    """
    if mode not in MODES:
        raise ValueError(f"quantize(): mode={mode!r} is not supported; accepted: {', '.join(MODES)}.")
    if isinstance(keep_float, str) or not all(isinstance(p, str) for p in keep_float):
        raise TypeError(f"quantize(): keep_float={keep_float!r} must be a sequence of regular-expression strings.")
    devices = {p.device.type for p in model.parameters()}
    if devices != {"cpu"}:
        raise ValueError(
            f"quantize(): int8 dynamic quantization runs on the CPU; the model is on {sorted(devices)}: "
            "call model.to('cpu') first."
        )
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if dtypes != {torch.float32}:
        raise ValueError(f"quantize(): needs a float32 model, got parameters of {sorted(map(str, dtypes))}.")
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as err:  # pragma: no cover - depends on the torch build
        raise ImportError(f"quantize(): this torch build has no torch.ao.quantization ({err}).") from None

    quantized = copy.deepcopy(model).eval()
    targets = {
        name: per_channel_dynamic_qconfig
        for name, module in quantized.named_modules()
        if isinstance(module, nn.Linear) and not any(re.search(pattern, name) for pattern in keep_float)
    }
    if not targets:
        raise ValueError("quantize(): the model has no linear layer left to quantize (check keep_float).")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_(tensor|channel).*deprecated", category=UserWarning)
        quantized = quantize_dynamic(quantized, targets, dtype=torch.qint8, inplace=True)
    quantized.is_quantized_copy = True
    return quantized
