"""Training the sparse model kind (issue 61 item 2, part): the sparse in-batch-negatives loss with the FLOPS
regulariser and its warm-up, in `SiameseTrainer` (the same machinery as the dense models), SPLADE and inference-free;
the refusals that keep each loss with its kind of model."""

from __future__ import annotations

import random
import re

import pytest
import torch
from conftest import TINY, WORDS, make_tiny_model
from datasets import Dataset
from helpers import make_args, run_cli, scored_pairs, write_tiny_beir
from transformers import BertConfig, BertForMaskedLM

from hf_siamese import SiameseTrainer, SparseSiameseConfig, SparseSiameseModel
from hf_siamese.losses import SparseMultipleNegativesRankingLoss, get_loss
from hf_siamese.losses.sparse import flops
from hf_siamese.modeling.modeling_sparse import SparseSiameseOutput


def _sparse(architecture: str = "splade") -> SparseSiameseModel:
    torch.manual_seed(0)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    config = SparseSiameseConfig(encoder_config=encoder.config, architecture=architecture, query_ignore_ids=[0, 2, 3])
    return SparseSiameseModel(config, encoder=encoder)


def _rows(n: int = 24, negatives: bool = True) -> Dataset:
    rng = random.Random(0)
    words = WORDS[:60]
    rows = []
    for _ in range(n):
        doc = " ".join(rng.choice(words) for _ in range(8))
        row = {"anchor": " ".join(doc.split()[:3]), "positive": doc}
        if negatives:
            row["negative"] = " ".join(rng.choice(words) for _ in range(8))
        rows.append(row)
    return Dataset.from_list(rows)


def test_the_loss_is_cross_entropy_of_dot_scores_plus_warmed_up_flops() -> None:
    torch.manual_seed(1)
    vectors = torch.relu(torch.randn(4, 3, 50))
    loss = SparseMultipleNegativesRankingLoss(query_regularizer=0.2, document_regularizer=0.1, warmup_ratio=0.5)
    queries, documents = vectors[:, 0], torch.cat([vectors[:, 1], vectors[:, 2]])
    ranking = torch.nn.functional.cross_entropy(queries @ documents.T, torch.arange(4))
    for step, factor in ((0, 0.0), (25, 0.25), (50, 1.0), (90, 1.0)):
        loss.set_progress(step, 100)
        expected = ranking + factor * (0.1 * flops(documents) + 0.2 * flops(queries))
        torch.testing.assert_close(loss(SparseSiameseOutput(sentence_embedding=vectors)), expected)
    assert float(flops(torch.tensor([[1.0, 0.0], [3.0, 0.0]]))) == 4.0  # (mean 2)^2 + 0


@pytest.mark.parametrize("architecture", ["splade", "inference_free"])
def test_siamese_trainer_trains_a_sparse_model(tmp_path, tiny_tokenizer, architecture) -> None:
    model = _sparse(architecture).train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = make_args(tmp_path, num_train_epochs=2, per_device_train_batch_size=8, learning_rate=1e-3)
    trainer = SiameseTrainer(model=model, args=args, train_dataset=_rows(), processing_class=tiny_tokenizer)
    assert isinstance(trainer.loss, SparseMultipleNegativesRankingLoss) and trainer.no_duplicates_sampler
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    changed = [name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())]
    assert any(name.startswith("encoder.") for name in changed)
    assert ("query_weights" in changed) is (architecture == "inference_free")
    assert trainer.loss.progress == pytest.approx(5 / 6)  # told its progress every step: the regulariser warmed up


def test_each_loss_trains_its_own_kind(tmp_path, tiny_tokenizer) -> None:
    args = make_args(tmp_path, num_train_epochs=1)
    with pytest.raises(ValueError, match="a SparseSiameseModel trains with 'sparse_mnr'"):
        SiameseTrainer(model=_sparse(), args=args, train_dataset=_rows(), processing_class=tiny_tokenizer, loss="mnr")
    with pytest.raises(ValueError, match="trains sparse vectors .*this model is a SiameseBertModel: use 'mnr'"):
        SiameseTrainer(
            model=make_tiny_model(), args=args, train_dataset=_rows(), processing_class=tiny_tokenizer,
            loss="sparse_mnr",
        )  # fmt: skip
    with pytest.raises(ValueError, match="a sparse model trains on rows of \\(query, positive"):
        SiameseTrainer(model=_sparse(), args=args, train_dataset=scored_pairs(8), processing_class=tiny_tokenizer)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("scale", 0.0), ("query_regularizer", -1.0), ("document_regularizer", float("inf")), ("warmup_ratio", 2.0)],
)
def test_bad_loss_settings_are_refused_by_name(setting, value) -> None:
    with pytest.raises(ValueError, match=f"SparseMultipleNegativesRankingLoss: {setting}="):
        get_loss("sparse_mnr", **{setting: value})


