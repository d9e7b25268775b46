"""`export_model` / `hf-siamese export` before and around the writing: arguments refused before anything is written
(opset, calibration texts without static quantization), and the staging folder and swap of hf_siamese.storage, so
that what a killed export left (a staging folder, an output renamed aside) is mended by the next export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import SENTENCES, make_tiny_model

from hf_siamese import serving as export_module
from hf_siamese.cli import main
from hf_siamese.serving import export_model


@pytest.fixture
def model():
    return make_tiny_model(normalize=True)


def dead_pid() -> int:
    """The id of a process that has ended (a killed export's, for the staging folder's name)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_staging_folder_is_an_ordinary_folder(tmp_path, model, tiny_tokenizer):
    out = export_model(model, tmp_path / "out", tokenizer=tiny_tokenizer)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_staging_folder_of_a_killed_export_is_removed_by_the_next(tmp_path, model, tiny_tokenizer):
    stale = tmp_path / f".out.export-{dead_pid()}-0123abcd"
    (stale / "onnx").mkdir(parents=True)
    (stale / "onnx" / "model.onnx").write_bytes(b"half a graph")
    running = tmp_path / f".out.export-{os.getppid()}-89abcdef"  # a process that still runs: its export goes on
    running.mkdir()
    export_model(model, tmp_path / "out", tokenizer=tiny_tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name, "out"]


def test_a_kill_between_the_two_renames_is_mended_by_the_next_export(tmp_path, model, tiny_tokenizer):
    out = export_model(model, tmp_path / "out", tokenizer=tiny_tokenizer)
    (out / "old.txt").write_text("the earlier export")
    aside = tmp_path / ".out.replaced"
    out.rename(aside)  # killed after the old output was renamed aside, before the new one was renamed in
    with pytest.raises(FileExistsError, match="already exists"):
        export_model(model, out, tokenizer=tiny_tokenizer)
    assert (out / "old.txt").read_text() == "the earlier export" and not aside.exists()

    aside.mkdir()  # killed after the new output was renamed in, before the old one was deleted
    (aside / "old.txt").write_text("the export before")
    export_model(model, out, tokenizer=tiny_tokenizer, overwrite=True)
    assert not (out / "old.txt").exists() and (out / "modules.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


KILLED_EXPORT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from transformers import BertConfig
    from hf_siamese import SiameseBertConfig, SiameseBertModel
    from hf_siamese.serving import export

    def stuck(model, folder, tokenizer):
        (folder / "model.safetensors").write_bytes(b"0" * 1000)
        Path(sys.argv[2]).write_text(str(folder))
        time.sleep(300)

    export.write_plain_layout = stuck
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                        vocab_size=99, max_position_embeddings=64)
    export.export_model(SiameseBertModel(SiameseBertConfig(encoder_config=config)), sys.argv[1], tokenizer=object())
    """
)


def test_an_export_killed_while_writing_leaves_nothing_after_the_next(tmp_path, model, tiny_tokenizer):
    out, marker = tmp_path / "out", tmp_path.parent / f"{tmp_path.name}-staging.txt"
    process = subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, str(out), str(marker)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), process.stderr.read().decode() if process.poll() is not None else "no staging"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    staging = marker.read_text()
    assert os.path.isdir(staging) and not out.exists()
    export_model(model, out, tokenizer=tiny_tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("opset", [13, 21, 0, True, "17", 17.0, None])
def test_an_opset_the_exporter_does_not_take_is_refused_up_front(tmp_path, model, tiny_tokenizer, capfd, opset):
    with pytest.raises(ValueError) as caught:
        export_model(model, tmp_path / "out", format="onnx", tokenizer=tiny_tokenizer, opset=opset)
    message = str(caught.value)
    assert "\n" not in message and f"opset={opset!r}" in message, message
    assert "an int from 14 " in message and f" to {torch_max_opset()} " in message, message
    assert list(tmp_path.iterdir()) == []
    assert "graph" not in capfd.readouterr().out  # no torch IR dump


def torch_max_opset() -> int:
    from torch.onnx import _constants

    return _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET


def test_the_opset_range_is_what_the_installed_torch_exporter_writes():
    opsets = export_module.ONNX_OPSETS
    assert opsets[0] == 14  # scaled_dot_product_attention (the encoders' sdpa attention) needs 14
    assert opsets[-1] == torch_max_opset() and 17 in opsets  # 17: export_model's default


@pytest.mark.parametrize(
    ("format", "quantize"), [("onnx", "none"), ("onnx", "int8-dynamic"), ("sentence-transformers", "none")]
)
def test_calibration_texts_without_static_quantization_are_refused(tmp_path, model, tiny_tokenizer, format, quantize):
    with pytest.raises(ValueError, match=rf"calibration_texts is used only with quantize='int8-static'.*{quantize!r}"):
        export_model(
            model, tmp_path / "out", format=format, quantize=quantize, calibration_texts=SENTENCES,
            tokenizer=tiny_tokenizer,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_cli_calibration_without_static_quantization_is_refused(tmp_path, model, tiny_tokenizer, capsys):
    source = tmp_path / "model"
    model.save_pretrained(source, tokenizer=tiny_tokenizer)
    capsys.readouterr()
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "served"
    argv = ["export", "--model", str(source), "-o", str(out), "--format", "onnx", "--calibration", str(calibration)]
    for extra in ([], ["--quantize", "int8-dynamic"]):
        assert main([*argv, *extra]) == 1
        err = capsys.readouterr().err
        assert "--calibration is used only with --quantize int8-static" in err and err.count("\n") == 1, err
    assert not out.exists()
    assert main(["export", "--model", str(source), "-o", str(out), "--opset", "17"]) == 2  # no such option
    assert "unrecognized arguments: --opset" in capsys.readouterr().err
