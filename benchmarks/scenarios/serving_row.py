"""One row of the serving benchmark for hf-siamese, in its own process (so its peak RSS is its own): time `encode`
over a list of texts, or embed texts and save the embeddings for the driver to score (`run.py serving`).

    python benchmarks/scenarios/serving_row.py --row onnx-int8-static --exports DIR --texts T.json --speed --out R.json
    python benchmarks/scenarios/serving_row.py --row torch-bf16 --exports DIR --texts T.json --save E.npy --out R.json

Rows: torch-fp32, torch-bf16 (`SiameseBertModel.encode`), and `ExportedEncoder` over the exports in DIR:
onnx-fp32, onnx-int8-dynamic, onnx-int8-static, openvino-fp32 (f32 hint), openvino-bf16, openvino-int8-static (bf16
hint for what stays float, the OpenVINO default on CPUs that have bf16).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import peak_rss_mib  # noqa: E402

# row -> (export subfolder, backend, file in the folder, OpenVINO precision)
GRAPH_ROWS = {
    "onnx-fp32": ("onnx", "onnx", "onnx/model.onnx", "f32"),
    "onnx-int8-dynamic": ("onnx-int8-dynamic", "onnx", "onnx/model_qint8_dynamic.onnx", "f32"),
    "onnx-int8-static": ("onnx-int8-static", "onnx", "onnx/model_qint8_static.onnx", "f32"),
    "openvino-fp32": ("openvino", "openvino", "openvino/openvino_model.xml", "f32"),
    "openvino-bf16": ("openvino", "openvino", "openvino/openvino_model.xml", "bf16"),
    "openvino-int8-static": ("openvino-int8-static", "openvino", "openvino/openvino_model_qint8_quantized.xml", "bf16"),
}
TORCH_ROWS = {"torch-fp32": None, "torch-bf16": torch.bfloat16}
ROWS = (*TORCH_ROWS, *GRAPH_ROWS)


def file_size(path: Path) -> int:
    """Bytes on disk of a graph (an OpenVINO .xml with its .bin)."""
    size = path.stat().st_size
    return size + path.with_suffix(".bin").stat().st_size if path.suffix == ".xml" else size


def load_row(row: str, exports: Path, batch_size: int):
    """(encode function over a list of texts, size in bytes of what it runs)."""
    if row in TORCH_ROWS:
        from transformers import AutoTokenizer

        from hf_siamese import SiameseBertModel

        folder = exports / "sentence-transformers"
        model = SiameseBertModel.from_encoder(str(folder)).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        dtype = TORCH_ROWS[row]
        return (
            lambda texts: model.encode(texts, tokenizer=tokenizer, batch_size=batch_size, dtype=dtype).numpy(),
            (folder / "model.safetensors").stat().st_size,
        )
    from hf_siamese import ExportedEncoder

    sub, backend, file_name, precision = GRAPH_ROWS[row]
    encoder = ExportedEncoder(exports / sub, backend, file_name=file_name, precision=precision)
    return lambda texts: encoder.encode(texts, batch_size=batch_size), file_size(exports / sub / file_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=ROWS, required=True)
    parser.add_argument("--exports", required=True, type=Path)
    parser.add_argument("--texts", required=True, type=Path, help="JSON list of texts")
    parser.add_argument("--speed", action="store_true", help="time encode over the texts (after a warm-up)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", type=Path, help="embed the texts once and save the embeddings (.npy)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = json.loads(args.texts.read_text(encoding="utf-8"))
    encode, size = load_row(args.row, args.exports, args.batch_size)
    result = {"row": args.row, "library": "hf-siamese", "file_bytes": size}
    if args.speed:
        # Warm-up over all the texts, as the sentence-transformers worker does: first-call allocations and the kernels
        # OpenVINO / ONNX Runtime prepare for each new input shape are not counted for either library.
        encode(texts)
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            encode(texts)
            seconds.append(time.perf_counter() - start)
        result["sentences_per_s"] = len(texts) / statistics.median(seconds)
        result["seconds"] = seconds
    if args.save:
        start = time.perf_counter()
        np.save(args.save, np.asarray(encode(texts), dtype=np.float32))
        result["embed_seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = peak_rss_mib()
    args.out.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
