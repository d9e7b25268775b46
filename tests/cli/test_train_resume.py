"""`hf-siamese train --output-dir OUT` resumes a stopped run and protects what OUT holds (training.run_folder):

- KT1: killed (SIGKILL) inside a checkpoint write: the same command resumes from the last complete checkpoint, says so
  in one line, and deletes the half-written one without loading it;
- KT2: killed after a complete checkpoint: the same command resumes from it;
- KT3: other data or settings into OUT holding a run are refused in one line naming what differs; --overwrite starts
  afresh and the first run's checkpoints go, a user's files beside them stay;
- KT4: a model from another run in OUT is refused, and so is the same command once it has finished (--overwrite
  replaces the model, not a user's files beside it);
- KT5: a vector index or other files in OUT are refused, naming what is there;
- the demo's own default folder is replaced by each demo run (`make demo` twice works).

A tiny random BERT and 40 scored pairs: 10 steps of batch 4, a checkpoint every 3 steps (3, 6, 9 and 10)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import WORDS, make_tiny_model, tiny_encoder_config
from transformers import BertModel

from hf_siamese import SiameseBertModel
from hf_siamese.cli import main
from hf_siamese.training.trainer import SiameseTrainer

# `hf-siamese ARGV...` in a child process that SIGKILLs itself: "inside" the third checkpoint it saves (weights and
# optimizer state written, trainer_state.json not), "first" inside the first one, or "after" the first one is whole.
KILLED = r"""
import os
import signal
import sys

from transformers import TrainerState

from hf_siamese.cli import main
from hf_siamese.training.trainer import SiameseTrainer

where, argv = sys.argv[1], sys.argv[2:]
saved = []
save_checkpoint, save_state = SiameseTrainer._save_checkpoint, TrainerState.save_to_json


def kill():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def checkpoint(self, *args, **kwargs):
    saved.append(self.state.global_step)
    save_checkpoint(self, *args, **kwargs)
    if where == "after":
        kill()


def state(self, json_path):
    if (where, len(saved)) in {("inside", 3), ("first", 1)}:
        kill()
    save_state(self, json_path)


SiameseTrainer._save_checkpoint = checkpoint
TrainerState.save_to_json = state
main(argv)
sys.exit(f"not killed: checkpoints saved at steps {saved}")
"""


def _pairs(seed: int) -> list[str]:
    rng = random.Random(seed)
    rows = ["sentence1\tsentence2\tscore"]
    for i in range(40):
        first = " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 7)))
        second = first + " ." if i % 2 == 0 else " ".join(rng.choice(WORDS[:60]) for _ in range(5))
        rows.append(f"{first}\t{second}\t{4.5 if i % 2 == 0 else round(rng.uniform(0, 2), 1)}")
    return rows


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A tiny base encoder and two training files of 40 scored pairs each (other rows in other.tsv)."""
    root = tmp_path_factory.mktemp("train-resume")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(root / "base")
    tiny_tokenizer.save_pretrained(root / "base")
    (root / "train.tsv").write_text("\n".join(_pairs(0)) + "\n", encoding="utf-8")
    (root / "other.tsv").write_text("\n".join(_pairs(1)) + "\n", encoding="utf-8")
    return root


def _argv(workdir: Path, out: Path, *extra: str) -> list[str]:
    argv = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--batch-size", "4"]
    return [*argv, "--save-steps", "3", "--output-dir", str(out), *extra]