@pytest.fixture
def beir_and_encoder(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64)).save_pretrained(tmp_path / "enc")
    tiny_tokenizer.save_pretrained(tmp_path / "enc")
    return tmp_path / "enc", write_tiny_beir(tmp_path / "beir", WORDS[:60])


def test_train_kind_sparse_from_a_beir_folder(beir_and_encoder, tmp_path, capsys) -> None:
    from transformers import AutoModel

    encoder, beir = beir_and_encoder
    argv = ["train", "--kind", "sparse", "--model", encoder, "--train", beir, "--eval", beir, "--eval-split", "test"]
    code, out, err = run_cli([*argv, "--output-dir", tmp_path / "out", "--batch-size", "4"], capsys)
    assert code == 0, err
    # A sparse model from a BEIR folder mines one hybrid negative a row unless told (KIND_HARD_NEGATIVES).
    assert "(train split) + 1 hard negatives (hybrid)" in out and "loss SparseMultipleNegativesRankingLoss" in out
    assert "nDCG@10 x100 on" in out and "before training" in out
    model = AutoModel.from_pretrained(tmp_path / "out")
    assert isinstance(model, SparseSiameseModel) and model.config.architecture == "splade"
    card = (tmp_path / "out" / "README.md").read_text()
    assert "sparse encoder: learned term weights" in card and "SentenceTransformer(" not in card
    for bad, fragment in (
        (["--pooling", "cls"], "--pooling set(s) a dense model; --kind sparse trains SPLADE term weights"),
        (["--loss", "mnr"], "--loss mnr: mnr train(s) a dense model; a sparse model trains on"),
    ):
        code, _, err = run_cli([*argv, "--output-dir", tmp_path / "bad", *bad], capsys)
        assert code == 1 and fragment in err.splitlines()[-1], err


def test_train_mines_hard_negatives_from_a_beir_folder(beir_and_encoder, tmp_path, capsys) -> None:
    encoder, beir = beir_and_encoder
    argv = ["train", "--model", encoder, "--train", beir, "--eval", beir, "--eval-split", "test", "--batch-size", "4"]
    code, out, err = run_cli(
        [*argv, "--kind", "sparse", "--hard-negatives", "2", "--output-dir", tmp_path / "sp"], capsys
    )
    assert code == 0, err
    assert "(train split) + 2 hard negatives (hybrid)" in out and "loss SparseMultipleNegativesRankingLoss" in out
    code, out, err = run_cli(
        [*argv, "--hard-negatives", "1", "--negatives-from", "lexical", "--output-dir", tmp_path / "dense"], capsys
    )
    assert code == 0 and "+ 1 hard negatives (lexical)" in out, err
    code, out, err = run_cli(
        [*argv, "--kind", "sparse", "--hard-negatives", "0", "--output-dir", tmp_path / "none"], capsys
    )
    assert code == 0 and "(train split) (14 rows), loss SparseMultipleNegativesRankingLoss" in out, err
    (tmp_path / "pairs.jsonl").write_text('{"anchor": "a dog", "positive": "a cat"}\n' * 4)
    for bad, fragment in (
        (["--negatives-from", "lexical"], "--negatives-from lexical ranks mined negatives: give --hard-negatives N"),
        (["--kind", "multi-vector", "--hard-negatives", "1", "--negatives-from", "sparse"], "mines with its encoder"),
        (["--hard-negatives", "-1"], "--hard-negatives"),
        (["--hard-negatives", "0", "--negatives-from", "dense"], "give --hard-negatives N"),
    ):
        code, _, err = run_cli([*argv, "--output-dir", tmp_path / "bad", *bad], capsys)
        assert code != 0 and fragment in err.splitlines()[-1], (bad, err)
    code, _, err = run_cli(
        ["train", "--model", encoder, "--train", tmp_path / "pairs.jsonl", "--hard-negatives", "1",
         "--output-dir", tmp_path / "bad"], capsys,
    )  # fmt: skip
    assert code == 1 and "mines from a BEIR folder's corpus" in err.splitlines()[-1], err


