"""`search --corpus` and `mine --corpus` stream the corpus into shards (kept with --embeddings-dir): `search` ranks as
an in-memory search over the whole file does and prints `rank. score  [id] text` as `search --index`, `mine` gives
the library's rows, and the folder is reused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from conftest import WORDS, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.cli.common import load_inference_model
from hf_siamese.retrieval.mining.negatives import mine_hard_negatives


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 8)))


@pytest.fixture
def files(tmp_path: Path, tiny_tokenizer) -> Path:
    make_tiny_model().save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    make_tiny_model(seed=3).save_pretrained(tmp_path / "other")
    tiny_tokenizer.save_pretrained(tmp_path / "other")
    rng = random.Random(1)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(40)))
    (tmp_path / "corpus.txt").write_text("\n".join(corpus[:20] + ["", "  "] + corpus[20:]) + "\n", encoding="utf-8")
    (tmp_path / "queries.txt").write_text(f"{corpus[4]}\na dog in the park\nmusic\n", encoding="utf-8")
    rows = [{"anchor": _sentence(rng), "positive": corpus[i]} for i in range(0, 30, 2)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return tmp_path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _in_memory_search(w: Path, queries: list[str], top_k: int) -> str:
    """The whole file embedded as one list, torch.topk; the hits printed as `search --index` prints them (the id of
    a line of a .txt is its position among the non-blank lines)."""
    model, tokenizer = load_inference_model(str(w / "model"), None, None, None, device="cpu")
    corpus = [line.strip() for line in (w / "corpus.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    scores = model.similarity(
        model.encode(queries, tokenizer=tokenizer, batch_size=64), model.encode(corpus, tokenizer=tokenizer)
    )
    top = torch.topk(scores, k=min(top_k, len(corpus)), dim=1)
    lines = []
    for index, query in enumerate(queries):
        lines.append(f"\nQuery: {query}")
        for rank, (score, position) in enumerate(zip(top.values[index], top.indices[index], strict=True), start=1):
            lines.append(f"  {rank:>2}. {score.item():.4f}  [{int(position)}] {corpus[int(position)]}")
    return "\n".join(lines) + "\n"


def _same_output(out: str, expected: str) -> bool:
    """The same lines, but for the last digit of a score (float32 rounding differs between the two searches)."""
    got, wanted = out.splitlines(), expected.splitlines()
    if len(got) != len(wanted):
        return False
    for a, b in zip(got, wanted, strict=True):
        if a != b:
            (rank_a, score_a, text_a), (rank_b, score_b, text_b) = a.split(maxsplit=2), b.split(maxsplit=2)
            if (rank_a, text_a) != (rank_b, text_b) or abs(float(score_a) - float(score_b)) > 1.5e-4:
                return False
    return True


def test_search_corpus_ranks_as_an_in_memory_search(files: Path, capsys) -> None:
    w = files
    queries = (w / "queries.txt").read_text(encoding="utf-8").splitlines()
    expected = _in_memory_search(w, queries, 5)
    base = ["search", "--model", str(w / "model"), "--corpus", str(w / "corpus.txt")]
    base += ["--queries", str(w / "queries.txt")]
    code, out, err = _run(base, capsys)
    assert code == 0, err
    assert _same_output(out, expected)
    assert out.split(f"Query: {queries[0]}\n")[1].startswith("   1. 1.0000  ")  # a corpus line finds itself
    # --embeddings-dir keeps the shards; a second run reuses them (no shard rewritten) and prints the same
    kept = [*base, "--embeddings-dir", str(w / "shards"), "--shard-size", "8"]
    assert _run(kept, capsys)[1] == out
    shards = sorted((w / "shards").glob("shard-*.parquet"))
    assert len(shards) == 5
    stamps = [path.stat().st_mtime_ns for path in shards]
    assert _run([*base, "--embeddings-dir", str(w / "shards")], capsys)[1] == out  # its shard size is the folder's
    assert [path.stat().st_mtime_ns for path in shards] == stamps
    # top-k larger than the corpus: every line once
    code, out, _ = _run([*base, "--top-k", "99"], capsys)
    assert code == 0 and _same_output(out, _in_memory_search(w, queries, 99)) and out.count("  40. ") == 3


def test_search_corpus_through_an_approximate_index(files: Path, capsys) -> None:
    pytest.importorskip("faiss")
    w = files
    base = ["search", "--model", str(w / "model"), "--corpus", str(w / "corpus.txt"), "--query", "music"]
    expected = _run(base, capsys)[1]
    code, out, err = _run([*base, "--embeddings-dir", str(w / "shards"), "--approximate"], capsys)
    assert code == 0 and out == expected, err
    assert (w / "shards" / "ann" / "ann.json").is_file()


def test_mine_corpus_file_streams_and_reuses_its_folder(files: Path, tiny_tokenizer, capsys) -> None:
    w = files
    base = ["mine", str(w / "pairs.jsonl"), "--model", str(w / "model"), "--corpus", str(w / "corpus.txt")]
    code, out, err = _run([*base, "-o", str(w / "mined.jsonl"), "--num-negatives", "2", "--margin", "0"], capsys)
    assert code == 0, err
    mined = [json.loads(line) for line in (w / "mined.jsonl").read_text(encoding="utf-8").splitlines()]
    assert f"mined {len(mined)} of 15 rows" in out and len(mined) >= 5
    # the library's rows, with the model as the command loads it
    model, _ = load_inference_model(str(w / "model"), None, None, None, device="cpu")
    from datasets import Dataset

    pairs = Dataset.from_json(str(w / "pairs.jsonl"))
    corpus = [line.strip() for line in (w / "corpus.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    expected = mine_hard_negatives(pairs, model, corpus, num_negatives=2, margin=0.0, tokenizer=tiny_tokenizer)
    assert mined == expected.to_list()
    # --embeddings-dir: kept, reused by the next run (shards untouched), the same rows
    kept = [*base, "--num-negatives", "2", "--margin", "0", "--embeddings-dir", str(w / "shards"), "--shard-size", "16"]
    assert _run([*kept, "-o", str(w / "a.jsonl")], capsys)[0] == 0
    stamps = [path.stat().st_mtime_ns for path in sorted((w / "shards").glob("shard-*.parquet"))]
    assert len(stamps) == 3
    assert _run([*kept, "-o", str(w / "b.jsonl")], capsys)[0] == 0
    assert [path.stat().st_mtime_ns for path in sorted((w / "shards").glob("shard-*.parquet"))] == stamps
    assert (w / "a.jsonl").read_text() == (w / "b.jsonl").read_text() == (w / "mined.jsonl").read_text()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        # a shard folder made with another model: the difference named, in one line
        (["search", "--model", "{w}/other", "--corpus", "{w}/corpus.txt", "--query", "a", "--embeddings-dir", "{w}/s"],
         "made differently: model (same config, different weights)"),
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/other", "--corpus", "{w}/corpus.txt", "-o", "{w}/m.jsonl",
          "--embeddings-dir", "{w}/s"], "made differently: model (same config, different weights)"),
        # more negatives than the corpus holds; an empty corpus; a missing one
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/model", "--corpus", "{w}/corpus.txt", "-o", "{w}/m.jsonl",
          "--num-negatives", "40"], "num_negatives=40 but the corpus has only 40 distinct documents; at most 39"),
        (["mine", "{w}/pairs.jsonl", "--model", "{w}/model", "--corpus", "{w}/blank.txt", "-o", "{w}/m.jsonl"],
         "blank.txt: has no rows"),
        (["search", "--model", "{w}/model", "--corpus", "{w}/blank.txt", "--query", "a"], "blank.txt: has no rows"),
        (["search", "--model", "{w}/model", "--corpus", "{w}/missing.txt", "--query", "a"], "corpus file not found"),
        # an embeddings folder is not an index: said, with what searches it
        (["search", "--index", "{w}/s", "--query", "a"], "holds corpus embeddings"),
    ],
    ids=["search-other-model", "mine-other-model", "too-many-negatives", "mine-empty", "search-empty", "missing",
         "index-is-shards"],
)  # fmt: skip
def test_bad_input_is_one_clear_line(files: Path, capsys, argv: list[str], fragment: str) -> None:
    w = files
    (w / "blank.txt").write_text("\n \n", encoding="utf-8")
    assert main(["embed", str(w / "corpus.txt"), "--model", str(w / "model"), "-o", str(w / "s")]) == 0
    capsys.readouterr()
    code, _, err = _run([part.format(w=w) for part in argv], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("hf-siamese: error: "), err
    assert fragment in lines[0]
