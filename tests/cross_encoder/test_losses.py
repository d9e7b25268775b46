"""Cross-encoder losses: values against hand-written formulas on fixed logits, gradients against the formulas'
autograd gradients (float64), and the labels each loss refuses."""

from __future__ import annotations

import math

import pytest
import torch

from hf_siamese.cross_encoder.losses import (
    BinaryCrossEntropyLoss,
    CrossEntropyLoss,
    LambdaLoss,
    MarginMSELoss,
    MSELoss,
    MultipleNegativesRankingLoss,
    PListMLELoss,
    get_loss,
)

# Two lists of unequal length (3 and 4 documents) as the collator gives them: flat scores + a (batch, 4) mask.
LIST_SCORES = [[0.3, -1.2, 2.0], [1.5, 0.1, -0.4, 0.9]]
LIST_LABELS = [[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 1.0, 1.0]]
LIST_MASK = torch.tensor([[True, True, True, False], [True, True, True, True]])


def flat(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor([x for row in rows for x in row], dtype=torch.float64).unsqueeze(1).requires_grad_()


def gradient(value: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    return torch.autograd.grad(value, leaf)[0]


def check_against(loss_value: torch.Tensor, formula_value: torch.Tensor, leaf_a, leaf_b) -> None:
    assert loss_value.dtype == torch.float64
    assert loss_value.item() == pytest.approx(formula_value.item(), rel=1e-9, abs=1e-12)
    torch.testing.assert_close(gradient(loss_value, leaf_a), gradient(formula_value, leaf_b), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------------ BCE


def bce_formula(s: torch.Tensor, y: torch.Tensor, pos_weight: float = 1.0) -> torch.Tensor:
    p = 1.0 / (1.0 + torch.exp(-s))
    return -(pos_weight * y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


@pytest.mark.parametrize("pos_weight", [None, 5.0])
def test_bce_value_and_gradient(pos_weight):
    values = [[0.5], [-1.0], [2.0], [0.0]]
    labels = torch.tensor([1.0, 0.0, 0.3, 1.0])
    a, b = flat(values), flat(values)
    loss = BinaryCrossEntropyLoss(pos_weight=pos_weight)(a, labels)
    check_against(loss, bce_formula(b[:, 0], labels.double(), pos_weight or 1.0), a, b)


def test_bce_on_tuples_counts_the_positive_as_one_and_lists_use_the_mask():
    tuples = torch.tensor([[0.5], [-1.0], [2.0], [1.0], [0.2], [-0.3]], dtype=torch.float64)
    value = BinaryCrossEntropyLoss()(tuples, group_size=3)
    expected = bce_formula(tuples[:, 0], torch.tensor([1.0, 0, 0, 1, 0, 0], dtype=torch.float64))
    assert value.item() == pytest.approx(expected.item())
    labels = torch.tensor([[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 1.0, 0.2]])
    scores = flat(LIST_SCORES).detach()
    value = BinaryCrossEntropyLoss()(scores, labels, mask=LIST_MASK)
    expected = bce_formula(scores[:, 0], labels[LIST_MASK].double())
    assert value.item() == pytest.approx(expected.item())


def test_bce_gradcheck():
    labels = torch.tensor([1.0, 0.0, 0.7])
    logits = torch.tensor([[0.3], [-0.8], [1.1]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: BinaryCrossEntropyLoss(pos_weight=2.0)(x, labels), (logits,))


@pytest.mark.parametrize("bad", [1.5, -0.25])
def test_bce_refuses_labels_outside_0_1_naming_the_value(bad):
    with pytest.raises(ValueError, match=rf"label {bad}.*outside \[0, 1\]"):
        BinaryCrossEntropyLoss()(torch.zeros(2, 1), torch.tensor([0.0, bad]))


def test_bce_refuses_bad_pos_weight_and_several_outputs():
    with pytest.raises(ValueError, match="pos_weight=-1"):
        BinaryCrossEntropyLoss(pos_weight=-1)
    with pytest.raises(ValueError, match="num_labels=3"):
        BinaryCrossEntropyLoss()(torch.zeros(2, 3), torch.tensor([0.0, 1.0]))


def test_logits_are_cast_to_float32_before_the_activation():
    logits = torch.tensor([[30.0], [-30.0]], dtype=torch.bfloat16)
    value = BinaryCrossEntropyLoss()(logits, torch.tensor([1.0, 0.0]))
    assert value.dtype == torch.float32
    scores = torch.tensor([[2.0], [1.0], [0.5], [0.0]], dtype=torch.bfloat16)
    assert MultipleNegativesRankingLoss()(scores, group_size=2).dtype == torch.float32


# ------------------------------------------------------------------------------------------------ MNR


def mnr_formula(grid: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    rows = [-(scale * row[0]) + torch.log(torch.exp(scale * row).sum()) for row in grid]
    return torch.stack(rows).mean()


@pytest.mark.parametrize("scale", [1.0, 5.0])
def test_mnr_value_and_gradient(scale):
    values = [[1.0], [0.2], [-0.5], [0.3], [0.9], [1.4]]  # 2 rows: (positive, negative, negative)
    a, b = flat(values), flat(values)
    loss = MultipleNegativesRankingLoss(scale=scale)(a, group_size=3)
    check_against(loss, mnr_formula(b.view(2, 3), scale), a, b)


def test_mnr_sigmoid_and_gradcheck():
    logits = torch.tensor([[1.0], [0.2], [-0.5], [0.3]], dtype=torch.float64, requires_grad=True)
    value = MultipleNegativesRankingLoss(scale=10.0, activation="sigmoid")(logits, group_size=2)
    assert value.item() == pytest.approx(mnr_formula(torch.sigmoid(logits.detach()).view(2, 2), 10.0).item())
    assert torch.autograd.gradcheck(lambda x: MultipleNegativesRankingLoss(scale=3.0)(x, group_size=2), (logits,))


def test_mnr_needs_tuples_with_a_negative():
    with pytest.raises(ValueError, match="group_size=None"):
        MultipleNegativesRankingLoss()(torch.zeros(4, 1))
    with pytest.raises(ValueError, match="group_size=1"):
        MultipleNegativesRankingLoss()(torch.zeros(4, 1), group_size=1)
    with pytest.raises(ValueError, match="scale=0"):
        MultipleNegativesRankingLoss(scale=0)


# ------------------------------------------------------------------------------------------------ LambdaLoss


def lambda_formula(rows, labels, mu=10.0, sigma=1.0, k=None) -> torch.Tensor:
    """LambdaLoss with NDCG-Loss2++ weights, one pair at a time (the paper's definition)."""
    terms = []
    for scores, rel in zip(rows, labels, strict=True):
        n = len(scores)
        rel = rel[:n]
        order = sorted(range(n), key=lambda i: -scores[i].item())
        position = {doc: p + 1 for p, doc in enumerate(order)}  # 1-based rank by the model
        ideal = sorted(rel, reverse=True)
        cut = n if k is None else k
        max_dcg = sum((2**g - 1) / math.log2(1 + p + 1) for p, g in enumerate(ideal[:cut]))
        gain = [(2**g - 1) / max_dcg for g in rel]
        for i in range(n):
            for j in range(n):
                if not rel[i] > rel[j]:
                    continue
                pi, pj = position[i], position[j]
                if k is not None and pi > k and pj > k:
                    continue
                d = abs(pi - pj)
                delta = abs(1 / math.log2(1 + d) - 1 / math.log2(2 + d))
                lambda_rank = abs(1 / math.log2(1 + pi) - 1 / math.log2(1 + pj))
                weight = (mu * delta + lambda_rank) * abs(gain[i] - gain[j])
                probability = torch.sigmoid(sigma * (scores[i] - scores[j]))
                terms.append(-weight * torch.log2(probability))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("k", [None, 2])
def test_lambda_loss_value_and_gradient_on_unequal_lists(k):
    a, b = flat(LIST_SCORES), flat(LIST_SCORES)
    loss = LambdaLoss(k=k)(a, torch.tensor(LIST_LABELS), mask=LIST_MASK)
    rows = [b[0:3, 0], b[3:7, 0]]
    check_against(loss, lambda_formula(rows, LIST_LABELS, k=k), a, b)


def test_lambda_loss_gradcheck_and_tuples():
    labels = torch.tensor(LIST_LABELS)
    logits = flat(LIST_SCORES)
    assert torch.autograd.gradcheck(lambda x: LambdaLoss(sigma=2.0)(x, labels, mask=LIST_MASK), (logits,))
    tuples = flat([[1.0], [0.2], [1.5], [0.3], [-0.9], [0.4]])
    value = LambdaLoss()(tuples, group_size=3)  # no labels: positive 1, negatives 0
    expected = lambda_formula([tuples[0:3, 0].detach(), tuples[3:6, 0].detach()], [[1.0, 0, 0], [1.0, 0, 0]])
    assert value.item() == pytest.approx(expected.item())


def test_lambda_loss_without_pairs_is_zero_and_refuses_negative_labels():
    logits = flat([[1.0], [2.0]])
    value = LambdaLoss()(logits, torch.tensor([[1.0, 1.0]]), group_size=2)
    assert value.item() == 0.0
    value.backward()
    with pytest.raises(ValueError, match="label -1.0"):
        LambdaLoss()(logits.detach(), torch.tensor([[1.0, -1.0]]), group_size=2)


# ------------------------------------------------------------------------------------------------ PListMLE


def plistmle_formula(rows, labels, weighted=True) -> torch.Tensor:
    per_query = []
    for scores, rel in zip(rows, labels, strict=True):
        n = len(scores)
        order = sorted(range(n), key=lambda i: -rel[i])  # stable: ties keep input order
        s = [scores[i] for i in order]
        weights = [(2 ** (n - i) - 1) if weighted else 1.0 for i in range(1, n + 1)]
        total = sum(weights)
        terms = [w / total * (s[i] - torch.log(torch.stack(s[i:]).exp().sum())) for i, w in enumerate(weights)]
        per_query.append(-torch.stack(terms).sum() * (total if not weighted else 1.0))
    return torch.stack(per_query).mean()


@pytest.mark.parametrize("weighted", [True, False])
def test_plistmle_value_and_gradient_on_unequal_lists(weighted):
    a, b = flat(LIST_SCORES), flat(LIST_SCORES)
    loss = PListMLELoss(weighted=weighted)(a, torch.tensor(LIST_LABELS), mask=LIST_MASK)
    rows = [list(b[0:3, 0]), list(b[3:7, 0])]
    check_against(loss, plistmle_formula(rows, LIST_LABELS, weighted), a, b)


def test_plistmle_gradcheck():
    labels = torch.tensor(LIST_LABELS)
    logits = flat(LIST_SCORES)
    assert torch.autograd.gradcheck(lambda x: PListMLELoss()(x, labels, mask=LIST_MASK), (logits,))


# ------------------------------------------------------------------------------------------------ MarginMSE, MSE, CE


def test_margin_mse_takes_teacher_scores_or_margins():
    logits = torch.tensor([[2.0], [0.5], [-1.0], [1.0], [1.5], [0.0]], dtype=torch.float64)
    teacher = torch.tensor([[3.0, 1.0, 0.0], [2.0, 2.5, -1.0]])
    margins = teacher[:, :1] - teacher[:, 1:]
    student = logits.view(2, 3)
    expected = ((student[:, :1] - student[:, 1:] - margins.double()) ** 2).mean()
    assert MarginMSELoss()(logits, teacher, group_size=3).item() == pytest.approx(expected.item())
    assert MarginMSELoss()(logits, margins, group_size=3).item() == pytest.approx(expected.item())
    with pytest.raises(ValueError, match="4 labels per row for 2 negatives"):
        MarginMSELoss()(logits, torch.zeros(2, 4), group_size=3)
    with pytest.raises(ValueError, match="teacher scores or margins"):
        MarginMSELoss()(logits, None, group_size=3)


def test_margin_mse_gradcheck():
    teacher = torch.tensor([[3.0, 1.0], [2.0, 2.5]])
    logits = torch.tensor([[2.0], [0.5], [-1.0], [1.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: MarginMSELoss()(x, teacher, group_size=2), (logits,))


def test_mse_on_pairs_and_lists():
    logits = torch.tensor([[2.0], [0.5], [-1.0]], dtype=torch.float64)
    target = torch.tensor([1.5, 0.5, 0.0])
    assert MSELoss()(logits, target).item() == pytest.approx(((logits[:, 0] - target) ** 2).mean().item())
    sig = torch.sigmoid(logits[:, 0])
    assert MSELoss(activation="sigmoid")(logits, target).item() == pytest.approx(((sig - target) ** 2).mean().item())
    scores = flat(LIST_SCORES).detach()
    labels = torch.tensor(LIST_LABELS)
    expected = ((scores[:, 0] - labels[LIST_MASK]) ** 2).mean()
    assert MSELoss()(scores, labels, mask=LIST_MASK).item() == pytest.approx(expected.item())


def test_cross_entropy_value_and_refuses_class_ids_past_num_labels():
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.2, 0.4, 0.1]], dtype=torch.float64)
    labels = torch.tensor([0, 2])
    terms = [torch.log(torch.exp(row[c]) / torch.exp(row).sum()) for row, c in zip(logits, labels, strict=True)]
    expected = -sum(terms) / 2
    assert CrossEntropyLoss()(logits, labels).item() == pytest.approx(expected.item())
    with pytest.raises(ValueError, match=r"class id 3 .*num_labels=3"):
        CrossEntropyLoss()(logits, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="class id -1"):
        CrossEntropyLoss()(logits, torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="num_labels > 1"):
        CrossEntropyLoss()(torch.zeros(2, 1), labels)


def test_get_loss_by_name():
    assert isinstance(get_loss("bce", pos_weight=3.0), BinaryCrossEntropyLoss)
    assert isinstance(get_loss("plistmle"), PListMLELoss)
    with pytest.raises(ValueError, match="'nope'.*accepted"):
        get_loss("nope")