def _csr_model(normalize: bool = False) -> SparseSiameseModel:
    torch.manual_seed(0)
    return SparseSiameseModel.from_dense(make_tiny_model(), hidden_dim=64, k=4, k_aux=8, normalize=normalize)


@pytest.mark.parametrize("normalize", [False, True])
def test_the_csr_loss_is_reconstruction_plus_ranking(tiny_tokenizer, normalize) -> None:
    import torch.nn.functional as F

    from hf_siamese.losses import CSRLoss
    from hf_siamese.losses.sparse import nmse
    from hf_siamese.training.collator import SiamesePairCollator

    model = _csr_model(normalize).train()
    torch.manual_seed(3)
    batch = SiamesePairCollator(tiny_tokenizer)(_rows(4).to_list())
    loss = CSRLoss(beta=0.5, gamma=2.0, dead_threshold=0)  # every latent counts as dead: the aux term runs
    got, output = loss.compute(model, batch, None)
    ae = model.autoencoder
    codes, dense, pre = output.sentence_embedding, output.dense_embedding, output.pre_activation
    flat_codes, flat_pre = codes.reshape(-1, 64), pre.reshape(-1, 64)
    target, _ = ae.standardise(dense.reshape(-1, dense.shape[-1]))
    recon_k = flat_codes @ ae.encoder.weight + ae.pre_bias
    recon_4k = ae.codes(flat_pre, 16) @ ae.encoder.weight + ae.pre_bias
    aux = ae.codes(flat_pre, 8) @ ae.encoder.weight
    queries, documents = codes[:, 0], torch.cat([codes[:, 1], codes[:, 2]])
    expected = (
        F.mse_loss(recon_k, target) + F.mse_loss(recon_4k, target) / 8
        + 0.5 * nmse(aux, target - recon_k.detach())
        + 2.0 * F.cross_entropy(queries @ documents.T, torch.arange(4))
    )  # fmt: skip
    torch.testing.assert_close(got, expected)
    assert loss.inactive_steps is not None and loss.inactive_steps.shape == (64,)


def test_siamese_trainer_trains_a_csr_model_with_its_loss(tmp_path, tiny_tokenizer) -> None:
    from hf_siamese.losses import CSRLoss

    model = _csr_model().train()
    before = model.autoencoder.encoder.weight.detach().clone()
    args = make_args(tmp_path, num_train_epochs=1, per_device_train_batch_size=8, learning_rate=1e-3)
    trainer = SiameseTrainer(model=model, args=args, train_dataset=_rows(), processing_class=tiny_tokenizer)
    assert isinstance(trainer.loss, CSRLoss)  # a CSR model's default
    trainer.train()
    assert not torch.equal(before, model.autoencoder.encoder.weight.detach())
    with pytest.raises(ValueError, match="CSRLoss trains a CSR model .*use 'sparse_mnr' for it"):
        CSRLoss().compute(_sparse(), {"input_ids": torch.tensor([[[2, 5, 3], [2, 6, 3]]])}, None)
    with pytest.raises(ValueError, match="CSRLoss: beta=-1"):
        get_loss("csr", beta=-1)


# ------------------------------------------------------------------------------ distillation: a teacher's scores


def _teacher_rows(n: int = 16) -> Dataset:
    """(anchor, positive, negative_1, negative_2) rows with a lexical teacher's scores (positive first), as `mine
    --teacher` writes them."""
    rng = random.Random(1)
    rows = []
    for _ in range(n):
        documents = [" ".join(rng.choice(WORDS[:60]) for _ in range(8)) for _ in range(3)]
        anchor = " ".join(documents[0].split()[:3])
        label = [2.0 * len(set(anchor.split()) & set(d.split())) for d in documents]
        rows.append(dict(zip(("anchor", "positive", "negative_1", "negative_2"), [anchor, *documents], strict=True)))
        rows[-1]["label"] = label
    return Dataset.from_list(rows)


