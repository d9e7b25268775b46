"""Checkpoints that are damaged or put together from parts that do not belong together are refused with an error
that names the file: truncated safetensors weights (every path that reads weights: `from_pretrained`, `AutoModel`,
`load_model`, `from_encoder`, the sentence-transformers reader's Dense layers) and a Pooling module whose width is not
the encoder's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SENTENCES, make_tiny_model

from hf_siamese import SiameseBertModel
from hf_siamese.formats.export import export_model
from hf_siamese.formats.sentence_transformers_read import SentenceTransformersFormatError

DENSE = [{"in_features": 32, "out_features": 24, "bias": True, "activation": "tanh"}]


@pytest.fixture
def saved(tmp_path: Path, tiny_tokenizer) -> Path:
    """A saved SiameseBertModel: our config.json plus the sentence-transformers layout (0_Transformer, 1_Pooling,
    2_Dense)."""
    make_tiny_model(projections=DENSE).save_pretrained(tmp_path / "saved", tokenizer=tiny_tokenizer)
    return tmp_path / "saved"


def _set_pooling_width(folder: Path, width: int) -> Path:
    path = folder / "1_Pooling" / "config.json"
    config = json.loads(path.read_text())
    config["word_embedding_dimension"] = width
    path.write_text(json.dumps(config))
    return path


def test_a_pooling_width_that_is_not_the_encoders_is_refused(saved: Path, tmp_path: Path, tiny_tokenizer) -> None:
    path = _set_pooling_width(saved, 768)
    pattern = rf"{path}: word_embedding_dimension=768, but the encoder's hidden size is 32 \(.*0_Transformer/config"
    with pytest.raises(SentenceTransformersFormatError, match=pattern):
        SiameseBertModel.from_encoder(saved)

    exported = export_model(make_tiny_model(), tmp_path / "exported", tokenizer=tiny_tokenizer)  # encoder at the root
    path = _set_pooling_width(exported, 384)
    with pytest.raises(SentenceTransformersFormatError, match=rf"=384, but .* is 32 \({exported}/config\.json\)"):
        SiameseBertModel.from_encoder(exported)


def test_the_matching_pooling_width_loads(saved: Path) -> None:
    model = SiameseBertModel.from_encoder(saved)
    assert model.encode(SENTENCES).shape == (len(SENTENCES), 24)
