"""Training the multi-vector model kind (`MultiVectorModel`) in `SiameseTrainer`: the collator tokenizes queries and
documents as `encode` does, each MaxSim loss trains a tiny random model (its loss falls), the cached loss's gradient
equals the plain one's, exact MaxSim search, `hf-siamese train --kind multi-vector` from a BEIR folder end to end, and
the refusals that keep each loss with its kind of model."""

from __future__ import annotations

import random
import re

import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from datasets import Dataset
from helpers import make_args, run_cli, scored_pairs, write_tiny_beir
from transformers import BertConfig, BertModel

from hf_siamese import MultiVectorConfig, MultiVectorModel, SiameseTrainer
from hf_siamese.losses import (
    CachedMultiVectorMultipleNegativesRankingLoss,
    MultiVectorMultipleNegativesRankingLoss,
    get_loss,
)
from hf_siamese.modeling.multivector_scoring import maxsim
from hf_siamese.training.multivector_collator import MultiVectorCollator

PROMPTS = {"query": "a ", "document": "the "}


def _model(tokenizer, **settings) -> MultiVectorModel:
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(**TINY, max_position_embeddings=64))
    settings = {
        "embedding_dim": 16, "query_expansion": "fixed", "query_expansion_length": 8, "query_length": 8,
        "query_expansion_token_id": tokenizer.mask_token_id, "prompts": PROMPTS,
        "skiplist_ids": [tokenizer.convert_tokens_to_ids(".")], **settings,
    }  # fmt: skip
    model = MultiVectorModel(MultiVectorConfig(encoder_config=encoder.config, **settings), encoder=encoder)
    model.tokenizer = tokenizer
    return model


def _rows(n: int = 16, negatives: int = 1, teacher: bool = False) -> Dataset:
    rng = random.Random(0)
    words = WORDS[:60]
    rows = []
    for _ in range(n):
        documents = [" ".join(rng.choice(words) for _ in range(8)) + " ." for _ in range(1 + negatives)]
        query = " ".join(documents[0].split()[:3])
        row = {"anchor": query, "positive": documents[0]}
        row |= {f"negative_{j}": d for j, d in enumerate(documents[1:], start=1)}
        if teacher:
            row["label"] = [2.0 * len(set(query.split()) & set(d.split())) for d in documents]
        rows.append(row)
    return Dataset.from_list(rows)


def test_the_collator_tokenizes_queries_and_documents_as_encode_does(tiny_tokenizer) -> None:
    model = _model(tiny_tokenizer).eval()
    rows = _rows(4).to_list()
    batch = MultiVectorCollator(tiny_tokenizer, model.config)(rows)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"} and batch["input_ids"].shape[:2] == (4, 3)
    query = model.tokenize([PROMPTS["query"] + rows[0]["anchor"]], tiny_tokenizer, "query")
    assert query["input_ids"].shape[1] == 8 and bool(query["expansion_mask"].any())  # expanded with [MASK]
    assert torch.equal(batch["input_ids"][0, 0, :8], query["input_ids"][0])
    document = model.tokenize([PROMPTS["document"] + rows[0]["positive"]], tiny_tokenizer, "document")
    assert torch.equal(batch["input_ids"][0, 1, : document["input_ids"].shape[1]], document["input_ids"][0])
    with torch.no_grad():
        output = model(**batch)
    encoded = model.encode([rows[0]["anchor"]], tiny_tokenizer, task="query")[0]
    torch.testing.assert_close(output.token_embeddings[0, 0][output.token_mask[0, 0]], encoded)
    encoded = model.encode([rows[0]["positive"]], tiny_tokenizer, task="document")[0]
    torch.testing.assert_close(output.token_embeddings[0, 1][output.token_mask[0, 1]], encoded)
    with pytest.raises(ValueError, match="rows of \\(query, positive\\[, negatives...\\]\\); the text columns are"):
        MultiVectorCollator(tiny_tokenizer, model.config)([{"text": "a dog"}])


def _batch_loss(model, loss, tokenizer, rows) -> float:
    batch = MultiVectorCollator(tokenizer, model.config)(rows.to_list())
    labels = batch.pop("labels", None)
    model.eval()
    with torch.no_grad():
        return float(loss.compute(model, batch, labels)[0])


