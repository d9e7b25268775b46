"""AnglE, in-batch ranking on scored pairs and weighted sums of losses: values computed by hand in plain Python (complex
numbers for AnglE), one forward pass for a sum, clear errors, loss strings, and short trainer / CLI runs."""

from __future__ import annotations

import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import WORDS, make_tiny_model, tiny_encoder_config
from datasets import Dataset
from transformers import BertModel, TrainingArguments

from hf_siamese import SiameseTrainer, losses
from hf_siamese.cli import main


def output(pairs: list, requires_grad: bool = False) -> SimpleNamespace:
    embeddings = torch.tensor(pairs, dtype=torch.float32, requires_grad=requires_grad)
    return SimpleNamespace(sentence_embedding=embeddings, similarity=None, logits=None)


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def log_softmax_at(scores: list[float], target: int) -> float:
    return scores[target] - math.log(sum(math.exp(s) for s in scores))


def cosent_by_hand(scores: list[float], gold: list[float], scale: float) -> float:
    terms = [
        math.exp(scale * (scores[j] - scores[i]))
        for i in range(len(gold))
        for j in range(len(gold))
        if gold[i] > gold[j]
    ]
    return math.log(1 + sum(terms))


def angle_by_hand(u: list[float], v: list[float]) -> float:
    """First half real, second half imaginary; z_k = u_k conj(v_k) / (|u| |v|); score |sum_k Re z_k + Im z_k|."""
    half = len(u) // 2
    uc = [complex(u[k], u[k + half]) for k in range(half)]
    vc = [complex(v[k], v[k + half]) for k in range(half)]
    lengths = math.sqrt(sum(abs(z) ** 2 for z in uc)) * math.sqrt(sum(abs(z) ** 2 for z in vc))
    quotients = [a * b.conjugate() / lengths for a, b in zip(uc, vc, strict=True)]
    return abs(sum(z.real + z.imag for z in quotients))


PAIRS = [
    [[1.0, 2.0, 0.5, -1.0], [0.5, 1.0, 1.0, 0.0]],
    [[1.0, 0.5, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]],
    [[0.2, -0.3, 0.9, 0.4], [0.1, 0.8, -0.5, 0.3]],
]
GOLD = [3.0, 1.0, 2.0]


# ---------------------------------------------------------------------------------------------------- AnglE


def test_angle_similarity_by_hand() -> None:
    u = torch.tensor([p[0] for p in PAIRS])
    v = torch.tensor([p[1] for p in PAIRS])
    expected = [angle_by_hand(a, b) for a, b in PAIRS]
    assert losses.angle_similarity(u, v).tolist() == pytest.approx(expected, abs=1e-6)
    # First pair on paper: a = (1, 2), b = (0.5, -1), c = (0.5, 1), d = (1, 0); |u| = 2.5, |v| = 1.5;
    # sum(ac + bd) = 3, sum(bc - ad) = -1.75, so s = |3 - 1.75| / 3.75 = 1/3 (sentence-transformers'
    # pairwise_angle_sim gives the same scores on these pairs, checked when this test was written).
    assert expected[0] == pytest.approx(1 / 3)
    # lengths do not matter, and an odd size pairs dim k with k + (size + 1) / 2 after one zero dim is appended
    assert losses.angle_similarity(3 * u, 0.5 * v).tolist() == pytest.approx(expected, abs=1e-6)
    odd_u, odd_v = [1.0, 2.0, -0.5], [0.3, 0.0, 1.0]
    assert losses.angle_similarity(torch.tensor([odd_u]), torch.tensor([odd_v])).item() == pytest.approx(
        angle_by_hand([*odd_u, 0.0], [*odd_v, 0.0]), abs=1e-6
    )


def test_angle_loss_by_hand() -> None:
    loss = losses.AnglELoss(scale=20)(output(PAIRS), torch.tensor(GOLD))
    expected = cosent_by_hand([angle_by_hand(a, b) for a, b in PAIRS], GOLD, 20)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    small = losses.AnglELoss(scale=2)(output(PAIRS), torch.tensor(GOLD))
    assert small.item() == pytest.approx(cosent_by_hand([angle_by_hand(a, b) for a, b in PAIRS], GOLD, 2), rel=1e-5)


