"""augmented_sbert in Python: stage 3 stopped after its first epoch's checkpoint goes on from it (the teacher and
the silver pairs read back, not redone), bad gold input named before anything is written."""

from __future__ import annotations

import json

import pytest
from conftest import make_tiny_model
from datasets import Dataset

from hf_siamese.recipes import augmented
from hf_siamese.recipes.augmented import augmented_sbert
from hf_siamese.training.trainer import SiameseTrainer

WORDS = ("a dog runs", "music plays", "the market fell", "soup is hot", "a cat sleeps")
GOLD = Dataset.from_dict(
    {
        "sentence1": [f"{w} today" for w in WORDS],
        "sentence2": [f"{w} now" for w in WORDS[1:] + WORDS[:1]],
        "score": [0.0, 1.0, 2.5, 4.0, 5.0],
    }
)


@pytest.fixture
def start(tmp_path, tiny_tokenizer):
    make_tiny_model().save_pretrained(tmp_path / "bi")
    tiny_tokenizer.save_pretrained(tmp_path / "bi")
    return str(tmp_path / "bi")


def test_stage_three_resumes_from_its_checkpoint(tmp_path, start, monkeypatch):
    original = SiameseTrainer._save_checkpoint

    def stop_after_saving(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(SiameseTrainer, "_save_checkpoint", stop_after_saving)
    settings = dict(model=start, neighbours=2, teacher_epochs=1, epochs=2, batch_size=4, show_progress_bar=False)
    with pytest.raises(KeyboardInterrupt):
        augmented_sbert(GOLD, tmp_path / "run", **settings)
    checkpoints = list((tmp_path / "run" / "checkpoints").glob("checkpoint-*"))
    assert len(checkpoints) == 1 and not (tmp_path / "run" / "model").exists()
    monkeypatch.undo()
    resumed = []
    original_train = SiameseTrainer.train
    monkeypatch.setattr(SiameseTrainer, "train", lambda self, **kw: resumed.append(kw) or original_train(self, **kw))
    monkeypatch.setattr(augmented, "_train_teacher", lambda *a, **k: pytest.fail("the teacher was trained again"))
    import hf_siamese.cross_encoder.augment as sampling

    monkeypatch.setattr(sampling, "silver_pairs", lambda *a, **k: pytest.fail("silver pairs sampled again"))
    model = augmented_sbert(GOLD, tmp_path / "run", **settings)
    assert resumed == [{"resume_from_checkpoint": str(checkpoints[0])}]
    assert model.encode(["a dog runs"]).shape == (1, 32)
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["epochs"] == 2
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("gold", "message"),
    [
        (Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"]}), "expected scored pairs"),
        (
            Dataset.from_dict({"sentence1": ["a", "b"], "sentence2": ["b", "c"], "score": [2.0, 2.0]}),
            "every score is 2",
        ),
        (
            Dataset.from_dict({"sentence1": ["a", " "], "sentence2": ["b", "c"], "score": [1.0, 2.0]}),
            "a sentence is ' '",
        ),
    ],
)
def test_bad_gold_is_named_and_nothing_written(tmp_path, start, gold, message):
    with pytest.raises(ValueError, match=message):
        augmented_sbert(gold, tmp_path / "run", model=start, show_progress_bar=False)
    assert not (tmp_path / "run").exists()


def test_unlabelled_must_be_sentences(tmp_path, start):
    with pytest.raises(ValueError, match="unlabelled: expected a list of sentences"):
        augmented_sbert(GOLD, tmp_path / "run", model=start, unlabelled="one string", show_progress_bar=False)


def test_the_kept_settings_fingerprint_what_the_gold_pairs_hold():
    from hf_siamese.recipes.augmented import _gold_fingerprint

    pairs = [("a dog", "a cat"), ("a man", "a woman")]
    same_size = _gold_fingerprint(pairs, [0.5, 0.9]), _gold_fingerprint(pairs, [0.5, 0.8])
    assert same_size[0] != same_size[1] and same_size[0].startswith("2 pairs, sha256 ")
    assert _gold_fingerprint(pairs, [0.5, 0.9]) == same_size[0]
