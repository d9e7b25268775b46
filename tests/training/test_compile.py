"""`TrainingArguments(torch_compile=True)`: the trainers compile the encoder's layers with dynamic shapes, train the
same parameters as without it, and compile a bounded number of graphs however the batches' lengths vary. Runs with
dynamo's "eager" backend (traces and guards as inductor does, generates no code), so it takes seconds."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, make_tiny_model
from helpers import make_args, scored_pairs
from transformers import BertConfig, BertForSequenceClassification

from hf_siamese import SiameseTrainer
from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer
from hf_siamese.modeling.compilation import compile_layers, encoder_layers


@pytest.fixture
def graph_count():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield lambda: counters["stats"]["unique_graphs"]
    torch._dynamo.reset()


def _unit_scores(n: int):
    return scored_pairs(n).map(lambda row: {"score": row["score"] / 5.0})


def _train(tmp_path, tokenizer, compile_: bool) -> SiameseTrainer:
    model = make_tiny_model(seed=3).train()
    args = make_args(
        tmp_path, num_train_epochs=1, torch_compile=compile_, torch_compile_backend="eager" if compile_ else None
    )
    trainer = SiameseTrainer(model=model, args=args, train_dataset=_unit_scores(32), processing_class=tokenizer)
    trainer.train()
    return trainer


def test_siamese_compiled_layers_train_the_same_parameters(tmp_path, tiny_tokenizer, graph_count) -> None:
    plain = _train(tmp_path / "plain", tiny_tokenizer, False)
    compiled = _train(tmp_path / "compiled", tiny_tokenizer, True)
    assert compiled.args.torch_compile is False  # the Trainer does not compile the whole model as well
    layers = encoder_layers(compiled.model.encoder)
    assert all(hasattr(layer, "_compiled_call_impl") and layer._compiled_call_impl is not None for layer in layers)
    for (name, a), (_, b) in zip(plain.model.named_parameters(), compiled.model.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


def test_new_lengths_reuse_the_compiled_graph(graph_count) -> None:
    plain, compiled = make_tiny_model(seed=1), make_tiny_model(seed=1)
    assert compile_layers(compiled.encoder, backend="eager") == 2
    for length in (5, 9, 13, 20, 31):
        ids = torch.randint(5, 90, (3, length))
        mask = torch.ones(3, length, dtype=torch.long)
        mask[0, length // 2 :] = 0
        expected = plain.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        got = compiled.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(got, expected)
    # 5 lengths through 2 identical layers: one dynamic graph (static shapes compile one per length: 5).
    assert graph_count() == 1


def test_cross_encoder_compiles_its_layers(tmp_path, tiny_tokenizer, graph_count) -> None:
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        vocab_size=len(VOCAB) + 10,
        num_labels=1,
    )
    model = BertForSequenceClassification(config)
    pairs = _unit_scores(16)
    args = make_args(tmp_path, num_train_epochs=1, torch_compile=True, torch_compile_backend="eager")
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=pairs, processing_class=tiny_tokenizer)
    trainer.train()
    assert all(layer._compiled_call_impl is not None for layer in encoder_layers(model))
    assert graph_count() >= 1


def test_a_model_without_layers_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="Linear has no stack of transformer layers"):
        compile_layers(torch.nn.Linear(2, 2))


def test_encoder_layers_finds_bert_layers() -> None:
    model = BertForSequenceClassification(
        BertConfig(hidden_size=8, num_hidden_layers=3, num_attention_heads=2, intermediate_size=8, vocab_size=20)
    )
    assert encoder_layers(model) is model.bert.encoder.layer
