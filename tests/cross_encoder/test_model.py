"""CrossEncoder: scores equal transformers' own forward, the saved layout loads in transformers and
sentence-transformers with the same scores, the truncation rule, ranking, and bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, VOCAB, make_tiny_model
from helpers import SCORED_PAIRS
from transformers import (
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    BertTokenizer,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from hf_siamese.cross_encoder import CrossEncoder, model_kind, tokenize_pairs
from hf_siamese.cross_encoder.tokenization import MIN_DOCUMENT_TOKENS

PAIRS = SCORED_PAIRS


def tiny_cross_encoder(tokenizer, num_labels: int = 1, seed: int = 0, **kwargs) -> CrossEncoder:
    torch.manual_seed(seed)
    model = BertForSequenceClassification(BertConfig(**TINY, max_position_embeddings=64, num_labels=num_labels))
    return CrossEncoder(model.eval(), tokenizer, **kwargs)


def reference_logits(model, tokenizer, pairs, max_length=64) -> torch.Tensor:
    """transformers' own padded forward, one pair at a time (no batching, no sorting, no dedup)."""
    rows = []
    with torch.no_grad():
        for query, document in pairs:
            inputs = tokenizer(
                [query], [document], truncation="only_second", max_length=max_length, return_tensors="pt"
            )
            rows.append(model(**inputs).logits[0].float())
    return torch.stack(rows)


def test_predict_equals_the_models_own_forward(tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer)
    expected = torch.sigmoid(reference_logits(ce.model, tiny_tokenizer, PAIRS))[:, 0].numpy()
    scores = ce.predict(PAIRS, batch_size=2, dtype=None)
    assert scores.dtype == np.float32 and scores.shape == (len(PAIRS),)
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    raw = ce.predict(PAIRS, activation=False, dtype=None)
    np.testing.assert_allclose(raw, reference_logits(ce.model, tiny_tokenizer, PAIRS)[:, 0].numpy(), atol=1e-5)
    assert float(ce.predict(PAIRS[0], dtype=None)) == pytest.approx(float(scores[0]), abs=1e-6)  # one pair
    assert ce.predict([], dtype=None).shape == (0,)


def test_bfloat16_keeps_the_head_in_float32(tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer)
    full = ce.predict(PAIRS, activation=False, dtype=None)
    low = ce.predict(PAIRS, activation=False, dtype=torch.bfloat16, batch_size=1)
    assert low.dtype == np.float32
    np.testing.assert_allclose(low, full, atol=0.05)
    # a float32 head over bfloat16 states: logits are not rounded to bfloat16's 8-bit mantissa
    assert any(float(v) != float(torch.tensor(v).to(torch.bfloat16).float()) for v in low)


def test_several_labels_give_rows_of_logits(tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer, num_labels=3)
    assert ce.activation == "identity"
    scores = ce.predict(PAIRS, dtype=None)
    assert scores.shape == (len(PAIRS), 3)
    np.testing.assert_allclose(scores, reference_logits(ce.model, tiny_tokenizer, PAIRS).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="one-output"):
        ce.rank("a man", ["someone plays music ."])


def test_rank_orders_by_score_and_names_bad_input(tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer)
    documents = [document for _, document in PAIRS[:3]]
    scores = ce.predict([("a man plays guitar", d) for d in documents], dtype=None)
    ranked = ce.rank("a man plays guitar", documents, top_k=2, return_documents=True, dtype=None)
    assert [hit["corpus_id"] for hit in ranked] == list(np.argsort(-scores)[:2])
    assert ranked[0]["text"] == documents[ranked[0]["corpus_id"]]
    assert ranked[0]["score"] >= ranked[1]["score"]
    with pytest.raises(ValueError, match="has no candidate documents"):
        ce.rank("a man", [])
    with pytest.raises(ValueError, match="top_k=0"):
        ce.rank("a man", documents, top_k=0)
    with pytest.raises(ValueError, match=r"the document of pair 1 is int 7; expected str"):
        ce.predict([("a", "b"), ("a", 7)])
    with pytest.raises(ValueError, match=r"pairs\[0\] is 'ab': expected a \(query, document\) pair"):
        ce.predict(["ab"])
    with pytest.raises(ValueError, match="activation='softmax'"):
        ce.predict(PAIRS, activation="softmax")


