"""The remote-code set as saved: `save_pretrained` copies exactly the modules tests/test_layout.py checks
(REMOTE_CODE: the model's file and, transitively, every sibling it imports), each small enough to read."""

from __future__ import annotations

from pathlib import Path

from conftest import make_tiny_model
from test_layout import PACKAGE, REMOTE_CODE


def test_save_pretrained_copies_exactly_the_remote_code_set(tmp_path: Path, tiny_tokenizer) -> None:
    make_tiny_model().save_pretrained(tmp_path, tokenizer=tiny_tokenizer)
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted(REMOTE_CODE)
    for name in REMOTE_CODE:  # copies, byte for byte, of the package's files
        assert (tmp_path / f"{name}.py").read_bytes() == (PACKAGE / "modeling" / f"{name}.py").read_bytes(), name


def test_every_remote_code_module_is_under_400_lines() -> None:
    lengths = {name: len((PACKAGE / "modeling" / f"{name}.py").read_text().splitlines()) for name in REMOTE_CODE}
    assert max(lengths.values()) <= 400, lengths


# The multi-vector model kind's remote code: its own files and the dense kind's batch runner (batching), importing
# only each other and public libraries.
MULTIVECTOR_REMOTE_CODE = (
    "configuration_multivector",
    "modeling_multivector",
    "multivector_scoring",
    "text_encoding",
    "batching",
    "low_precision",
)


def test_a_multivector_model_saves_exactly_its_own_remote_code_set(tmp_path: Path, tiny_tokenizer) -> None:
    import ast

    from conftest import tiny_encoder_config
    from test_layout import imported_modules

    from hf_siamese import MultiVectorConfig, MultiVectorModel

    MultiVectorModel(MultiVectorConfig(encoder_config=tiny_encoder_config())).save_pretrained(tmp_path)
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted(MULTIVECTOR_REMOTE_CODE)
    for name in MULTIVECTOR_REMOTE_CODE:
        path = PACKAGE / "modeling" / f"{name}.py"
        assert (tmp_path / f"{name}.py").read_bytes() == path.read_bytes(), name
        assert len(path.read_text().splitlines()) <= 400, name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
        assert all(n.level == 1 and n.module in MULTIVECTOR_REMOTE_CODE for n in relative), name
        absolute = [t for t, _ in imported_modules(path) if not t.startswith("hf_siamese.modeling.")]
        assert not absolute, (name, absolute)
