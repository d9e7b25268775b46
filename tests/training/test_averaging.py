"""WeightAveragingCallback: the model ends with the mean of its epoch-end (or every-N-steps) weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from helpers import make_args, scored_pairs
from transformers import TrainerCallback

from hf_siamese import (
    SiamesePairCollator,
    SiameseTrainer,
    WeightAveragingCallback,
    choose_interpolation,
    interpolate_toward,
    interpolate_weights,
    keep_average_if_better,
    losses,
    parse_interpolation,
)


class RecordWeights(TrainerCallback):
    """Keeps a copy of the weights at every epoch end and step end (runs before the averaging callback's end)."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, torch.Tensor]] = []
        self.steps: dict[int, dict[str, torch.Tensor]] = {}

    @staticmethod
    def copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        self.epochs.append(self.copy(model))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps[state.global_step] = self.copy(model)


def train(tmp_path: Path, tokenizer, averaging: WeightAveragingCallback, epochs: int = 3):
    record = RecordWeights()
    model = make_tiny_model()
    trainer = SiameseTrainer(
        model=model,
        args=make_args(tmp_path, num_train_epochs=epochs, logging_steps=100),
        train_dataset=scored_pairs(32),
        data_collator=SiamesePairCollator(tokenizer),
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
        callbacks=[record, averaging],
    )
    trainer.train()
    return model, record


def mean_of(snapshots: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: torch.stack([s[name] for s in snapshots]).mean(0) for name in snapshots[0]}


def max_difference(model: torch.nn.Module, expected: dict[str, torch.Tensor]) -> float:
    return max((p.detach() - expected[n]).abs().max().item() for n, p in model.named_parameters())


def test_model_ends_with_the_mean_of_its_epoch_end_weights(tmp_path: Path, tiny_tokenizer) -> None:
    averaging = WeightAveragingCallback()
    model, record = train(tmp_path, tiny_tokenizer, averaging)
    assert averaging.count == 3 and len(record.epochs) == 3
    assert max_difference(model, mean_of(record.epochs)) < 1e-6
    # and that is not simply the last epoch's weights
    assert max_difference(model, record.epochs[-1]) > 1e-4


def test_start_epoch_skips_the_first_epochs(tmp_path: Path, tiny_tokenizer) -> None:
    averaging = WeightAveragingCallback(start_epoch=2)
    model, record = train(tmp_path, tiny_tokenizer, averaging)
    assert averaging.count == 2
    assert max_difference(model, mean_of(record.epochs[1:])) < 1e-6


def test_every_steps_and_keeping_the_trained_weights(tmp_path: Path, tiny_tokenizer) -> None:
    # 32 rows / batch 8 = 4 steps an epoch, 12 steps: snapshots at steps 5 and 10 (epochs 2 and 3 only)
    averaging = WeightAveragingCallback(every_steps=5, load_at_end=False)
    model, record = train(tmp_path, tiny_tokenizer, averaging)
    assert averaging.count == 2
    assert max_difference(model, record.epochs[-1]) < 1e-7  # load_at_end=False: the model keeps its last weights
    averaging.load_average(model)
    assert max_difference(model, mean_of([record.steps[5], record.steps[10]])) < 1e-6


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"start_epoch": 0}, "start_epoch must be an integer >= 1"),
        ({"start_epoch": 1.5}, "got 1.5"),
        ({"every_steps": -1}, "every_steps must be an integer >= 0"),
        ({"every_steps": True}, "got True"),
    ],
)
def test_bad_settings_are_named(kwargs, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        WeightAveragingCallback(**kwargs)


def test_average_before_any_snapshot_is_an_error(tmp_path: Path, tiny_tokenizer) -> None:
    averaging = WeightAveragingCallback(start_epoch=5)  # a 3-epoch run never reaches epoch 5
    with pytest.raises(RuntimeError, match="no snapshot to average.*epoch 5"):
        train(tmp_path, tiny_tokenizer, averaging)


def test_interpolate_weights_against_hand_mix() -> None:
    model = make_tiny_model()
    end = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(1)
    start = {n: torch.randn_like(p) for n, p in end.items()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    interpolate_weights(model, start, end, 0.25)
    name = "encoder.embeddings.word_embeddings.weight"
    hand = 0.75 * start[name] + 0.25 * end[name]
    assert torch.allclose(dict(model.named_parameters())[name], hand, atol=1e-6)
    for n, p in model.named_parameters():
        assert torch.allclose(p, 0.75 * start[n] + 0.25 * end[n], atol=1e-6), n
    assert all(torch.equal(b, buffers[n]) for n, b in model.named_buffers())
    interpolate_weights(model, start, end, 1.0)
    assert all(torch.equal(p, end[n]) for n, p in model.named_parameters())
    interpolate_weights(model, start, end, 0)
    assert all(torch.equal(p, start[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.5", True, float("nan")])
def test_interpolate_weights_rejects_bad_alpha(alpha) -> None:
    model = make_tiny_model()
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(ValueError, match="alpha must be a number between 0 and 1"):
        interpolate_weights(model, state, state, alpha)


def test_interpolate_weights_rejects_other_architecture() -> None:
    model = make_tiny_model()
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    missing = {n: v for n, v in state.items() if "pooler" not in n and "layer.1." not in n}
    with pytest.raises(KeyError, match="`start` has no weights"):
        interpolate_weights(model, missing, state, 0.5)
    name = next(iter(state))
    wrong = {**state, name: torch.zeros(3, 3)}
    with pytest.raises(ValueError, match=f"`end` weight '{name}' has shape"):
        interpolate_weights(model, state, wrong, 0.5)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # nothing half-written


def test_choose_interpolation_picks_the_best_alpha_and_breaks_ties_upward() -> None:
    model = make_tiny_model()
    end = {n: p.detach().clone() for n, p in model.named_parameters()}
    start = {n: torch.zeros_like(p) for n, p in end.items()}
    name = "encoder.embeddings.word_embeddings.weight"
    target = 0.7 * end[name]  # the score peaks where the weights are 0.7 of the way from zeros to `end`

    def score() -> float:
        return -(dict(model.named_parameters())[name] - target).norm().item()

    alpha, scores = choose_interpolation(model, start, score)
    assert alpha == 0.7 and list(scores) == [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
    assert scores[0.7] == max(scores.values())
    for n, p in model.named_parameters():
        assert torch.allclose(p, 0.7 * end[n], atol=1e-6), n
    interpolate_weights(model, start, end, 1.0)
    alpha, scores = choose_interpolation(model, start, lambda: 1.0, alphas=[0.5, 0.8, 0.6])
    assert alpha == 0.8 and scores == {0.5: 1.0, 0.8: 1.0, 0.6: 1.0}
    assert all(torch.allclose(p, 0.8 * end[n], atol=1e-6) for n, p in model.named_parameters())


@pytest.mark.parametrize("alphas", [[], [0.5, 1.2], [True]])
def test_choose_interpolation_rejects_bad_alphas(alphas) -> None:
    model = make_tiny_model()
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(ValueError, match="alpha"):
        choose_interpolation(model, state, lambda: 0.0, alphas=alphas)
    assert all(torch.equal(p, state[n]) for n, p in model.named_parameters())


def test_interpolate_toward_moves_the_model_in_place() -> None:
    model = make_tiny_model()
    trained = {n: p.detach().clone() for n, p in model.named_parameters()}
    start = {n: torch.randn_like(p) for n, p in trained.items()}
    interpolate_toward(model, start, 0.3)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, 0.7 * start[name] + 0.3 * trained[name])
    with pytest.raises(ValueError, match="between 0 and 1"):
        interpolate_toward(model, start, 1.2)
    with pytest.raises(KeyError, match="`start` has no weights"):
        interpolate_toward(model, {}, 0.5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("auto", "auto"),
        ("1", 1.0),
        ("0.25", 0.25),
        ("0", None),
        ("1.5", None),
        ("nan", None),
        ("half", None),
        ("-0.2", None),
    ],
)
def test_parse_interpolation(text: str, expected) -> None:
    if expected is None:
        with pytest.raises(ValueError, match=f"or auto, got {text!r}"):
            parse_interpolation(text)
    else:
        assert parse_interpolation(text) == expected


@pytest.mark.parametrize("mean_wins", [True, False])
def test_keep_average_if_better_keeps_the_higher_scoring_weights(tmp_path: Path, tiny_tokenizer, mean_wins) -> None:
    model = make_tiny_model()
    averaging = WeightAveragingCallback(load_at_end=False)
    averaging.add_snapshot(model)
    mean = averaging.average_state_dict()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01)  # the "best checkpoint": other weights than the mean
    best = {n: p.detach().clone() for n, p in model.named_parameters()}

    class Stub:  # what keep_average_if_better reads from a Trainer after train()
        def __init__(self) -> None:
            self.model = model
            self.args = make_args(tmp_path, eval_strategy="epoch", metric_for_best_model="spearman_cosine")
            self.state = type("State", (), {"best_metric": 0.5})()

        def evaluate(self) -> dict[str, float]:
            at_mean = torch.equal(next(model.parameters()), next(iter(mean.values())))
            return {"eval_spearman_cosine": 0.6 if at_mean == mean_wins else 0.4}

    assert averaging.mean_score is None
    assert keep_average_if_better(Stub(), averaging) is mean_wins
    assert averaging.mean_score == (0.6 if mean_wins else 0.4)  # the mean's own score, either way
    expected = mean if mean_wins else best
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, expected[name])


def test_keep_average_if_better_needs_a_best_checkpoint(tmp_path: Path) -> None:
    trainer = type("T", (), {"args": make_args(tmp_path), "state": type("S", (), {"best_metric": None})()})()
    with pytest.raises(ValueError, match="load_best_model_at_end=True and metric_for_best_model"):
        keep_average_if_better(trainer, WeightAveragingCallback())
