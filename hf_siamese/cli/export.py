"""`hf-siamese export`: write a model for serving: the plain sentence-transformers layout (TEI, sentence-transformers,
MTEB), optionally with an ONNX or OpenVINO graph in float32 or int8. A cross-encoder folder (`--model CE_DIR`) is
written in its `CrossEncoder.save_pretrained` layout (TEI's `/rerank`) with a graph to its logits."""

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
    from ..cross_encoder.export import is_cross_encoder
    from ..formats.export import DEFAULT_CALIBRATION_SIZE, export_model

    if args.calibration and args.quantize != "int8-static":
        raise ValueError(
            f"--calibration is used only with --quantize int8-static (here --quantize {args.quantize}): drop "
            "--calibration, or give --quantize int8-static"
        )
    calibration = None
    if args.calibration and is_cross_encoder(args.model):
        calibration = _calibration_pairs(args.calibration)
    elif args.calibration:
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
    if is_cross_encoder(args.model):
        return _export_cross_encoder(args, calibration)
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


def _calibration_pairs(source: str) -> list[tuple[str, str]]:
    """(query, document) pairs of a calibration file for a cross-encoder: its first two text columns."""
    from ..data.columns import detect_layout
    from .common import load_data

    dataset = load_data(source, None, None, None)
    layout = detect_layout(dataset.column_names)
    if len(layout.texts) < 2:
        raise ValueError(
            f"--calibration {source}: a cross-encoder calibrates on (query, document) pairs; the file has columns "
            f"{dataset.column_names} (expected two text columns, e.g. sentence1 and sentence2)"
        )
    first, second = layout.texts[:2]
    return list(zip(dataset[first], dataset[second], strict=True))


def _export_cross_encoder(args: argparse.Namespace, calibration: list[tuple[str, str]] | None) -> int:
    """`hf-siamese export` of a cross-encoder folder: its save_pretrained layout (TEI's /rerank), plus the graph."""
    from ..cross_encoder.export import export_cross_encoder
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
    output = export_cross_encoder(
        model,
        args.output,
        format=args.format,
        quantize=args.quantize,
        calibration_pairs=calibration,
        calibration_size=args.calibration_size,
        overwrite=args.overwrite,
    )
    print(f"wrote {args.format} export (quantize: {args.quantize}) of the cross-encoder {args.model} to {output}")
    return 0