def test_max_length_past_the_position_table_is_refused_naming_the_limit(tiny_tokenizer) -> None:
    """A pair longer than the encoder's position table would index past it: refused, naming max_length, the value
    and the limit (max_position_embeddings, less RoBERTa's offset); the default never exceeds it."""
    ce = tiny_cross_encoder(tiny_tokenizer)
    with pytest.raises(ValueError) as refused:
        ce.predict(PAIRS, max_length=10000)
    assert str(refused.value) == (
        "max_length=10000: this model reads at most 64 tokens a pair (max_position_embeddings=64); give "
        "max_length <= 64, or None for the model's own (64)"
    )
    with pytest.raises(ValueError, match=r"max_length=65: this model reads at most 64 tokens"):
        ce.rank("a man", ["music"], max_length=65)
    ce.max_length = 100  # the attribute, set past the table
    with pytest.raises(ValueError, match=r"CrossEncoder.max_length=100: .* set max_length <= 64$"):
        ce.predict(PAIRS)

    torch.manual_seed(0)
    config = RobertaConfig(**TINY, max_position_embeddings=66, pad_token_id=1, num_labels=1)
    roberta = CrossEncoder(
        RobertaForSequenceClassification(config).eval(),
        BertTokenizer(vocab={t: i for i, t in enumerate(VOCAB)}, model_max_length=512),
    )
    assert roberta.position_limit == (66, 2) and roberta.max_length == 64  # the tokenizer's 512 capped
    with pytest.raises(ValueError) as refused:
        roberta.predict(PAIRS, max_length=65)
    assert str(refused.value) == (
        "max_length=65: this model reads at most 64 tokens a pair (max_position_embeddings=66 less 2: its position "
        "ids start at 2); give max_length <= 64, or None for the model's own (64)"
    )
    long_pair = ("a man plays guitar", " ".join(["music"] * 100))
    assert np.isfinite(roberta.predict([long_pair], max_length=64, dtype=None)).all()  # at the limit: scored