def _killed(where: str, argv: list[str], cwd: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    child = subprocess.run(
        [sys.executable, "-c", KILLED, where, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert child.returncode == -signal.SIGKILL, child.stdout[-2000:] + child.stderr[-3000:]


def _rerun(argv: list[str], out: Path, monkeypatch, capsys) -> tuple[list, str]:
    """The command again in this process: (what each `train()` resumed from and OUT's checkpoints then, stdout)."""
    resumed = []
    train = SiameseTrainer.train

    def noted(self, *args, **kwargs):
        resumed.append((kwargs.get("resume_from_checkpoint"), _checkpoint_names(out)))
        return train(self, *args, **kwargs)

    monkeypatch.setattr(SiameseTrainer, "train", noted)
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return resumed, captured.out


def _checkpoint_names(out: Path) -> list[str]:
    return sorted((p.name for p in out.glob("checkpoint-*")), key=lambda name: int(name.split("-")[1]))


def _state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def _refused(argv: list[str], capsys) -> str:
    """The one stderr line of a refused command."""
    assert main(argv) != 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), captured.err
    assert "Traceback" not in captured.err and "before training" not in captured.out
    return lines[0]


def _snapshot(folder: Path) -> dict[str, int]:
    """Every file under `folder` with its modification time (ns): what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def test_kt1_killed_inside_a_checkpoint_resumes_from_the_last_complete_one(workdir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = _argv(workdir, out)
    _killed("inside", argv, tmp_path)
    half = out / "checkpoint-9"
    assert _checkpoint_names(out) == ["checkpoint-3", "checkpoint-6", "checkpoint-9"]
    assert (half / "optimizer.pt").is_file() and not (half / "trainer_state.json").exists()
    assert not (out / "config.json").exists()

    resumed, printed = _rerun(argv, out, monkeypatch, capsys)
    complete = out / "checkpoint-6"
    # the half-written checkpoint-9 is gone, never loaded; the older complete checkpoint-3 stays
    assert resumed == [(str(complete), ["checkpoint-3", "checkpoint-6"])]
    assert f"hf-siamese train: resuming from {complete} (step 6 of 10); --overwrite starts afresh\n" in printed
    assert _checkpoint_names(out) == ["checkpoint-3", "checkpoint-6", "checkpoint-9", "checkpoint-10"]
    assert _state(half)["global_step"] == 9 and _state(out / "checkpoint-10")["global_step"] == 10
    assert SiameseBertModel.from_pretrained(out).encode(["a dog runs"]).shape == (1, 32)


def test_kt1_killed_inside_the_first_checkpoint_starts_again_without_it(workdir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = _argv(workdir, out)
    _killed("first", argv, tmp_path)
    assert _checkpoint_names(out) == ["checkpoint-3"] and not (out / "checkpoint-3" / "trainer_state.json").exists()

    resumed, printed = _rerun(argv, out, monkeypatch, capsys)
    assert resumed == [(None, [])]
    assert "holds no complete checkpoint to resume from (checkpoint-3 deleted)" in printed
    assert _state(out / "checkpoint-3")["global_step"] == 3 and (out / "config.json").is_file()


def test_kt2_killed_after_a_complete_checkpoint_resumes_from_it(workdir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = _argv(workdir, out)
    _killed("after", argv, tmp_path)
    assert _checkpoint_names(out) == ["checkpoint-3"] and _state(out / "checkpoint-3")["global_step"] == 3

    resumed, printed = _rerun(argv, out, monkeypatch, capsys)
    assert resumed == [(str(out / "checkpoint-3"), ["checkpoint-3"])]
    assert f"resuming from {out / 'checkpoint-3'} (step 3 of 10); --overwrite starts afresh" in printed
    assert _state(out / "checkpoint-10")["global_step"] == 10
    assert json.loads((out / "train_settings.json").read_text())["finished"] is True


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--train", "OTHER"], "train_data"),
        (["--lr", "1e-3"], "lr (5e-05 there, 0.001 now)"),
        (["--batch-size", "8"], "batch_size (4 there, 8 now)"),
        (["--epochs", "2"], "epochs (null there, 2.0 now)"),
        (["--loss", "cosent"], 'loss (null there, "cosent" now)'),
        (["--model", "OTHER_MODEL"], 'other-model" now)'),
    ],
)
def test_kt3_other_settings_are_refused_naming_them(workdir, tmp_path, extra, named, capsys):
    out = tmp_path / "out"
    if "OTHER_MODEL" in extra:
        make_tiny_model(seed=1).save_pretrained(tmp_path / "other-model")
    assert main(_argv(workdir, out)) == 0
    capsys.readouterr()
    kept = _snapshot(out)
    replaced = {"OTHER": str(workdir / "other.tsv"), "OTHER_MODEL": str(tmp_path / "other-model")}
    argv = _argv(workdir, out) + [replaced.get(x, x) for x in extra]
    line = _refused(argv, capsys)
    assert f"--output-dir {out} holds the model and checkpoints of a run with other settings: " in line
    assert named in line and "--overwrite starts afresh" in line
    assert _snapshot(out) == kept

    # A stopped run (its checkpoints, no model yet) is protected the same way.
    record = json.loads((out / "train_settings.json").read_text())
    (out / "train_settings.json").write_text(json.dumps({**record, "finished": False}))
    line = _refused(argv, capsys)
    assert "holds the checkpoints of a run with other settings: " in line and named in line


def test_kt3_overwrite_starts_afresh_and_removes_the_first_runs_checkpoints(workdir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert main(_argv(workdir, out)) == 0
    assert _checkpoint_names(out) == ["checkpoint-3", "checkpoint-6", "checkpoint-9", "checkpoint-10"]
    capsys.readouterr()
    argv = _argv(workdir, out, "--train", str(workdir / "other.tsv"), "--batch-size", "8", "--save-steps", "4")
    resumed, printed = _rerun([*argv, "--overwrite"], out, monkeypatch, capsys)
    assert resumed == [(None, [])]  # the first run's checkpoints went before training
    assert f"starting afresh: deleting the earlier run in {out}" in printed
    assert _checkpoint_names(out) == ["checkpoint-4", "checkpoint-5"]  # 40 rows in batches of 8: 5 steps
    assert "other.tsv" in json.loads((out / "train_settings.json").read_text())["settings"]["train"]


def test_kt3_overwrite_keeps_the_users_files_beside_the_run(workdir, tmp_path, monkeypatch, capsys):
    """`--overwrite` replaces only the run's own entries (its record names them); a user's files stay."""
    out = tmp_path / "out"
    assert main(_argv(workdir, out)) == 0
    capsys.readouterr()
    (out / "notes.txt").write_text("keep me")
    (out / "mine").mkdir()
    (out / "mine" / "data.csv").write_text("a,b\n")
    (out / ".hidden").write_text("mine too")
    argv = _argv(workdir, out, "--train", str(workdir / "other.tsv"), "--overwrite")
    resumed, printed = _rerun(argv, out, monkeypatch, capsys)
    assert resumed == [(None, [])]
    assert (
        f"starting afresh: deleting the earlier run in {out}; keeping what is not its own: mine, notes.txt" in printed
    )
    assert (out / "notes.txt").read_text() == "keep me" and (out / "mine" / "data.csv").read_text() == "a,b\n"
    assert (out / ".hidden").read_text() == "mine too"
    record = json.loads((out / "train_settings.json").read_text())
    assert record["finished"] is True and "config.json" in record["files"] and "checkpoint-10" in record["files"]
    assert not {"notes.txt", "mine", ".hidden"} & set(record["files"])

    # A run recorded before runs listed their files: the entries of a saved model and the checkpoints go, no others.
    del record["files"]
    (out / "train_settings.json").write_text(json.dumps(record))
    (out / "vocab.txt").write_text("[PAD]\n")  # as an earlier model's tokenizer left it
    assert main([*_argv(workdir, out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "keep me" and (out / "mine" / "data.csv").is_file()
    assert not (out / "vocab.txt").exists()


def test_kt4_overwrite_of_another_model_keeps_the_users_files(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    make_tiny_model(seed=1).save_pretrained(out)
    (out / "notes.txt").write_text("keep me")
    (out / "stale-checkpoint-weights.bin").write_text("mine")
    capsys.readouterr()
    assert main([*_argv(workdir, out), "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert f"replacing a model (config.json) saved by another run in {out}; keeping what is not its own: " in printed
    assert (out / "notes.txt").read_text() == "keep me"
    assert (out / "stale-checkpoint-weights.bin").read_text() == "mine"
    assert "notes.txt" not in json.loads((out / "train_settings.json").read_text())["files"]


def test_kt3_a_bad_command_line_with_overwrite_deletes_nothing(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_argv(workdir, out)) == 0
    capsys.readouterr()
    kept = _snapshot(out)
    _refused(_argv(workdir, out, "--overwrite", "--loss", "cosine", "--score-range", "5,1"), capsys)
    assert _snapshot(out) == kept


def test_kt4_a_model_from_another_run_is_refused(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    make_tiny_model(seed=1).save_pretrained(out)
    capsys.readouterr()
    kept = _snapshot(out)
    line = _refused(_argv(workdir, out), capsys)
    assert line.endswith(
        f"--output-dir {out} holds a model (config.json) saved by another run; --overwrite replaces it, or give "
        "another folder"
    )
    assert _snapshot(out) == kept
    assert main([*_argv(workdir, out), "--overwrite"]) == 0
    assert f"replacing a model (config.json) saved by another run in {out}" in capsys.readouterr().out
    assert json.loads((out / "train_settings.json").read_text())["finished"] is True


def test_kt4_the_same_command_after_it_finished_is_refused(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(workdir, out)
    assert main(argv) == 0
    capsys.readouterr()
    kept = _snapshot(out)
    line = _refused(argv, capsys)
    assert f"--output-dir {out} holds the model this same run already saved" in line
    assert "--overwrite trains it again and replaces it" in line
    assert _snapshot(out) == kept
    assert main([*argv, "--overwrite"]) == 0
    assert f"starting afresh: deleting the earlier run in {out}" in capsys.readouterr().out


def test_kt5_a_vector_index_folder_is_refused(workdir, tmp_path, capsys):
    out = tmp_path / "index"
    out.mkdir()
    (out / "index.json").write_text(json.dumps({"format": "hf-siamese-vector-index", "version": 2}))
    (out / "texts.arrow").write_bytes(b"\0" * 16)
    line = _refused(_argv(workdir, out), capsys)
    assert f"--output-dir {out} holds a vector index (index.json); --overwrite replaces it" in line
    assert sorted(p.name for p in out.iterdir()) == ["index.json", "texts.arrow"]


def test_kt5_other_files_are_refused_even_with_overwrite(workdir, tmp_path, capsys):
    out = tmp_path / "notes"
    (out / "data").mkdir(parents=True)
    (out / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        line = _refused(_argv(workdir, out, *extra), capsys)
        assert f"--output-dir {out} holds 2 other entries (data, notes.txt), not a training run" in line
    assert (out / "notes.txt").read_text() == "keep me" and (out / "data").is_dir()
    (tmp_path / "file").write_text("x")
    assert "exists and is not a folder" in _refused(_argv(workdir, tmp_path / "file"), capsys)


def test_demo_default_folder_is_replaced_by_each_demo_run(workdir, tmp_path, monkeypatch, capsys):
    """`make demo` twice: the demo's own folder (runs/demo-minilm) is replaced; other files there are refused."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--model", str(workdir / "base"), "--max-train", "16", "--max-eval", "16", "--epochs", "1"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "deleting" not in first and (tmp_path / "runs" / "demo-minilm" / "config.json").is_file()
    assert main(argv) == 0
    assert "hf-siamese train: starting afresh: deleting the earlier run in runs/demo-minilm" in capsys.readouterr().out
    # Given explicitly, the same folder is protected like any other.
    line = _refused([*argv, "--output-dir", "runs/demo-minilm"], capsys)
    assert "holds the model this same run already saved" in line
    (tmp_path / "runs" / "demo-minilm" / "train_settings.json").unlink()
    (tmp_path / "runs" / "demo-minilm" / "config.json").unlink()
    (tmp_path / "runs" / "demo-minilm" / "notes.txt").write_text("mine")
    assert "not a training run" in _refused(argv, capsys)


def _torchrun(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`hf-siamese ARGV...` in 2 processes (torchrun, gloo on the CPU), one thread each."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "PYTEST_"))}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    return subprocess.run(
        [*command, "-m", "hf_siamese.cli", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # about 40 s: three launches of 2 processes
def test_two_processes_resume_from_the_same_checkpoint_and_refuse_together(workdir, tmp_path):
    out = tmp_path / "out"
    argv = [*_argv(workdir, out), "--batch-size", "2"]  # 2 processes x 2 rows: 10 steps
    first = _torchrun(argv, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # As a kill inside checkpoint-9 leaves the folder: the run unfinished, checkpoint-9 and -10 without their state.
    record = json.loads((out / "train_settings.json").read_text())
    (out / "train_settings.json").write_text(json.dumps({**record, "finished": False}))
    for step in (9, 10):
        (out / f"checkpoint-{step}" / "trainer_state.json").unlink()
    second = _torchrun(argv, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count(f"resuming from {out / 'checkpoint-6'} (step 6 of 10)") == 1  # the main process
    assert _state(out / "checkpoint-10")["global_step"] == 10
    assert json.loads((out / "train_settings.json").read_text())["finished"] is True
    refused = _torchrun([*argv, "--lr", "1e-3"], tmp_path)  # every process stops, none waits for another
    assert refused.returncode != 0 and "lr (5e-05 there, 0.001 now)" in refused.stderr
