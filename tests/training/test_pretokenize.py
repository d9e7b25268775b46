"""The train set tokenized once before training: the padded batches equal the on-the-fly collator's, the training run
equals the run that tokenizes every batch, and the tokenized set is fingerprinted by every tokenization setting."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, make_tiny_model
from datasets import Dataset
from helpers import make_args, scored_pairs
from transformers import BertTokenizer

from hf_siamese import SiamesePairCollator, SiameseTrainer, losses
from hf_siamese.training.pretokenize import TOKENS, TokenizedRows, pad_tokenized, tokenize_dataset


def tokenizer(side: str = "right") -> BertTokenizer:
    tok = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)
    tok.padding_side = side
    return tok


def triplets() -> Dataset:
    return Dataset.from_dict(
        {
            "anchor": ["a man plays guitar", "the dog", "two cats eat bread today in the park"],
            "positive": ["someone plays music", "a dog runs", "cats eat"],
            "negative": ["the stock market fell", "rain", "a red car"],
        }
    )


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize(
    ("rows", "settings"),
    [
        (scored_pairs(6), {}),
        (triplets(), {"prompts": {"anchor": "query :", "positive": "a"}, "lowercase": True}),
        (triplets(), {"max_length": 4}),
        (triplets(), {"pad_to_multiple_of": 8}),
        (Dataset.from_dict({"premise": ["a man", "the dog runs"], "hypothesis": ["a", "b c"], "label": [0, 2]}), {}),
    ],
)
def test_padded_tokenized_rows_equal_the_collators_batch(rows, settings, side) -> None:
    collator = SiamesePairCollator(tokenizer(side), **settings)
    expected = collator(list(rows))
    tokenized = tokenize_dataset(collator, rows)
    assert f"{TOKENS}0" in tokenized.column_names and "anchor" not in tokenized.column_names
    # The collator sees tokenized rows and only pads them: as a list of rows, and as the Arrow batch the train loader
    # fetches (TokenizedRows), here in another order than the set's.
    order = list(range(len(rows)))[::-1]
    expected_reversed = collator([rows[i] for i in order])
    arrow = collator(TokenizedRows(tokenized).__getitems__(order))
    for got, wanted in ((collator(list(tokenized)), expected), (arrow, expected_reversed)):
        assert got.keys() == wanted.keys()
        for key, value in wanted.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got[key], value), key
                assert got[key].dtype == value.dtype, key
            else:
                assert got[key] == value, key
        assert ("text_lengths" in got) == (side == "right")


def test_fingerprint_follows_every_setting() -> None:
    rows = triplets()
    base = tokenize_dataset(SiamesePairCollator(tokenizer(), max_length=16), rows)._fingerprint
    assert tokenize_dataset(SiamesePairCollator(tokenizer(), max_length=16), rows)._fingerprint == base
    for other in (
        SiamesePairCollator(tokenizer(), max_length=8),
        SiamesePairCollator(tokenizer(), max_length=16, prompts="a"),
        SiamesePairCollator(tokenizer(), max_length=16, lowercase=True),
    ):
        assert tokenize_dataset(other, rows)._fingerprint != base
    changed = rows.map(lambda row: {"anchor": row["anchor"] + " today"})
    assert tokenize_dataset(SiamesePairCollator(tokenizer(), max_length=16), changed)._fingerprint != base


@pytest.mark.parametrize("loss", ["cosine", "mnr"])
def test_training_on_tokenized_rows_equals_tokenizing_each_batch(loss, tmp_path) -> None:
    rows = scored_pairs(48, seed=5)
    if loss == "mnr":
        rows = rows.remove_columns("score").rename_columns({"sentence1": "anchor", "sentence2": "positive"})
        rows = rows.map(lambda row, i: {"anchor": f"{row['anchor']} {i}"}, with_indices=True)
    loss_object = losses.CosineSimilarityLoss(score_range=(0, 5)) if loss == "cosine" else loss
    parameters = []
    for pretokenize in (True, False):
        model = make_tiny_model()
        args = make_args(tmp_path, max_steps=4, per_device_train_batch_size=8)
        trainer = SiameseTrainer(
            model=model,
            args=args,
            train_dataset=rows,
            processing_class=tokenizer(),
            loss=loss_object,
            pretokenize=pretokenize,
        )
        assert (f"{TOKENS}0" in trainer.training_rows().column_names) == pretokenize
        trainer.train()
        parameters.append({n: p.detach().clone() for n, p in model.named_parameters()})
    for name, value in parameters[0].items():
        assert torch.allclose(value, parameters[1][name], atol=1e-6), name


def test_a_collator_subclass_with_its_own_call_gets_raw_rows(tmp_path) -> None:
    class Spy(SiamesePairCollator):
        def __call__(self, rows):
            assert "sentence1" in rows[0]
            return super().__call__(rows)

    args = make_args(tmp_path, max_steps=1)
    trainer = SiameseTrainer(
        model=make_tiny_model(),
        args=args,
        train_dataset=scored_pairs(16),
        data_collator=Spy(tokenizer()),
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    assert trainer.training_rows() is trainer.train_dataset
    trainer.train()


def test_pad_tokenized_keeps_the_label_checks() -> None:
    collator = SiamesePairCollator(tokenizer())
    rows = tokenize_dataset(collator, Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": ["x"]}))
    with pytest.raises(ValueError, match="no label2id"):
        pad_tokenized(collator, list(rows))
