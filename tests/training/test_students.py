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


def sentences(n: int = 12) -> list[str]:
    words = ["a dog runs", "music plays loud", "the market fell", "soup is hot", "cats sleep", "rain falls today"]
    return [f"{words[i % 6]} {words[(i // 6) % 6]}" for i in range(n)]  # n <= 36 distinct texts


def test_teacher_embeddings_full_width_and_pca(tiny_tokenizer):
    from datasets import Dataset

    from hf_siamese.training.students import pca_projection, teacher_embeddings

    teacher = make_tiny_model()
    teacher.tokenizer = tiny_tokenizer
    texts = sentences()
    rows = teacher_embeddings(Dataset.from_dict({"sentence": texts}), teacher)
    expected = teacher.encode(texts, convert_to_numpy=True)
    torch.testing.assert_close(torch.tensor(rows["label"]), torch.as_tensor(expected), rtol=1e-5, atol=1e-6)
    narrow = teacher_embeddings(Dataset.from_dict({"sentence": texts}), teacher, dim=4)
    mean, components = pca_projection(expected, 4)
    manual = (torch.as_tensor(expected, dtype=torch.float64) - mean) @ components.T
    torch.testing.assert_close(torch.tensor(narrow["label"], dtype=torch.float64), manual, rtol=1e-4, atol=1e-5)
    # the first component carries the most variance
    assert manual[:, 0].var() >= manual[:, 3].var()
    parallel = teacher_embeddings(Dataset.from_dict({"sentence1": texts[:2], "sentence2": ["x y", "z"]}), teacher)
    torch.testing.assert_close(torch.tensor(parallel["label"]), torch.as_tensor(expected[:2]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="already has a 'label' column"):
        teacher_embeddings(rows, teacher)
    with pytest.raises(ValueError, match=r"dim=99: a PCA projection keeps 1 to 12 dimensions"):
        teacher_embeddings(Dataset.from_dict({"sentence": texts}), teacher, dim=99)
    with pytest.raises(ValueError, match="teacher is object; expected a SiameseBertModel"):
        teacher_embeddings(Dataset.from_dict({"sentence": texts}), object())


def test_embedding_mse_by_hand_and_widths():
    from types import SimpleNamespace

    from hf_siamese import losses

    embeddings = torch.tensor([[[1.0, 2.0], [0.0, 1.0]], [[3.0, -1.0], [1.0, 1.0]]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0], [2.0, 2.0]])
    value = losses.EmbeddingMSELoss()(SimpleNamespace(sentence_embedding=embeddings), labels)
    by_hand = ((0 + 4) + (1 + 1) + (1 + 9) + (1 + 1)) / 8
    assert float(value.detach()) == pytest.approx(by_hand)
    (gradient,) = torch.autograd.grad(value, embeddings)
    torch.testing.assert_close(gradient, 2 * (embeddings - labels[:, None, :]).detach() / 8)
    with pytest.raises(ValueError, match=r"the targets are 3 wide, the student's embeddings 2: .*dim=2"):
        losses.EmbeddingMSELoss()(SimpleNamespace(sentence_embedding=embeddings), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="needs target embedding"):
        losses.EmbeddingMSELoss()(SimpleNamespace(sentence_embedding=embeddings), None)


def test_a_student_distils_toward_the_teacher(tmp_path, tiny_tokenizer):
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_siamese import SiameseTrainer
    from hf_siamese.training.students import teacher_embeddings

    teacher = make_tiny_model()
    teacher.tokenizer = tiny_tokenizer
    rows = teacher_embeddings(Dataset.from_dict({"sentence": sentences(16)}), teacher)
    student = make_tiny_model(seed=1)  # another random model: far from the targets, so the distance must fall
    student.tokenizer = tiny_tokenizer
    targets = torch.tensor(rows["label"])

    def distance() -> float:
        return float(((student.encode(rows["sentence"]) - targets) ** 2).mean())

    before = distance()
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=12, learning_rate=1e-3, use_cpu=True,
        report_to=[], save_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=student, args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss="embedding_mse"
    )
    trainer.train()
    student.eval()
    assert distance() < before


def test_add_projection_feeds_the_model_embedding_through_a_new_layer(tiny_tokenizer):
    import torch

    from hf_siamese.training.students import add_projection

    model = make_tiny_model(projections=[{"in_features": 32, "out_features": 8}], normalize=False)
    model.tokenizer = tiny_tokenizer
    projected = add_projection(model, 24).eval()
    assert projected.config.embedding_size == 24 and projected.tokenizer is tiny_tokenizer
    texts = ["a dog runs", "music plays today"]
    with torch.no_grad():
        expected = projected.projections[-1](model.encode(texts))
    assert torch.allclose(projected.encode(texts), expected, atol=1e-5)
    assert model.config.embedding_size == 8  # the original is untouched


def test_add_projection_bad_input():
    from hf_siamese.training.students import add_projection

    with pytest.raises(ValueError, match="width=0; expected a positive int"):
        add_projection(make_tiny_model(), 0)
    with pytest.raises(ValueError, match="model is str; expected a SiameseBertModel"):
        add_projection("bert", 8)
    with pytest.raises(ValueError, match="truncates its embeddings to 16 dims"):
        add_projection(make_tiny_model(truncate_dim=16), 8)
