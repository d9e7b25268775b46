"""Loading a sentence-transformers model with a serving backend (torch, ONNX, OpenVINO) and making its exports with
sentence-transformers' own helpers, for the serving rows (st_serving_row.py; runs in the ST benchmark venv)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from st_quality import digest, read_json_texts

ONNX_FILE = "onnx/model.onnx"
ONNX_QINT8_FILE = "onnx/model_qint8_avx512_vnni.onnx"
OV_FILE = "openvino/openvino_model.xml"
OV_QINT8_STEM = "openvino/openvino_model_qint8_quantized"
COPY_DONE = ".st_serving_row_copy_complete"


def load_model(folder: Path, backend: str, file_name: str | None, threads: int, ov_precision: str):
    """`SentenceTransformer(folder, backend=..., model_kwargs={"file_name": ...})` with the thread settings."""
    from sentence_transformers import SentenceTransformer

    if backend == "torch":
        return SentenceTransformer(str(folder), device="cpu")
    model_kwargs: dict[str, Any] = {"file_name": file_name}
    if backend == "onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        model_kwargs.update(provider="CPUExecutionProvider", session_options=options)
    else:
        ov_config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
        if ov_precision != "default":
            ov_config["INFERENCE_PRECISION_HINT"] = ov_precision
        model_kwargs["ov_config"] = ov_config
    return SentenceTransformer(str(folder), device="cpu", backend=backend, model_kwargs=model_kwargs)


def openvino_precision(model) -> str | None:
    """The inference precision the OpenVINO CPU plugin compiled with (read back, for the record)."""
    compiled = getattr(model.transformers_model, "request", None)
    if compiled is None:
        return None
    try:
        value = compiled.get_property("INFERENCE_PRECISION_HINT")
    except Exception:  # a property this OpenVINO release does not expose
        return None
    return value.to_string() if hasattr(value, "to_string") else str(value)  # an openvino.Type: "f32", "bf16"


# ---------------------------------------------------------------- exports (child process)


def scratch_copy(model: Path, work: Path) -> Path:
    """A copy of the model folder without its own onnx/ and openvino/ exports (made once, atomically)."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in model.name)[:40]
    scratch = work / f"st-{name}-{digest(str(model.resolve()).encode())}"
    if (scratch / COPY_DONE).exists():
        return scratch
    partial = work / f"{scratch.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)

    def skip(directory: str, names: list[str]) -> set[str]:
        return {"onnx", "openvino"} & set(names) if Path(directory) == model else set()

    shutil.copytree(model, partial, ignore=skip)
    (partial / COPY_DONE).write_text(str(model.resolve()) + "\n")
    if scratch.exists():
        shutil.rmtree(scratch)
    partial.rename(scratch)
    return scratch


def calibration_suffix(calibration: str) -> str:
    return "qint8_quantized_" + digest(Path(calibration).read_bytes())


def backend_file(backend: str, calibration: str | None) -> str | None:
    if backend == "torch":
        return None
    if backend == "onnx":
        return ONNX_FILE
    if backend == "onnx-qint8":
        return ONNX_QINT8_FILE
    if backend == "openvino":
        return OV_FILE
    if calibration is None:
        raise SystemExit("--backend openvino-qint8 needs --calibration (a JSON list of calibration texts)")
    return f"openvino/openvino_model_{calibration_suffix(calibration)}.xml"


def export(scratch: Path, backend: str, calibration: str | None, work: Path) -> None:
    """Make the file `backend` loads in `scratch` (and the float32 export it starts from), with ST's own API."""
    from sentence_transformers import (
        SentenceTransformer,
        export_dynamic_quantized_onnx_model,
        export_static_quantized_openvino_model,
    )

    if backend.startswith("onnx") and not (scratch / ONNX_FILE).exists():
        # No onnx/ in the copy: sentence-transformers exports the model to ONNX; save_pretrained keeps it.
        SentenceTransformer(str(scratch), device="cpu", backend="onnx").save_pretrained(str(scratch))
    if backend.startswith("openvino") and not (scratch / OV_FILE).exists():
        SentenceTransformer(str(scratch), device="cpu", backend="openvino").save_pretrained(str(scratch))
    if backend == "onnx-qint8" and not (scratch / ONNX_QINT8_FILE).exists():
        model = SentenceTransformer(str(scratch), device="cpu", backend="onnx", model_kwargs={"file_name": ONNX_FILE})
        export_dynamic_quantized_onnx_model(model, "avx512_vnni", str(scratch))
    if backend == "openvino-qint8":
        assert calibration is not None
        suffix = calibration_suffix(calibration)
        if (scratch / f"openvino/openvino_model_{suffix}.xml").exists():
            return
        from optimum.intel import OVQuantizationConfig

        texts = read_json_texts(calibration)
        # A local folder with one data file is a dataset `datasets.load_dataset` reads offline (config "default").
        dataset = work / f"calibration-{suffix.rsplit('_', 1)[-1]}"
        dataset.mkdir(parents=True, exist_ok=True)
        with open(dataset / "train.jsonl", "w", encoding="utf-8") as file:
            for text in texts:
                file.write(json.dumps({"text": text}) + "\n")
        model = SentenceTransformer(str(scratch), device="cpu", backend="openvino", model_kwargs={"file_name": OV_FILE})
        export_static_quantized_openvino_model(
            model,
            OVQuantizationConfig(num_samples=len(texts)),
            str(scratch),
            dataset_name=str(dataset),
            dataset_config_name="default",
            dataset_split="train",
            column_name="text",
            file_suffix=suffix,
        )
