"""MarginMSE for the bi-encoder: the value and float64 gradient against the formula written out (one negative with a
scalar margin, k negatives with k margins or 1 + k scores, dot and cosine), list labels through the collator, a few
SiameseTrainer steps, and the bad inputs named."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import make_tiny_model
from datasets import Dataset
from transformers import TrainingArguments

from hf_siamese import SiamesePairCollator, SiameseTrainer, losses


def output(embeddings: torch.Tensor) -> SimpleNamespace:
    return SimpleNamespace(sentence_embedding=embeddings)


def dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def cos(a, b) -> float:
    return dot(a, b) / math.sqrt(dot(a, a) * dot(b, b))


ROWS = [
    [[1.0, 0.0, 2.0], [0.5, 1.0, 1.0], [2.0, -1.0, 0.0], [0.0, 1.0, -1.0]],
    [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [-1.0, 0.5, 2.0], [1.0, 0.0, 1.0]],
]


def by_hand(similarity, margins: list[list[float]], scale: float = 1.0) -> float:
    terms = []
    for (q, p, *negatives), row_margins in zip(ROWS, margins, strict=True):
        for n, m in zip(negatives, row_margins, strict=True):
            terms.append((scale * (similarity(q, p) - similarity(q, n)) - m) ** 2)
    return sum(terms) / len(terms)


@pytest.mark.parametrize(("similarity", "function"), [("dot", dot), ("cosine", cos)])
def test_margin_mse_by_hand_with_k_margins_or_scores(similarity, function):
    loss = losses.MarginMSELoss(similarity=similarity)
    margins = [[0.5, -1.0], [2.0, 0.25]]
    embeddings = torch.tensor(ROWS, dtype=torch.float64, requires_grad=True)
    value = loss(output(embeddings), torch.tensor(margins, dtype=torch.float64))
    assert float(value) == pytest.approx(by_hand(function, margins), rel=1e-6)
    scores = [[3.0, 2.5, 4.0], [1.0, -1.0, 0.75]]  # positive first: margins [0.5, -1.0], [2.0, 0.25]
    assert float(loss(output(embeddings), torch.tensor(scores))) == pytest.approx(float(value), rel=1e-6)
    # the gradient of the loss against a finite-difference one of the formula (float64)
    (gradient,) = torch.autograd.grad(value, embeddings)
    step = 1e-6
    for index in [(0, 0, 0), (0, 2, 1), (1, 1, 2), (1, 3, 0)]:
        shifted = [[list(vector) for vector in row] for row in ROWS]
        shifted[index[0]][index[1]][index[2]] += step
        rows, ROWS[:] = list(ROWS), shifted
        try:
            ahead = by_hand(function, margins)
        finally:
            ROWS[:] = rows
        numeric = (ahead - by_hand(function, margins)) / step
        assert float(gradient[index]) == pytest.approx(numeric, rel=1e-3, abs=1e-5)


def test_scale_stretches_the_student_margins():
    margins = [[5.0, -3.0], [8.0, 1.0]]
    embeddings = torch.tensor(ROWS, dtype=torch.float64)
    value = losses.MarginMSELoss(similarity="cosine", scale=7.5)(output(embeddings), torch.tensor(margins))
    assert float(value) == pytest.approx(by_hand(cos, margins, scale=7.5), rel=1e-6)


def test_one_negative_takes_a_scalar_margin():
    embeddings = torch.tensor([row[:3] for row in ROWS])
    value = losses.MarginMSELoss()(output(embeddings), torch.tensor([0.5, 2.0]))
    expected = sum((dot(q, p) - dot(q, n) - m) ** 2 for (q, p, n, _), m in zip(ROWS, [0.5, 2.0], strict=True)) / 2
    assert float(value) == pytest.approx(expected, rel=1e-6)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"similarity='euclid'; accepted: \['dot', 'cosine'\]"):
        losses.MarginMSELoss(similarity="euclid")
    with pytest.raises(ValueError, match="scale=0 must be a positive number"):
        losses.MarginMSELoss(scale=0)
    loss = losses.MarginMSELoss()
    with pytest.raises(ValueError, match=r"needs \(anchor, positive, negative"):
        loss(output(torch.zeros(2, 2, 3)), torch.zeros(2))
    with pytest.raises(ValueError, match=r"2 negative\(s\) need 2 teacher margin\(s\) or 3 scores per row"):
        loss(output(torch.zeros(2, 4, 3)), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="needs teacher margin"):
        loss(output(torch.zeros(2, 4, 3)), None)
    assert isinstance(losses.get_loss("margin_mse"), losses.MarginMSELoss)


def rows(n: int = 8) -> Dataset:
    words = ["a dog runs", "music plays", "the market fell", "soup is hot", "cats sleep", "rain falls"]
    return Dataset.from_dict(
        {
            "anchor": [words[i % 6] for i in range(n)],
            "positive": [words[(i + 1) % 6] for i in range(n)],
            "negative_1": [words[(i + 2) % 6] for i in range(n)],
            "negative_2": [words[(i + 3) % 6] for i in range(n)],
            "label": [[float(i % 3), 0.5 * i] for i in range(n)],
        }
    )


def test_list_labels_through_the_collator_and_bad_lengths(tiny_tokenizer):
    collator = SiamesePairCollator(tiny_tokenizer)
    batch = collator(rows(3).to_list())
    assert batch["input_ids"].shape[:2] == (3, 4) and batch["labels"].shape == (3, 2)
    assert batch["labels"].dtype == torch.float32
    bad = rows(3).to_list()
    bad[1]["label"] = [1.0]
    with pytest.raises(ValueError, match=r"row 1: label \[1.0\] in column 'label': expected a list of 2\+ finite"):
        collator(bad)


def test_trainer_steps_with_margin_mse(tmp_path, tiny_tokenizer):
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, learning_rate=1e-3, use_cpu=True,
        report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=args, train_dataset=rows(), processing_class=tiny_tokenizer, loss="margin_mse"
    )
    trainer.train()
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all(math.isfinite(value) for value in logged)


def test_score_lists_choose_margin_mse_in_the_trainer_as_in_the_cli(tmp_path, tiny_tokenizer):
    """One rule (`trainer_data.default_loss`) for `SiameseTrainer` and `hf-siamese train`: lists -> margin_mse."""
    from hf_siamese.training.objective import choose_objective
    from hf_siamese.training.trainer_data import default_loss

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    trainer = SiameseTrainer(model=make_tiny_model(), args=args, train_dataset=rows(), processing_class=tiny_tokenizer)
    assert isinstance(trainer.loss, losses.MarginMSELoss)
    assert choose_objective(rows(), source="rows").loss_name == "margin_mse"
    assert [default_loss(label) for label in (None, [1.0, 0.5], 3.5, 2, "entailment")] == [
        "mnr", "margin_mse", "cosine", "softmax", "softmax",
    ]  # fmt: skip


@pytest.mark.parametrize(("similarity", "function", "scale"), [("cosine", cos, 20.0), ("dot", dot, 1.0)])
def test_list_distillation_by_hand(similarity, function, scale):
    teacher = [[3.0, 2.5, 4.0], [1.0, -1.0, 0.75]]
    loss = losses.ListDistillationLoss(scale=scale, teacher_temperature=2.0, similarity=similarity)
    embeddings = torch.tensor(ROWS, dtype=torch.float64, requires_grad=True)
    value = loss(output(embeddings), torch.tensor(teacher, dtype=torch.float64))

    def formula(rows) -> float:
        total = 0.0
        for (q, *documents), scores in zip(rows, teacher, strict=True):
            student = [scale * function(q, d) for d in documents]
            s_norm = math.log(sum(math.exp(x) for x in student))
            t = [x / 2.0 for x in scores]
            t_norm = math.log(sum(math.exp(x) for x in t))
            total += sum(math.exp(x - t_norm) * ((x - t_norm) - (y - s_norm)) for x, y in zip(t, student, strict=True))
        return total / len(rows)

    assert float(value.detach()) == pytest.approx(formula(ROWS), rel=1e-5)
    (gradient,) = torch.autograd.grad(value, embeddings)
    step = 1e-6
    for index in [(0, 0, 0), (1, 2, 1), (0, 3, 2)]:
        shifted = [[list(vector) for vector in row] for row in ROWS]
        shifted[index[0]][index[1]][index[2]] += step
        numeric = (formula(shifted) - formula(ROWS)) / step
        assert float(gradient[index]) == pytest.approx(numeric, rel=1e-3, abs=1e-5)
    with pytest.raises(ValueError, match=r"3 documents need 3 teacher scores each"):
        loss(output(embeddings), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="scale=0 must be a positive number"):
        losses.ListDistillationLoss(scale=0)
    assert isinstance(losses.get_loss("list_distill"), losses.ListDistillationLoss)