def test_angle_loss_gradient_and_bad_input() -> None:
    out = output(PAIRS, requires_grad=True)
    losses.AnglELoss()(out, torch.tensor(GOLD)).backward()
    assert out.sentence_embedding.grad is not None and out.sentence_embedding.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"AnglELoss needs pairs.*\(3, 1, 4\)"):
        losses.AnglELoss()(output([[p[0]] for p in PAIRS]), torch.tensor(GOLD))
    with pytest.raises(ValueError, match="AnglELoss needs float score labels"):
        losses.AnglELoss()(output(PAIRS), None)
    with pytest.raises(ValueError, match=r"scale=0"):
        losses.AnglELoss(scale=0)


# ---------------------------------------------------------------------------------------------------- scored ranking


@pytest.mark.parametrize("symmetric", [False, True])
def test_scored_pairs_ranking_by_hand(symmetric: bool) -> None:
    gold = [4.5, 1.0, 4.0]  # rows 0 and 2 are positives at threshold 4; row 1 only lends its texts as negatives
    loss = losses.ScoredPairsRankingLoss(threshold=4, scale=10, symmetric=symmetric)(output(PAIRS), torch.tensor(gold))
    us, vs = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    forward = -sum(log_softmax_at([10 * cos(us[i], v) for v in vs], i) for i in (0, 2)) / 2
    expected = forward
    if symmetric:
        backward = -sum(log_softmax_at([10 * cos(vs[i], u) for u in us], i) for i in (0, 2)) / 2
        expected = (forward + backward) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_scored_pairs_ranking_without_positives_is_a_connected_zero() -> None:
    out = output(PAIRS, requires_grad=True)
    loss = losses.ScoredPairsRankingLoss(threshold=5.0)(out, torch.tensor(GOLD))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert out.sentence_embedding.grad is not None and out.sentence_embedding.grad.abs().sum() == 0


def test_scored_pairs_ranking_bad_input() -> None:
    with pytest.raises(ValueError, match=r"needs threshold=.*threshold=4\.0"):
        losses.ScoredPairsRankingLoss()
    for bad in ("high", float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match=rf"threshold={bad!r} must be a finite number"):
            losses.ScoredPairsRankingLoss(threshold=bad)
    with pytest.raises(ValueError, match=r"scale=-1"):
        losses.ScoredPairsRankingLoss(threshold=1.0, scale=-1)
    loss = losses.ScoredPairsRankingLoss(threshold=1.0)
    with pytest.raises(ValueError, match="needs pairs"):
        loss(output([[p[0], p[1], p[1]] for p in PAIRS]), torch.tensor(GOLD))
    with pytest.raises(ValueError, match="float score labels"):
        loss(output(PAIRS), None)
    with pytest.raises(ValueError, match=r"one score per pair.*\(3,\), got \(2,\)"):
        loss(output(PAIRS), torch.tensor([1.0, 2.0]))


# ---------------------------------------------------------------------------------------------------- combined


