"""`load_exported`: an exported folder of either kind opened with the class its config calls for, with the same
results as that class; the public names reachable from the package root and from `hf_siamese.serving`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SENTENCES, TINY, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification

import hf_siamese
from hf_siamese import serving
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.serving import ExportedCrossEncoder, ExportedEncoder, export_model, load_exported

pytest.importorskip("onnx", reason="pip install 'hf-siamese[onnx]' for the export tests")
pytest.importorskip("onnxruntime", reason="pip install 'hf-siamese[onnx]' for the export tests")


def test_load_exported_picks_the_class_by_the_folder(tmp_path, tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True)
    bi = export_model(model, tmp_path / "bi", format="onnx", tokenizer=tiny_tokenizer)
    encoder = load_exported(bi, workers=1)
    assert type(encoder) is ExportedEncoder
    np.testing.assert_allclose(
        encoder.encode(SENTENCES), model.encode(SENTENCES, tokenizer=tiny_tokenizer, convert_to_numpy=True), atol=1e-4
    )

    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=1)
    ce = CrossEncoder(BertForSequenceClassification(config).eval(), tiny_tokenizer, max_length=64)
    cross = export_model(ce, tmp_path / "ce", format="onnx")
    reranker = load_exported(cross, "onnx", max_length=48)
    assert type(reranker) is ExportedCrossEncoder and reranker.max_length == 48
    pairs = [(SENTENCES[0], SENTENCES[1]), (SENTENCES[2], SENTENCES[3])]
    np.testing.assert_allclose(reranker.predict(pairs), ce.predict(pairs, dtype=None, max_length=48), atol=1e-4)

    with pytest.raises(ValueError, match="backend='tensorrt' is not one of"):
        load_exported(cross, "tensorrt")


def test_the_serving_names_are_public_at_the_root() -> None:
    for name in ("export_model", "export_cross_encoder", "ExportedEncoder", "ExportedCrossEncoder", "load_exported"):
        assert getattr(hf_siamese, name) is getattr(serving, name), name
        assert name in hf_siamese.__all__ and name in serving.__all__, name
