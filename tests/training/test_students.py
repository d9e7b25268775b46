"""Students built from a teacher's layers: all layers give the teacher's embeddings, a subset copies exactly the chosen
layers (BERT and DistilBERT stacks), evenly spread layer choices, save / load round trip, and bad input named."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model

from hf_siamese import SiameseBertModel
from hf_siamese.training.students import spread_layers, student_from_teacher

TEXTS = ["a dog runs in the park", "music plays", "the market fell today ."]


def test_keeping_every_layer_gives_the_teacher(tiny_tokenizer):
    teacher = make_tiny_model()
    student = student_from_teacher(teacher, [0, 1])
    torch.testing.assert_close(
        student.encode(TEXTS, tokenizer=tiny_tokenizer), teacher.encode(TEXTS, tokenizer=tiny_tokenizer)
    )


@pytest.mark.parametrize(("model_type", "stack"), [("bert", "encoder.layer"), ("distilbert", "transformer.layer")])
def test_a_subset_copies_the_chosen_layers(model_type, stack, tiny_tokenizer):
    teacher = make_tiny_model(model_type)
    student = student_from_teacher(teacher, [1])
    assert student.config.encoder_config.num_hidden_layers == 1
    teacher_state, student_state = teacher.encoder.state_dict(), student.encoder.state_dict()
    for name, value in student_state.items():
        source = name.replace(f"{stack}.0.", f"{stack}.1.")
        torch.testing.assert_close(value, teacher_state[source], rtol=0, atol=0)
    assert student.encode(TEXTS, tokenizer=tiny_tokenizer).shape == (3, 32)
    assert sum(p.numel() for p in student.parameters()) < sum(p.numel() for p in teacher.parameters())


def test_spread_layers_keeps_first_and_last():
    assert spread_layers(12, 4) == [0, 4, 7, 11]
    assert spread_layers(6, 3) == [0, 2, 5]
    assert spread_layers(6, 1) == [0]
    assert spread_layers(6, 6) == [0, 1, 2, 3, 4, 5]


def test_a_count_spreads_and_the_student_saves_and_loads(tmp_path, tiny_tokenizer):
    teacher = make_tiny_model()
    teacher.tokenizer = tiny_tokenizer
    student = student_from_teacher(teacher, 1)
    assert student.tokenizer is tiny_tokenizer
    student.save_pretrained(tmp_path / "student")
    loaded = SiameseBertModel.from_pretrained(tmp_path / "student")
    assert loaded.config.encoder_config.num_hidden_layers == 1
    torch.testing.assert_close(loaded.encode(TEXTS, tokenizer=tiny_tokenizer), student.encode(TEXTS))


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([], "expected a non-empty list"),
        ([0, 2], r"\[2\] not layer indices of a 2-layer teacher"),
        ([1, 1], "a layer is named twice"),
        ("0,1", "expected a non-empty list"),
        (3, r"keep=3: expected an int from 1 to the teacher's 2 layers"),
    ],
)
def test_bad_layers_are_named(layers, message):
    with pytest.raises(ValueError, match=message):
        student_from_teacher(make_tiny_model(), layers)


def test_the_teacher_must_be_a_bi_encoder():
    with pytest.raises(ValueError, match="teacher is Linear; expected a SiameseBertModel"):
        student_from_teacher(torch.nn.Linear(2, 2), [0])
