"""`hf-siamese encode`: embed a text file (one text per line) into .npy or .safetensors."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .common import load_inference_model


def run_encode(args: argparse.Namespace) -> int:
    """Embed each line of a text file; write a (lines, hidden) array to .npy or .safetensors ("embeddings")."""
    import torch

    from ..data.readers import read_text_lines

    output = Path(args.output)
    suffix = output.suffix.lower()
    if suffix not in (".npy", ".safetensors"):
        raise ValueError(f"--output {args.output!r}: the name must end in .npy or .safetensors")
    if suffix == ".npy" and args.dtype == "bfloat16":
        raise ValueError("--dtype bfloat16 cannot be stored in .npy (numpy has no bfloat16); use a .safetensors name")
    texts = read_text_lines(args.texts)
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, quantize=args.quantize, device=args.device
    )
    dtype = getattr(torch, args.dtype)
    # On a CPU, autocast to float16 is slow or unsupported; compute in float32 there and only store in float16.
    compute = None if dtype == torch.float32 or (dtype == torch.float16 and model.device.type == "cpu") else dtype
    embeddings = model.encode(
        texts, tokenizer=tokenizer, batch_size=args.batch_size, dtype=compute, show_progress_bar=True
    ).to(dtype)

    output.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".npy":
        import numpy as np

        np.save(output, embeddings.numpy())
    else:
        from safetensors.torch import save_file

        save_file({"embeddings": embeddings.contiguous()}, str(output), metadata={"source": os.fspath(args.texts)})
    rows, width = embeddings.shape
    print(f"wrote {rows} x {width} {args.dtype} embeddings of {args.texts} to {output}")
    return 0
