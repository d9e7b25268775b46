"""`hf-siamese export`: write a model for serving: the plain sentence-transformers layout (TEI, sentence-transformers,
MTEB), optionally with an ONNX or OpenVINO graph in float32 or int8. A cross-encoder folder (`--model CE_DIR`) is
written in its `CrossEncoder.save_pretrained` layout (TEI's `/rerank`) with a graph to its logits; a learned-sparse
one (`--model SPARSE_DIR`, SPLADE or inference-free) in sentence-transformers' SparseEncoder layout with a graph of
its document path (to the MLM logits, pooled after it)."""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from .arguments import add_command, add_model_arguments, positive_int
from .common import load_inference_model

# serving.names.FORMATS / QUANTIZATION, repeated so building the parser imports no export code (a test keeps them
# equal).
EXPORT_FORMATS = ("sentence-transformers", "onnx", "openvino")
EXPORT_QUANTIZATION = ("none", "int8-dynamic", "int8-static")


def register(commands: Any) -> None:
    """Add `export` to the `hf-siamese` subparsers."""
    add_command(
        commands, "export", run_export, add_arguments,
        summary="write a model for serving: sentence-transformers layout, ONNX or OpenVINO, float32 or int8",
        description="Write the plain sentence-transformers layout (what text-embeddings-inference, "
        "sentence-transformers and MTEB load) and, with --format onnx / openvino, the encoder's graph in onnx/ or "
        "openvino/ (float32, plus an int8 version with --quantize). The folder appears only once the export "
        "succeeded and the float32 graph matched the torch model.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `export`: the output folder, the model, the format, the quantization and its calibration."""
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write (must not exist)")
    add_model_arguments(parser, training=True)
    parser.add_argument(
        "--format", choices=EXPORT_FORMATS, default="sentence-transformers", help="default: %(default)s"
    )
    parser.add_argument(
        "--quantize", choices=EXPORT_QUANTIZATION, default="none",
        help="int8-dynamic: int8 weights; int8-static: int8 weights and activations, calibrated on --calibration "
        "(default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--calibration", metavar="FILE",
        help="texts like the ones you will serve (.txt one per line, .jsonl, .csv, .parquet)",
    )  # fmt: skip
    parser.add_argument(
        "--calibration-column", default="text", metavar="NAME",
        help="text column of a table file (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--calibration-size", type=positive_int, default=300, help="texts drawn for calibration (default: %(default)s)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --output once the export succeeded")


def run_export(args: argparse.Namespace) -> int:
    """Read the calibration items (texts, or pairs for a cross-encoder), load the model of either kind, call
    `hf_siamese.serving.export_model` once."""
    from ..serving import export_model

    if args.calibration and args.quantize != "int8-static":
        raise ValueError(
            f"--calibration is used only with --quantize int8-static (here --quantize {args.quantize}): drop "
            "--calibration, or give --quantize int8-static"
        )
    sparse = _is_sparse(args)
    cross_encoder = not sparse and _is_cross_encoder(args.model)
    calibration = None
    if args.calibration and cross_encoder:
        calibration = _calibration_pairs(args.calibration)
    elif args.calibration:
        calibration = _calibration_texts(args.calibration, args.calibration_column, args.calibration_size)
    elif args.quantize == "int8-static":
        raise ValueError(
            "--quantize int8-static calibrates on texts like the ones you will serve: give --calibration FILE (one "
            "text per line, or .jsonl / .csv / .parquet with --calibration-column)"
        )
    if sparse:
        from .sparse_options import load_sparse_model

        model, tokenizer = load_sparse_model(args.model, args.max_seq_length, device="cpu")
    elif cross_encoder:
        model, tokenizer = _load_cross_encoder(args), None
    else:
        model, tokenizer = load_inference_model(
            args.model, args.pooling, args.normalize, args.max_seq_length, device="cpu"
        )
    output = export_model(
        model,
        args.output,
        format=args.format,
        quantize=args.quantize,
        calibration_texts=calibration,
        calibration_size=args.calibration_size,
        tokenizer=tokenizer,
        overwrite=args.overwrite,
    )
    what = f"the cross-encoder {args.model}" if cross_encoder else args.model or "the default model"
    what = f"the sparse model {args.model}" if sparse else what
    print(f"wrote {args.format} export (quantize: {args.quantize}) of {what} to {output}")
    return 0


def _is_sparse(args: argparse.Namespace) -> bool:
    """Whether `--model` is a learned-sparse model (by its config.json, or a SparseEncoder folder); the dense-only
    flags are refused for one, each named."""
    from .sparse_options import is_sparse_model_path, refuse_dense_flags

    if not is_sparse_model_path(args.model):
        return False
    normalize = args.normalize is not None
    refuse_dense_flags(args.model, {"--pooling": args.pooling, "--normalize/--no-normalize": normalize})
    return True


def _is_cross_encoder(model: str | None) -> bool:
    """Whether `--model` is a local cross-encoder folder (a `...ForSequenceClassification`)."""
    from ..cross_encoder.source import model_kind

    return model is not None and model_kind(model) == "cross-encoder"


def _calibration_texts(source: str, column: str | None, size: int) -> list[str]:
    """The texts of a calibration file (one per line, or a column of .jsonl / .csv / .parquet)."""
    from ..data.corpus_stream import open_corpus
    from ..serving import DEFAULT_CALIBRATION_SIZE

    # Reading stops well past the sample size: a calibration file may be a whole corpus.
    limit = max(size, DEFAULT_CALIBRATION_SIZE) * 20
    return [text for _, text in itertools.islice(open_corpus(source, column, None), limit)]


def _calibration_pairs(source: str) -> list[tuple[str, str]]:
    """(query, document) pairs of a calibration file for a cross-encoder: its first two text columns."""
    from ..data.columns import detect_layout
    from ..data.training_sets import load_data

    dataset = load_data(source, None, None, None)
    layout = detect_layout(dataset.column_names)
    if len(layout.texts) < 2:
        raise ValueError(
            f"--calibration {source}: a cross-encoder calibrates on (query, document) pairs; the file has columns "
            f"{dataset.column_names} (expected two text columns, e.g. sentence1 and sentence2)"
        )
    first, second = layout.texts[:2]
    return list(zip(dataset[first], dataset[second], strict=True))


def _load_cross_encoder(args: argparse.Namespace) -> Any:
    """The cross-encoder folder `--model` on the CPU, `--max-seq-length` applied; bi-encoder options refused."""
    from .common import load_cross_encoder

    bi_encoder_only = [
        option
        for option, value in (("--pooling", args.pooling), ("--normalize/--no-normalize", args.normalize))
        if value is not None
    ]
    if bi_encoder_only:
        raise ValueError(
            f"{' and '.join(bi_encoder_only)}: bi-encoder options, but --model {args.model} is a cross-encoder "
            "(it scores pairs; it pools and normalizes nothing): drop them"
        )
    model = load_cross_encoder(args.model, device="cpu", option="--model")
    if args.max_seq_length is not None:
        model.max_length = args.max_seq_length
    return model
