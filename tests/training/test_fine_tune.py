"""`fine_tune` (the run `hf-siamese train` makes in one call) and `read_training_sets` (its data): a tiny encoder on
scored pairs, the progress lines through the report callback, the result, the saved model and card, the run folder's
refusal, and bad inputs named by their source."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import tiny_encoder_config
from transformers import AutoModel, BertModel

from hf_siamese.data.training_sets import DEMO_DEV_NAME, read_training_sets
from hf_siamese.training.fine_tune import FineTuneResult, fine_tune
from hf_siamese.training.objective import choose_objective
from hf_siamese.training.recipe import resolve_recipe

PAIRS = [
    ("a man plays a guitar", "someone plays music", 4.5),
    ("the market fell today", "stocks dropped", 3.5),
    ("a dog runs in the park", "the red car is fast", 0.5),
    ("a woman cooks soup", "soup is being cooked", 4.0),
    ("two dogs play", "a cat sleeps", 1.0),
    ("rain falls on the city", "it is raining in town", 4.2),
]


def _tsv(path: Path, rows: list[tuple]) -> str:
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in rows))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("fine-tune")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(root / "base")
    tiny_tokenizer.save_pretrained(root / "base")
    _tsv(root / "train.tsv", PAIRS * 2)
    _tsv(root / "eval.tsv", PAIRS)
    _tsv(root / "bad.tsv", [(*PAIRS[0][:2], 9.0), *PAIRS[1:]])
    (root / "unscored.tsv").write_text("anchor\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b, _ in PAIRS))
    return root


def _arguments(out: Path) -> dict:
    return {"output_dir": str(out), "per_device_train_batch_size": 4, "learning_rate": 1e-3, "use_cpu": True}


def test_one_call_trains_reports_saves_and_returns_the_scores(files: Path, tmp_path: Path) -> None:
    sets = read_training_sets(str(files / "train.tsv"), eval=str(files / "eval.tsv"), max_train=8, seed=1)
    assert len(sets.train) == 8 and len(sets.eval) == len(PAIRS) and not sets.demo
    objective = choose_objective(sets.train)
    recipe = resolve_recipe("plain", objective.loss.label_kind, sets.eval, epochs=1)
    lines: list[str] = []
    out = tmp_path / "model"
    result = fine_tune(sets, objective, recipe, _arguments(out), model=str(files / "base"), report=lines.append)
    assert isinstance(result, FineTuneResult) and result.main_process
    assert result.output_dir == str(out)
    assert -1 <= result.before["spearman_cosine"] <= 1 and set(result.after) == set(result.before)
    base = BertModel.from_pretrained(files / "base").embeddings.word_embeddings.weight
    assert not torch.allclose(result.model.encoder.embeddings.word_embeddings.weight, base)  # it trained
    assert lines[0].startswith(f"{files / 'train.tsv'} (8 rows), loss CosineSimilarityLoss (scores 0..5)")
    assert any(line.startswith("Spearman (cosine) x100 on ") and "before training" in line for line in lines)
    assert any("before" in line and "->  after" in line for line in result.summary)
    loaded = AutoModel.from_pretrained(out)
    assert torch.allclose(loaded.encode(["a dog"]), result.model.encode(["a dog"]), atol=1e-5)
    card = (out / "README.md").read_text()
    assert f"value: {result.after['spearman_cosine']}" in card and "dataset_size:8" in card  # the final weights'
    # The same folder with other settings is refused, naming what differs; the saved model is kept.
    with pytest.raises(ValueError, match=r"other settings: lr \(null there, 0.0005 now\)"):
        fine_tune(sets, objective, recipe, _arguments(out), model=str(files / "base"), run_options={"lr": 5e-4})
    assert torch.allclose(AutoModel.from_pretrained(out).encode(["a dog"]), result.model.encode(["a dog"]), atol=1e-5)


def test_a_row_outside_the_score_range_names_its_source_and_the_callers_option(files: Path, tmp_path: Path) -> None:
    sets = read_training_sets(str(files / "bad.tsv"), eval=str(files / "eval.tsv"))
    objective = choose_objective(sets.train, score_range=(0.0, 5.0))
    recipe = resolve_recipe("plain", objective.loss.label_kind, sets.eval)
    pattern = r"bad\.tsv: train_dataset row \d+: score 9\.0 .* outside the score range .* Pass --range LOW,HIGH"
    with pytest.raises(ValueError, match=pattern):
        fine_tune(sets, objective, recipe, _arguments(tmp_path / "m"), model=str(files / "base"),
                  option_names={"score_range": "--range"})  # fmt: skip
    assert not (tmp_path / "m" / "model.safetensors").exists()


def test_read_training_sets_demo_and_bad_inputs(files: Path) -> None:
    demo = read_training_sets()
    assert demo.demo and demo.eval_name == DEMO_DEV_NAME and len(demo.eval) > 0
    with pytest.raises(ValueError, match="give --train too"):
        read_training_sets(columns={"sentence1": "a"})
    with pytest.raises(ValueError, match="at least 1, got 0"):
        read_training_sets(str(files / "train.tsv"), max_train=0)
    with pytest.raises(ValueError, match=r"unscored\.tsv: expected scored pairs"):
        read_training_sets(str(files / "train.tsv"), eval=str(files / "unscored.tsv"))
    assert read_training_sets(str(files / "train.tsv")).eval is None


def test_a_plain_run_trains_its_kinds_default_epochs() -> None:
    """A sparse or multi-vector model's plain run trains KIND_PLAIN_EPOCHS (2, chosen on held-out SciFact claims); a
    dense one one epoch; `--epochs` wins over both."""
    assert resolve_recipe("plain", None, None, kind="sparse").epochs == 2.0
    assert resolve_recipe("plain", None, None, kind="multi-vector").epochs == 2.0
    assert resolve_recipe("plain", None, None, kind="dense").epochs == 1.0
    assert resolve_recipe("plain", None, None).epochs == 1.0
    assert resolve_recipe("plain", None, None, epochs=3, kind="sparse").epochs == 3
    assert "recipe plain: 2 epoch(s)" in resolve_recipe(None, None, None, kind="sparse").describe()