@pytest.mark.parametrize(
    ("loss", "teacher"),
    [("maxsim_mnr", False), ("cached_maxsim_mnr", False), ("maxsim_margin_mse", True), ("maxsim_list_distill", True)],
)
def test_siamese_trainer_trains_a_multivector_model(tmp_path, tiny_tokenizer, loss, teacher) -> None:
    model = _model(tiny_tokenizer)
    rows = _rows(16, negatives=2 if teacher else 1, teacher=teacher)
    kwargs = {"mini_batch_size": 3} if loss.startswith("cached") else {}
    args = make_args(tmp_path, num_train_epochs=4, per_device_train_batch_size=8, learning_rate=2e-3)
    trainer = SiameseTrainer(
        model=model, args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss=get_loss(loss, **kwargs)
    )
    assert isinstance(trainer.data_collator, MultiVectorCollator)
    assert trainer.no_duplicates_sampler is (not teacher)
    before = _batch_loss(model, trainer.loss, tiny_tokenizer, rows)
    trainer.train()
    after = _batch_loss(model, trainer.loss, tiny_tokenizer, rows)
    assert after < before, (before, after)


def test_the_default_losses_of_a_multivector_model(tmp_path, tiny_tokenizer) -> None:
    from hf_siamese.losses import MultiVectorMarginMSELoss

    args = make_args(tmp_path, num_train_epochs=1)
    plain = SiameseTrainer(
        model=_model(tiny_tokenizer), args=args, train_dataset=_rows(), processing_class=tiny_tokenizer
    )
    assert type(plain.loss) is MultiVectorMultipleNegativesRankingLoss
    teacher = SiameseTrainer(
        model=_model(tiny_tokenizer), args=args, train_dataset=_rows(8, 2, True), processing_class=tiny_tokenizer
    )
    assert isinstance(teacher.loss, MultiVectorMarginMSELoss)


