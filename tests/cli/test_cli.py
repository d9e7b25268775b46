"""The `hf-siamese` command line end to end on a tiny model and tiny files: train -> eval -> encode -> search, the
built-in demo default, and one clear stderr line (no traceback) for every kind of bad input."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import WORDS, tiny_encoder_config
from safetensors.torch import load_file
from transformers import BertModel

from hf_siamese.cli import main

SENTENCES = [
    "a man is playing a guitar .",
    "someone plays music .",
    "the stock market fell today .",
    "two dogs are playing in the park .",
    "a woman cooks soup in the kitchen .",
    "the red car is fast .",
]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 7)))


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A tiny base encoder (plain BertModel + tokenizer, as a user would pass with --model) and small data files."""
    root = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(root / "base")
    tiny_tokenizer.save_pretrained(root / "base")

    rng = random.Random(0)
    scored, labelled, triplets = ["sentence1\tsentence2\tscore"], ["premise\thypothesis\tgold"], []
    triplets.append("anchor\tpositive\tnegative")
    for i in range(24):
        first = _sentence(rng)
        same = i % 2 == 0
        second = first + " ." if same else _sentence(rng)
        scored.append(f"{first}\t{second}\t{4.5 if same else round(rng.uniform(0, 2), 1)}")
        labelled.append(f"{first}\t{second}\t{'entailment' if same else 'contradiction'}")
        triplets.append(f"{first} {i}\t{first} {i} !\t{_sentence(rng)}")
    _write(root / "train.tsv", scored)
    _write(root / "eval.tsv", scored[:1] + scored[13:])
    _write(root / "nli.tsv", labelled)
    _write(root / "triplets.tsv", triplets)
    _write(root / "corpus.txt", SENTENCES + ["", "   "])  # blank lines are skipped
    _write(root / "queries.txt", ["a dog in the park", "music"])
    return root


@pytest.fixture(scope="module")
def trained(workdir: Path) -> Path:
    """`hf-siamese train` on scored pairs, saved to a folder the other subcommands load."""
    out = workdir / "model"
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv")]
    args += ["--eval", str(workdir / "eval.tsv"), "--output-dir", str(out), "--batch-size", "8", "--lr", "1e-3"]
    assert main(args) == 0
    return out


def test_train_saves_a_loadable_model(trained: Path) -> None:
    assert (trained / "model.safetensors.index.json").is_file() and (trained / "tokenizer_config.json").is_file()
    assert (trained / "0_Transformer" / "model.safetensors").is_file() and (trained / "modules.json").is_file()
    from transformers import AutoModel

    import hf_siamese

    loaded = AutoModel.from_pretrained(trained)
    assert isinstance(loaded, hf_siamese.SiameseBertModel)
    assert loaded.config.pooling == "mean" and loaded.config.normalize


