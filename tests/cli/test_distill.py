"""`hf-siamese distill`: a tiny teacher distilled into a 1-layer student from a text file and from parallel pairs, and
into another (narrower) model through a PCA of the teacher's embeddings; the saved student loads; bad input in one
line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_tiny_model

from hf_siamese import SiameseBertModel
from hf_siamese.cli import main

TEXTS = [f"{a} {b}" for a in ("a dog runs", "music plays", "the market fell") for b in ("today", "in the park", "!")]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("distill")
    teacher = make_tiny_model()
    teacher.save_pretrained(root / "teacher")
    tiny_tokenizer.save_pretrained(root / "teacher")
    narrow = make_tiny_model(seed=1, projections=[{"in_features": 32, "out_features": 8}])
    narrow.save_pretrained(root / "narrow")
    tiny_tokenizer.save_pretrained(root / "narrow")
    (root / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    pairs = [{"sentence1": text, "sentence2": text.upper()} for text in TEXTS]
    (root / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pairs))
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


FAST = ["--epochs", "1", "--batch-size", "4", "--lr", "1e-3"]


def test_a_layer_student_from_texts(files, tmp_path, capsys):
    out = tmp_path / "student"
    code, stdout, stderr = _run(
        ["distill", files / "texts.txt", "--teacher", files / "teacher", "-o", out, *FAST], capsys
    )
    assert code == 0, stderr
    assert "student: 1 layers, width 32; teacher width 32; 9 training rows" in stdout
    student = SiameseBertModel.from_pretrained(out)
    assert student.config.encoder_config.num_hidden_layers == 1
    assert student.encode(["a dog runs"]).shape == (1, 32)
    assert not [p for p in tmp_path.iterdir() if "checkpoints" in p.name]
    # a second student is not written into the first one's folder without --overwrite, then replaces it whole
    (out / "notes.txt").write_text("mine")
    again = ["distill", files / "texts.txt", "--teacher", files / "teacher", "-o", out, *FAST]
    code, _, stderr = _run(again, capsys)
    assert code == 1 and "pass --overwrite to replace it" in stderr and (out / "notes.txt").exists()
    code, _, stderr = _run([*again, "--overwrite"], capsys)
    assert code == 0, stderr
    assert not (out / "notes.txt").exists() and SiameseBertModel.from_pretrained(out)


def test_parallel_pairs_and_a_narrower_student(files, tmp_path, capsys):
    out = tmp_path / "student"
    argv = [
        "distill",
        files / "pairs.jsonl",
        "--parallel",
        "--teacher",
        files / "teacher",
        "--student",
        files / "narrow",
    ]
    code, stdout, stderr = _run([*argv, "-o", out, *FAST], capsys)
    assert code == 0, stderr
    assert "width 8; teacher width 32" in stdout
    assert SiameseBertModel.from_pretrained(out).encode(["music plays"]).shape == (1, 8)


def test_a_learned_projection_for_a_narrower_student(files, tmp_path, capsys):
    out = tmp_path / "student"
    argv = ["distill", files / "texts.txt", "--teacher", files / "teacher", "--student", files / "narrow"]
    code, stdout, stderr = _run([*argv, "--projection", "learned", "-o", out, *FAST], capsys)
    assert code == 0, stderr
    assert "added a learned projection to the student: 8 -> 32" in stdout and "width 32; teacher width 32" in stdout
    student = SiameseBertModel.from_pretrained(out)
    assert [p["out_features"] for p in student.config.projections] == [8, 32]
    assert student.encode(["music plays"]).shape == (1, 32)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["{root}/texts.txt", "--layers", "0,7"], "[7] not layer indices of a 2-layer teacher"),
        (["{root}/texts.txt", "--layers", "zero"], "--layers 'zero': expected layer indices"),
        (["{root}/texts.txt", "--columns", "sentence1=a"], "--columns applies with --parallel"),
        (["{root}/texts.txt", "--student", "{root}/missing"], "model folder not found: '{root}/missing'"),
    ],
)
def test_bad_input_is_one_line(files, tmp_path, capsys, extra, message):
    argv = [part.format(root=files) for part in extra]
    code, _, stderr = _run(["distill", *argv, "--teacher", files / "teacher", "-o", tmp_path / "out", *FAST], capsys)
    assert code == 1
    assert stderr.startswith("hf-siamese: error: ") and stderr.count("\n") == 1
    assert message.format(root=files) in stderr
    assert not (tmp_path / "out").exists()


def test_a_stopped_run_resumes(files, tmp_path, capsys, monkeypatch):
    from hf_siamese.training.trainer import SiameseTrainer

    steps = {"count": 0}
    original = SiameseTrainer.training_step

    def stopped_at_the_third_step(self, *args, **kwargs):
        steps["count"] += 1
        if steps["count"] == 3:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SiameseTrainer, "training_step", stopped_at_the_third_step)
    out = tmp_path / "student"
    argv = ["distill", files / "texts.txt", "--teacher", files / "teacher", "-o", out, "--epochs", "2"]
    argv += ["--batch-size", "4", "--save-steps", "1"]
    assert _run(argv, capsys)[0] == 130  # interrupted
    work = tmp_path / ".student.distill"
    assert (work / "targets" / "scores-00000.npy").is_file()
    assert [p.name for p in (work / "checkpoints").glob("checkpoint-*")] == ["checkpoint-2"]
    monkeypatch.undo()
    code, _, stderr = _run([*argv, "--lr", "1e-3"], capsys)  # other settings: refused, the stopped run kept
    assert code == 1 and "a run with other settings is kept here (differs in ['lr'])" in stderr
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    assert "resuming from" in stdout and "checkpoint-2" in stdout
    assert SiameseBertModel.from_pretrained(out).config.encoder_config.num_hidden_layers == 1
    assert not work.exists()
