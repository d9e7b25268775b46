"""`export_model` / `hf-siamese export` of a learned-sparse model (SPLADE, inference-free): sentence-transformers'
SparseEncoder layout plus the ONNX graph of the document path (to the MLM logits, in the Transformer module's folder),
whose pooled vectors equal the torch model's (OpenVINO too); what sentence-transformers makes of the graph; the
refusals (a CSR graph, an existing folder, a drifting graph), none leaving a folder behind. Tiny random BERT
masked-language models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import TINY, VOCAB, VOCAB_SIZE, make_tiny_model
from transformers import BertConfig, BertForMaskedLM

from hf_siamese import SparseSiameseConfig, SparseSiameseModel
from hf_siamese.cli import main
from hf_siamese.serving import ONNX_FILES, OPENVINO_FILES, export_model, load_exported

onnx = pytest.importorskip("onnx", reason="pip install 'hf-siamese[onnx]' for the export tests")
onnxruntime = pytest.importorskip("onnxruntime", reason="pip install 'hf-siamese[onnx]' for the export tests")
from hf_siamese.serving import ExportedGraphError, ExportedSparseEncoder  # noqa: E402

TOLERANCE = 1e-4
DOCUMENTS = [
    "A man is playing a guitar.",
    "dog",
    "",
    "the cat eats bread in the kitchen today . the cat eats bread in the kitchen today . two dogs play",
    "Someone plays music.",
    "dog",
]
QUERIES = ["dog dog guitar", "who plays the piano", "cat"]  # words of the tiny vocabulary


def _model(vocab_size: int = VOCAB_SIZE, **settings) -> SparseSiameseModel:
    torch.manual_seed(0)
    encoder = BertForMaskedLM(BertConfig(**{**TINY, "vocab_size": vocab_size}, max_position_embeddings=64))
    config = SparseSiameseConfig(encoder_config=encoder.config, **settings)
    return SparseSiameseModel(config, encoder=encoder).eval()


def _inference_free(tokenizer) -> SparseSiameseModel:
    # as wide as the tokenizer's vocabulary: sentence-transformers sizes its query table by it
    model = _model(
        len(VOCAB), architecture="inference_free", pooling="sum", activation="log1p_log1p_relu", max_active_dims=40,
        query_ignore_ids=sorted(set(tokenizer.all_special_ids)), prompts={"document": "the "},
    )  # fmt: skip
    with torch.no_grad():
        model.query_weights.copy_(torch.rand(len(model.query_weights)) + 0.5)
    return model


def _same(got: torch.Tensor, expected: torch.Tensor) -> None:
    got, expected = got.to_dense() if got.is_sparse else got, expected.to_dense() if expected.is_sparse else expected
    assert got.shape == expected.shape
    assert float((got - expected).abs().max()) <= TOLERANCE


def _graph_io(path) -> tuple[list[str], list[str]]:
    graph = onnx.load(str(path)).graph
    return [i.name for i in graph.input], [o.name for o in graph.output]


def _st_pipeline_on_the_graph(folder, graph) -> object:
    """sentence-transformers' SparseEncoder over `folder` with its masked-language model swapped for the ONNX graph
    `graph` (token ids in, `logits` out: what optimum's ORTModelForMaskedLM gives its backend='onnx'), so that its
    own tokenization and SpladePooling run on the graph's logits."""
    from sentence_transformers import SparseEncoder

    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]

    class GraphMLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)  # where the encoder's device is

        def forward(self, input_ids, attention_mask, token_type_ids=None, **kwargs):
            feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            feed = {name: (feed[name] if feed[name] is not None else torch.zeros_like(input_ids)) for name in inputs}
            logits = session.run(["logits"], {k: v.numpy() for k, v in feed.items()})[0]
            return {"logits": torch.from_numpy(logits)}

    st = SparseEncoder(str(folder), device="cpu", local_files_only=True)
    transformers = [m for m in st.modules() if type(m).__name__ in ("Transformer", "MLMTransformer")]
    assert len(transformers) == 1
    mlm = GraphMLM()
    mlm.config = transformers[0].model.config  # as optimum's ORT models carry theirs
    transformers[0].model = mlm
    return st


