"""Two stages on the command line: `search --index/--corpus --rerank CE_DIR` (the library's reranked hits, with their
first-stage rank), `eval BEIR --rerank` (first stage and reranked side by side), `rerank CANDIDATES_FILE` (printed or
written), and one stderr line for every bad input (a bi-encoder where a cross-encoder is expected included)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.retrieval.stores import load_index

HIT = re.compile(r"^ +(\d+)\. (\S+)  \[(.*?)\] (.*?)(?:  \(first stage: #(\d+)(?:, (\S+))?\))?$")


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(3, 8)))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A tiny bi-encoder, a tiny cross-encoder (scores spread by large initial weights), a corpus, its index, a BEIR
    folder over it and a candidates file."""
    root = tmp_path_factory.mktemp("rerank-cli")
    make_tiny_model().save_pretrained(root / "bi")
    tiny_tokenizer.save_pretrained(root / "bi")
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer).save_pretrained(root / "ce")
    rng = random.Random(4)
    corpus = list(dict.fromkeys(_sentence(rng) for _ in range(30)))[:12]
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    assert main(["index", str(root / "corpus.txt"), "--model", str(root / "bi"), "-o", str(root / "idx")]) == 0
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(corpus))
    )
    queries = {"q1": "music", "q2": "a dog in the park", "q3": "the market"}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\nq2\td7\t1\nq3\td9\t1\n")
    rows = [
        {"query": "music", "documents": corpus[:5]},
        {"query": "a dog in the park", "documents": corpus[5:8], "ids": ["x", "y", "z"]},
    ]
    (root / "candidates.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows) + "\n", encoding="utf-8")
    return root


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _hits(out: str) -> list[list[tuple]]:
    """Per query, (rank, score, id, text, first-stage rank, first-stage score) of every hit line."""
    queries: list[list[tuple]] = []
    for line in out.splitlines():
        if line.startswith("Query: "):
            queries.append([])
        elif (match := HIT.match(line)) is not None:
            queries[-1].append(match.groups())
    return queries


def test_search_rerank_prints_the_librarys_reranked_hits(files: Path, capsys, caplog, tiny_tokenizer) -> None:
    w = files
    query = ["--query", "music", "--query", "a dog in the park", "--top-k", "3"]
    code, out, err = _run(["search", "--index", w / "idx", *query, "--rerank", w / "ce", "--rerank-top", "8"], capsys)
    assert code == 0, err
    printed = _hits(out)
    index, ce = load_index(w / "idx"), CrossEncoder.from_pretrained(w / "ce")
    from hf_siamese import SiameseBertModel

    model = SiameseBertModel.from_pretrained(w / "bi")
    expected = index.search(model, ["music", "a dog in the park"], 3, tokenizer=tiny_tokenizer, rerank=ce, rerank_top=8)
    assert [[(int(h[0]), h[2], int(h[4])) for h in hits] for hits in printed] == [
        [(hit["rank"], str(hit["id"]), hit["first_stage_rank"]) for hit in hits] for hits in expected
    ]
    for hits, library in zip(printed, expected, strict=True):
        for hit, reference in zip(hits, library, strict=True):
            assert float(hit[1]) == pytest.approx(reference["score"], abs=2e-4)
            assert float(hit[5]) == pytest.approx(reference["first_stage_score"], abs=2e-4)
    # over the corpus file: the same reranked hits
    argv = [
        "search",
        "--corpus",
        w / "corpus.txt",
        "--model",
        w / "bi",
        *query,
        "--rerank",
        w / "ce",
        "--rerank-top",
        "8",
    ]
    code, by_corpus, err = _run(argv, capsys)
    assert code == 0, err
    assert [[h[2] for h in hits] for hits in _hits(by_corpus)] == [[h[2] for h in hits] for hits in printed]
    # more than the corpus holds: all reranked, with a warning
    caplog.clear()
    code, out, err = _run(["search", "--index", w / "idx", *query, "--rerank", w / "ce"], capsys)
    assert code == 0 and "rerank_top=100 is more than the 12 documents searched: reranking all 12" in caplog.text


def test_eval_rerank_prints_both_stages_side_by_side(files: Path, capsys) -> None:
    w = files
    code, plain, err = _run(["eval", w / "beir", "--model", w / "bi"], capsys)
    assert code == 0, err
    code, out, err = _run(["eval", w / "beir", "--model", w / "bi", "--rerank", w / "ce", "--rerank-top", "4"], capsys)
    assert code == 0, err
    assert f"reranked by {w / 'ce'}: the first stage's top 4 per query" in out
    assert re.search(r"metric +first stage +reranked +change", out)
    table = {line.split()[0]: line.split()[1:] for line in out.splitlines() if re.match(r"^[a-z]+@\d+ ", line)}
    assert len(table) == 25
    ndcg = next(line.split()[1:] for line in plain.splitlines() if line.startswith("ndcg "))
    assert [table[f"ndcg@{k}"][0] for k in (1, 3, 5, 10, 100)] == ndcg  # the first stage as plain eval prints it
    for first, second, change in table.values():
        assert float(change) == pytest.approx(float(second) - float(first), abs=0.011)
    assert table["recall@100"][0] == table["recall@100"][1]  # the same documents, reranked


def test_rerank_command_prints_or_writes_ranked_documents(files: Path, capsys, tmp_path: Path) -> None:
    w = files
    rows = [json.loads(line) for line in (w / "candidates.jsonl").read_text().splitlines() if line.strip()]
    ce = CrossEncoder.from_pretrained(w / "ce")
    code, out, err = _run(["rerank", w / "candidates.jsonl", "--model", w / "ce"], capsys)
    assert code == 0, err
    printed = _hits(out)
    assert [len(hits) for hits in printed] == [5, 3]
    for row, hits in zip(rows, printed, strict=True):
        ranked = ce.rank(row["query"], row["documents"])
        ids = row.get("ids") or list(range(len(row["documents"])))
        assert [h[2] for h in hits] == [str(ids[hit["corpus_id"]]) for hit in ranked]
        assert [int(h[4]) for h in hits] == [hit["corpus_id"] + 1 for hit in ranked]
        assert [float(h[1]) for h in hits] == pytest.approx([hit["score"] for hit in ranked], abs=2e-4)
    output = tmp_path / "out" / "ranked.jsonl"
    code, out, err = _run(["rerank", w / "candidates.jsonl", "--model", w / "ce", "-o", output, "--top-k", "2"], capsys)
    assert code == 0, err
    assert out == f"reranked 2 queries (8 pairs) with {w / 'ce'} -> {output}\n"
    written = [json.loads(line) for line in output.read_text().splitlines()]
    assert [row["query"] for row in written] == ["music", "a dog in the park"]
    assert [[str(hit["id"]) for hit in row["hits"]] for row in written] == [
        [h[2] for h in hits[:2]] for hits in printed
    ]
    assert set(written[0]["hits"][0]) == {"id", "text", "score", "rank", "first_stage_rank"}
    assert [hit["rank"] for hit in written[1]["hits"]] == [1, 2]


def test_bad_input_is_one_line(files: Path, capsys, tmp_path: Path) -> None:
    w = files

    def fails(argv: list, message: str) -> None:
        code, _, err = _run(argv, capsys)
        assert code != 0 and "Traceback" not in err, err
        assert message in err, err

    search = ["search", "--index", w / "idx", "--query", "music"]
    fails([*search, "--rerank", w / "bi"], "is a bi-encoder (a sentence-embedding model), not a cross-encoder")
    fails([*search, "--rerank", tmp_path / "nowhere"], f"--rerank {tmp_path / 'nowhere'}: no such folder")
    fails([*search, "--rerank-top", "10"], "--rerank-top applies with --rerank CE_DIR")
    fails([*search, "--top-k", "5", "--rerank", w / "ce", "--rerank-top", "3"], "--rerank-top 3 is below --top-k 5")
    fails([*search, "--rerank", w / "ce", "--rerank-top", "0"], "expected a positive integer, got '0'")
    fails(["eval", w / "beir", "--model", w / "bi", "--rerank", w / "bi"], "is a bi-encoder")
    fails(["eval", w / "beir", "--model", w / "bi", "--rerank-top", "5"], "--rerank-top applies with --rerank")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tscore\na dog\ta cat\t1.0\nmusic\tsong\t4.0\n")
    fails(["eval", pairs, "--model", w / "bi", "--rerank", w / "ce"], "apply to a BEIR folder")
    fails(["rerank", w / "candidates.jsonl", "--model", w / "bi"], "--model " + str(w / "bi") + ": ")
    fails(["rerank", w / "candidates.jsonl", "--model", w / "ce", "-o", tmp_path / "x.csv"], "must end in .jsonl")
    fails(["rerank", tmp_path / "missing.jsonl", "--model", w / "ce"], "missing.jsonl")
    good = json.dumps({"query": "music", "documents": ["a song"]})
    for line, message in (
        ("not json", "line 2: is not JSON Lines"),
        ('["music"]', "line 2: has a line that is not a JSON object"),
        (json.dumps({"query": "music", "documents": []}), "line 2: the query 'music' has no documents to rank"),
        (json.dumps({"query": "", "documents": ["a"]}), "line 2: \"query\" is ''; expected a non-empty string"),
        (json.dumps({"query": "m", "documents": "a song"}), 'line 2: "documents" is str; expected a list'),
        (json.dumps({"query": "m", "documents": ["a", 3]}), "line 2: documents[1] is 3; expected a string"),
        (json.dumps({"query": "m", "documents": ["a"], "ids": [1, 2]}), 'line 2: "ids" has 2 entries for 1'),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(good + "\n" + line + "\n", encoding="utf-8")
        fails(["rerank", bad, "--model", w / "ce"], message)
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    fails(["rerank", tmp_path / "empty.jsonl", "--model", w / "ce"], "no rows")
