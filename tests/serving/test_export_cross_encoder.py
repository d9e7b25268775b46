"""Exporting a cross-encoder: the plain layout TEI's /rerank reads, ONNX / OpenVINO graphs to the logits whose scores
equal torch's, int8 keeping the ranking, `ExportedCrossEncoder` scoring with `predict`'s habits, the CLI, and options
that only apply to bi-encoders refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, make_tiny_model
from helpers import SCORED_PAIRS
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from hf_siamese.cli import main
from hf_siamese.cross_encoder import CrossEncoder
from hf_siamese.serving import ONNX_FILES, OPENVINO_FILES, ExportedCrossEncoder, export_cross_encoder, export_model

pytest.importorskip("onnx", reason="pip install 'hf-siamese[onnx]' for the export tests")
pytest.importorskip("onnxruntime", reason="pip install 'hf-siamese[onnx]' for the export tests")

PAIRS = [
    *SCORED_PAIRS,
    ("the weather", "it is cold and the market fell"),
    ("music", "a man plays the guitar . someone plays music"),
    ("dogs in the park", "a child plays with a ball"),
]


@pytest.fixture(scope="module")
def fast_tokenizer(tmp_path_factory, tiny_tokenizer):
    """The tiny vocabulary as a fast tokenizer: it writes tokenizer.json, which TEI needs."""
    folder = tmp_path_factory.mktemp("fast-tokenizer")
    tiny_tokenizer.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder, use_fast=True)


def spread_cross_encoder(tokenizer, num_labels: int = 1) -> CrossEncoder:
    """A tiny random BERT classifier whose scores spread (large initial weights)."""
    torch.manual_seed(0)
    config = BertConfig(**TINY, max_position_embeddings=64, num_labels=num_labels, initializer_range=0.5)
    return CrossEncoder(BertForSequenceClassification(config).eval(), tokenizer, max_length=64)


@pytest.fixture(scope="module")
def ce(fast_tokenizer) -> CrossEncoder:
    return spread_cross_encoder(fast_tokenizer)


@pytest.fixture(scope="module")
def onnx_export(ce, tmp_path_factory) -> Path:
    """One ONNX export with its int8 (dynamic) graph beside the float32 one."""
    return export_model(ce, tmp_path_factory.mktemp("ce") / "onnx", format="onnx", quantize="int8-dynamic")


def test_the_plain_layout_is_what_tei_and_sentence_transformers_read(ce, tmp_path) -> None:
    out = export_cross_encoder(ce, tmp_path / "plain")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert len(config["id2label"]) == len(config["label2id"]) == 1
    for name in ("model.safetensors", "tokenizer.json", "modules.json", "config_sentence_transformers.json"):
        assert (out / name).is_file(), name
    assert not (out / "onnx").exists()
    np.testing.assert_allclose(
        CrossEncoder.from_pretrained(out).predict(PAIRS, dtype=None), ce.predict(PAIRS, dtype=None), atol=1e-6
    )


def test_the_onnx_graph_scores_as_torch_does(ce, onnx_export) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_export / ONNX_FILES["none"]), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in session.get_outputs()] == ["logits"]
    assert session.get_outputs()[0].shape == ["batch_size", 1]
    graph = ExportedCrossEncoder(onnx_export)
    assert graph.activation == "sigmoid" and graph.max_length == 64
    expected = ce.predict(PAIRS, dtype=None)
    assert np.ptp(expected) > 0.05  # the scores spread, so the comparison below means something
    scores = graph.predict(PAIRS, batch_size=3)
    assert scores.dtype == np.float32 and scores.shape == (len(PAIRS),)
    np.testing.assert_allclose(scores, expected, atol=1e-4)
    np.testing.assert_allclose(
        graph.predict(PAIRS, activation=False), ce.predict(PAIRS, activation=False, dtype=None), atol=1e-4
    )
    assert float(graph.predict(PAIRS[0])) == pytest.approx(float(expected[0]), abs=1e-4)
    assert graph.predict([]).shape == (0,)
    documents = [document for _, document in PAIRS]
    ranked = graph.rank("a man plays guitar", documents, top_k=3)
    assert [hit["corpus_id"] for hit in ranked] == [
        hit["corpus_id"] for hit in ce.rank("a man plays guitar", documents, top_k=3, dtype=None)
    ]


def test_the_fusion_weights_travel_with_the_graph(fast_tokenizer, tmp_path) -> None:
    reranker = spread_cross_encoder(fast_tokenizer)
    reranker.first_stage_weight, reranker.stage_weights = 0.3, {"dense": 0.2, "lexical": 0.5}
    graph = ExportedCrossEncoder(export_model(reranker, tmp_path / "onnx", format="onnx"))
    assert graph.first_stage_weight == 0.3 and graph.stage_weights == {"dense": 0.2, "lexical": 0.5}


def test_the_int8_graph_keeps_the_ranking(ce, onnx_export) -> None:
    assert (onnx_export / ONNX_FILES["int8-dynamic"]).is_file()
    int8 = ExportedCrossEncoder(onnx_export, file_name=ONNX_FILES["int8-dynamic"])
    expected = ce.predict(PAIRS, dtype=None)
    scores = int8.predict(PAIRS)
    np.testing.assert_allclose(scores, expected, atol=0.1)
    unique = [row for row in range(len(PAIRS)) if row != 3]  # the repeated pair counted once
    expected, scores = expected[unique], scores[unique]
    assert set(np.argsort(-expected)[:3]) == set(np.argsort(-scores)[:3])  # the same top 3
    ranks = np.argsort(np.argsort(expected)), np.argsort(np.argsort(scores))
    assert np.corrcoef(*ranks)[0, 1] >= 0.8  # Spearman


def test_several_labels_and_static_int8(fast_tokenizer, tmp_path) -> None:
    ce = spread_cross_encoder(fast_tokenizer, num_labels=3)
    out = export_cross_encoder(
        ce, tmp_path / "nli", format="onnx", quantize="int8-static", calibration_pairs=PAIRS * 3, calibration_size=8
    )
    graph = ExportedCrossEncoder(out)
    assert graph.activation == "identity"
    scores = graph.predict(PAIRS)
    assert scores.shape == (len(PAIRS), 3)
    np.testing.assert_allclose(scores, ce.predict(PAIRS, dtype=None), atol=1e-4)
    static = ExportedCrossEncoder(out, file_name=ONNX_FILES["int8-static"]).predict(PAIRS)
    assert static.shape == (len(PAIRS), 3) and np.isfinite(static).all()


def test_openvino_graph_scores_as_torch_does(ce, tmp_path) -> None:
    pytest.importorskip("openvino", reason="pip install 'hf-siamese[openvino]' for the OpenVINO export")
    out = export_cross_encoder(ce, tmp_path / "ov", format="openvino")
    assert (out / OPENVINO_FILES["none"]).is_file() and (out / OPENVINO_FILES["none"]).with_suffix(".bin").is_file()
    scores = ExportedCrossEncoder(out, backend="openvino").predict(PAIRS)
    np.testing.assert_allclose(scores, ce.predict(PAIRS, dtype=None), atol=1e-4)


def test_the_cli_exports_a_cross_encoder_folder(ce, tmp_path, capsys) -> None:
    folder = ce.save_pretrained(tmp_path / "ce")
    out = tmp_path / "out"
    assert main(["export", "--model", str(folder), "-o", str(out), "--format", "onnx"]) == 0
    assert "cross-encoder" in capsys.readouterr().out
    np.testing.assert_allclose(ExportedCrossEncoder(out).predict(PAIRS), ce.predict(PAIRS, dtype=None), atol=1e-4)
    # options only a bi-encoder has are refused, named
    assert main(["export", "--model", str(folder), "-o", str(tmp_path / "x"), "--pooling", "mean"]) != 0
    error = capsys.readouterr().err
    assert "--pooling" in error and "cross-encoder" in error
    assert main(["export", "--model", str(folder), "-o", str(tmp_path / "y"), "--no-normalize"]) != 0
    assert "--normalize" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_bad_input_is_named(ce, fast_tokenizer, onnx_export, tmp_path) -> None:
    folder = ce.save_pretrained(tmp_path / "ce")
    with pytest.raises(ValueError, match="is a cross-encoder"):
        export_model(folder, tmp_path / "a")
    with pytest.raises(ValueError, match="tokenizer= is for bi-encoders"):
        export_model(ce, tmp_path / "b", tokenizer=fast_tokenizer)
    with pytest.raises(ValueError, match="calibration_texts is used only with quantize='int8-static'"):
        export_cross_encoder(ce, tmp_path / "c", format="onnx", calibration_pairs=PAIRS)
    with pytest.raises(ValueError, match="calibrates activation ranges on pairs"):
        export_cross_encoder(ce, tmp_path / "d", format="onnx", quantize="int8-static")
    with pytest.raises(TypeError, match="calibration pair 1 is 'just a text'"):
        export_cross_encoder(
            ce, tmp_path / "e", format="onnx", quantize="int8-static", calibration_pairs=[PAIRS[0], "just a text"]
        )
    with pytest.raises(ValueError, match="format='tflite'"):
        export_cross_encoder(ce, tmp_path / "f", format="tflite")
    assert not any((tmp_path / name).exists() for name in "abcdef")
    with pytest.raises(ValueError, match="the document of pair 0 is int"):
        ExportedCrossEncoder(onnx_export).predict([("query", 3)])
    bi_encoder = export_model(make_tiny_model(), tmp_path / "bi", format="onnx", tokenizer=fast_tokenizer)
    with pytest.raises(ValueError, match="is a bi-encoder"):
        ExportedCrossEncoder(bi_encoder)
    with pytest.raises(ValueError, match="does not exist"):
        ExportedCrossEncoder(folder)  # a cross-encoder folder with no graph


def test_a_float_graph_that_differs_from_torch_is_refused(ce, tmp_path, monkeypatch) -> None:
    from hf_siamese.serving import graphs as export_graphs

    real = export_graphs._compare

    def drifted(*args):
        expected, got = real(*args)
        return expected, got + 1e-3

    monkeypatch.setattr(export_graphs, "_compare", drifted)
    with pytest.raises(RuntimeError, match=r"onnx/model.onnx gives logits 1.00e-03 away"):
        export_cross_encoder(ce, tmp_path / "out", format="onnx")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["abc", True, "0.3", 1.5])
def test_an_exported_reranker_with_a_bad_saved_weight_is_refused_naming_the_file(onnx_export, tmp_path, bad) -> None:
    import shutil

    folder = tmp_path / "bad"
    shutil.copytree(onnx_export, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "first_stage_weight": bad}))
    with pytest.raises(ValueError, match=r"config.json: first_stage_weight=.*expected a number in \[0, 1\]"):
        ExportedCrossEncoder(folder)