def test_train_eval_encode_search(workdir: Path, trained: Path, tmp_path: Path, capsys) -> None:
    model = str(trained)
    # eval: the correlation table, a scatter plot, a heatmap
    code = main(
        ["eval", str(workdir / "eval.tsv"), "--model", model, "--plot", str(tmp_path / "scatter.png")]
        + ["--sentences", str(workdir / "corpus.txt"), "--heatmap", str(tmp_path / "heat.png")]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    for word in ("cosine", "dot", "euclidean", "manhattan", "Spearman", "12 pairs"):
        assert word in out
    assert (tmp_path / "scatter.png").stat().st_size > 0 and (tmp_path / "heat.png").stat().st_size > 0

    # encode: .npy float32 and .safetensors bfloat16, one row per non-blank line
    assert main(["encode", str(workdir / "corpus.txt"), "--model", model, "-o", str(tmp_path / "e.npy")]) == 0
    array = np.load(tmp_path / "e.npy")
    assert array.shape == (len(SENTENCES), 32) and array.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(array, axis=1), 1.0, atol=1e-5)  # the trained model normalizes
    target = tmp_path / "sub" / "e.safetensors"
    assert (
        main(["encode", str(workdir / "corpus.txt"), "--model", model, "-o", str(target), "--dtype", "bfloat16"]) == 0
    )
    tensor = load_file(target)["embeddings"]
    assert tensor.dtype == torch.bfloat16 and tensor.shape == (len(SENTENCES), 32)
    torch.testing.assert_close(tensor.float(), torch.from_numpy(array), atol=2e-2, rtol=2e-2)
    # --quantize int8: an int8 copy on the CPU, close to the float embeddings
    quantized = tmp_path / "q.npy"
    assert (
        main(["encode", str(workdir / "corpus.txt"), "--model", model, "-o", str(quantized), "--quantize", "int8"]) == 0
    )
    cosines = (np.load(quantized) * array).sum(axis=1) / np.linalg.norm(np.load(quantized), axis=1)
    assert cosines.min() > 0.9 and not np.array_equal(np.load(quantized), array)
    assert main(["eval", str(workdir / "eval.tsv"), "--model", model, "--quantize", "int8"]) == 0

    # search: --query (repeated) and --queries; top-k clamps to the corpus size
    capsys.readouterr()
    code = main(
        ["search", "--model", model, "--corpus", str(workdir / "corpus.txt"), "--query", SENTENCES[2]]
        + ["--queries", str(workdir / "queries.txt"), "--top-k", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("Query:") == 3 and out.count("  1. ") == 3 and "  3. " not in out
    first_hit = out.split("Query: " + SENTENCES[2])[1].splitlines()[1]
    assert first_hit.endswith(SENTENCES[2]) and "1.0000" in first_hit  # a corpus line finds itself first
    assert (
        main(["search", "--model", model, "--corpus", str(workdir / "corpus.txt"), "--query", "x", "--top-k", "99"])
        == 0
    )
    assert capsys.readouterr().out.count(". ") >= len(SENTENCES)


def test_demo_default_uses_builtin_dataset(workdir: Path, tmp_path: Path, capsys) -> None:
    """No data argument: the built-in demo set (train split; dev split for before/after). Tiny model, 32 rows."""
    args = ["train", "--model", str(workdir / "base"), "--max-train", "32", "--epochs", "1"]
    assert main([*args, "--output-dir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "built-in demo set (train split) (32 rows)" in out
    assert "before" in out and "after" in out and "dev split" in out
    assert "AutoModel.from_pretrained" in out and str(tmp_path / "demo") in out
    assert (tmp_path / "demo" / "config.json").is_file()
    # eval defaults to the demo dev split as well
    assert main(["eval", "--model", str(tmp_path / "demo"), "--max-eval", "40"]) == 0
    assert "40 pairs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("data", "extra", "expected"),
    [
        ("nli.tsv", ["--columns", "sentence1=premise,sentence2=hypothesis,label=gold"], "SoftmaxLoss"),
        (
            "nli.tsv",
            [
                "--columns",
                "premise=premise,hypothesis=hypothesis,label=gold",
                "--labels",
                "entailment,contradiction",
                "--eval",
                "eval.tsv",
            ],
            "SoftmaxLoss",
        ),
        ("triplets.tsv", ["--eval", "eval.tsv", "--eval-steps", "2"], "MultipleNegativesRankingLoss"),
        ("train.tsv", ["--loss", "cosent", "--group-by-length", "--max-train", "16"], "CoSENTLoss"),
    ],
)
def test_train_other_losses(workdir: Path, tmp_path: Path, data: str, extra: list, expected: str, capsys) -> None:
    extra = [str(workdir / x) if x.endswith(".tsv") else x for x in extra]
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / data), "--batch-size", "8"]
    assert main([*args, *extra, "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert expected in out and "saved" in out
    if "--eval" in extra:
        assert "before" in out and "after" in out


def test_python_m_help() -> None:
    result = subprocess.run([sys.executable, "-m", "hf_siamese", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for command in ("train", "eval", "encode", "search"):
        assert command in result.stdout


def test_help_in_process(capsys) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--score-range", "--labels", "--push-to-hub", "--gather-across-processes", "--max-train"):
        assert option in out


BAD_INPUTS = [
    # (argv with {w} = workdir, fragment expected in the error line)
    (["train", "--model", "{w}/base", "--train", "{w}/missing.csv"], "data file not found"),
    (
        ["train", "--model", "{w}/base", "--train", "{w}/train.tsv", "--columns", "sentence1=nope,sentence2=sentence2"],
        "unknown column for 'sentence1' (got 'nope')",
    ),
    (["train", "--model", "{w}/base", "--train", "{w}/broken.tsv"], "line 3"),
    (["train", "--model", "{w}/base", "--loss", "hinge"], "invalid choice: 'hinge'"),
    (["train", "--model", "{w}/base", "--train", "{w}/train.tsv", "--columns", "sentence1"], "NAME=COLUMN"),
    (["train", "--model", "{w}/base", "--train", "{w}/train.tsv", "--score-range", "5,0"], "LOW must be below HIGH"),
    (["train", "--model", "{w}/base", "--train", "{w}/train.tsv", "--score-range", "0,1"], "outside the score range"),
    (
        [
            "train",
            "--model",
            "{w}/base",
            "--train",
            "{w}/nli.tsv",
            "--columns",
            "premise=premise,hypothesis=hypothesis,label=gold",
            "--labels",
            "entailment,neutral",
        ],
        "'contradiction'",
    ),
    (["train", "--model", "{w}/base", "--eval", "{w}/nli.tsv"], "expected scored pairs"),
    (["train", "--model", "{w}/base", "--push-to-hub", "norepo"], "OWNER/NAME"),
    (["train", "--model", "{w}/no-such-model", "--train", "{w}/train.tsv"], "no-such-model"),
    (["train", "--epochs"], "expected one argument"),
    (["encode", "{w}/empty.txt", "--model", "{w}/base", "-o", "{w}/e.npy"], "has no text"),
    (["encode", "{w}/missing.txt", "--model", "{w}/base", "-o", "{w}/e.npy"], "text file not found"),
    (["encode", "{w}/corpus.txt", "--model", "{w}/base", "-o", "{w}/e.txt"], ".npy or .safetensors"),
    (["encode", "{w}/corpus.txt", "--model", "{w}/base", "-o", "{w}/e.npy", "--dtype", "bfloat16"], "numpy"),
    (["encode", "{w}/latin1.txt", "--model", "{w}/base", "-o", "{w}/e.npy"], "line 2"),
    (["search", "--model", "{w}/base", "--corpus", "{w}/corpus.txt"], "--query"),
    (["search", "--model", "{w}/base", "--corpus", "{w}/corpus.txt", "--query", "a", "--top-k", "0"], "--top-k"),
    (["eval", "{w}/train.tsv", "--model", "{w}/base", "--heatmap", "{w}/h.png"], "--sentences"),
    (["eval", "{w}/train.tsv", "--model", "{w}/model", "--pooling", "cls"], "hf-siamese model"),
    (["eval", "{w}/train.tsv", "--model", "{w}/base", "--columns", "a=b=c"], "unknown column"),
    ([], "required"),
]


@pytest.mark.parametrize(("argv", "fragment"), BAD_INPUTS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_clear_line(workdir: Path, trained: Path, argv: list, fragment: str, capsys) -> None:
    (workdir / "broken.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t1.0\na\tb\n", encoding="utf-8")
    (workdir / "empty.txt").write_text("\n  \n", encoding="utf-8")
    (workdir / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    code = main([part.format(w=workdir) for part in argv])
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), err
    assert fragment in lines[0]


def test_push_to_hub(workdir: Path, tmp_path: Path, fake_hub, capsys) -> None:
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--max-train", "8"]
    assert main([*args, "--output-dir", str(tmp_path / "out"), "--push-to-hub", "someone/tiny-siamese"]) == 0
    files = fake_hub.files("someone/tiny-siamese")
    assert {"config.json", "model.safetensors.index.json", "modeling_siamese.py", "tokenizer_config.json"} <= set(files)
    assert {"modules.json", "0_Transformer/model.safetensors", "0_Transformer/tokenizer_config.json"} <= set(files)
    assert "someone/tiny-siamese" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------- retrieval


@pytest.fixture(scope="module")
def beir(workdir: Path) -> Path:
    """A tiny BEIR folder: the corpus sentences, two judged queries per split."""
    import json

    folder = workdir / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": s}) + "\n" for i, s in enumerate(SENTENCES))
    )
    queries = {"q1": "music", "q2": "a dog in the park", "q3": "the market", "q4": "a woman cooking"}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td2\t1\nq4\td4\t2\n")
    return folder


def test_eval_prints_the_ir_table_on_a_beir_folder(workdir: Path, beir: Path, capsys) -> None:
    assert main(["eval", str(beir), "--model", str(workdir / "base")]) == 0
    out = capsys.readouterr().out
    assert "(test split): 2 queries, 6 documents" in out
    for name in ("ndcg", "mrr", "recall", "map", "precision"):
        assert any(line.startswith(name) for line in out.splitlines())
    assert "@10" in out and "@100" in out


def test_train_reports_ndcg_on_a_beir_eval_folder(workdir: Path, beir: Path, tmp_path: Path, capsys) -> None:
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "triplets.tsv"), "--eval", str(beir)]
    assert main([*args, "--output-dir", str(tmp_path / "out"), "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "nDCG@10 x100 on" in out and "(test split)" in out and "2 queries" in out
    assert "recipe plain: 1 epoch(s)" in out  # a retrieval --eval is not the best recipe's default
    # Asked for, the best recipe selects on nDCG@10 (scored pairs on a retrieval --eval: cosine loss)
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--eval", str(beir)]
    extra = ["--recipe", "best", "--epochs", "2", "--interpolate", "auto", "--batch-size", "8"]
    assert main([*args, *extra, "--output-dir", str(tmp_path / "best")]) == 0
    out = capsys.readouterr().out
    assert "recipe best: 2 epoch(s)" in out and "kept " in out and "--interpolate auto: weights" in out
    assert "nDCG@10 x100" in out and (tmp_path / "best" / "config.json").is_file()


def test_mine_writes_triplets(workdir: Path, beir: Path, tmp_path: Path, capsys) -> None:
    output = tmp_path / "mined.jsonl"
    args = ["mine", str(beir), "--model", str(workdir / "base"), "-o", str(output), "--num-negatives", "2"]
    assert main(args) == 0
    assert "mined 2 of 2 rows (2 negatives each)" in capsys.readouterr().out
    import json

    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [sorted(row) for row in rows] == [["anchor", "negative_1", "negative_2", "positive"]] * 2
    for row in rows:
        assert row["positive"] not in (row["negative_1"], row["negative_2"])
    bad = ["mine", str(workdir / "triplets.tsv"), "--model", str(workdir / "base"), "-o", str(tmp_path / "x.parquet")]
    assert main(bad) != 0
    assert "must end in one of" in capsys.readouterr().err


def test_train_average_weights_saves_the_mean_of_the_epoch_ends(workdir: Path, tmp_path: Path, capsys) -> None:
    from hf_siamese import SiameseBertModel

    out = tmp_path / "avg"
    # 24 rows / batch 8 = 3 steps an epoch: the checkpoints at steps 3 and 6 hold the two epoch-end weights
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--batch-size", "8"]
    args += ["--lr", "1e-3", "--epochs", "2", "--save-steps", "3", "--average-weights", "--output-dir", str(out)]
    assert main(args) == 0
    ends = [SiameseBertModel.from_pretrained(out / f"checkpoint-{step}").state_dict() for step in (3, 6)]
    saved = SiameseBertModel.from_pretrained(out).state_dict()
    weights = [k for k in saved if saved[k].is_floating_point()]
    assert max((saved[k] - (ends[0][k] + ends[1][k]) / 2).abs().max().item() for k in weights) < 1e-6
    assert max((saved[k] - ends[1][k]).abs().max().item() for k in weights) > 1e-4  # not just the last epoch
    assert "recipe plain: 2 epoch(s), mean of the epoch ends" in capsys.readouterr().out
    card = (out / "README.md").read_text()
    assert "Final weights: `hf-siamese train` (plain recipe) ended with the mean of the 2 epoch-end weights." in card


def _train_interpolated(workdir: Path, out: Path, *extra: str) -> list[str]:
    # 24 rows / batch 8 = 3 steps: the checkpoint at step 3 holds the fine-tuned weights before the interpolation
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--batch-size", "8"]
    return args + ["--lr", "1e-3", "--save-steps", "3", "--output-dir", str(out), *extra]


def _random_eval(path: Path) -> Path:
    """60 pairs of random words with random scores: enough that weights close to each other rank them differently."""
    rng = random.Random(1)
    rows = [f"{_sentence(rng)}\t{_sentence(rng)}\t{round(rng.uniform(0, 5), 1)}" for _ in range(60)]
    return _write(path, ["sentence1\tsentence2\tscore", *rows])


def _spearman(model, workdir: Path, evaluation: Path) -> float:
    """Spearman of the cosine similarity against the gold scores of `evaluation`, computed here by hand."""
    from scipy.stats import spearmanr
    from transformers import AutoTokenizer

    from hf_siamese import read_pairs_file

    pairs = read_pairs_file(evaluation)
    tokenizer = AutoTokenizer.from_pretrained(workdir / "base")
    first, second = (model.encode(pairs[c], tokenizer=tokenizer) for c in ("sentence1", "sentence2"))
    return spearmanr(torch.nn.functional.cosine_similarity(first, second), pairs["score"])[0]


def _mix_distance(saved: dict, base: dict, trained: dict, alpha: float) -> float:
    weights = [k for k in saved if saved[k].is_floating_point() and k in base]
    return max((saved[k] - ((1 - alpha) * base[k] + alpha * trained[k])).abs().max().item() for k in weights)


def test_train_interpolate_saves_the_mix_of_base_and_trained(workdir: Path, tmp_path: Path, capsys) -> None:
    from hf_siamese import SiameseBertModel

    base = SiameseBertModel.from_encoder(str(workdir / "base")).state_dict()
    out = tmp_path / "wise"
    assert main(_train_interpolated(workdir, out, "--interpolate", "0.25")) == 0
    assert "--interpolate 0.25: weights (1 - 0.25) * base + 0.25 * trained" in capsys.readouterr().out
    trained = SiameseBertModel.from_pretrained(out / "checkpoint-3").state_dict()
    saved = SiameseBertModel.from_pretrained(out).state_dict()
    assert _mix_distance(saved, base, trained, 0.25) < 1e-6
    assert _mix_distance(saved, base, trained, 1.0) > 1e-4  # not the trained weights themselves


def test_train_interpolate_auto_picks_alpha_on_eval(workdir: Path, tmp_path: Path, capsys) -> None:
    import re

    from hf_siamese import SiameseBertModel

    base = SiameseBertModel.from_encoder(str(workdir / "base")).state_dict()
    evaluation = _random_eval(tmp_path / "eval.tsv")
    out = tmp_path / "wise-auto"
    extra = ["--interpolate", "auto", "--eval", str(evaluation), "--epochs", "3", "--lr", "5e-3", "--recipe", "plain"]
    assert main(_train_interpolated(workdir, out, *extra)) == 0
    printed = capsys.readouterr().out
    alpha = float(re.search(r"--interpolate auto: weights \(1 - ([0-9.]+)\)", printed).group(1))
    assert alpha in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    trained = SiameseBertModel.from_pretrained(out / "checkpoint-9").state_dict()  # 3 epochs of 3 steps
    saved = SiameseBertModel.from_pretrained(out).state_dict()
    assert _mix_distance(saved, base, trained, alpha) < 1e-6
    # the chosen alpha scores highest on --eval among the grid (ties: the larger alpha)
    from hf_siamese import interpolate_weights

    model = SiameseBertModel.from_pretrained(out / "checkpoint-9")
    scores = {}
    for grid_alpha in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        interpolate_weights(model, base, trained, grid_alpha)
        scores[grid_alpha] = _spearman(model, workdir, evaluation)
    best = max(scores.values())
    assert scores[alpha] > best - 1e-6
    assert all(a <= alpha for a, score in scores.items() if score > best - 1e-6)
    assert len({round(score, 6) for score in scores.values()}) > 1  # the choice was not a tie everywhere


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "nan", "half"])
def test_train_interpolate_rejects_bad_alpha(workdir: Path, tmp_path: Path, value: str, capsys) -> None:
    out = tmp_path / "bad"
    assert main(_train_interpolated(workdir, out, "--interpolate", value)) != 0
    assert "expected a number above 0 and at most 1" in capsys.readouterr().err
    assert not out.exists()


def test_train_interpolate_auto_needs_eval(workdir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "no-eval"
    assert main(_train_interpolated(workdir, out, "--interpolate", "auto")) != 0
    assert "--interpolate auto chooses ALPHA by the score on --eval" in capsys.readouterr().err
    assert not out.exists()


def test_best_recipe_is_the_default_for_scored_pairs_with_eval(workdir: Path, tmp_path: Path, capsys) -> None:
    """Scored pairs + --eval: evaluate every epoch, keep the best epoch or the mean of the epoch ends (whichever
    scores higher on --eval), then interpolate toward the base by the alpha that scores best on --eval."""
    import re

    from hf_siamese import SiameseBertModel, interpolate_weights

    base = SiameseBertModel.from_encoder(str(workdir / "base")).state_dict()
    evaluation = _random_eval(tmp_path / "eval.tsv")
    out = tmp_path / "best"
    # --save-steps 3 (= one epoch) keeps the checkpoints, so the choice can be checked here
    assert main(_train_interpolated(workdir, out, "--eval", str(evaluation), "--epochs", "2", "--lr", "5e-3")) == 0
    printed = capsys.readouterr().out
    assert (
        "recipe best: 2 epoch(s), best epoch or mean of the epoch ends, interpolation toward the base (auto)" in printed
    )
    ends = {step: SiameseBertModel.from_pretrained(out / f"checkpoint-{step}") for step in (3, 6)}
    scores = {step: _spearman(model, workdir, evaluation) for step, model in ends.items()}
    best_step = max(scores, key=lambda step: (scores[step], -step))  # ties: the earlier checkpoint
    mean = SiameseBertModel.from_pretrained(out / "checkpoint-3")
    with torch.no_grad():
        for name, param in mean.named_parameters():
            param.copy_((param + ends[6].get_parameter(name)) / 2)
    mean_score = _spearman(mean, workdir, evaluation)
    if "kept the mean of the 2 epoch-end weights" in printed:
        kept, kept_score = mean, mean_score
        assert mean_score > scores[best_step] - 1e-6
    else:
        assert (
            f"kept the best epoch (epoch {best_step // 3}); the mean of the 2 epoch-end weights scored lower" in printed
        )
        kept, kept_score = ends[best_step], scores[best_step]
        assert mean_score < scores[best_step] + 1e-6
    # Both scores are printed: the mean's, then the best checkpoint's
    printed_mean, printed_best = map(float, re.search(r"spearman_cosine ([0-9.-]+) vs ([0-9.-]+)", printed).groups())
    assert printed_mean == pytest.approx(mean_score, abs=6e-5) and printed_best == pytest.approx(
        scores[best_step], abs=6e-5
    )
    alpha = float(re.search(r"--interpolate auto: weights \(1 - ([0-9.]+)\)", printed).group(1))
    trained = {name: p.detach().clone() for name, p in kept.named_parameters()}
    saved = SiameseBertModel.from_pretrained(out).state_dict()
    assert _mix_distance(saved, base, trained, alpha) < 1e-5
    grid = {}
    for grid_alpha in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        interpolate_weights(kept, base, trained, grid_alpha)
        grid[grid_alpha] = _spearman(kept, workdir, evaluation)
    assert grid[1.0] == pytest.approx(kept_score, abs=1e-9)
    assert grid[alpha] > max(grid.values()) - 1e-6
    # The card states the ending and the final weights' score (not the best checkpoint's)
    card = (out / "README.md").read_text()
    assert "Final weights: `hf-siamese train` (best recipe) kept" in card and "--interpolate auto: weights" in card
    after = float(re.search(r"after (-?[0-9.]+)", printed).group(1))
    card_score = float(re.search(r"\| Spearman \(cosine\) \| (-?[0-9.]+) \|", card).group(1))
    assert abs(100 * card_score - after) < 0.006


def test_best_recipe_removes_its_selection_checkpoints(workdir: Path, tmp_path: Path, capsys) -> None:
    from hf_siamese import SiameseBertModel

    out = tmp_path / "best-no-average"
    (out / "checkpoint-99").mkdir(parents=True)  # a user's earlier checkpoint stays
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--batch-size", "8"]
    args += ["--eval", str(workdir / "eval.tsv"), "--epochs", "2", "--lr", "1e-3", "--output-dir", str(out)]
    assert main([*args, "--no-average-weights", "--interpolate", "1"]) == 0
    printed = capsys.readouterr().out
    assert "recipe best: 2 epoch(s), best epoch, interpolation toward the base (1.0)" in printed
    assert re.search(r"kept the best epoch \(epoch [12]\)\n", printed)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-99"]
    assert isinstance(SiameseBertModel.from_pretrained(out), SiameseBertModel)


def test_plain_recipe_where_best_does_not_apply(workdir: Path, tmp_path: Path, capsys) -> None:
    args = ["train", "--model", str(workdir / "base"), "--batch-size", "8", "--output-dir", str(tmp_path / "out")]
    assert main([*args, "--train", str(workdir / "train.tsv"), "--max-train", "8"]) == 0  # no --eval
    printed = capsys.readouterr().out
    assert "recipe plain: 1 epoch(s) (give --eval scored pairs" in printed and "kept" not in printed
    triplets = ["--train", str(workdir / "triplets.tsv"), "--eval", str(workdir / "eval.tsv"), "--max-train", "8"]
    assert main([*args, *triplets, "--overwrite"]) == 0  # MNR: not a score loss (another run: --overwrite)
    printed = capsys.readouterr().out
    assert "recipe plain: 1 epoch(s)\n" in printed and "before" in printed and "after" in printed


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--recipe", "best"], "--recipe best chooses the epoch, the mean and the interpolation on --eval"),
        (
            [
                "--recipe",
                "best",
                "--eval",
                "EVAL",
                "--loss",
                "softmax",
                "--train",
                "NLI",
                "--columns",
                "sentence1=premise,sentence2=hypothesis,label=gold",
            ],
            "--recipe best evaluates the training loss on --eval",
        ),
        (
            ["--eval", "EVAL", "--save-steps", "5", "--eval-steps", "2"],
            "--save-steps must be a multiple of --eval-steps",
        ),
        (["--epochs", "0"], "expected a positive number, got '0'"),
        (["--epochs", "nan"], "expected a positive number, got 'nan'"),
        (["--recipe", "fast"], "invalid choice: 'fast'"),
    ],
)
def test_recipe_bad_input(workdir: Path, tmp_path: Path, extra: list, fragment: str, capsys) -> None:
    files = {"EVAL": str(workdir / "eval.tsv"), "NLI": str(workdir / "nli.tsv")}
    out = tmp_path / "bad"
    args = ["train", "--model", str(workdir / "base"), "--train", str(workdir / "train.tsv"), "--output-dir", str(out)]
    assert main([*args, *(files.get(x, x) for x in extra)]) != 0
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert not out.exists()
