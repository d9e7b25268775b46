"""adapt: SimCSE's two views of one text really get two dropout masks (a test that fails if the trainer merged
them), the methods train and save from a corpus file, a second call resumes / reuses, gpl scores with a teacher and
picks the margin scale; bad input named."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.recipes.adapt import adapt


def _passage(rng: random.Random) -> str:
    sentence = lambda: " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(4, 7))).capitalize() + "."  # noqa: E731
    return " ".join(sentence() for _ in range(rng.randint(2, 4)))


@pytest.fixture
def files(tmp_path: Path, tiny_tokenizer) -> Path:
    make_tiny_model().save_pretrained(tmp_path / "bi")
    tiny_tokenizer.save_pretrained(tmp_path / "bi")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(tmp_path / "ce")
    make_tiny_model("distilbert").save_pretrained(tmp_path / "distil")
    tiny_tokenizer.save_pretrained(tmp_path / "distil")
    rng = random.Random(0)
    (tmp_path / "corpus.txt").write_text("\n".join(_passage(rng) for _ in range(24)) + "\n")
    return tmp_path


def test_simcse_views_get_two_dropout_masks(tiny_tokenizer, tmp_path):
    """Through the trainer's own data loader and loss call: the two copies of a text are two encodings with two
    dropout masks (if the trainer sent each distinct text once, the views would be equal and SimCSE would learn
    nothing)."""
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_siamese import SiameseTrainer

    model = make_tiny_model(hidden_dropout_prob=0.3)
    texts = ["a dog runs in the park", "music plays today", "the market fell", "soup is hot"]
    rows = Dataset.from_dict({"anchor": texts, "positive": texts})
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, report_to=[], use_cpu=True)
    trainer = SiameseTrainer(model=model, args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss="mnr")
    batch = next(iter(trainer.get_train_dataloader()))
    torch.manual_seed(0)
    _, outputs = trainer.compute_loss(model.train(), batch, return_outputs=True)
    views = outputs.sentence_embedding
    assert views.shape[:2] == (4, 2)
    assert not torch.allclose(views[:, 0], views[:, 1], atol=1e-4)
    _, outputs = trainer.compute_loss(model.eval(), batch, return_outputs=True)
    assert torch.allclose(outputs.sentence_embedding[:, 0], outputs.sentence_embedding[:, 1], atol=1e-5)


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("method", ["simcse", "tsdae", "crop", "ict"])
def test_methods_train_from_a_corpus_file(files, capsys, method):
    out = files / f"run_{method}"
    argv = ["adapt", files / "corpus.txt", "--method", method, "--model", files / "bi", "-o", out, "--batch-size", "4"]
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    assert (out / "model" / "config.json").is_file() and not (out / "checkpoints").exists()
    assert f"`hf-siamese adapt --method {method}` on 24 unlabelled texts" in (out / "model" / "README.md").read_text()
    code, stdout, _ = _run(argv, capsys)
    assert code == 0 and "done before" in stdout
    code, _, stderr = _run([*argv, "--lr", "1e-3"], capsys)
    assert code == 1 and "a run with other settings is kept here" in stderr


def test_title_pairs_from_a_table(files, capsys):
    rng = random.Random(1)
    rows = [{"title": f"title {i} " + rng.choice(WORDS), "text": _passage(rng)} for i in range(12)]
    (files / "titled.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    out = files / "titled"
    argv = [
        "adapt",
        files / "titled.jsonl",
        "--method",
        "title",
        "--model",
        files / "bi",
        "-o",
        out,
        "--batch-size",
        "4",
    ]
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    written = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert written == [{"anchor": row["title"], "positive": row["text"]} for row in rows]
    assert json.loads((out / "settings.json").read_text())["title_column"] == "title"
    code, _, stderr = _run([*argv[:-4], "-o", files / "t2", "--title-column", "heading"], capsys)
    assert code == 1 and "has no column 'heading'" in stderr, stderr
    code, _, stderr = _run(["adapt", files / "corpus.txt", *argv[2:-4], "-o", files / "t3"], capsys)
    assert code == 1 and "title_column='title'" in stderr and not (files / "t3").exists(), stderr


def test_too_few_pairs_leave_no_rows(files):
    texts = [f"one sentence of words number {i}" for i in range(24)]  # ict needs passages of two sentences
    with pytest.raises(ValueError, match="the corpus gives 0 ict pairs .ict needs passages of two sentences or more"):
        adapt(texts, files / "few", model=str(files / "bi"), method="ict", batch_size=4, show_progress_bar=False)
    assert not (files / "few" / "pairs.jsonl").exists()


def test_a_generator_corpus_is_read_twice(files):
    lines = (files / "corpus.txt").read_text().splitlines()
    adapt((line for line in lines), files / "gen_src", model=str(files / "bi"), method="crop", batch_size=4,
          show_progress_bar=False)  # fmt: skip
    assert json.loads((files / "gen_src" / "settings.json").read_text())["texts"].startswith("24 texts, sha256 ")
    assert (files / "gen_src" / "model" / "config.json").is_file()


def test_gpl_with_a_teacher(files, capsys):
    out = files / "gpl"
    argv = ["adapt", files / "corpus.txt", "--method", "gpl", "--model", files / "bi", "-o", out, "--batch-size", "4"]
    code, stdout, stderr = _run([*argv, "--teacher", files / "ce", "--negatives", "2"], capsys)
    assert code == 0, stderr
    assert "MarginMSE with student scale" in stdout
    assert (out / "scored.jsonl").is_file() and not (out / "teacher-scores").exists()
    assert "teacher " in (out / "model" / "README.md").read_text()


def test_gpl_stopped_in_training_resumes_from_its_checkpoint(files, monkeypatch):
    """A stop after the first checkpoint: the second call scores nothing again and goes on from the checkpoint."""
    from hf_siamese import SiameseTrainer

    original = SiameseTrainer._save_checkpoint

    def stop_after_saving(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(SiameseTrainer, "_save_checkpoint", stop_after_saving)
    texts = (files / "corpus.txt").read_text().splitlines()
    settings = dict(model=str(files / "bi"), method="gpl", teacher=str(files / "ce"), batch_size=4, num_negatives=2,
                    save_steps=2, show_progress_bar=False)  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        adapt(texts, files / "run", **settings)
    checkpoints = list((files / "run" / "checkpoints").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-2"] and (files / "run" / "scored.jsonl").is_file()
    monkeypatch.undo()
    import hf_siamese.cross_encoder.teacher as teacher_module
    import hf_siamese.retrieval.mining.negatives as mining

    monkeypatch.setattr(teacher_module, "teacher_scores", lambda *a, **k: pytest.fail("scored again"))
    monkeypatch.setattr(mining, "mine_hard_negatives", lambda *a, **k: pytest.fail("mined again"))
    resumed = []
    original_train = SiameseTrainer.train
    monkeypatch.setattr(SiameseTrainer, "train", lambda self, **kw: resumed.append(kw) or original_train(self, **kw))
    adapt(texts, files / "run", **settings)
    assert resumed == [{"resume_from_checkpoint": str(checkpoints[0])}]
    assert (files / "run" / "model" / "config.json").is_file() and not (files / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "gpl"], "method='gpl' needs a cross-encoder teacher"),
        (["--method", "simcse", "--teacher", "{w}/ce"], "teacher= applies to method='gpl', not 'simcse'"),
        (["--method", "simcse", "--batch-size", "16"], "the corpus has 24 texts: in-batch negatives need at least"),
        (["--method", "gpl", "--teacher", "{w}/bi"], "is a bi-encoder"),
        (["--method", "tsdae", "--model", "{w}/distil", "--batch-size", "4"], "'distilbert'"),
        (["--method", "tsdae", "--batch-size", "30"], "tsdae: 24 texts of 3 words or more"),
    ],
)
def test_bad_input(files, capsys, extra, message):
    argv = ["adapt", files / "corpus.txt", "--model", files / "bi", "-o", files / "out"]
    code, _, stderr = _run([*argv, *[str(part).format(w=files) for part in extra]], capsys)
    assert code == 1 and message in stderr, stderr
    assert not (files / "out").exists()


def test_library_call_takes_a_list(files):
    texts = (files / "corpus.txt").read_text().splitlines()
    model = adapt(texts, files / "lib", model=str(files / "bi"), method="crop", batch_size=4, show_progress_bar=False)
    assert model.encode(["a dog runs"]).shape == (1, 32)


def test_other_texts_of_the_same_count_are_not_done_before(files):
    texts = (files / "corpus.txt").read_text().splitlines()
    kwargs = dict(model=str(files / "bi"), method="crop", batch_size=4, show_progress_bar=False)
    adapt(texts, files / "lib", **kwargs)
    adapt(texts, files / "lib", **kwargs)  # the same texts: done before, reused
    other = [text.upper() for text in texts]  # as many texts, other content
    with pytest.raises(ValueError, match=r"other settings is kept here \(differs in \['texts'\]\)"):
        adapt(other, files / "lib", **kwargs)


def test_gpl_takes_a_query_generator(files):
    texts = (files / "corpus.txt").read_text().splitlines()

    def first_words(batch: list[str]) -> list[str]:
        return [" ".join(text.split()[:3]) for text in batch]

    adapt(
        texts, files / "gen", model=str(files / "bi"), method="gpl", teacher=str(files / "ce"), batch_size=4,
        num_negatives=2, query_generator=first_words, show_progress_bar=False,
    )  # fmt: skip

    rows = [json.loads(line) for line in (files / "gen" / "pairs.jsonl").read_text().splitlines()]
    assert [r["anchor"] for r in rows] == first_words(texts) and [r["positive"] for r in rows] == texts
    with pytest.raises(ValueError, match="query_generator gave 1 queries for 24 texts"):
        adapt(
            texts, files / "bad", model=str(files / "bi"), method="gpl", teacher=str(files / "ce"), batch_size=4,
            query_generator=lambda batch: ["one"], show_progress_bar=False,
        )  # fmt: skip
