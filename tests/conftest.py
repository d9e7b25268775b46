"""Shared fixtures: a tiny vocabulary, tokenizer and random encoders (hidden 32, 2 layers) so tests run in seconds."""

from __future__ import annotations

import os

import pytest
from transformers import BertConfig, BertTokenizer, DistilBertConfig, RobertaConfig

import hf_siamese

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = (
    "a man woman child dog cat is are plays playing played guitar piano music song sings singing the an on in "
    "of and someone people two three red blue car bus train road rides riding cooks cooking food kitchen eats "
    "eating bread soup market stock fell rose today price weather rain sun sunny cold hot city walks walking "
    "park ball football team wins won game computer runs code screen new old big small fast slow . , ! ?"
).split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(WORDS)]
VOCAB_SIZE = 99
assert len(VOCAB) <= VOCAB_SIZE

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=VOCAB_SIZE)


def tiny_encoder_config(model_type: str = "bert"):
    if model_type == "bert":
        return BertConfig(**TINY, max_position_embeddings=64)
    if model_type == "roberta":
        return RobertaConfig(**TINY, max_position_embeddings=66, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    if model_type == "distilbert":
        return DistilBertConfig(
            vocab_size=VOCAB_SIZE, dim=32, n_layers=2, n_heads=2, hidden_dim=37, max_position_embeddings=64
        )
    raise ValueError(model_type)


def make_tiny_model(model_type: str = "bert", seed: int = 0, **config_kwargs) -> hf_siamese.SiameseBertModel:
    import torch

    torch.manual_seed(seed)
    config = hf_siamese.SiameseBertConfig(encoder_config=tiny_encoder_config(model_type), **config_kwargs)
    return hf_siamese.SiameseBertModel(config).eval()


@pytest.fixture(autouse=True)
def native_low_precision_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """bfloat16/float16 encode tests run the low-precision paths on every CPU, also on one that only emulates those
    dtypes (where encode() would run float32 instead): the tests check behaviour, not this machine's instructions.
    tests/test_encode_dtype.py undoes this to test the fallback itself."""
    import hf_siamese.modeling.low_precision

    monkeypatch.setattr(hf_siamese.modeling.low_precision, "native_low_precision", lambda dtype: True)


@pytest.fixture(scope="session")
def tiny_tokenizer() -> BertTokenizer:
    return BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)


@pytest.fixture
def tiny_model() -> hf_siamese.SiameseBertModel:
    return make_tiny_model()


SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays music.",
    "The stock market fell today.",
    "Two dogs are playing in the park.",
    "A woman cooks soup in the kitchen.",
]

from conftest_hub import fake_hub  # noqa: E402, F401  (the local Hub-API server fixture)