def test_splade_graph_gives_the_torch_vectors(tmp_path, tiny_tokenizer) -> None:
    model = _model(prompts={"query": "who "})
    out = export_model(
        model, tmp_path / "splade", format="onnx", quantize="int8-static", calibration_texts=DOCUMENTS * 3,
        tokenizer=tiny_tokenizer,
    )  # fmt: skip
    graph = out / ONNX_FILES["none"]  # at the root, beside the Transformer module's files
    assert graph.is_file() and (out / "1_SpladePooling" / "config.json").is_file()
    assert _graph_io(graph) == (["input_ids", "attention_mask", "token_type_ids"], ["logits"])
    assert json.loads((out / "config_sentence_transformers.json").read_text())["model_type"] == "SparseEncoder"

    served = ExportedSparseEncoder(out)
    for task in ("document", "query"):  # SPLADE queries run the graph too, with their prompt
        got = served.encode(DOCUMENTS if task == "document" else QUERIES, task=task)
        assert got.is_sparse and got.shape == (len(DOCUMENTS if task == "document" else QUERIES), VOCAB_SIZE)
        _same(got, model.encode(DOCUMENTS if task == "document" else QUERIES, tiny_tokenizer, task=task))
    _same(served.encode("dog"), model.encode("dog", tiny_tokenizer))
    _same(served.encode(DOCUMENTS, max_active_dims=7), model.encode(DOCUMENTS, tiny_tokenizer, max_active_dims=7))
    assert served.encode([]).shape == (0, VOCAB_SIZE)
    assert type(load_exported(out)) is ExportedSparseEncoder
    int8 = ExportedSparseEncoder(out, file_name=ONNX_FILES["int8-static"]).encode(DOCUMENTS).to_dense()
    float32 = served.encode(DOCUMENTS).to_dense()
    assert float(torch.nn.functional.cosine_similarity(int8[:2], float32[:2]).min()) > 0.8

    # sentence-transformers' own tokenization and SpladePooling over the graph's logits: the same vectors
    st = _st_pipeline_on_the_graph(out, graph)
    _same(st.encode_document(DOCUMENTS, convert_to_tensor=True).cpu(), model.encode(DOCUMENTS, tiny_tokenizer))


def test_inference_free_graph_is_the_document_route_and_queries_a_lookup(tmp_path, tiny_tokenizer) -> None:
    model = _inference_free(tiny_tokenizer)
    out = export_model(model, tmp_path / "free", format="onnx", quantize="int8-dynamic", tokenizer=tiny_tokenizer)
    transformer = out / "document_0_Transformer"  # where SparseEncoder's document route loads its Transformer from
    assert (transformer / ONNX_FILES["none"]).is_file() and (transformer / ONNX_FILES["int8-dynamic"]).is_file()
    assert not (out / "onnx").exists() and not list((out / "query_0_SparseStaticEmbedding").glob("**/*.onnx"))

    served = ExportedSparseEncoder(out)
    documents = served.encode(DOCUMENTS, task="document")
    _same(documents, model.encode(DOCUMENTS, tiny_tokenizer, task="document"))
    assert int((documents.to_dense()[0] > 0).sum()) <= 40  # max_active_dims travels with the folder
    _same(served.encode_query(QUERIES), model.encode(QUERIES, tiny_tokenizer, task="query"))

    int8 = ExportedSparseEncoder(out, file_name=ONNX_FILES["int8-dynamic"]).encode(DOCUMENTS[:2]).to_dense()
    cosine = torch.nn.functional.cosine_similarity(int8, documents.to_dense()[:2])
    assert float(cosine.min()) > 0.8

    st = _st_pipeline_on_the_graph(out, transformer / ONNX_FILES["none"])
    _same(st.encode_document(DOCUMENTS, convert_to_tensor=True).cpu(), documents)


def test_sentence_transformers_onnx_backend_loads_the_export(tmp_path, tiny_tokenizer) -> None:
    pytest.importorskip("optimum.onnxruntime", reason="SparseEncoder(backend='onnx') needs optimum's ONNX Runtime")
    from sentence_transformers import SparseEncoder

    for name, model in (("splade", _model()), ("free", _inference_free(tiny_tokenizer))):
        out = export_model(model, tmp_path / name, format="onnx", tokenizer=tiny_tokenizer)
        st = SparseEncoder(str(out), backend="onnx", local_files_only=True)
        got = st.encode_document(DOCUMENTS, convert_to_tensor=True).cpu()
        _same(got, model.encode(DOCUMENTS, tiny_tokenizer, task="document"))


