"""One sentence-transformers serving row per process, and the interop check of our exported folders.

Runs with the python of the ST benchmark venv (``benchmarks/scenarios/st_venv.py``: sentence-transformers 5.x with
transformers < 5, optimum-onnx, optimum-intel), never with the project's .venv; it imports nothing of hf_siamese.

Row mode: one backend of one model, timed on its own, so that the process's peak RSS is the row's own.

    .bench-venv-st/bin/python benchmarks/scenarios/st_serving_row.py --model DIR \\
        --backend torch|onnx|onnx-qint8|openvino|openvino-qint8 --texts TEXTS.json --out ROW.json \\
        [--batch-size 64] [--threads 2] [--repeats 3] [--work DIR] [--calibration CALIB.json] \\
        [--eval-stsb sts-test.csv] [--eval-scifact SCIFACT_DIR] [--ov-precision f32]

- The model is loaded as the sentence-transformers docs say:
  ``SentenceTransformer(path, backend=..., model_kwargs={"file_name": ...})``; ONNX Runtime gets a
  ``SessionOptions`` with ``--threads`` intra-op threads, OpenVINO an ``ov_config`` with ``INFERENCE_NUM_THREADS``
  and ``INFERENCE_PRECISION_HINT`` (``--ov-precision``, f32 by default: a CPU with native bf16 would otherwise run
  bf16), torch ``torch.set_num_threads``.
- Every non-torch backend runs on sentence-transformers' own exports, made in a scratch copy of the model folder
  (``--work``/st-<name>-<hash>, without any onnx/ or openvino/ folder the model came with) and kept there for the
  next rows: ``onnx`` = the export of ``SentenceTransformer(copy, backend="onnx")`` saved with ``save_pretrained``
  (onnx/model.onnx); ``onnx-qint8`` = ``export_dynamic_quantized_onnx_model(model, "avx512_vnni", copy)``
  (onnx/model_qint8_avx512_vnni.onnx); ``openvino`` = the same for OpenVINO (openvino/openvino_model.xml);
  ``openvino-qint8`` = ``export_static_quantized_openvino_model`` with the texts of ``--calibration`` as the
  calibration dataset, all of them (openvino/openvino_model_qint8_quantized_<hash of the texts>.xml). Exports run in
  a child process, so that their memory is not counted in the row's peak RSS; ``export_s`` is their wall time.
- Timing: one warm-up ``encode`` over all the texts, then ``--repeats`` timed ones; sentences/s of the best and of
  the median.
- ``--eval-stsb``: the STS Benchmark file (tab-separated, no header, csv.QUOTE_NONE; the format of
  ../shared/data/stsb/SOURCE.txt), Spearman x100 of the cosine similarities of the pairs against the gold scores,
  each distinct sentence embedded once. ``--eval-scifact``: a BEIR folder (corpus.jsonl, queries.jsonl,
  qrels/test.tsv), documents ``title + " " + text`` (just ``text`` without a title), the test queries that have a
  relevant judgement, exact cosine ranking of the whole corpus, nDCG@10 (trec_eval ``ndcg_cut``: gain = the
  relevance, discount log2(rank + 1), ideal DCG from the query's judged relevances), MRR@10 and Recall@100, x100.
- The JSON written to ``--out``: throughput, the file the backend loads and its size on disk (.onnx with any external
  data; .xml + .bin; model.safetensors for torch), peak RSS (``ru_maxrss``) after loading, after timing and at the
  end, the metrics, and the versions.

Check mode: do the folders our exporter writes load in sentence-transformers with the same embeddings?

    .bench-venv-st/bin/python benchmarks/scenarios/st_serving_row.py --check-folder DIR --reference REF.npy \\
        --texts TEXTS.json [--out CHECK.json] [--atol 1e-4] [--threads 2]

loads DIR with backend torch, onnx (onnx/model.onnx) and openvino (openvino/openvino_model.xml, f32 inference
precision), embeds the texts and reports each one's max abs difference against REF.npy (the embeddings of the same
texts, in order, computed by hf_siamese); also, for information only, the quantized files when present
(onnx/model_qint8_dynamic.onnx, onnx/model_qint8_static.onnx, openvino/openvino_model_qint8_quantized.xml).
Exit status 1 when one of the three float32 backends fails to load or differs by more than ``--atol``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from common import peak_rss_mib  # common and st_venv import the standard library only
from st_exports import backend_file, export, load_model, openvino_precision, scratch_copy
from st_quality import eval_scifact, eval_stsb, read_json_texts, unit_rows
from st_venv import VERSIONS  # the packages the venv records

BACKENDS = ("torch", "onnx", "onnx-qint8", "openvino", "openvino-qint8")
# (name, backend, file, float32): the files our exporter writes; the float32 ones must match the reference.
CHECKED_FILES = (
    ("torch", "torch", None, True),
    ("onnx", "onnx", "onnx/model.onnx", True),
    ("openvino", "openvino", "openvino/openvino_model.xml", True),
    ("onnx-qint8-dynamic", "onnx", "onnx/model_qint8_dynamic.onnx", False),
    ("onnx-qint8-static", "onnx", "onnx/model_qint8_static.onnx", False),
    ("openvino-qint8", "openvino", "openvino/openvino_model_qint8_quantized.xml", False),
)


# ---------------------------------------------------------------- small helpers


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in VERSIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def file_bytes(folder: Path, file_name: str | None) -> tuple[str, int]:
    """The file(s) a backend loads, relative to the folder, and their size on disk together."""
    if file_name is None:  # torch: the weights file
        for candidate in ("model.safetensors", "pytorch_model.bin"):
            if (folder / candidate).exists():
                return candidate, (folder / candidate).stat().st_size
        return "", 0
    path = folder / file_name
    files = [path]
    if path.suffix == ".xml":
        files.append(path.with_suffix(".bin"))
    else:  # ONNX external data, when the graph was saved with it
        files += [p for p in (Path(f"{path}_data"), Path(f"{path}.data")) if p.exists()]
    return " + ".join(str(p.relative_to(folder)) for p in files), sum(p.stat().st_size for p in files)


# ---------------------------------------------------------------- modes


def run_row(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model).resolve()
    work = Path(args.work).resolve()
    file_name = backend_file(args.backend, args.calibration)
    folder = model_dir
    export_s = 0.0
    if file_name is not None:
        work.mkdir(parents=True, exist_ok=True)
        folder = scratch_copy(model_dir, work)
        if not (folder / file_name).exists():
            # In a child process: export memory must not count in this row's peak RSS.
            command = [sys.executable, str(Path(__file__).resolve()), "--export-only", *sys.argv[1:]]
            start = time.perf_counter()
            subprocess.run(command, check=True)
            export_s = time.perf_counter() - start
            if not (folder / file_name).exists():
                raise RuntimeError(f"the export did not write {folder / file_name}")
    texts = read_json_texts(args.texts)

    start = time.perf_counter()
    model = load_model(folder, args.backend.removesuffix("-qint8"), file_name, args.threads, args.ov_precision)
    load_s = time.perf_counter() - start
    rss_loaded = peak_rss_mib()

    def encode(batch: list[str]):
        return model.encode(batch, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)

    embeddings = encode(texts)  # warm-up
    if args.save:
        import numpy as np

        np.save(args.save, np.asarray(embeddings, dtype=np.float32))
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        encode(texts)
        times.append(time.perf_counter() - start)
    rss_timed = peak_rss_mib()

    loaded, size = file_bytes(folder, file_name)
    row: dict[str, Any] = {
        "backend": args.backend,
        "model": str(model_dir),
        "folder": str(folder),
        "file": loaded,
        "file_bytes": size,
        "file_mib": size / 2**20,
        "texts": len(texts),
        "embedding_dim": int(embeddings.shape[1]),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "times_s": times,
        "sentences_per_s_best": len(texts) / min(times) if times else None,
        "sentences_per_s_median": len(texts) / statistics.median(times) if times else None,
        "load_s": load_s,
        "export_s": export_s,
        "peak_rss_mib_after_load": rss_loaded,
        "peak_rss_mib_after_timing": rss_timed,
    }
    if args.backend.startswith("openvino"):
        row["ov_precision_asked"] = args.ov_precision
        row["ov_inference_precision"] = openvino_precision(model)
    if args.eval_stsb:
        row["stsb_test"] = eval_stsb(encode, args.eval_stsb)
    if args.eval_scifact:
        row["scifact_test"] = eval_scifact(encode, args.eval_scifact)
    row["peak_rss_mib"] = peak_rss_mib()
    row["versions"] = versions()
    return row


def run_check(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    folder = Path(args.check_folder).resolve()
    texts = read_json_texts(args.texts)
    reference = np.load(args.reference).astype(np.float32)
    if reference.shape[0] != len(texts):
        raise SystemExit(f"{args.reference} has {reference.shape[0]} rows for {len(texts)} texts")
    results: dict[str, Any] = {}
    ok = True
    for name, backend, file_name, float32 in CHECKED_FILES:
        entry: dict[str, Any] = {"backend": backend, "file": file_name, "float32": float32}
        results[name] = entry
        if file_name is not None and not (folder / file_name).exists():
            entry["present"] = False
            ok = ok and not float32
            continue
        entry["present"] = True
        try:
            model = load_model(folder, backend, file_name, args.threads, "f32")
            embeddings = model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
        except Exception as err:  # reported; fails the check for a float32 backend
            entry["error"] = f"{type(err).__name__}: {err}"
            ok = ok and not float32
            continue
        if embeddings.shape != reference.shape:
            entry["error"] = f"embeddings of shape {list(embeddings.shape)}, reference {list(reference.shape)}"
            ok = ok and not float32
            continue
        diff = np.abs(embeddings.astype(np.float32) - reference)
        cosine = (unit_rows(embeddings) * unit_rows(reference)).sum(axis=1)
        entry.update(max_abs_diff=float(diff.max()), mean_abs_diff=float(diff.mean()), min_cosine=float(cosine.min()))
        if backend == "openvino":
            entry["ov_inference_precision"] = openvino_precision(model)
        if float32:
            entry["within_atol"] = bool(diff.max() <= args.atol)
            ok = ok and entry["within_atol"]
    report = {
        "folder": str(folder),
        "texts": len(texts),
        "atol": args.atol,
        "ok": ok,
        "results": results,
        "versions": versions(),
    }
    return report, ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a sentence-transformers model folder (row mode)")
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    parser.add_argument("--texts", help="JSON list of the sentences to time (row mode) or to check (check mode)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calibration", help="JSON list of texts: the calibration set of openvino-qint8")
    parser.add_argument("--work", default="out/st_serving", help="scratch folder for the exports (kept)")
    parser.add_argument("--eval-stsb", help="STS Benchmark test file: report the Spearman x100 of the cosines")
    parser.add_argument("--eval-scifact", help="BEIR SciFact folder: report nDCG@10, MRR@10, Recall@100 (test)")
    parser.add_argument(
        "--ov-precision",
        default="f32",
        choices=("f32", "bf16", "f16", "default"),
        help="OpenVINO INFERENCE_PRECISION_HINT (default: f32; 'default' leaves the plugin's own choice)",
    )
    parser.add_argument("--save", help="row mode: save the embeddings of --texts (.npy; --repeats 0 skips timing)")
    parser.add_argument("--out", help="write the JSON here (it is printed too)")
    parser.add_argument("--check-folder", help="check mode: a folder exported by hf_siamese")
    parser.add_argument("--reference", help="check mode: .npy of the reference embeddings of --texts")
    parser.add_argument("--atol", type=float, default=1e-4, help="check mode: max abs difference allowed")
    parser.add_argument("--export-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check_folder:
        if not (args.reference and args.texts):
            parser.error("--check-folder needs --reference and --texts")
    elif not args.model or (not args.texts and not args.export_only):
        parser.error("row mode needs --model and --texts (or --check-folder for check mode)")
    return args


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.export_only:
        # datasets caches the calibration set under the hub cache: keep it in the scratch folder, not in ~/.cache.
        work = Path(args.work).resolve()
        os.environ["HF_HOME"] = str(work / "hf-home")
        import torch

        torch.set_num_threads(args.threads)
        file_name = backend_file(args.backend, args.calibration)
        if file_name is not None:
            export(scratch_copy(Path(args.model).resolve(), work), args.backend, args.calibration, work)
        return
    if args.check_folder:
        report, ok = run_check(args)
    else:
        report, ok = run_row(args), True
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
