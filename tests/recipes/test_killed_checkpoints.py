"""A kill mid-checkpoint never blocks a staged command: `augment`, `adapt` and `distill` are each SIGKILLed (a real
`kill -9` of a child process, no exception handler or `finally` runs) while writing their second training
checkpoint, so the run folder holds a complete first checkpoint and a half-written newer one. The same command run
again sets the half-written one aside (`.checkpoint-N.incomplete`), resumes from the complete one and saves a model
that loads. Resuming from the newest checkpoint-N instead, the rerun fails on the half-written one every time
(augment: safetensors' "incomplete metadata, file not fully covered"; adapt: bad JSON in trainer_state.json;
distill: "No such file or directory: .../trainer_state.json").

The kill point differs per command, covering the three states a kill mid-save leaves (transformers' `Trainer` writes
the weights, then the optimizer / scheduler / RNG state, then `trainer_state.json` last):

- augment: killed while writing the weights (a truncated `0_Transformer/model.safetensors`, no trainer state);
- adapt: killed while writing `trainer_state.json` (truncated JSON after complete weights and optimizer state);
- distill: killed just before `trainer_state.json` (weights and optimizer state written, no trainer state)."""

from __future__ import annotations

import csv
import json
import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese import SiameseBertModel
from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.training.trainer import SiameseTrainer

# Runs `hf-siamese ARGV...` in a child process that SIGKILLs itself inside the second training checkpoint it saves,
# at the point named by its first argument.
KILLED_MID_CHECKPOINT = r"""
import os
import signal
import sys
from pathlib import Path

from transformers import TrainerState

from hf_siamese.cli import main
from hf_siamese.training.trainer import SiameseTrainer

where, argv = sys.argv[1], sys.argv[2:]
saving = []
save_checkpoint, save_model = SiameseTrainer._save_checkpoint, SiameseTrainer.save_model
save_state = TrainerState.save_to_json


def kill():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def counted_checkpoint(self, *args, **kwargs):
    saving.append(self.state.global_step)
    return save_checkpoint(self, *args, **kwargs)


def weights_then_kill(self, output_dir=None, _internal_call=False):
    save_model(self, output_dir, _internal_call)
    if where == "weights" and _internal_call and len(saving) == 2:
        for path in Path(output_dir).rglob("*.safetensors"):  # as a kill while they are written leaves them
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
        kill()


def state_then_kill(self, json_path):
    if where == "before-state" and len(saving) == 2:
        kill()
    save_state(self, json_path)
    if where == "mid-state" and len(saving) == 2:
        text = Path(json_path).read_text()
        Path(json_path).write_text(text[: len(text) // 2])
        kill()


SiameseTrainer._save_checkpoint = counted_checkpoint
SiameseTrainer.save_model = weights_then_kill
TrainerState.save_to_json = state_then_kill
main(argv)
sys.exit(f"not killed: checkpoints saved at steps {saving}")
"""