def test_choose_objective_for_a_sparse_model_on_teacher_scores() -> None:
    from hf_siamese.losses import SparseListDistillationLoss, SparseMarginMSELoss
    from hf_siamese.training.objective import SPARSE_ROW_LOSSES, choose_objective
    from hf_siamese.training.trainer_data import default_loss

    assert SPARSE_ROW_LOSSES == ("sparse_mnr", "sparse_margin_mse", "sparse_list_distill")
    assert default_loss([1.0, 0.5], sparse=True) == "sparse_margin_mse" and default_loss(None, True) == "sparse_mnr"
    rows = _teacher_rows(4)
    chosen = choose_objective(rows, sparse=True, margin_scale=2.0)
    assert chosen.loss_name == "sparse_margin_mse" and isinstance(chosen.loss, SparseMarginMSELoss)
    assert chosen.loss.scale == 2.0
    listwise = choose_objective(rows, loss="sparse_list_distill", sparse=True)
    assert isinstance(listwise.loss, SparseListDistillationLoss)
    for loss, fragment in (
        ("margin_mse", "loss margin_mse: margin_mse train(s) a dense model; a sparse model trains on rows with one of "
         "sparse_mnr, sparse_margin_mse, sparse_list_distill"),
        ("sparse_mnr+sparse_margin_mse", "sparse losses are not combined"),
        ("csr", "loss csr: csr train(s) a dense model"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(fragment)):
            choose_objective(rows, loss=loss, sparse=True, source="rows")
    with pytest.raises(ValueError, match="loss sparse_margin_mse: sparse_margin_mse train\\(s\\) a sparse model"):
        choose_objective(rows, loss="sparse_margin_mse")
    with pytest.raises(ValueError, match="margin_scale applies to loss sparse_margin_mse, not sparse_list_distill"):
        choose_objective(rows, loss="sparse_list_distill", sparse=True, margin_scale=2.0)
    with pytest.raises(ValueError, match="sparse_margin_mse needs a score column"):
        choose_objective(_rows(4), loss="sparse_margin_mse", sparse=True)


def test_siamese_trainer_refuses_a_dense_distillation_loss_on_a_sparse_model(tmp_path, tiny_tokenizer) -> None:
    args = make_args(tmp_path, num_train_epochs=1)
    with pytest.raises(ValueError, match="MarginMSELoss trains dense embeddings; .*'sparse_margin_mse'"):
        SiameseTrainer(
            model=_sparse(), args=args, train_dataset=_teacher_rows(8), processing_class=tiny_tokenizer,
            loss="margin_mse",
        )  # fmt: skip


def test_train_kind_sparse_on_teacher_scores(beir_and_encoder, tmp_path, capsys) -> None:
    from hf_siamese.storage import write_rows

    encoder, _ = beir_and_encoder
    write_rows(tmp_path / "rows.jsonl", _teacher_rows())
    argv = ["train", "--kind", "sparse", "--model", encoder, "--train", tmp_path / "rows.jsonl", "--batch-size", "4"]
    for extra, loss in (
        (["--loss", "sparse_margin_mse"], "SparseMarginMSELoss"),
        ([], "SparseMarginMSELoss"),  # the default on score lists
    ):
        code, out, err = run_cli([*argv, "--output-dir", tmp_path / f"out{len(extra)}{loss}", *extra], capsys)
        assert code == 0, err
        assert f"(16 rows), loss {loss}" in out
    code, _, err = run_cli([*argv, "--output-dir", tmp_path / "bad", "--loss", "margin_mse"], capsys)
    assert code == 1 and "--loss margin_mse: margin_mse train(s) a dense model" in err, err
    assert "one of sparse_mnr, sparse_margin_mse, sparse_list_distill" in err
    dense = ["train", "--model", encoder, "--train", tmp_path / "rows.jsonl", "--output-dir", tmp_path / "dense"]
    code, _, err = run_cli([*dense, "--loss", "sparse_margin_mse"], capsys)
    assert code == 1 and "sparse_margin_mse train(s) a sparse model (SparseSiameseModel), not a dense one" in err
