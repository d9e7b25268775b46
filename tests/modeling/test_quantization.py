"""int8 dynamic quantization for CPU inference, and encode's parallel CPU batches."""

from __future__ import annotations

import pytest
import torch
from conftest import SENTENCES, make_tiny_model

from hf_siamese import quantize


def test_int8_copy_encodes_close_to_float_and_leaves_the_model_alone(tiny_tokenizer) -> None:
    model = make_tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reference = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    quantized = quantize(model)
    embeddings = quantized.encode(SENTENCES, tokenizer=tiny_tokenizer)
    assert embeddings.shape == reference.shape
    assert torch.nn.functional.cosine_similarity(embeddings, reference).min() > 0.95
    assert not torch.equal(embeddings, reference)  # int8 matmuls really ran
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    kinds = {name: type(module).__name__ for name, module in quantized.named_modules()}
    assert kinds["encoder.encoder.layer.0.attention.self.query"] == "Linear"  # the dynamic quantized Linear
    assert "quantized" in type(quantized.encoder.encoder.layer[0].attention.self.query).__module__
    # The FFN output projection stays float by default; keep_float=() quantizes it too.
    assert type(quantized.encoder.encoder.layer[0].output.dense) is torch.nn.Linear
    everything = quantize(model, keep_float=())
    assert type(everything.encoder.encoder.layer[0].output.dense) is not torch.nn.Linear


def test_quantized_copy_cannot_be_saved(tmp_path, tiny_tokenizer) -> None:
    quantized = quantize(make_tiny_model())
    with pytest.raises(ValueError, match="int8 quantized copy"):
        quantized.save_pretrained(tmp_path / "q", tokenizer=tiny_tokenizer)
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "int4"}, ValueError, r"mode='int4' is not supported; accepted: int8"),
        ({"keep_float": "output"}, TypeError, r"keep_float='output' must be a sequence"),
        ({"keep_float": [r"."]}, ValueError, "no linear layer left"),
    ],
)
def test_bad_quantize_arguments(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        quantize(make_tiny_model(), **kwargs)


def test_quantize_needs_a_float32_cpu_model() -> None:
    with pytest.raises(ValueError, match="needs a float32 model"):
        quantize(make_tiny_model().to(torch.bfloat16))


def test_parallel_cpu_batches_give_the_same_embeddings_and_restore_threads(tiny_tokenizer) -> None:
    model = make_tiny_model()
    threads = torch.get_num_threads()
    texts = SENTENCES * 7
    one = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=4, cpu_workers=1)
    two = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=4, cpu_workers=2)
    three = model.encode(texts, tokenizer=tiny_tokenizer, batch_size=4, cpu_workers=3, dtype=torch.bfloat16)
    assert (one - two).abs().max() < 1e-6
    assert torch.nn.functional.cosine_similarity(one, three).min() > 0.99
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_cpu_workers(tiny_tokenizer, bad) -> None:
    with pytest.raises(ValueError, match=r"cpu_workers=.* must be a positive int"):
        make_tiny_model().encode(SENTENCES, tokenizer=tiny_tokenizer, cpu_workers=bad)


def test_bf16_encode_on_cpu_runs_a_bf16_copy_and_keeps_the_model_float32(tiny_tokenizer) -> None:
    from hf_siamese.modeling.low_precision import LOW_PRECISION_COPY

    model = make_tiny_model()
    model.tokenizer = tiny_tokenizer
    texts = SENTENCES * 4
    batches = len(texts) // 2
    assert batches >= LOW_PRECISION_COPY
    reference = model.encode(texts, batch_size=2)
    copied = model.encode(texts, batch_size=2, dtype=torch.bfloat16)  # a bf16 copy (enough batches)
    autocast = model.encode(texts[:4], batch_size=2, dtype=torch.bfloat16)  # two batches: autocast
    assert torch.nn.functional.cosine_similarity(copied, reference).min() > 0.99
    assert torch.nn.functional.cosine_similarity(autocast, reference[:4]).min() > 0.99
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.tokenizer is tiny_tokenizer
    assert torch.equal(model.encode(texts, batch_size=2), reference)