def _killed_mid_checkpoint(where: str, argv: list, cwd: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_MID_CHECKPOINT, where, *map(str, argv)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stdout[-2000:] + child.stderr[-3000:]


def _checkpoints(folder: Path) -> dict[str, set[str]]:
    """The checkpoint folders by step, each with the names of its files (top level)."""
    found = sorted(folder.iterdir(), key=lambda path: int(path.name.removeprefix("checkpoint-")))
    return {path.name: {p.name for p in path.iterdir()} for path in found}


def _weights(checkpoint: Path) -> int:
    """The bytes of the checkpoint's weights (in 0_Transformer/ for a bi-encoder), 0 if none."""
    return sum(path.stat().st_size for path in checkpoint.rglob("*.safetensors"))


def _rerun(argv: list, checkpoints: Path, monkeypatch, capsys, caplog) -> tuple[list, str]:
    """The same command again, in this process; returns (what the training resumed from and the checkpoints folder
    at that moment, stdout)."""
    resumed = []
    train = SiameseTrainer.train

    def noted(self, *args, **kwargs):
        resumed.append((kwargs.get("resume_from_checkpoint"), sorted(p.name for p in checkpoints.iterdir())))
        return train(self, *args, **kwargs)

    monkeypatch.setattr(SiameseTrainer, "train", noted)
    with caplog.at_level(logging.WARNING, logger="hf_siamese.recipes.stages"):
        code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return resumed, captured.out


def _set_aside_warning(caplog, checkpoint: Path) -> bool:
    return any(
        f"{checkpoint} is incomplete (a run stopped while saving it): set aside as .{checkpoint.name}.incomplete"
        in record.getMessage()
        for record in caplog.records
    )


@pytest.fixture
def models(tmp_path: Path, tiny_tokenizer) -> Path:
    make_tiny_model().save_pretrained(tmp_path / "bi")
    tiny_tokenizer.save_pretrained(tmp_path / "bi")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(tmp_path / "ce")
    return tmp_path


def test_augment_killed_while_writing_checkpoint_weights(models, monkeypatch, capsys, caplog):
    phrases = ("a dog runs", "music plays", "the market fell", "soup is hot")
    pairs = zip(phrases, phrases[1:] + phrases[:1], strict=True)
    with open(models / "gold.tsv", "w", newline="") as file:
        writer = csv.writer(file, delimiter="\t")
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows((f"{a} today", f"{b} now", float(score)) for score, (a, b) in enumerate(pairs))
    out = models / "run"
    argv = ["augment", models / "gold.tsv", "--model", models / "bi", "--teacher", models / "ce", "-o", out]
    argv += ["--neighbours", "2", "--epochs", "2", "--batch-size", "4"]  # a checkpoint per epoch
    _killed_mid_checkpoint("weights", argv, models)
    found = _checkpoints(out / "checkpoints")
    assert len(found) == 2 and not (out / "model").exists(), found
    complete, half = (out / "checkpoints" / name for name in found)  # checkpoint-N (epoch 1), checkpoint-2N
    assert int(half.name.split("-")[1]) == 2 * int(complete.name.split("-")[1])
    assert "trainer_state.json" in found[complete.name] and "trainer_state.json" not in found[half.name]
    assert 0 < _weights(half) < _weights(complete)  # half of them written

    resumed, stdout = _rerun(argv, out / "checkpoints", monkeypatch, capsys, caplog)
    assert "stage 2 done before" in stdout
    assert resumed == [(str(complete), [f".{half.name}.incomplete", complete.name])]
    assert _set_aside_warning(caplog, half)
    assert not half.exists()
    assert SiameseBertModel.from_pretrained(out / "model").encode(["a dog runs"]).shape == (1, 32)


def test_adapt_killed_while_writing_trainer_state(models, monkeypatch, capsys, caplog):
    rng = random.Random(0)
    sentence = lambda: " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(4, 7))) + "."  # noqa: E731
    (models / "corpus.txt").write_text("\n".join(f"{sentence()} {sentence()}" for _ in range(16)) + "\n")
    out = models / "run"
    argv = ["adapt", models / "corpus.txt", "--method", "crop", "--model", models / "bi", "-o", out]
    argv += ["--batch-size", "4", "--save-steps", "1"]  # 16 pairs: 4 steps, a checkpoint each
    _killed_mid_checkpoint("mid-state", argv, models)
    assert _checkpoints(out / "checkpoints").keys() == {"checkpoint-1", "checkpoint-2"}
    complete, half = out / "checkpoints" / "checkpoint-1", out / "checkpoints" / "checkpoint-2"
    json.loads((complete / "trainer_state.json").read_text())
    assert (half / "optimizer.pt").is_file() and _weights(half) == _weights(complete)
    with pytest.raises(ValueError):
        json.loads((half / "trainer_state.json").read_text())

    resumed, _ = _rerun(argv, out / "checkpoints", monkeypatch, capsys, caplog)
    assert resumed == [(str(complete), [".checkpoint-2.incomplete", "checkpoint-1"])]
    assert _set_aside_warning(caplog, half)
    assert json.loads((out / "train_metrics.json").read_text())["global_step"] == 4
    assert not (out / "checkpoints").exists()
    assert SiameseBertModel.from_pretrained(out / "model").encode(["a dog runs"]).shape == (1, 32)


def test_distill_killed_before_writing_trainer_state(models, monkeypatch, capsys, caplog):
    texts = [f"{a} {b}" for a in ("a dog runs", "music plays", "the market fell") for b in ("today", "in the park")]
    (models / "texts.txt").write_text("\n".join(texts) + "\n")
    out = models / "student"
    argv = ["distill", models / "texts.txt", "--teacher", models / "bi", "-o", out]
    argv += ["--batch-size", "2", "--save-steps", "1"]  # 6 texts: 3 steps, a checkpoint each
    _killed_mid_checkpoint("before-state", argv, models)
    work = models / ".student.distill"
    assert _checkpoints(work / "checkpoints").keys() == {"checkpoint-1", "checkpoint-2"}
    complete, half = work / "checkpoints" / "checkpoint-1", work / "checkpoints" / "checkpoint-2"
    assert (half / "optimizer.pt").is_file() and _weights(half) == _weights(complete)
    assert not (half / "trainer_state.json").exists() and (complete / "trainer_state.json").is_file()
    assert not out.exists()

    resumed, stdout = _rerun(argv, work / "checkpoints", monkeypatch, capsys, caplog)
    assert f"resuming from {complete}" in stdout
    assert resumed == [(str(complete), [".checkpoint-2.incomplete", "checkpoint-1"])]
    assert _set_aside_warning(caplog, half)
    assert not work.exists()
    student = SiameseBertModel.from_pretrained(out)
    assert student.config.encoder_config.num_hidden_layers == 1
    assert student.encode(["a dog runs"]).shape == (1, 32)