class CountingModel(torch.nn.Module):
    """A tiny siamese model that counts its forward passes."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = make_tiny_model()
        self.calls = 0

    def forward(self, **inputs: torch.Tensor):
        self.calls += 1
        return self.inner(**inputs)


def test_combined_is_the_weighted_sum_on_one_forward_pass(tiny_tokenizer) -> None:
    model = CountingModel()
    texts = ["a man plays", "a dog", "the red car", "two cats", "a man plays music", "the car"]
    batch = tiny_tokenizer(texts, padding=True, return_tensors="pt")
    inputs = {k: v.reshape(3, 2, -1) for k, v in batch.items()}
    gold = torch.tensor([4.5, 0.5, 2.0])
    parts = [losses.CoSENTLoss(), losses.AnglELoss(scale=10), losses.ScoredPairsRankingLoss(threshold=2.0)]
    combined = losses.CombinedLoss([(parts[0], 1.0), (parts[1], 0.5), (parts[2], 2)])
    value, out = combined.compute(model, inputs, gold)
    assert model.calls == 1
    separate = [part.compute(model, inputs, gold)[0] for part in parts]  # eval mode: the same embeddings
    assert value.item() == pytest.approx((separate[0] + 0.5 * separate[1] + 2 * separate[2]).item(), rel=1e-5)
    assert out.sentence_embedding.shape == (3, 2, 32)
    value.backward()
    assert model.inner.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert combined.summary == "CoSENTLoss + 0.5 * AnglELoss + 2 * ScoredPairsRankingLoss"
    assert (combined.label_kind, combined.num_texts, combined.score_range) == ("score", 2, None)


def test_combined_constructor_forms_and_score_range() -> None:
    by_mapping = losses.CombinedLoss({"cosent": 1, losses.CosineSimilarityLoss(score_range=(0, 5)): 0.25})
    assert [type(c).__name__ for c in by_mapping.components] == ["CoSENTLoss", "CosineSimilarityLoss"]
    assert by_mapping.weights == [1.0, 0.25] and by_mapping.score_range == (0.0, 5.0)
    by_sequence = losses.CombinedLoss(["cosent", ("angle", 3)])
    assert by_sequence.weights == [1.0, 3.0] and isinstance(by_sequence.components[1], losses.AnglELoss)
    # wrapped the other way round, Matryoshka sums the combination over its dims
    matryoshka = losses.MatryoshkaLoss(by_sequence, dims=[4, 2])
    value = matryoshka(output(PAIRS), torch.tensor(GOLD))
    halves = output([[a[:2], b[:2]] for a, b in PAIRS])
    expected = by_sequence(output(PAIRS), torch.tensor(GOLD)) + by_sequence(halves, torch.tensor(GOLD))
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: losses.CombinedLoss([]), "at least one loss"),
        (lambda: losses.CombinedLoss("cosent+angle"), r"use get_loss\('cosent\+angle'\)"),
        (lambda: losses.CombinedLoss({"cosent": 0}), "weight of CoSENTLoss is 0; weights must be positive finite"),
        (lambda: losses.CombinedLoss({"cosent": -1.5}), "is -1.5"),
        (lambda: losses.CombinedLoss({"cosent": float("inf")}), "is inf"),
        (lambda: losses.CombinedLoss({"cosent": float("nan")}), "is nan"),
        (lambda: losses.CombinedLoss({"cosent": True}), "is True"),
        (lambda: losses.CombinedLoss({"cosent": "1"}), "is '1'"),
        (lambda: losses.CombinedLoss([("cosent", 1, 2)]), "not a \\(loss, weight\\) pair"),
        (lambda: losses.CombinedLoss(["cosent", "mnr"]), r"CoSENTLoss reads float scores.*no labels.*scored_mnr"),
        (lambda: losses.CombinedLoss(["cosent", "cached_mnr"]), "cannot hold CachedMultipleNegativesRankingLoss"),
        (
            lambda: losses.CombinedLoss(["cosent", losses.MatryoshkaLoss("angle", dims=[4])]),
            r"MatryoshkaLoss\(CombinedLoss\(\.\.\.\), dims\)",
        ),
        (
            lambda: losses.CombinedLoss(
                [losses.CosineSimilarityLoss(score_range=(0, 5)), losses.CosineSimilarityLoss(score_range=(0, 1))]
            ),
            "different score ranges",
        ),
    ],
)
def test_combined_bad_input(make, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()


# ---------------------------------------------------------------------------------------------------- loss strings


def test_loss_strings() -> None:
    plain = losses.get_loss("cosent+angle")
    assert isinstance(plain, losses.CombinedLoss) and plain.weights == [1.0, 1.0]
    assert [type(c) for c in plain.components] == [losses.CoSENTLoss, losses.AnglELoss]
    weighted = losses.get_loss(" CoSENT + 0.5 * Angle ")
    assert weighted.weights == [1.0, 0.5] and weighted.summary == "CoSENTLoss + 0.5 * AnglELoss"
    assert losses.parse_loss_spec("2*cosine+1e-1*angle") == [("cosine", 2.0), ("angle", 0.1)]
    # each keyword goes to the losses that take it
    routed = losses.get_loss("cosine+angle+scored_mnr", score_range=(0, 5), scale=10, threshold=4)
    cosine, angle, ranking = routed.components
    assert cosine.score_range == (0.0, 5.0) and routed.score_range == (0.0, 5.0)
    assert angle.scale == 10 and ranking.scale == 10 and ranking.threshold == 4.0
    assert isinstance(losses.get_loss("angle"), losses.AnglELoss)
    assert isinstance(losses.get_loss("scored_mnr", threshold=0.5), losses.ScoredPairsRankingLoss)


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("cosent+", {}, "empty term ''"),
        (
            "cosent+angel",
            {},
            r"unknown loss 'angel'; accepted names: angle, cached_maxsim_mnr, cached_mnr, cosent, cosine, "
            r".*scored_mnr, softmax",
        ),
        ("cosent+x*angle", {}, "weight 'x' of 'angle' is not a number"),
        ("cosent+0*angle", {}, "the weight of 'angle' is 0.0"),
        ("cosent+-1*angle", {}, "the weight of 'angle' is -1.0"),
        ("cosent+angle*0.5", {}, r"unknown loss '0.5' \(write the weight first"),
        ("cosent+cosent", {}, "'cosent' appears twice"),
        ("cosent+mnr", {}, "need different rows"),
        ("cosent+scored_mnr", {}, "needs threshold="),
        ("cosent+angle", {"score_range": (0, 5)}, r"argument\(s\) \['score_range'\] are taken by none"),
        ("triplet", {}, r"Unknown loss 'triplet'.*'cosent\+0\.5\*angle'"),
    ],
)
def test_bad_loss_strings(text: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        losses.get_loss(text, **kwargs)


# ---------------------------------------------------------------------------------------------------- training


def scored_pairs(n: int = 24) -> Dataset:
    rng = random.Random(0)
    rows = {"sentence1": [], "sentence2": [], "score": []}
    for i in range(n):
        first = " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 6)))
        same = i % 2 == 0
        rows["sentence1"].append(first)
        rows["sentence2"].append(first if same else " ".join(rng.choice(WORDS[:60]) for _ in range(4)))
        rows["score"].append(4.5 if same else round(rng.uniform(0, 2), 1))
    return Dataset.from_dict(rows)


@pytest.mark.parametrize("loss", ["cosent+angle", losses.get_loss("cosent+0.5*scored_mnr", threshold=4.0)])
def test_trainer_runs_on_a_combination(loss, tmp_path: Path, tiny_tokenizer) -> None:
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=3,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=args, train_dataset=scored_pairs(), processing_class=tiny_tokenizer, loss=loss
    )
    assert isinstance(trainer.loss, losses.CombinedLoss)
    trainer.train()
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 3 and all(math.isfinite(value) for value in logged)


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("cli-combined")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(root / "base")
    tiny_tokenizer.save_pretrained(root / "base")
    data = scored_pairs(16)
    lines = ["sentence1\tsentence2\tscore"]
    lines += [f"{a}\t{b}\t{s}" for a, b, s in zip(data["sentence1"], data["sentence2"], data["score"], strict=True)]
    (root / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_cli_trains_on_a_combination(cli_files: Path, tmp_path: Path, capsys) -> None:
    argv = ["train", "--model", str(cli_files / "base"), "--train", str(cli_files / "train.tsv"), "--epochs", "1"]
    assert main([*argv, "--loss", "cosent+0.5*angle", "--batch-size", "8", "--output-dir", str(tmp_path)]) == 0
    assert "CoSENTLoss + 0.5 * AnglELoss" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--loss", "cosent+hinge"], "invalid choice: 'cosent+hinge' (loss 'cosent+hinge': unknown loss 'hinge'"),
        (["--loss", "cosent+cached_mnr"], "unknown loss 'cached_mnr'"),
        (["--loss", "cosent+scored_mnr"], "needs --positive-threshold T"),
        (["--loss", "angle", "--positive-threshold", "4"], "--positive-threshold applies to --loss scored_mnr"),
        (["--loss", "cosent+mnr"], "need different rows"),
    ],
)
def test_cli_bad_loss_is_one_clear_line(cli_files: Path, tmp_path: Path, extra: list, fragment: str, capsys) -> None:
    argv = ["train", "--model", str(cli_files / "base"), "--train", str(cli_files / "train.tsv"), *extra]
    assert main([*argv, "--output-dir", str(tmp_path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hf-siamese: error: ") and fragment in lines[0], lines
