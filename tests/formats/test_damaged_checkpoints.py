"""Checkpoints that are damaged or put together from parts that do not belong together are refused with an error
that names the file: truncated safetensors weights (every path that reads weights: `from_pretrained`, `AutoModel`,
`load_model`, `from_encoder`, the sentence-transformers reader's Dense layers) and a Pooling module whose width is not
the encoder's."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import SENTENCES, make_tiny_model
from helpers import BLOCKED_IMPORT, minilm_path, run_isolated
from transformers import AutoModel

from hf_siamese import SiameseBertModel
from hf_siamese.formats.loading import load_model
from hf_siamese.formats.sentence_transformers_read import SentenceTransformersFormatError
from hf_siamese.serving import export_model

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


def _truncate(path: Path, size: int = 1000) -> str:
    """Keep the first `size` bytes of `path` (a download or copy cut short); a pattern matching the file named in
    an error that says so."""
    path.write_bytes(path.read_bytes()[:size])
    return rf"{re.escape(str(path))}: .*truncated"


@pytest.mark.parametrize("damaged", ["0_Transformer/model.safetensors", "siamese_head.safetensors"])
def test_truncated_weights_of_a_saved_model_name_the_file(saved: Path, damaged: str) -> None:
    pattern = _truncate(saved / damaged)
    for load in (SiameseBertModel.from_pretrained, AutoModel.from_pretrained, lambda path: load_model(str(path))):
        with pytest.raises(OSError, match=pattern):
            load(saved)


@pytest.mark.parametrize("damaged", ["0_Transformer/model.safetensors", "2_Dense/model.safetensors"])
def test_truncated_weights_read_by_from_encoder_name_the_file(saved: Path, damaged: str) -> None:
    pattern = _truncate(saved / damaged)
    with pytest.raises(OSError, match=pattern):
        SiameseBertModel.from_encoder(saved)


def test_truncated_weights_name_the_file_in_remote_code(saved: Path, tmp_path: Path) -> None:
    """Without hf_siamese (AutoModel with trust_remote_code), the copied modeling code names the file too."""
    _truncate(saved / "0_Transformer" / "model.safetensors")
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        from transformers import AutoModel
        try:
            AutoModel.from_pretrained({str(saved)!r}, trust_remote_code=True)
        except OSError as error:
            print("ERROR", error)
        """
    )
    out = run_isolated(script, tmp_path)
    assert f"ERROR {saved}/0_Transformer/model.safetensors: " in out and "truncated" in out, out


@pytest.mark.slow
def test_real_minilm_truncated_or_with_another_pooling_width(tmp_path: Path) -> None:
    source = Path(minilm_path())
    folder = tmp_path / "minilm"
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    with open(source / "model.safetensors", "rb") as weights:
        (folder / "model.safetensors").write_bytes(weights.read(1000))
    pattern = rf"{re.escape(str(folder / 'model.safetensors'))}: .*truncated"
    for load in (SiameseBertModel.from_encoder, lambda path: load_model(str(path))):
        with pytest.raises(OSError, match=pattern):
            load(folder)

    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(source / "model.safetensors")
    path = _set_pooling_width(folder, 768)
    with pytest.raises(SentenceTransformersFormatError, match=rf"{path}: word_embedding_dimension=768, .* is 384"):
        SiameseBertModel.from_encoder(folder)
