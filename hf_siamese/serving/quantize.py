"""int8 versions of an exported float32 graph, made with each runtime's own tools.

- ONNX, `int8-dynamic`: `onnxruntime.quantization.quantize_dynamic`: int8 MatMul/Gemm weights (per output channel),
  activations quantized to uint8 per batch at run time (what sentence-transformers' `onnx-qint8` files hold).
- ONNX, `int8-static`: `quantize_static` in QDQ form, activation ranges measured on the calibration batches (MinMax),
  weight MatMuls only, and not the feed-forward down-projections (whose inputs, the activation function's outputs,
  have ranges int8 cannot hold: on all-MiniLM-L6-v2 the mean cosine to float32 rose from 0.93 to 0.99 without them).
- OpenVINO, `int8-dynamic`: `nncf.compress_weights` (int8 weights, float activations).
- OpenVINO, `int8-static`: `nncf.quantize` with the transformer preset on the calibration batches.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..storage import work_folder

logger = logging.getLogger(__name__)

# The ops quantized in the ONNX graphs: the matrix products hold nearly all the work and all the weights.
ONNX_OPS = ["MatMul", "Gemm"]
# Elementwise activations: a MatMul fed by one of these is a feed-forward down-projection.
ACTIVATION_OPS = {"Mul", "Gelu", "FastGelu", "BiasGelu", "Relu", "Sigmoid", "Tanh", "Erf", "Silu", "QuickGelu"}


def activation_fed_matmuls(path: Path) -> list[str]:
    """Names of the MatMul nodes of the ONNX graph at `path` whose first input is an activation function's output."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {output: node.op_type for node in graph.node for output in node.output}
    return [n.name for n in graph.node if n.op_type == "MatMul" and producer.get(n.input[0]) in ACTIVATION_OPS]


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """ONNX Runtime's quantizer logs a line per tensor to the root logger at INFO; keep those out of the user's log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_onnx(source: Path, target: Path, mode: str, batches: list[dict[str, np.ndarray]]) -> None:
    """Write the int8 version (`mode` `int8-dynamic` or `int8-static`) of the ONNX graph `source` to `target`."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with work_folder(target, "quantize") as scratch, _quiet_root_logger():
        prepared = scratch / "prepared.onnx"
        # Shape inference and graph clean-up first, as ONNX Runtime's quantization guide advises.
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        if mode == "int8-dynamic":
            quantize_dynamic(
                str(prepared), str(target), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=ONNX_OPS
            )
            return

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.items = iter(batches)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.items, None)

        quantize_static(
            str(prepared),
            str(target),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=ONNX_OPS,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=activation_fed_matmuls(prepared),
            extra_options={"MatMulConstBOnly": True},
        )


def quantize_openvino(source: Path, target: Path, mode: str, batches: list[dict[str, np.ndarray]] | None) -> None:
    """Write the int8 version of the OpenVINO model `source` (.xml) to `target` (.xml, with its .bin)."""
    import nncf
    import openvino

    core = openvino.Core()
    graph = core.read_model(str(source))
    if mode == "int8-dynamic":
        quantized = nncf.compress_weights(graph, mode=nncf.CompressWeightsMode.INT8_ASYM)
    else:
        # subset_size counts dataset items: here batches, every one of them used.
        dataset = nncf.Dataset(batches or [])
        quantized = nncf.quantize(
            graph, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=max(1, len(batches or []))
        )
    openvino.save_model(quantized, str(target), compress_to_fp16=False)