def test_openvino_graph_gives_the_torch_vectors(tmp_path, tiny_tokenizer) -> None:
    pytest.importorskip("openvino", reason="pip install 'hf-siamese[openvino]' for the OpenVINO export")
    model = _inference_free(tiny_tokenizer)
    out = export_model(model, tmp_path / "ov", format="openvino", tokenizer=tiny_tokenizer)
    assert (out / "document_0_Transformer" / OPENVINO_FILES["none"]).is_file()
    served = ExportedSparseEncoder(out, backend="openvino")
    _same(served.encode(DOCUMENTS), model.encode(DOCUMENTS, tiny_tokenizer))
    _same(served.encode_query(QUERIES), model.encode(QUERIES, tiny_tokenizer, task="query"))


def test_the_cli_exports_a_sparse_folder(tmp_path, tiny_tokenizer, capsys) -> None:
    model = _model()
    source = tmp_path / "model"
    model.save_pretrained(source)
    tiny_tokenizer.save_pretrained(source)
    out = tmp_path / "out"
    assert main(["export", "--model", str(source), "-o", str(out), "--format", "onnx"]) == 0
    assert "sparse model" in capsys.readouterr().out
    _same(ExportedSparseEncoder(out).encode(DOCUMENTS), model.encode(DOCUMENTS, tiny_tokenizer))
    # a SparseEncoder folder is a sparse --model too; dense-only flags and OpenVINO are refused, named
    again = tmp_path / "again"
    assert main(["export", "--model", str(out), "-o", str(again), "--format", "onnx", "--max-seq-length", "8"]) == 0
    capsys.readouterr()
    short = model.encode(DOCUMENTS, tiny_tokenizer, convert_to_sparse_tensor=False)
    model.config.max_seq_length = 8
    _same(ExportedSparseEncoder(again).encode(DOCUMENTS), model.encode(DOCUMENTS, tiny_tokenizer))
    assert float((short - model.encode(DOCUMENTS, tiny_tokenizer).to_dense()).abs().max()) > 0  # it did cut
    assert main(["export", "--model", str(source), "-o", str(tmp_path / "x"), "--pooling", "mean"]) != 0
    error = capsys.readouterr().err
    assert "--pooling" in error and "sparse model" in error
    assert not (tmp_path / "x").exists()


def test_bad_input_is_named_and_leaves_no_folder(tmp_path, tiny_tokenizer, monkeypatch) -> None:
    model = _model()
    csr = SparseSiameseModel.from_dense(make_tiny_model(), hidden_dim=64, k=8)
    with pytest.raises(ValueError, match=r"format='onnx' of a sparse model with architecture='csr'"):
        export_model(csr, tmp_path / "b", format="onnx", tokenizer=tiny_tokenizer)
    existing = tmp_path / "c"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already exists and is not empty"):
        export_model(model, existing, format="onnx", tokenizer=tiny_tokenizer)
    assert [p.name for p in existing.iterdir()] == ["keep.txt"]

    from hf_siamese.serving import graphs

    real = graphs._compare
    monkeypatch.setattr(graphs, "_compare", lambda *args: (real(*args)[0], real(*args)[1] + 1e-3))
    with pytest.raises(RuntimeError, match=r"onnx/model.onnx gives sparse vectors 1.00e-03 away"):
        export_model(model, tmp_path / "d", format="onnx", tokenizer=tiny_tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no half-written folder, no staging left
    monkeypatch.undo()

    plain = export_model(model, tmp_path / "plain", tokenizer=tiny_tokenizer)  # the layout alone: no graph
    with pytest.raises(ExportedGraphError, match="does not exist"):
        ExportedSparseEncoder(plain)
    with pytest.raises(ValueError, match="task='passage'"):
        ExportedSparseEncoder(export_model(model, tmp_path / "e", format="onnx", tokenizer=tiny_tokenizer)).encode(
            DOCUMENTS, task="passage"
        )
    with pytest.raises(FileNotFoundError, match="is not a SparseEncoder folder"):
        ExportedSparseEncoder(tmp_path / "c")
    np.testing.assert_equal((tmp_path / "c" / "keep.txt").read_text(), "mine")
