"""The model-kind registry (`hf_siamese.modeling.kinds`): every kind told from its files without loading weights,
loaded by its kind's loader, and a new kind joining by one registration."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY, make_tiny_model
from transformers import BertConfig, BertForSequenceClassification, BertModel

from hf_siamese import MultiVectorConfig, MultiVectorModel, SparseSiameseConfig, SparseSiameseModel
from hf_siamese.modeling import kinds


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(**TINY, max_position_embeddings=64))
    models = {
        "dense": make_tiny_model(),
        "sparse": SparseSiameseModel(SparseSiameseConfig(encoder_config=encoder.config), encoder=encoder),
        "multi-vector": MultiVectorModel(
            MultiVectorConfig(encoder_config=encoder.config, embedding_dim=8), encoder=encoder
        ),
        "cross-encoder": BertForSequenceClassification(BertConfig(**TINY, max_position_embeddings=64, num_labels=1)),
        "plain encoder": encoder,
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
        tiny_tokenizer.save_pretrained(root / name)
    return {name: root / name for name in models}


def test_each_kind_is_told_from_its_files(folders: dict[str, Path]) -> None:
    found = {name: kinds.kind_of_path(folder) for name, folder in folders.items()}
    assert found == {
        "dense": "dense", "sparse": "sparse", "multi-vector": "multi-vector", "cross-encoder": "cross-encoder",
        "plain encoder": "dense",
    }  # fmt: skip
    assert kinds.kind_of_path(None) is None and kinds.kind_of_path(folders["dense"] / "missing") is None
    assert kinds.model_kinds(trainable=True) == ("dense", "sparse", "multi-vector")
    assert "cross-encoder" in kinds.model_kinds()


def test_each_kind_loads_by_its_loader_and_refuses_another(folders: dict[str, Path]) -> None:
    model, tokenizer = kinds.load_kind(str(folders["sparse"]))
    assert kinds.kind_of_model(model) == "sparse" and tokenizer is not None
    model, _ = kinds.load_kind(str(folders["multi-vector"]), device="cpu")
    assert kinds.kind_of_model(model) == "multi-vector"
    reranker, _ = kinds.load_kind(str(folders["cross-encoder"]))
    assert type(reranker).__name__ == "CrossEncoder"
    with pytest.raises(ValueError, match=r"expected a sparse model \(siamese-sparse\), got SiameseBertModel"):
        kinds.load_kind(str(folders["dense"]), "sparse")
    with pytest.raises(ValueError, match="kind='colbert'; accepted: dense, sparse, multi-vector, cross-encoder"):
        kinds.get_kind("colbert")


def test_a_new_kind_joins_by_one_registration(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    config = BertConfig(**TINY)
    config.model_type = "toy-kind"
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "config.json").write_text(config.to_json_string().replace('"bert"', '"toy-kind"'))
    assert kinds.kind_of_path(tmp_path / "toy") == "dense"  # unknown model_type: read as dense, until registered
    kinds.register_kind(kinds.ModelKind("toy", "toy-kind", lambda path, **options: (path, options), trainable=False))
    assert kinds.kind_of_path(tmp_path / "toy") == "toy"
    assert kinds.load_kind(str(tmp_path / "toy"), device="cpu") == (str(tmp_path / "toy"), {"device": "cpu"})
    assert "toy" not in kinds.model_kinds(trainable=True)
    with pytest.raises(ModuleNotFoundError):
        kinds.register_kind(kinds.ModelKind("broken", "broken", "no_such_package.module:load"))
    with pytest.raises(ValueError, match="expected a ModelKind"):
        kinds.register_kind("toy")  # type: ignore[arg-type]
