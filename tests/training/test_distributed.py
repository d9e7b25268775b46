"""Training and evaluation across processes: exact cross-process MNR gradients, `accelerate launch`, sharded STS.

Each test starts 2 gloo processes on the CPU running a script from `tests/distributed/` (through this venv's
`python -m torch.distributed.run` / `python -m accelerate.commands.launch`) and checks what they wrote.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoModel

import hf_siamese
from hf_siamese.modeling.distributed import gather_with_grad, shutdown_process_group

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "distributed"
ACCELERATE_CONFIG = HERE.parents[1] / "examples" / "accelerate_cpu_2proc.yaml"
TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "PYTEST_"))}
    # 2 processes on 2 cores: one thread each, or they oversubscribe the cores and crawl.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    return env


def launch(command: list[str]) -> subprocess.CompletedProcess[str]:
    # A session of its own, so a hung run is killed with its worker processes, not just the launcher.
    process = subprocess.Popen(
        command,
        env=child_env(),
        cwd=HERE.parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"timed out after {TIMEOUT_S} s\n{stdout[-3000:]}\n{stderr[-6000:]}")
    assert process.returncode == 0, f"exit {process.returncode}\n{stdout[-3000:]}\n{stderr[-6000:]}"
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def torchrun(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    port = str(free_port())
    return launch(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
        + [str(SCRIPTS / script), *args]
    )


def accelerate_launch(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    port = str(free_port())
    return launch(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIG)]
        + ["--main_process_port", port, str(SCRIPTS / script), *args]
    )


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """Output folder for the child processes. Not pytest's tmp_path: pytest deletes old numbered temp folders
    when other pytest sessions start, which can pull the folder away from a run still writing into it."""
    with tempfile.TemporaryDirectory(prefix="hf_siamese_distributed_") as folder:
        yield Path(folder)


def rank_reports(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


def test_single_process_helpers() -> None:
    import torch
    import torch.distributed as dist

    local = torch.randn(3, 4)
    gathered, offset = gather_with_grad(local)
    assert gathered is local and offset == 0
    shutdown_process_group()  # no process group: nothing to do, no error

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        shutdown_process_group(settle_s=0)
        assert not dist.is_initialized()
        shutdown_process_group()  # twice is harmless
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ------------------------------------------------------------------------------------ exact cross-process gradients


@pytest.fixture(scope="module")
def gradient_report(scratch: Path) -> dict[tuple[int, bool, bool, bool], dict[str, Any]]:
    out = scratch / "gradients.json"
    torchrun("mnr_gradients.py", str(out))
    return {(r["negatives"], r["symmetric"], r["gather"], r["cached"]): r for r in json.loads(out.read_text())}


@pytest.mark.parametrize("negatives", [0, 1], ids=["pairs", "hard-negative"])
@pytest.mark.parametrize("symmetric", [False, True], ids=["one-way", "symmetric"])
def test_gathered_mnr_gradients_equal_one_process_with_the_global_batch(
    gradient_report: dict[tuple[int, bool, bool, bool], dict[str, Any]], negatives: int, symmetric: bool
) -> None:
    """2 processes x 4 rows with gathering, gradients averaged by DDP == 1 process x 8 rows, loss and gradients.

    The gather's backward sums each candidate's gradient over processes; DDP then divides by the world size. The
    loss needs no extra factor: the result is the gradient of the global mean loss, not W times it."""
    gathered = gradient_report[(negatives, symmetric, True, False)]
    assert gathered["loss_diff"] < 1e-6, gathered
    assert gathered["grad_diff"] < 1e-5, gathered
    # Without gathering each process only sees its own 4 candidates: a different loss and clearly different
    # gradients, so the comparison above can fail.
    local_only = gradient_report[(negatives, symmetric, False, False)]
    assert local_only["loss_diff"] > 0.1, local_only
    assert local_only["grad_diff"] > 0.05 * local_only["grad_max"], local_only


@pytest.mark.parametrize("negatives", [0, 1], ids=["pairs", "hard-negative"])
@pytest.mark.parametrize("symmetric", [False, True], ids=["one-way", "symmetric"])
def test_cached_gathered_mnr_gradients_equal_one_process_with_the_global_batch(
    gradient_report: dict[tuple[int, bool, bool, bool], dict[str, Any]], negatives: int, symmetric: bool
) -> None:
    """The same with CachedMultipleNegativesRankingLoss: each process embeds its 4 rows in chunks of 3 and 1 (DDP
    synchronises once, after the last chunk), the loss is taken on the gathered global batch."""
    cached = gradient_report[(negatives, symmetric, True, True)]
    assert cached["loss_diff"] < 1e-6, cached
    assert cached["grad_diff"] < 1e-5, cached


# ------------------------------------------------------------------------------------ accelerate launch end to end


@pytest.fixture(scope="module")
def trained(scratch: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = scratch / "accelerate_mnr"
    out.mkdir()
    return accelerate_launch("train_mnr.py", str(out)), out


@pytest.mark.slow  # about 20 s: accelerate's launcher, 2 x (transformers import + Trainer)
def test_accelerate_launch_trains_one_model_across_two_processes(trained) -> None:
    result, out = trained
    assert "terminate called" not in result.stderr + result.stdout
    reports = rank_reports(out)
    for rank, report in enumerate(reports):
        assert report["rank"] == rank
        assert report["num_processes"] == 2, report
        assert report["distributed_type"] == "DistributedType.MULTI_CPU" and report["backend"] == "gloo", report
        assert report["wrapped_class"] == "DistributedDataParallel", report
    assert [r["should_save"] for r in reports] == [True, False]
    # DDP kept the replicas identical, and training moved them.
    assert reports[0]["checksum"] == reports[1]["checksum"]
    assert reports[0]["checksum"] != pytest.approx(reports[0]["initial_checksum"], abs=1e-4)
    assert reports[0]["train_loss"] == pytest.approx(reports[1]["train_loss"])


@pytest.mark.slow
def test_accelerate_launch_saves_exactly_one_loadable_model(trained) -> None:
    _, out = trained
    assert [p.relative_to(out).as_posix() for p in out.rglob("config_sentence_transformers.json")] == [
        "model/config_sentence_transformers.json"
    ]
    assert [p.relative_to(out).as_posix() for p in out.rglob("*.safetensors")] == [
        "model/0_Transformer/model.safetensors"
    ]
    assert not list((out / "run").glob("checkpoint-*"))
    loaded = AutoModel.from_pretrained(out / "model")
    assert isinstance(loaded, hf_siamese.SiameseBertModel)
    checksum = float(sum(p.detach().double().sum() for p in loaded.parameters()))
    assert checksum == pytest.approx(rank_reports(out)[0]["checksum"], abs=1e-6)
    assert loaded.encode(["a man plays the guitar"]).shape == (1, 32)  # the saved tokenizer is found


@pytest.mark.slow  # about 20 s, as above
def test_streamed_training_each_process_reads_its_own_part(scratch: Path) -> None:
    """A 4-shard stream, 2 processes x 4 steps x 8 rows, cached MNR gathered across processes: each process reads
    its own 2 shards (32 rows), so together they see every row once, and DDP keeps the replicas identical."""
    out = scratch / "accelerate_stream"
    out.mkdir()
    result = accelerate_launch("train_mnr.py", str(out), "--stream")
    assert "terminate called" not in result.stderr + result.stdout
    reports = rank_reports(out)
    seen = [report["anchors"] for report in reports]
    assert len(seen[0]) == len(seen[1]) == 32
    assert not set(seen[0]) & set(seen[1])
    assert len(set(seen[0]) | set(seen[1])) == 64
    assert reports[0]["checksum"] == reports[1]["checksum"]
    assert reports[0]["checksum"] != pytest.approx(reports[0]["initial_checksum"], abs=1e-4)


# ------------------------------------------------------------------------------------ sharded STS evaluation


@pytest.mark.slow  # about 20 s: 2 processes + one in-process Trainer
def test_sharded_sts_evaluation_equals_one_process(scratch: Path) -> None:
    out = scratch / "eval_sts"
    out.mkdir()
    # torchrun here (accelerate launch is covered above): Trainer must find the process group either way.
    torchrun("eval_sts.py", str(out))
    spec = importlib.util.spec_from_file_location("eval_sts", SCRIPTS / "eval_sts.py")
    assert spec is not None and spec.loader is not None
    eval_sts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eval_sts)
    single = eval_sts.evaluate_tiny(out / "single")
    assert single["num_processes"] == 1
    for report in rank_reports(out):  # every process computes the metric on the full set
        assert report["num_processes"] == 2
        assert report["unique_texts"] == single["unique_texts"] == 41  # odd: shards of 21 and 20 texts
        assert abs(report["metrics"]["eval_spearman_cosine"] - single["metrics"]["eval_spearman_cosine"]) < 1e-6
        assert report["metrics"]["eval_pearson_cosine"] == pytest.approx(
            single["metrics"]["eval_pearson_cosine"], abs=1e-5
        )
        # Retrieval: each process embeds a shard of the corpus; the metrics are those of one process.
        for key in ("ndcg@10", "mrr@10", "recall@5", "map@10", "precision@1"):
            assert report["ir_metrics"][f"eval_ir_{key}"] == pytest.approx(single["ir_metrics"][f"eval_ir_{key}"])


# ------------------------------------------------------------------------------------ the CLI's best recipe


def test_cli_best_recipe_across_two_processes(scratch: Path, tiny_tokenizer) -> None:
    """`hf-siamese train` with scored pairs and --eval under torchrun: the best recipe's evaluations, checkpoint
    choice, mean-vs-best comparison and interpolation run on both processes; one model and one card are saved."""
    import random

    import torch
    from conftest import WORDS, tiny_encoder_config
    from transformers import BertModel

    folder = scratch / "cli-best"
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(folder / "base")
    tiny_tokenizer.save_pretrained(folder / "base")
    rng = random.Random(0)
    rows = ["sentence1\tsentence2\tscore"]
    for _ in range(32):
        first, second = (" ".join(rng.choices(WORDS[:60], k=5)) for _ in range(2))
        rows.append(f"{first}\t{second}\t{round(rng.uniform(0, 5), 1)}")
    (folder / "pairs.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = folder / "out"
    args = ["train", "--model", str(folder / "base"), "--train", str(folder / "pairs.tsv"), "--eval"]
    args += [str(folder / "pairs.tsv"), "--epochs", "2", "--batch-size", "8", "--lr", "5e-3", "--output-dir", str(out)]
    port = str(free_port())
    result = launch(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
        + ["-m", "hf_siamese.cli", *args]
    )
    assert result.stdout.count("recipe best: 2 epoch(s)") == 1  # printed by the main process only
    assert result.stdout.count("kept ") == 1 and "--interpolate auto: weights" in result.stdout
    assert not [p for p in out.iterdir() if p.name.startswith("checkpoint-")]
    assert "Final weights: `hf-siamese train` (best recipe) kept" in (out / "README.md").read_text()
    assert isinstance(AutoModel.from_pretrained(out), hf_siamese.SiameseBertModel)
