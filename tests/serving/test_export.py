"""`export_model` / `hf-siamese export` and `ExportedEncoder`: the plain sentence-transformers layout read the way
text-embeddings-inference reads it, ONNX and OpenVINO graphs giving the torch embeddings, int8 versions, and every
bad input (nothing half-written)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SENTENCES, make_tiny_model
from safetensors import safe_open
from transformers import AutoTokenizer

from hf_siamese import serving as export_module
from hf_siamese.cli import main
from hf_siamese.serving import (
    FORMATS,
    ONNX_FILES,
    OPENVINO_FILES,
    QUANTIZATION,
    TEI_MODEL_TYPES,
    MissingExtraError,
    export_model,
)

onnx = pytest.importorskip("onnx", reason="pip install 'hf-siamese[onnx]' for the export tests")
pytest.importorskip("onnxruntime", reason="pip install 'hf-siamese[onnx]' for the export tests")
from hf_siamese.serving import ExportedEncoder, ExportedGraphError  # noqa: E402

TOLERANCE = 1e-4
TEXTS = [*SENTENCES, "", "a man plays the guitar . a man plays the guitar . a man plays the guitar", SENTENCES[0]]


@pytest.fixture(scope="module")
def fast_tokenizer(tmp_path_factory, tiny_tokenizer):
    """The tiny vocabulary as a fast tokenizer: it writes tokenizer.json, which TEI needs."""
    folder = tmp_path_factory.mktemp("fast-tokenizer")
    tiny_tokenizer.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, use_fast=True)
    assert tokenizer.is_fast
    return tokenizer


@pytest.fixture
def model():
    return make_tiny_model(
        normalize=True,
        projections=[{"in_features": 32, "out_features": 24, "bias": True, "activation": "tanh"}],
        prompts={"query": "the weather : "},
    )


def tei_view(folder: Path) -> dict:
    """What text-embeddings-inference reads from a model folder (its core/src/download.rs and router/src/lib.rs):
    the root config.json and its model_type, the pooling from 1_Pooling/config.json, the Dense modules listed in
    modules.json, tokenizer.json, safetensors weights at the root and onnx/model.onnx for the ONNX backend."""
    config = json.loads((folder / "config.json").read_text())
    modules = json.loads((folder / "modules.json").read_text())
    pooling_entry = next(m for m in modules if m["type"].endswith("Pooling"))
    pooling_config = json.loads((folder / pooling_entry["path"] / "config.json").read_text())
    modes = [k for k, v in pooling_config.items() if k.startswith("pooling_mode_") and v is True]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    view = {
        "model_type": config["model_type"],
        "hidden_size": config.get("hidden_size", config.get("dim")),
        "pooling": modes,
        "dense": [m["path"] for m in modules if m["type"].endswith("Dense")],
        "normalize": any(m["type"].endswith("Normalize") for m in modules),
        "tokenizer_vocab": tokenizer.get_vocab_size(),
        "weights": names,
    }
    onnx_path = folder / "onnx" / "model.onnx"
    if onnx_path.is_file():
        graph = onnx.load(str(onnx_path)).graph
        view["onnx_inputs"] = [i.name for i in graph.input]
        view["onnx_outputs"] = [o.name for o in graph.output]
    return view


def test_plain_layout_reads_as_tei_and_sentence_transformers_read_it(tmp_path, model, fast_tokenizer):
    out = export_model(model, tmp_path / "out", tokenizer=fast_tokenizer)
    view = tei_view(out)
    assert view["model_type"] in TEI_MODEL_TYPES and view["model_type"] == "bert"
    assert view["pooling"] == ["pooling_mode_mean_tokens"]
    assert view["dense"] == ["2_Dense"] and view["normalize"]
    assert view["tokenizer_vocab"] == fast_tokenizer.vocab_size
    assert "embeddings.word_embeddings.weight" in view["weights"]
    assert not any(name.startswith("encoder.embeddings") for name in view["weights"])  # not our prefix
    assert json.loads((out / "modules.json").read_text())[0]["path"] == ""
    # sentence-transformers' ONNX backend (optimum) refuses loading arguments such as add_pooling_layer.
    assert json.loads((out / "sentence_bert_config.json").read_text())["model_args"] == {}
    assert json.loads((out / "config_sentence_transformers.json").read_text())["prompts"] == {"query": "the weather : "}
    assert (out / "README.md").is_file()
    assert not list(tmp_path.glob(".out.export-*"))  # no staging left behind

    expected = model.encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    st = pytest.importorskip("sentence_transformers")
    theirs = st.SentenceTransformer(str(out), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(theirs, expected, atol=1e-5)
    from hf_siamese import SiameseBertModel

    again = SiameseBertModel.from_encoder(str(out)).encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    np.testing.assert_allclose(again, expected, atol=1e-6)


def test_onnx_export_gives_the_torch_embeddings(tmp_path, model, fast_tokenizer):
    model.config.include_prompt = False
    model.config.do_lower_case = True
    out = export_model(model, tmp_path / "out", format="onnx", tokenizer=fast_tokenizer)
    view = tei_view(out)
    assert view["onnx_inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert view["onnx_outputs"] == ["last_hidden_state"]
    encoder = ExportedEncoder(out, "onnx", workers=2)
    threads = torch.get_num_threads()
    for kwargs in ({}, {"prompt_name": "query"}, {"batch_size": 2}):
        expected = model.encode([t.upper() for t in TEXTS], tokenizer=fast_tokenizer, convert_to_numpy=True, **kwargs)
        got = encoder.encode([t.upper() for t in TEXTS], **kwargs)
        assert got.shape == expected.shape == (len(TEXTS), 24)
        np.testing.assert_allclose(got, expected, atol=TOLERANCE)
    assert torch.get_num_threads() == threads  # the batch threads' setting does not leak out
    single = encoder.encode(TEXTS[0])
    assert single.shape == (24,)
    np.testing.assert_allclose(single, encoder.encode(TEXTS)[0], atol=1e-6)
    assert encoder.encode([]).shape == (0, 24)


def test_onnx_graph_without_token_types_for_distilbert(tmp_path, fast_tokenizer):
    model = make_tiny_model("distilbert", normalize=True)
    out = export_model(model, tmp_path / "out", format="onnx", tokenizer=fast_tokenizer)
    assert tei_view(out)["onnx_inputs"] == ["input_ids", "attention_mask"]
    expected = model.encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    np.testing.assert_allclose(ExportedEncoder(out, "onnx").encode(TEXTS), expected, atol=TOLERANCE)


@pytest.mark.parametrize("mode", ["int8-dynamic", "int8-static"])
def test_onnx_int8_files_beside_the_float_graph(tmp_path, model, fast_tokenizer, mode):
    calibration = [f"{a} {b} plays the guitar" for a in ("a man", "the woman", "someone") for b in ("today", "")]
    calibration = calibration if mode == "int8-static" else None  # refused by the other modes
    out = export_model(
        model, tmp_path / "out", format="onnx", quantize=mode, calibration_texts=calibration, tokenizer=fast_tokenizer
    )
    assert (out / ONNX_FILES["none"]).is_file() and (out / ONNX_FILES[mode]).is_file()
    graph = onnx.load(str(out / ONNX_FILES[mode])).graph
    assert any(node.op_type in ("DynamicQuantizeLinear", "QuantizeLinear", "MatMulInteger") for node in graph.node)
    got = ExportedEncoder(out, "onnx", file_name=ONNX_FILES[mode]).encode(TEXTS)
    expected = model.encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    cosine = (got * expected).sum(1)  # both unit length
    assert got.shape == expected.shape and cosine.mean() > 0.9


def test_openvino_export_float_and_int8(tmp_path, model, fast_tokenizer):
    pytest.importorskip("openvino", reason="pip install 'hf-siamese[openvino]'")
    pytest.importorskip("nncf", reason="pip install 'hf-siamese[openvino]'")
    calibration = [f"{a} plays the {b}" for a in ("a man", "the woman", "someone") for b in ("guitar", "piano")]
    out = export_model(
        model, tmp_path / "out", format="openvino", quantize="int8-static", calibration_texts=calibration,
        tokenizer=fast_tokenizer,
    )  # fmt: skip
    assert (out / OPENVINO_FILES["none"]).is_file() and (out / OPENVINO_FILES["int8-static"]).is_file()
    assert not (out / "onnx").exists() and not list(out.glob(".*"))  # the ONNX step left nothing behind
    expected = model.encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    np.testing.assert_allclose(ExportedEncoder(out, "openvino").encode(TEXTS), expected, atol=TOLERANCE)
    int8 = ExportedEncoder(out, "openvino", file_name=OPENVINO_FILES["int8-static"], precision="bf16").encode(TEXTS)
    assert int8.shape == expected.shape and (int8 * expected).sum(1).mean() > 0.9


def test_the_classifier_head_is_dropped_with_a_warning(tmp_path, fast_tokenizer, caplog):
    model = make_tiny_model(num_labels=3, cosine_affine=True)
    with caplog.at_level(logging.WARNING, logger="hf_siamese.serving.export"):
        out = export_model(model, tmp_path / "out", tokenizer=fast_tokenizer)
    assert "classifier head is not written" in caplog.text and "cosine_affine" in caplog.text
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        assert not any("classifier" in name for name in weights.keys())


def test_bad_arguments_name_the_value(tmp_path, model, fast_tokenizer):
    with pytest.raises(ValueError, match=r"format='tflite' is not one of \['sentence-transformers'"):
        export_model(model, tmp_path / "a", format="tflite", tokenizer=fast_tokenizer)
    with pytest.raises(ValueError, match=r"quantize='int4' is not one of"):
        export_model(model, tmp_path / "a", format="onnx", quantize="int4", tokenizer=fast_tokenizer)
    with pytest.raises(ValueError, match="needs a graph format"):
        export_model(model, tmp_path / "a", quantize="int8-dynamic", tokenizer=fast_tokenizer)
    with pytest.raises(ValueError, match="calibration_texts"):
        export_model(model, tmp_path / "a", format="onnx", quantize="int8-static", tokenizer=fast_tokenizer)
    with pytest.raises(ValueError, match="no non-empty text"):
        export_model(
            model, tmp_path / "a", format="onnx", quantize="int8-static", calibration_texts=["", " "],
            tokenizer=fast_tokenizer,
        )  # fmt: skip
    with pytest.raises(TypeError, match=r"calibration_texts\[1\] is int \(7\)"):
        export_model(
            model, tmp_path / "a", format="onnx", quantize="int8-static", calibration_texts=["ok", 7],
            tokenizer=fast_tokenizer,
        )  # fmt: skip
    with pytest.raises(ValueError, match="calibration_size=0"):
        export_model(
            model, tmp_path / "a", format="onnx", quantize="int8-static", calibration_texts=["ok"],
            calibration_size=0, tokenizer=fast_tokenizer,
        )  # fmt: skip
    assert FORMATS == ("sentence-transformers", "onnx", "openvino") and "int8-static" in QUANTIZATION
    assert not (tmp_path / "a").exists()


def test_an_existing_folder_is_kept_unless_overwrite(tmp_path, model, fast_tokenizer):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already exists.*overwrite=True"):
        export_model(model, out, tokenizer=fast_tokenizer)
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    export_model(model, out, tokenizer=fast_tokenizer, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "modules.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_failed_export_leaves_the_earlier_folder_and_no_staging(tmp_path, model, fast_tokenizer, monkeypatch):
    out = export_model(model, tmp_path / "out", tokenizer=fast_tokenizer)
    before = sorted(p.name for p in out.iterdir())
    from hf_siamese.serving import graphs as export_graphs

    def broken(*args, **kwargs):
        raise RuntimeError("the graph broke")

    monkeypatch.setattr(export_graphs, "export_onnx", broken)
    with pytest.raises(RuntimeError, match="the graph broke"):
        export_model(model, out, format="onnx", tokenizer=fast_tokenizer, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_float_graph_that_differs_from_torch_is_refused(tmp_path, model, fast_tokenizer, monkeypatch):
    from hf_siamese.serving import graphs as export_graphs

    real = export_graphs._compare

    def drifted(*args):
        expected, got = real(*args)
        return expected, got + 1e-3

    monkeypatch.setattr(export_graphs, "_compare", drifted)
    with pytest.raises(RuntimeError, match=r"onnx/model.onnx gives embeddings 1.00e-03 away"):
        export_model(model, tmp_path / "out", format="onnx", tokenizer=fast_tokenizer)
    assert not (tmp_path / "out").exists()


def test_a_missing_extra_is_named(tmp_path, model, fast_tokenizer, monkeypatch):
    import importlib

    real = importlib.import_module

    def without_openvino(name, *args):
        if name == "openvino":
            raise ImportError("No module named 'openvino'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_openvino)
    with pytest.raises(MissingExtraError, match=r"pip install 'hf-siamese\[openvino\]'"):
        export_model(model, tmp_path / "out", format="openvino", tokenizer=fast_tokenizer)
    assert not (tmp_path / "out").exists()
    assert export_module.EXTRAS["onnx"] == ("onnx", "onnxruntime")


def test_graph_files_that_are_missing_corrupt_or_from_another_model(tmp_path, model, fast_tokenizer):
    out = export_model(model, tmp_path / "out", format="onnx", tokenizer=fast_tokenizer)
    with pytest.raises(ExportedGraphError, match=r"model_qint8_dynamic.onnx' does not exist; graphs in this folder: "):
        ExportedEncoder(out, "onnx", file_name=ONNX_FILES["int8-dynamic"])
    with pytest.raises(ValueError, match="backend='tensorrt' is not one of"):
        ExportedEncoder(out, "tensorrt")
    with pytest.raises(ValueError, match="precision='bf16' is an OpenVINO setting"):
        ExportedEncoder(out, "onnx", precision="bf16")
    with pytest.raises(FileNotFoundError, match="has no modules.json"):
        ExportedEncoder(tmp_path, "onnx")

    from transformers import BertConfig

    from hf_siamese import SiameseBertConfig, SiameseBertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20,
                        vocab_size=99, max_position_embeddings=64)  # fmt: skip
    narrow = SiameseBertModel(SiameseBertConfig(encoder_config=config)).eval()
    other = export_model(narrow, tmp_path / "narrow", format="onnx", tokenizer=fast_tokenizer)
    shutil.copy(other / ONNX_FILES["none"], out / "onnx" / "other.onnx")
    with pytest.raises(ExportedGraphError, match="width 16, but .*hidden_size=32"):
        ExportedEncoder(out, "onnx", file_name="onnx/other.onnx")

    (out / "onnx" / "broken.onnx").write_bytes(b"not a graph")
    with pytest.raises(ExportedGraphError, match=r"cannot load .*broken.onnx"):
        ExportedEncoder(out, "onnx", file_name="onnx/broken.onnx")


def test_encode_rejects_what_the_torch_encode_rejects(tmp_path, model, fast_tokenizer):
    out = export_model(model, tmp_path / "out", format="onnx", tokenizer=fast_tokenizer)
    encoder = ExportedEncoder(out, "onnx")
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType"):
        encoder.encode(["ok", None])
    with pytest.raises(ValueError, match="batch_size=0"):
        encoder.encode(["ok"], batch_size=0)
    with pytest.raises(ValueError, match="prompt_name='passage' is not one of this model's prompts"):
        encoder.encode(["ok"], prompt_name="passage")


def test_cli_export(tmp_path, model, fast_tokenizer, capsys):
    source = tmp_path / "model"
    model.save_pretrained(source, tokenizer=fast_tokenizer)
    fast_tokenizer.save_pretrained(source)
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "served"
    argv = ["export", "--model", str(source), "-o", str(out), "--format", "onnx", "--quantize", "int8-static"]
    assert main([*argv, "--calibration", str(calibration)]) == 0
    assert "wrote onnx export (quantize: int8-static)" in capsys.readouterr().out
    assert (out / ONNX_FILES["int8-static"]).is_file()
    expected = model.encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    np.testing.assert_allclose(ExportedEncoder(out, "onnx").encode(TEXTS), expected, atol=TOLERANCE)

    assert main([*argv, "--calibration", str(calibration)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 1
    assert "give --calibration FILE" in capsys.readouterr().err
    from hf_siamese.cli.export import EXPORT_FORMATS, EXPORT_QUANTIZATION

    assert (EXPORT_FORMATS, EXPORT_QUANTIZATION) == (FORMATS, QUANTIZATION)


def test_openvino_bf16_on_a_cpu_without_it_runs_float32_and_says_so_once(tmp_path, model, fast_tokenizer, caplog):
    pytest.importorskip("openvino", reason="pip install 'hf-siamese[openvino]'")
    from hf_siamese.serving import runtime

    out = export_model(model, tmp_path / "out", format="openvino", tokenizer=fast_tokenizer)
    runtime._WARNED.discard("bf16")
    with pytest.MonkeyPatch.context() as patch, caplog.at_level(logging.WARNING, logger="hf_siamese.serving.runtime"):
        patch.setattr(runtime, "native_low_precision", lambda dtype: False)
        first = ExportedEncoder(out, "openvino", precision="bf16")
        ExportedEncoder(out, "openvino", precision="bf16")
    assert caplog.text.count("no native bfloat16") == 1
    expected = model.encode(TEXTS, tokenizer=fast_tokenizer, convert_to_numpy=True)
    np.testing.assert_allclose(first.encode(TEXTS), expected, atol=TOLERANCE)  # float32 ran


def test_openvino_files_that_are_missing_or_corrupt(tmp_path, model, fast_tokenizer):
    pytest.importorskip("openvino", reason="pip install 'hf-siamese[openvino]'")
    out = export_model(model, tmp_path / "out", format="openvino", tokenizer=fast_tokenizer)
    xml = out / OPENVINO_FILES["none"]
    shutil.copy(xml, xml.with_name("copy.xml"))
    with pytest.raises(ExportedGraphError, match=r"copy.bin' \(the weights of copy.xml\) is missing"):
        ExportedEncoder(out, "openvino", file_name="openvino/copy.xml")
    xml.with_name("broken.xml").write_text("<net>not a model")
    xml.with_name("broken.bin").write_bytes(b"")
    with pytest.raises(ExportedGraphError, match=r"OpenVINO cannot read .*broken.xml"):
        ExportedEncoder(out, "openvino", file_name="openvino/broken.xml")