def test_truncation_cuts_the_document_not_the_query(tiny_tokenizer, caplog) -> None:
    query = "a man plays guitar on the road"
    document = " ".join(["music"] * 80)
    with caplog.at_level(logging.WARNING):
        tokens = tokenize_pairs(tiny_tokenizer, [query, "cold"], [document, "hot"], max_length=48)
    ids = tokens.input_ids[0]
    assert len(ids) == 48 and tokens.documents_cut == 1 and tokens.queries_cut == 0
    assert tiny_tokenizer.decode(ids[1 : 1 + len(query.split())]) == query  # the whole query kept
    assert "1 of 2 pairs were longer than max_length=48" in caplog.text
    # a query too long to leave MIN_DOCUMENT_TOKENS for the document is cut too
    long_query = " ".join(["dog"] * 60)
    tokens = tokenize_pairs(tiny_tokenizer, [long_query], [document], max_length=48, warn=False)
    types = tokens.token_type_ids[0]
    assert len(tokens.input_ids[0]) == 48 and tokens.queries_cut == 1
    assert sum(types) - 1 >= min(MIN_DOCUMENT_TOKENS, 48 // 2 - 2)  # document tokens (type 1) minus its [SEP]
    with pytest.raises(ValueError, match="max_length=16"):
        tokenize_pairs(tiny_tokenizer, ["a"], ["b"], max_length=16)


def test_saved_folder_loads_everywhere_with_the_same_scores(tmp_path: Path, tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer, max_length=48)
    expected = ce.predict(PAIRS, dtype=None)
    ce.save_pretrained(tmp_path / "ce")
    files = {path.name for path in (tmp_path / "ce").iterdir()}
    assert {"config.json", "model.safetensors", "modules.json", "config_sentence_transformers.json"} <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    config = json.loads((tmp_path / "ce" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and len(config["id2label"]) == 1
    assert "id2label" in config and "label2id" in config  # what TEI's /rerank needs
    st_config = json.loads((tmp_path / "ce" / "config_sentence_transformers.json").read_text())
    assert st_config["activation_fn"] == "torch.nn.modules.activation.Sigmoid"
    assert model_kind(tmp_path / "ce") == "cross-encoder"

    back = CrossEncoder.from_pretrained(tmp_path / "ce")
    assert back.max_length == 48 and back.activation == "sigmoid"
    np.testing.assert_allclose(back.predict(PAIRS, dtype=None), expected, atol=1e-6)

    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ce").eval()
    logits = reference_logits(plain, tiny_tokenizer, PAIRS, max_length=48)
    np.testing.assert_allclose(torch.sigmoid(logits)[:, 0].numpy(), expected, atol=1e-6)

    sentence_transformers = pytest.importorskip("sentence_transformers")
    theirs = sentence_transformers.CrossEncoder(str(tmp_path / "ce"))
    assert type(theirs.activation_fn).__name__ == "Sigmoid"
    np.testing.assert_allclose(theirs.predict(PAIRS), expected, atol=1e-5)


def test_identity_activation_is_recorded_for_sentence_transformers(tmp_path: Path, tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer, activation="identity")
    ce.save_pretrained(tmp_path / "ce")
    assert CrossEncoder.from_pretrained(tmp_path / "ce").activation == "identity"
    st = pytest.importorskip("sentence_transformers")
    theirs = st.CrossEncoder(str(tmp_path / "ce"))
    np.testing.assert_allclose(theirs.predict(PAIRS[:3]), ce.predict(PAIRS[:3], dtype=None), atol=1e-5)


def test_a_bi_encoder_is_not_a_cross_encoder_and_starts_one(tmp_path: Path, tiny_tokenizer) -> None:
    bi = make_tiny_model()
    bi.save_pretrained(tmp_path / "bi", tokenizer=tiny_tokenizer)
    assert model_kind(tmp_path / "bi") == "bi-encoder"
    with pytest.raises(ValueError, match=r"is a bi-encoder .* CrossEncoder.from_encoder"):
        CrossEncoder.from_pretrained(tmp_path / "bi")
    ce = CrossEncoder.from_encoder(tmp_path / "bi", num_labels=1)
    encoder_weight = bi.encoder.embeddings.word_embeddings.weight
    assert torch.equal(ce.model.bert.embeddings.word_embeddings.weight, encoder_weight)  # the encoder's weights
    assert ce.predict(PAIRS[:2], dtype=None).shape == (2,)
    with pytest.raises(ValueError, match="num_labels=0"):
        CrossEncoder.from_encoder(tmp_path / "bi", num_labels=0)
    with pytest.raises(OSError):
        CrossEncoder.from_pretrained(tmp_path / "nowhere")


def test_save_refuses_to_overwrite_unless_asked(tmp_path: Path, tiny_tokenizer) -> None:
    ce = tiny_cross_encoder(tiny_tokenizer)
    (tmp_path / "ce").mkdir()
    (tmp_path / "ce" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ce.save_pretrained(tmp_path / "ce", overwrite=False)
    assert (tmp_path / "ce" / "keep.txt").read_text() == "mine"
    ce.save_pretrained(tmp_path / "ce")
    assert not (tmp_path / "ce" / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ce"]  # no staging folder left


def test_a_cross_encoder_is_not_a_bi_encoder(tmp_path: Path, tiny_tokenizer) -> None:
    from hf_siamese.formats.loading import load_model

    tiny_cross_encoder(tiny_tokenizer).save_pretrained(tmp_path / "ce")
    with pytest.raises(ValueError, match=r"is a cross-encoder \(BertForSequenceClassification.*CrossEncoder"):
        load_model(str(tmp_path / "ce"))