def test_the_cached_loss_gives_the_plain_losss_gradient(tiny_tokenizer) -> None:
    model = _model(tiny_tokenizer).eval()  # no dropout: both passes see the same network
    batch = MultiVectorCollator(tiny_tokenizer, model.config)(_rows(6).to_list())
    grads = []
    for loss in (MultiVectorMultipleNegativesRankingLoss(), CachedMultiVectorMultipleNegativesRankingLoss(2)):
        model.zero_grad()
        value, _ = loss.compute(model, batch, None)
        value.backward()
        grads.append((float(value.detach()), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (plain, plain_grads), (cached, cached_grads) = grads
    assert cached == pytest.approx(plain, rel=1e-5) and len(plain_grads) == len(cached_grads) > 0
    for a, b in zip(plain_grads, cached_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_each_loss_trains_its_own_kind(tmp_path, tiny_tokenizer) -> None:
    from hf_siamese.training.objective import MULTIVECTOR_ROW_LOSSES, ROW_LOSSES, choose_objective

    args = make_args(tmp_path, num_train_epochs=1)
    with pytest.raises(
        ValueError, match="MultipleNegativesRankingLoss trains dense embeddings; a MultiVectorModel trains"
    ):
        SiameseTrainer(model=_model(tiny_tokenizer), args=args, train_dataset=_rows(), processing_class=tiny_tokenizer,
                       loss="mnr")  # fmt: skip
    with pytest.raises(ValueError, match="trains token vectors scored by MaxSim .*this model is a SiameseBertModel"):
        SiameseTrainer(model=make_tiny_model(), args=args, train_dataset=_rows(), processing_class=tiny_tokenizer,
                       loss="maxsim_mnr")  # fmt: skip
    with pytest.raises(ValueError, match="a multi-vector model trains on rows of \\(query, positive"):
        SiameseTrainer(model=_model(tiny_tokenizer), args=args, train_dataset=scored_pairs(8),
                       processing_class=tiny_tokenizer)  # fmt: skip
    assert not set(MULTIVECTOR_ROW_LOSSES) & set(ROW_LOSSES)
    rows = _rows(4, 2, teacher=True)
    chosen = choose_objective(rows, kind="multi-vector", margin_scale=2.0)
    assert chosen.loss_name == "maxsim_margin_mse" and chosen.loss.scale == 2.0
    assert choose_objective(_rows(4), kind="multi-vector", gather_across_processes=True).loss.gather_across_processes
    for loss, kind, fragment in (
        ("margin_mse", "multi-vector", "loss margin_mse: margin_mse train(s) a dense model; a multi-vector model "
         "trains on rows with one of maxsim_mnr, maxsim_margin_mse, maxsim_list_distill, cached_maxsim_mnr"),
        ("sparse_mnr", "multi-vector", "sparse_mnr train(s) a sparse model"),
        ("maxsim_mnr+maxsim_margin_mse", "multi-vector", "multi-vector losses are not combined"),
        ("maxsim_mnr", "dense", "loss maxsim_mnr: maxsim_mnr train(s) a multi-vector model (MultiVectorModel), not a "
         "dense one"),
        ("maxsim_mnr", "sparse", "loss maxsim_mnr: maxsim_mnr train(s) a multi-vector model; a sparse model"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(fragment)):
            choose_objective(rows, loss=loss, kind=kind, source="rows")
    with pytest.raises(ValueError, match="kind='colbert'; accepted: dense, sparse, multi-vector"):
        choose_objective(rows, kind="colbert")


def test_maxsim_search_ranks_by_exact_maxsim() -> None:
    from hf_siamese.retrieval.ranking.maxsim import maxsim_search

    generator = torch.Generator().manual_seed(0)
    queries = [torch.randn(n, 4, generator=generator) for n in (2, 3, 1)]
    corpus = [torch.randn(n, 4, generator=generator) for n in (5, 1, 3, 2, 4, 2, 3)]
    corpus.append(corpus[2].clone())  # a tie: the lower row first
    scores, rows = maxsim_search(queries, corpus, 4)
    for i, query in enumerate(queries):
        full = torch.stack([maxsim(query, None, doc, None)[0, 0] for doc in corpus])
        order = sorted(range(len(corpus)), key=lambda j: (-float(full[j]), j))[:4]
        assert rows[i].tolist() == order
        torch.testing.assert_close(torch.from_numpy(scores[i]), full[order])
    with pytest.raises(ValueError, match="top_k=0: expected a positive int"):
        maxsim_search(queries, corpus, 0)


@pytest.fixture
def beir_and_encoder(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY, max_position_embeddings=64)).save_pretrained(tmp_path / "enc")
    tiny_tokenizer.save_pretrained(tmp_path / "enc")
    return tmp_path / "enc", write_tiny_beir(tmp_path / "beir", WORDS[:60])


def test_train_kind_multivector_from_a_beir_folder(beir_and_encoder, tmp_path, capsys) -> None:
    from transformers import AutoModel

    encoder, beir = beir_and_encoder
    argv = ["train", "--kind", "multi-vector", "--model", encoder, "--train", beir, "--eval", beir]
    argv += ["--eval-split", "test", "--batch-size", "4"]
    code, out, err = run_cli([*argv, "--output-dir", tmp_path / "out"], capsys)
    assert code == 0, err
    # From a BEIR folder it mines one hybrid negative a row and trains two epochs unless told (chosen on held-out
    # SciFact claims): by its encoder as a dense model fused with BM25 (MaxSim over a corpus is the slow stage).
    assert "(train split) + 1 hard negatives (hybrid)" in out and "recipe plain: 2 epoch(s)" in out, out
    assert "loss MultiVectorMultipleNegativesRankingLoss" in out
    assert "nDCG@10 x100 on" in out and "before training" in out
    model = AutoModel.from_pretrained(tmp_path / "out", trust_remote_code=True)
    assert model.config.model_type == "siamese-multivector" and model.config.query_expansion == "fixed"
    vectors = model.encode(["a dog plays"], task="query")[0]
    assert vectors.shape == (32, 128)  # ColBERT's defaults: 32 query tokens (expanded), 128 dims
    code, out, err = run_cli([*argv, "--hard-negatives", "0", "--epochs", "1", "--output-dir", tmp_path / "hn"], capsys)
    assert code == 0 and "(train split) (14 rows), loss MultiVectorMultipleNegativesRankingLoss" in out, err
    assert "recipe plain: 1 epoch(s)" in out
    for bad, fragment in (
        (["--pooling", "cls"], "--pooling set(s) a dense model; --kind multi-vector trains token vectors"),
        (["--loss", "mnr"], "--loss mnr: mnr train(s) a dense model; a multi-vector model trains on"),
        (["--loss", "colbert"], "invalid choice: 'colbert'"),
    ):
        code, _, err = run_cli([*argv, "--output-dir", tmp_path / "bad", *bad], capsys)
        assert code != 0 and fragment in err, err
