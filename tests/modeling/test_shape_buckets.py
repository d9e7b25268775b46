"""CUDA graphs' step: packed batches rounded up to shape buckets (few sizes), the same embeddings and training as
unbucketed, layers compiled with static shapes once a bucket (what CUDA graphs replay on a GPU), and when it is on.

Compiling runs with dynamo's "eager" backend (it traces and guards as inductor does, generating no code), so the
tests take seconds; flash attention's varlen kernel is stood in for by SDPA per segment (test_packing_varlen.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import make_tiny_model
from helpers import make_args, scored_pairs
from test_packing import PAIRS, TRIPLETS
from test_packing_varlen import _batch, _embeddings, flash_calls  # noqa: F401  (the fixture)

from hf_siamese import SiameseTrainer, SiameseTrainingArguments
from hf_siamese.modeling.shape_buckets import ShapeBuckets, bucket_value, previous_bucket
from hf_siamese.training.trainer_setup import text_token_limit, uses_cuda_graphs


def test_buckets_are_few_and_pad_little() -> None:
    sizes = sorted({bucket_value(n) for n in range(1, 40_000)})
    assert all(size % 64 == 0 for size in sizes)
    assert len([s for s in sizes if 8192 <= s < 16384]) == 16  # 16 an octave
    for n in range(2_000, 40_000, 7):
        value = bucket_value(n)
        assert value >= n and (value - n) / value <= 1 - 2 ** (-1 / 16) + 64 / n
        assert previous_bucket(value) < n  # n is in (previous, value]
    shares = [(bucket_value(n) - n) / bucket_value(n) for n in range(4_000, 40_000)]
    assert sum(shares) / len(shares) < 0.03


def test_pad_segments_depend_on_the_bucket_alone() -> None:
    buckets = ShapeBuckets(text_tokens=128)
    for bucket in (bucket_value(n) for n in (3_000, 6_000, 17_000)):
        counts = set()
        for total in range(previous_bucket(bucket) + 1, bucket + 1):
            pads = buckets.pad_segments(bucket, total)
            assert sum(pads) == bucket - total and max(pads) <= 128 and min(pads) >= 0
            counts.add(len(pads))
        assert len(counts) == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_bad_bucket_settings_are_refused_by_name(value) -> None:
    with pytest.raises(ValueError, match=r"text_tokens=.* must be a positive whole number"):
        ShapeBuckets(text_tokens=value)


def test_bad_shape_buckets_option_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"cuda_graphs='yes'; accepted: True, False, None"):
        SiameseTrainingArguments(output_dir=str(tmp_path), cuda_graphs="yes")


@pytest.mark.parametrize("rows", [PAIRS, TRIPLETS])
def test_bucketed_block_mask_rows_give_the_same_embeddings(tiny_tokenizer, rows) -> None:
    model = make_tiny_model()
    batch = _batch(tiny_tokenizer, rows)
    plain = _embeddings(model, batch, "sdpa", True)
    model.encoder.shape_buckets = ShapeBuckets(text_tokens=40, per_octave=2, multiple=4)
    bucketed = _embeddings(model, batch, "sdpa", True)
    torch.testing.assert_close(bucketed, plain, rtol=1e-5, atol=1e-6)


def test_bucketed_varlen_row_gives_the_same_embeddings_and_fixed_shapes(tiny_tokenizer, flash_calls) -> None:  # noqa: F811
    model = make_tiny_model()
    model.encoder.shape_buckets = ShapeBuckets(text_tokens=64, multiple=16)
    for rows in (PAIRS, TRIPLETS):
        batch = _batch(tiny_tokenizer, rows)
        lengths = batch["attention_mask"].sum(-1).reshape(-1).tolist()
        flash_calls.clear()
        bucketed = _embeddings(model, batch, "flash_attention_2", True)
        padded = _embeddings(model, batch, "sdpa", False)
        assert (bucketed - padded).abs().max() < 1e-5
        bucket = bucket_value(sum(lengths), 16, 16)
        for call in flash_calls:
            assert call["tokens"] == bucket  # the row is the bucket's length
            assert call["max_seqlen"] == (64, 64)  # the kernel's longest segment is fixed
            bounds = call["cu_seqlens"].tolist()
            assert bounds[: len(lengths) + 1] == torch.tensor([0, *lengths]).cumsum(0).tolist()
            assert bounds[-1] == bucket and all(b - a <= 64 for a, b in zip(bounds, bounds[1:], strict=False))


def _unit_scores(n: int):
    return scored_pairs(n).map(lambda row: {"score": row["score"] / 5.0})


_SETTINGS = ("output_dir", "per_device_train_batch_size", "num_train_epochs", "learning_rate", "use_cpu", "report_to")
_SETTINGS += ("logging_steps", "save_strategy", "seed", "disable_tqdm")


def _train(tmp_path, tokenizer, **options) -> tuple[SiameseTrainer, list[float]]:
    model = make_tiny_model(seed=3).train()
    for module in model.modules():  # dropout masks are drawn per shape: bucketed rows would draw others
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    settings = make_args(tmp_path, num_train_epochs=2, per_device_train_batch_size=4).to_dict()
    args = SiameseTrainingArguments(**{k: settings[k] for k in _SETTINGS}, **options)
    trainer = SiameseTrainer(model=model, args=args, train_dataset=_unit_scores(24), processing_class=tokenizer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return trainer, losses


@pytest.fixture
def graph_count():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield lambda: counters["stats"]["unique_graphs"]
    torch._dynamo.reset()


def test_static_bucketed_step_trains_like_the_plain_one(tmp_path, tiny_tokenizer, graph_count) -> None:
    plain, plain_losses = _train(tmp_path / "plain", tiny_tokenizer)
    assert not plain.graph_steps and getattr(plain.model.encoder, "shape_buckets", None) is None
    compiled, losses = _train(
        tmp_path / "static", tiny_tokenizer, torch_compile=True, torch_compile_backend="eager", cuda_graphs=True
    )
    assert compiled.graph_steps and compiled.model.encoder.shape_buckets.text_tokens == 64
    assert len(losses) == len(plain_losses) == 12
    # The same loss curve (float32: to rounding) and the same trained parameters.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(plain_losses), rtol=1e-4, atol=1e-5)
    for (name, a), (_, b) in zip(plain.model.named_parameters(), compiled.model.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    # Static shapes: one graph a bucket met (the rows of 64-token capacity, bucketed), far fewer than the steps.
    assert 1 <= graph_count() <= 4


def test_a_cuda_graph_mode_turns_graphs_on(tmp_path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    for mode, expected in ((None, False), ("reduce-overhead", True), ("max-autotune", True), ("default", False)):
        args = make_args(tmp_path, torch_compile=True, torch_compile_backend="eager", torch_compile_mode=mode)
        trainer = SiameseTrainer(model=model, args=args, train_dataset=_unit_scores(8), processing_class=tiny_tokenizer)
        assert trainer.graph_steps is expected, mode
        assert (getattr(model.encoder, "shape_buckets", None) is not None) is expected, mode
        model.encoder.shape_buckets = None
        torch._dynamo.reset()


def _settings(device: str = "cuda", bf16: bool = True, world_size: int = 1, **extra) -> SimpleNamespace:
    return SimpleNamespace(device=torch.device(device), bf16=bf16, fp16=False, world_size=world_size, n_gpu=1, **extra)


def test_graphs_by_default_only_where_they_measured_fastest(monkeypatch) -> None:
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "triton" else found(name))
    varlen, sdpa = make_tiny_model().encoder, make_tiny_model().encoder
    varlen.config._attn_implementation = "varlen_attn"
    assert uses_cuda_graphs(_settings(), None, varlen)  # bf16, one CUDA GPU, the varlen kernel
    assert not uses_cuda_graphs(_settings(device="cpu"), None, varlen)
    assert not uses_cuda_graphs(_settings(bf16=False), None, varlen)  # fp32 keeps SDPA's block mask
    assert not uses_cuda_graphs(_settings(world_size=2), None, varlen)  # several processes: not measured
    assert not uses_cuda_graphs(_settings(gradient_checkpointing=True), None, varlen)  # recomputation: not measured
    assert not uses_cuda_graphs(_settings(), None, sdpa)
    assert not uses_cuda_graphs(_settings(), None, None)  # trains padded
    assert not uses_cuda_graphs(_settings(), {"backend": None, "mode": None}, varlen)  # torch_compile: dynamic layers
    assert not uses_cuda_graphs(_settings(cuda_graphs=False), None, varlen)
    assert uses_cuda_graphs(_settings(device="cpu", cuda_graphs=True), None, sdpa)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "triton" else found(name))
    assert not uses_cuda_graphs(_settings(), None, varlen)  # no Triton (inductor's GPU kernels): the plain step


def test_cuda_graphs_on_a_padded_model_is_refused(tmp_path, tiny_tokenizer) -> None:
    model = make_tiny_model()
    model.packing = False
    settings = make_args(tmp_path).to_dict()
    args = SiameseTrainingArguments(**{k: settings[k] for k in _SETTINGS}, cuda_graphs=True)
    with pytest.raises(ValueError, match="cuda_graphs=True: this model trains padded"):
        SiameseTrainer(model=model, args=args, train_dataset=_unit_scores(8), processing_class=tiny_tokenizer)


def test_text_token_limit_reads_the_collator(tiny_tokenizer) -> None:
    from hf_siamese.cross_encoder.collator import CrossEncoderCollator
    from hf_siamese.training.collator import SiamesePairCollator

    assert text_token_limit(SiamesePairCollator(tiny_tokenizer, max_length=20)) == 20
    assert text_token_limit(SiamesePairCollator(tiny_tokenizer)) == 64  # the tokenizer's model_max_length
    assert text_token_limit(CrossEncoderCollator(tiny_tokenizer, max_length=33)) == 33
    assert text_token_limit(CrossEncoderCollator(tiny_tokenizer)) == 64
    assert math.isfinite(text_token_limit(object()))


def test_cross_encoder_trains_the_same_with_buckets(tmp_path, tiny_tokenizer) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    from hf_siamese import CrossEncoderTrainingArguments
    from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer

    trained = []
    for buckets in (False, True):
        torch.manual_seed(0)
        config = BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=99,
            num_labels=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        model = BertForSequenceClassification(config)
        settings = make_args(tmp_path / str(buckets), num_train_epochs=1).to_dict()
        args = CrossEncoderTrainingArguments(
            **{k: settings[k] for k in _SETTINGS},
            cuda_graphs=buckets,
            torch_compile=buckets,
            torch_compile_backend="eager",
        )
        trainer = CrossEncoderTrainer(
            model=model, args=args, train_dataset=_unit_scores(16), processing_class=tiny_tokenizer
        )
        trainer.train()
        assert (getattr(model.bert, "shape_buckets", None) is not None) is buckets
        trained.append(model)
    for (name, a), (_, b) in zip(trained[0].named_parameters(), trained[1].named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
