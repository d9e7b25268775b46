"""`hf-siamese encode`: embed a text file (one text per line) into .npy or .safetensors."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .arguments import add_command, add_model_arguments, add_quantize_argument, positive_int
from .common import DTYPES, load_inference_model


def register(commands: Any) -> None:
    """Add `encode` to the `hf-siamese` subparsers."""
    add_command(
        commands, "encode", run_encode, add_arguments,
        summary="embed a text file (one text per line) into .npy or .safetensors",
        description="Embed every non-blank line of a text file. Row i of the output is the i-th non-blank line.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `encode`: the text file, the output file, the model, the batch size, the dtype, quantization."""
    parser.add_argument("texts", metavar="FILE", help="UTF-8 text file, one text per line")
    parser.add_argument(
        "-o", "--output", required=True, help="output file: NAME.npy, or NAME.safetensors (tensor 'embeddings')"
    )
    add_model_arguments(parser, training=False)
    parser.add_argument("--batch-size", type=positive_int, default=64, help="default: %(default)s")
    parser.add_argument(
        "--dtype", choices=DTYPES, default="float32",
        help="dtype of the stored embeddings (and of the computation on a GPU; default: %(default)s)",
    )  # fmt: skip
    add_quantize_argument(parser)


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
