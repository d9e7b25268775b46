"""`hf-siamese export`: write a model for serving: the plain sentence-transformers layout (TEI, sentence-transformers,
MTEB), optionally with an ONNX or OpenVINO graph in float32 or int8."""

from __future__ import annotations

import argparse
import itertools

from .common import load_inference_model

# formats.export.FORMATS / QUANTIZATION, repeated so building the parser imports no export code (a test keeps them
# equal).
EXPORT_FORMATS = ("sentence-transformers", "onnx", "openvino")
EXPORT_QUANTIZATION = ("none", "int8-dynamic", "int8-static")


def run_export(args: argparse.Namespace) -> int:
    """Read the calibration texts (when given), load the model, call `export_model` once."""
    from ..formats.export import DEFAULT_CALIBRATION_SIZE, export_model

    if args.calibration and args.quantize != "int8-static":
        raise ValueError(
            f"--calibration is used only with --quantize int8-static (here --quantize {args.quantize}): drop "
            "--calibration, or give --quantize int8-static"
        )
    calibration = None
    if args.calibration:
        from ..data.corpus_stream import open_corpus

        # Reading stops well past the sample size: a calibration file may be a whole corpus.
        limit = max(args.calibration_size, DEFAULT_CALIBRATION_SIZE) * 20
        rows = open_corpus(args.calibration, args.calibration_column, None)
        calibration = [text for _, text in itertools.islice(rows, limit)]
    elif args.quantize == "int8-static":
        raise ValueError(
            "--quantize int8-static calibrates on texts like the ones you will serve: give --calibration FILE (one "
            "text per line, or .jsonl / .csv / .parquet with --calibration-column)"
        )
    model, tokenizer = load_inference_model(args.model, args.pooling, args.normalize, args.max_seq_length, device="cpu")
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
    print(f"wrote {args.format} export (quantize: {args.quantize}) of {args.model or 'the default model'} to {output}")
    return 0
