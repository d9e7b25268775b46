"""Retrieval sets: the BEIR reader, bad input, and IR metrics in SiameseTrainer's evaluation (keys, best checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SENTENCES, make_tiny_model
from datasets import Dataset
from transformers import TrainingArguments

from hf_siamese import SiameseTrainer
from hf_siamese.data import RetrievalDataset, read_beir
from hf_siamese.evaluation.retrieval import evaluate_retrieval

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "retrieval" / "scifact"


def write_beir(folder: Path, qrels_lines: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [
        {"_id": f"d{i}", "title": "the weather" if i == 0 else "", "text": text} for i, text in enumerate(SENTENCES)
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus))
    queries = [{"_id": "q1", "text": "a man plays music"}, {"_id": "q2", "text": "the dog"}, {"_id": "q3", "text": "x"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries))
    (folder / "qrels").mkdir(exist_ok=True)
    lines = qrels_lines or ["query-id\tcorpus-id\tscore", "q1\td0\t1", "q1\td1\t2", "q2\td3\t1"]
    (folder / "qrels" / "test.tsv").write_bytes(("\r\n".join(lines) + "\r\n").encode())  # header, CRLF as BEIR's
    return folder


def test_read_beir(tmp_path: Path) -> None:
    data = read_beir(write_beir(tmp_path / "tiny"))
    assert data.queries == {"q1": "a man plays music", "q2": "the dog"}  # q3 is not judged in this split
    assert data.corpus["d0"] == "the weather " + SENTENCES[0] and data.corpus["d1"] == SENTENCES[1]
    assert data.qrels == {"q1": {"d0": 1, "d1": 2}, "q2": {"d3": 1}}
    assert data.name == "tiny/test" and len(data) == 2


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/data is not present")
def test_read_beir_scifact() -> None:
    data = read_beir(SCIFACT, split="test")
    assert (len(data.corpus), len(data.queries), sum(map(len, data.qrels.values()))) == (5183, 300, 339)


def test_read_beir_errors(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny")
    with pytest.raises(FileNotFoundError, match=r"qrels/dev\.tsv not found \(splits found: \['test'\]\)"):
        read_beir(folder, split="dev")
    write_beir(folder, ["query-id\tcorpus-id\tscore", "q1\td0\tvery"])
    with pytest.raises(ValueError, match=r"test\.tsv line 2: .*not query-id, corpus-id, int score"):
        read_beir(folder)
    write_beir(folder, ["query-id\tcorpus-id\tscore", "q1\td0\t1", "q1\tmissing\t1", "q2\tgone\t1"])
    with pytest.raises(ValueError, match=r"qrels name 2 document id\(s\) that are not in the document set"):
        read_beir(folder)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"corpus": {}}, r"the corpus is empty"),
        ({"qrels": {"q9": {"d0": 1}}}, r"qrels name 1 query id\(s\) that are not in the query set, e.g. \['q9'\]"),
        ({"qrels": {"q1": {"d0": -1}}}, r"qrels\['q1'\]\['d0'\] = -1; relevance must be an int >= 0"),
        ({"k_values": [10, 0]}, r"k_values=\[10, 0\] must be positive ints"),
    ],
)
def test_retrieval_dataset_bad_input(kwargs: dict, message: str) -> None:
    fields = {"queries": {"q1": "the dog"}, "corpus": {"d0": "a dog"}, "qrels": {"q1": {"d0": 1}}, **kwargs}
    with pytest.raises(ValueError, match=message):
        RetrievalDataset(**fields)


def make_trainer(tmp_path: Path, tokenizer, retrieval: RetrievalDataset, **args) -> SiameseTrainer:
    rows = Dataset.from_dict({"anchor": SENTENCES, "positive": SENTENCES[1:] + SENTENCES[:1]})
    scored = Dataset.from_dict(
        {"sentence1": SENTENCES, "sentence2": SENTENCES[::-1], "score": [0.1, 0.5, 0.9, 0.3, 0.7]}
    )
    arguments = TrainingArguments(str(tmp_path), use_cpu=True, report_to=[], per_device_train_batch_size=5, **args)
    return SiameseTrainer(
        model=make_tiny_model(),
        args=arguments,
        train_dataset=rows,
        eval_dataset={"tiny": retrieval, "sts": scored},
        processing_class=tokenizer,
        loss="mnr",
    )


def test_trainer_reports_ir_metrics_next_to_sts(tmp_path: Path, tiny_tokenizer) -> None:
    retrieval = read_beir(write_beir(tmp_path / "tiny"))
    trainer = make_trainer(tmp_path / "run", tiny_tokenizer, retrieval)
    metrics = trainer.evaluate()
    for key in ("ndcg@10", "mrr@10", "recall@100", "map@10", "precision@1"):
        assert f"eval_tiny_{key}" in metrics
    assert "eval_sts_spearman_cosine" in metrics
    direct = evaluate_retrieval(trainer.model, retrieval, tokenizer=tiny_tokenizer)
    assert metrics["eval_tiny_ndcg@10"] == pytest.approx(direct["ndcg@10"])
    assert metrics["eval_tiny_recall@100"] == pytest.approx(1.0)  # 5 documents: everything is in the top 100


def test_best_checkpoint_by_ndcg(tmp_path: Path, tiny_tokenizer) -> None:
    retrieval = read_beir(write_beir(tmp_path / "tiny"))
    trainer = make_trainer(
        tmp_path / "run", tiny_tokenizer, retrieval, max_steps=4, learning_rate=5e-3, eval_strategy="steps",
        eval_steps=1, save_strategy="steps", save_steps=1, metric_for_best_model="tiny_ndcg@10",
        load_best_model_at_end=True, greater_is_better=True,
    )  # fmt: skip
    trainer.train()
    logged = [(e["step"], e["eval_tiny_ndcg@10"]) for e in trainer.state.log_history if "eval_tiny_ndcg@10" in e]
    assert len(logged) == 4
    best_step, best = max(logged, key=lambda entry: (entry[1], -entry[0]))
    assert trainer.state.best_metric == pytest.approx(best)
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best_step}")


def test_retrieval_evaluator_is_evaluate_retrieval(tmp_path: Path, tiny_tokenizer) -> None:
    import numpy as np

    from hf_siamese.evaluation.retrieval import RetrievalEvaluator

    retrieval = read_beir(write_beir(tmp_path / "tiny"))
    model = make_tiny_model()
    evaluator = RetrievalEvaluator(retrieval, tokenizer=tiny_tokenizer, percent=True)
    assert evaluator.primary_metric == "ndcg@10" and len(evaluator) == 2
    metrics = evaluator(model)
    assert metrics == evaluate_retrieval(model, retrieval, tokenizer=tiny_tokenizer, percent=True)

    class Lengths:  # a reranker: longer documents first
        def predict(self, pairs, batch_size=32, show_progress_bar=False):
            return np.array([len(document) for _, document in pairs], dtype=np.float32)

    two = RetrievalEvaluator(retrieval, tokenizer=tiny_tokenizer, rerank=Lengths(), rerank_top=3, name="two")
    assert two.primary_metric == "rerank_ndcg@10"
    reranked = two(model)
    assert reranked["rerank_top"] == 3 and reranked["ndcg@10"] == pytest.approx(metrics["ndcg@10"] / 100)
    with pytest.raises(ValueError, match="give a model, or first_stage='lexical'"):
        evaluator(None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rerank_depth'"):
        evaluate_retrieval(model, retrieval, rerank_depth=3)
