"""The names an export is written under and read back by (formats, quantization modes, graph files, what TEI
builds) and the optional-dependency check: shared by every module of `hf_siamese.serving`."""

from __future__ import annotations

FORMATS = ("sentence-transformers", "onnx", "openvino")
QUANTIZATION = ("none", "int8-dynamic", "int8-static")
# What each kind's graph returns: a bi-encoder's encoder its token states (pooled after the graph), a cross-encoder
# its logits `(batch, num_labels)`.
ENCODER_OUTPUT = "last_hidden_state"
CROSS_ENCODER_OUTPUT = "logits"
DEFAULT_CALIBRATION_SIZE = 300  # sentence-transformers' default for its static int8 export
ONNX_FILES = {
    "none": "onnx/model.onnx",
    "int8-dynamic": "onnx/model_qint8_dynamic.onnx",
    "int8-static": "onnx/model_qint8_static.onnx",
}
OPENVINO_FILES = {
    "none": "openvino/openvino_model.xml",
    "int8-dynamic": "openvino/openvino_model_qint8_dynamic.xml",
    # The name sentence-transformers' export_static_quantized_openvino_model writes.
    "int8-static": "openvino/openvino_model_qint8_quantized.xml",
}
# Model types text-embeddings-inference builds (its docs and core/src/download.rs, late 2026).
TEI_MODEL_TYPES = (
    "bert",
    "camembert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "mpnet",
    "nomic_bert",
    "jina_bert",
    "new",
    "gte",
    "modernbert",
    "mistral",
    "qwen2",
    "qwen3",
)
TEI_POOLING = ("cls", "mean", "lasttoken")
# The ONNX opsets an encoder graph is written in: from 14, the first with scaled_dot_product_attention (transformers'
# sdpa attention; lower opsets fail inside the exporter), to the highest the installed torch's TorchScript exporter
# (torch.onnx.export(dynamo=False)) writes.
try:
    from torch.onnx._constants import ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET as _MAX_OPSET
except ImportError:  # a private name: torch 2.13 has it; 20 is its value there
    _MAX_OPSET = 20
ONNX_OPSETS = range(14, _MAX_OPSET + 1)
EXTRAS = {"onnx": ("onnx", "onnxruntime"), "openvino": ("openvino",), "nncf": ("nncf",)}


class MissingExtraError(ImportError):
    """An optional dependency of an export format or backend is not installed; the message names the extra."""


def require(extra: str, what: str) -> None:
    """Import the modules of `extra` (`onnx`, `openvino`, `nncf`) or raise `MissingExtraError` naming the pip extra."""
    import importlib

    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as error:
            package = "openvino" if extra == "nncf" else extra
            raise MissingExtraError(
                f"{what} needs the Python package {module!r}, which is not installed: pip install "
                f"'hf-siamese[{package}]'"
            ) from error
