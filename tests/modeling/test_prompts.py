"""Prompts: per-column prompts in the collator and the trainer give the embeddings `encode(..., prompt=...)` gives,
with the prompt in or out of the pooling, and bad prompts are refused with a clear error."""

from __future__ import annotations

import pytest
import torch
from conftest import SENTENCES, make_tiny_model
from datasets import Dataset
from transformers import TrainingArguments

from hf_siamese import SiamesePairCollator, SiameseTrainer
from hf_siamese.modeling.encoding import prompt_token_count
from hf_siamese.modeling.modeling_siamese import pool_token_states

PROMPTS = {"anchor": "the weather : ", "positive": "a new song : "}
ROWS = [{"anchor": a, "positive": p} for a, p in zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1], strict=True)]


def test_prompt_token_count_skips_the_trailing_separator(tiny_tokenizer) -> None:
    # [CLS] the weather : [SEP] -> the prompt takes [CLS] + 3 words at the start of an input.
    assert prompt_token_count(tiny_tokenizer, "the weather : ") == 4
    assert prompt_token_count(tiny_tokenizer, "") == 1


def test_pooling_leaves_the_prompt_out_with_left_and_right_padding() -> None:
    states = torch.arange(1.0, 7.0).view(1, 6, 1).repeat(2, 1, 1)
    right = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    # Two prompt tokens: the right-padded row keeps positions 3-4, the left-padded row positions 5-6.
    assert pool_token_states(states, right, "mean", prompt_length=2)[:, 0].tolist() == [3.5, 4.5]
    assert pool_token_states(states, left, "mean", prompt_length=2)[:, 0].tolist() == [5.5, 4.5]
    assert pool_token_states(states, right, "cls", prompt_length=2)[:, 0].tolist() == [3.0, 3.0]
    assert pool_token_states(states, left, "lasttoken", prompt_length=2)[:, 0].tolist() == [6.0, 6.0]
    per_row = torch.tensor([1, 3])
    assert pool_token_states(states, right, "mean", prompt_length=per_row)[:, 0].tolist() == [3.0, 5.0]


@pytest.mark.parametrize("include_prompt", [True, False])
def test_collator_prompts_match_encode(include_prompt: bool, tiny_tokenizer) -> None:
    model = make_tiny_model(include_prompt=include_prompt)
    collator = SiamesePairCollator(tiny_tokenizer, prompts=PROMPTS)
    batch = collator(ROWS)
    assert batch["prompt_length"].tolist() == [[4, 5]] * len(ROWS)  # [CLS] + 3 words, [CLS] + 4 words
    first_ids = batch["input_ids"][0, 0, :4].tolist()
    assert first_ids == tiny_tokenizer("the weather :")["input_ids"][:4]
    with torch.no_grad():
        grouped = model(**batch).sentence_embedding
    anchors = model.encode([r["anchor"] for r in ROWS], tokenizer=tiny_tokenizer, prompt=PROMPTS["anchor"])
    positives = model.encode([r["positive"] for r in ROWS], tokenizer=tiny_tokenizer, prompt=PROMPTS["positive"])
    assert torch.allclose(grouped[:, 0], anchors, atol=1e-5)
    assert torch.allclose(grouped[:, 1], positives, atol=1e-5)
    plain = model.encode([r["anchor"] for r in ROWS], tokenizer=tiny_tokenizer)
    assert not torch.allclose(plain, anchors, atol=1e-3)  # the prompt does change the embedding


def test_one_prompt_for_every_column(tiny_tokenizer) -> None:
    batch = SiamesePairCollator(tiny_tokenizer, prompts="the weather : ")(ROWS)
    assert batch["input_ids"][:, :, 1].unique().tolist() == [tiny_tokenizer.convert_tokens_to_ids("the")]


def test_collator_refuses_bad_prompts(tiny_tokenizer) -> None:
    with pytest.raises(ValueError, match=r"prompts name columns \['query'\] .*text columns: \['anchor', 'positive'\]"):
        SiamesePairCollator(tiny_tokenizer, prompts={"query": "x "})(ROWS)
    with pytest.raises(ValueError, match=r"prompts=\{'anchor': 3\} must be a string or a dict"):
        SiamesePairCollator(tiny_tokenizer, prompts={"anchor": 3})


def test_lowercasing_follows_the_model(tiny_tokenizer) -> None:
    model = make_tiny_model(do_lower_case=True)
    assert model.prepare_text("The Dog", "A ") == "a the dog"
    args = TrainingArguments("unused", use_cpu=True, report_to=[])
    trainer = SiameseTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(ROWS), processing_class=tiny_tokenizer
    )
    assert trainer.data_collator.lowercase is True


def test_trainer_trains_and_evaluates_with_prompts(tmp_path, tiny_tokenizer) -> None:
    model = make_tiny_model(include_prompt=False, normalize=True)
    scored = Dataset.from_dict(
        {"sentence1": SENTENCES, "sentence2": SENTENCES[1:] + SENTENCES[:1], "score": [0.9, 0.1, 0.5, 0.3, 0.7]}
    )
    args = TrainingArguments(str(tmp_path), per_device_train_batch_size=5, max_steps=2, use_cpu=True, report_to=[])
    prompts = {"sentence1": "the weather : ", "sentence2": "a new song : "}
    trainer = SiameseTrainer(
        model=model,
        args=args,
        train_dataset=scored,
        eval_dataset=scored,
        processing_class=tiny_tokenizer,
        loss="cosine",
        prompts=prompts,
    )
    trainer.train()
    metrics = trainer.evaluate()
    # The STS metric embeds each column with its prompt, exactly as encode(prompt=...) does.
    from hf_siamese import sts_metrics_from_embeddings

    u = model.encode(SENTENCES, tokenizer=tiny_tokenizer, prompt=prompts["sentence1"])
    v = model.encode(scored["sentence2"], tokenizer=tiny_tokenizer, prompt=prompts["sentence2"])
    expected = sts_metrics_from_embeddings(u.numpy(), v.numpy(), scored["score"], score_range=(0, 1))
    assert metrics["eval_spearman_cosine"] == pytest.approx(expected["spearman_cosine"])
    assert metrics["eval_pearson_cosine"] == pytest.approx(expected["pearson_cosine"], abs=1e-5)
