"""Device choice: `resolve_device`, `encode(device=...)`, `load_model(device=...)` and the CLI's `--device`, with
`torch.cuda` mocked where a GPU is needed (no GPU runs here; benchmarks/gpu_check.py covers the real thing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import SENTENCES, make_tiny_model

from hf_siamese.cli import main
from hf_siamese.formats.loading import load_model
from hf_siamese.modeling.devices import resolve_device


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_auto_takes_this_process_gpu(two_gpus: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device(None) == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")  # accelerate launch / torchrun: one GPU per process
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


def test_auto_without_gpu_is_the_cpu(no_gpu: None) -> None:
    expected = "mps" if torch.backends.mps.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    ("device", "message"),
    [("cuda", "no CUDA GPU is available"), ("gpu0", "is not a device"), ("mps", "MPS is not available")],
)
def test_unavailable_device_is_a_clear_error(no_gpu: None, device: str, message: str) -> None:
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(ValueError, match=message) as error:
        resolve_device(device)
    assert repr(device) in str(error.value)


def test_gpu_index_beyond_the_count(two_gpus: None) -> None:
    with pytest.raises(ValueError, match=r"'cuda:2': only 2 CUDA GPU\(s\) here \(cuda:0..cuda:1\)"):
        resolve_device("cuda:2")


def test_encode_moves_the_model_to_the_device(tiny_tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_tiny_model()
    expected = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    moves = []
    real_to = torch.nn.Module.to

    def recording_to(self, *args, **kwargs):
        moves.append(args)
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", recording_to)
    # A device string equal to the model's own moves nothing and gives the same embeddings.
    torch.testing.assert_close(model.encode(SENTENCES, tokenizer=tiny_tokenizer, device="cpu"), expected)
    assert moves == []
    # Another device: the model goes there first (pretend the model sits on "meta" so that "cpu" differs).
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("meta")))
    model.encode(SENTENCES, tokenizer=tiny_tokenizer, device="cpu")
    assert moves and moves[0] == (torch.device("cpu"),)


def test_encode_refuses_a_missing_gpu(no_gpu: None, tiny_tokenizer) -> None:
    with pytest.raises(ValueError, match="no CUDA GPU is available"):
        make_tiny_model().encode(SENTENCES, tokenizer=tiny_tokenizer, device="cuda")


def _saved(tmp_path: Path, tiny_tokenizer) -> str:
    make_tiny_model().save_pretrained(tmp_path / "m")
    tiny_tokenizer.save_pretrained(tmp_path / "m")
    return str(tmp_path / "m")


def test_load_model_places_the_model(tmp_path: Path, tiny_tokenizer, no_gpu: None) -> None:
    model, tokenizer = load_model(_saved(tmp_path, tiny_tokenizer), device="cpu")
    assert model.device.type == "cpu" and not model.training and tokenizer is not None
    with pytest.raises(ValueError, match="no CUDA GPU"):
        load_model(_saved(tmp_path, tiny_tokenizer), device="cuda")


def test_int8_copy_stays_on_the_cpu(tmp_path: Path, tiny_tokenizer, two_gpus: None) -> None:
    path = _saved(tmp_path, tiny_tokenizer)
    model, _ = load_model(path, quantize="int8")  # auto: the CPU, where the int8 copy runs
    assert model.device.type == "cpu"
    with pytest.raises(ValueError, match="int8 copy for the CPU, but the device is cuda"):
        load_model(path, quantize="int8", device="cuda")


def test_cli_device_flag(tmp_path: Path, tiny_tokenizer, no_gpu: None, capsys) -> None:
    path = _saved(tmp_path, tiny_tokenizer)
    (tmp_path / "texts.txt").write_text("\n".join(SENTENCES))
    args = ["encode", str(tmp_path / "texts.txt"), "--model", path, "-o", str(tmp_path / "e.npy")]
    assert main([*args, "--device", "cpu"]) == 0
    assert main([*args, "--device", "cuda"]) == 1
    assert "no CUDA GPU is available" in capsys.readouterr().err
