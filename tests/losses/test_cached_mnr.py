"""CachedMultipleNegativesRankingLoss (GradCache): the gradient of plain MNR on the same batch, chunked, dropout on."""

from __future__ import annotations

import pytest
import torch
from conftest import SENTENCES, VOCAB_SIZE, make_tiny_model
from datasets import Dataset
from transformers import TrainingArguments

from hf_siamese import SiameseBertOutput, SiameseTrainer
from hf_siamese.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss
from hf_siamese.losses.cached import chunk_plan, embed_chunk

ROWS, SEQ_LEN = 8, 7


def random_batch(num_texts: int, seed: int = 1234) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB_SIZE, (ROWS, num_texts, SEQ_LEN), generator=generator)
    input_ids[..., 0] = 2  # [CLS]
    lengths = torch.randint(3, SEQ_LEN + 1, (ROWS, num_texts), generator=generator)
    attention_mask = (torch.arange(SEQ_LEN) < lengths[..., None]).long()
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask}


def gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])


def chunked_embeddings(model, batch, mini_batch_size: int) -> torch.Tensor:
    """The batch's embeddings with one graph, the encoder run on the cached loss's chunks (the same dropout draws)."""
    plan = chunk_plan(batch, mini_batch_size)
    pieces = [embed_chunk(model, batch, column, rows) for column, rows in plan]
    embeddings = torch.zeros(ROWS, batch["attention_mask"].shape[1], pieces[0].shape[-1], dtype=pieces[0].dtype)
    for (column, rows), piece in zip(plan, pieces, strict=True):
        embeddings = embeddings.index_put((rows, torch.full_like(rows, column)), piece)
    return embeddings


def chunked_plain_mnr(model, batch, mini_batch_size: int, loss: MultipleNegativesRankingLoss) -> torch.Tensor:
    """Plain MNR with one graph over the whole batch, embedded in the cached loss's chunks."""
    value = loss(SiameseBertOutput(sentence_embedding=chunked_embeddings(model, batch, mini_batch_size)), None)
    value.backward()
    return value.detach()


def run_both(dtype: torch.dtype, num_texts: int, symmetric: bool, mini_batch_size: int):
    model = make_tiny_model(seed=0).to(dtype).train()  # dropout on
    batch = random_batch(num_texts)
    torch.manual_seed(7)
    reference_loss = chunked_plain_mnr(model, batch, mini_batch_size, MultipleNegativesRankingLoss(symmetric=symmetric))
    reference = gradients(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    cached = CachedMultipleNegativesRankingLoss(mini_batch_size=mini_batch_size, symmetric=symmetric)
    loss, output = cached.compute(model, batch, None)
    loss.backward()
    return reference_loss, reference, loss.detach(), gradients(model), output


@pytest.mark.parametrize("mini_batch_size", [4, 3, 1], ids=["divides", "does-not-divide", "one-text"])
@pytest.mark.parametrize("symmetric", [False, True], ids=["one-way", "symmetric"])
@pytest.mark.parametrize("num_texts", [2, 3], ids=["pairs", "hard-negative"])
def test_gradients_equal_plain_mnr(num_texts: int, symmetric: bool, mini_batch_size: int) -> None:
    reference_loss, reference, loss, grads, output = run_both(torch.float32, num_texts, symmetric, mini_batch_size)
    assert output.sentence_embedding.shape == (ROWS, num_texts, 32)
    assert torch.allclose(loss, reference_loss, atol=1e-6)
    assert (grads - reference).abs().max().item() < 1e-5
    assert reference.abs().max().item() > 1e-3  # the gradients compared are not all zero


@pytest.mark.parametrize("symmetric", [False, True], ids=["one-way", "symmetric"])
def test_gradients_equal_plain_mnr_float64(symmetric: bool) -> None:
    _, reference, _, grads, _ = run_both(torch.float64, 3, symmetric, 3)
    assert (grads - reference).abs().max().item() < 1e-10


def test_dropout_is_replayed() -> None:
    """The comparison above can fail: a second pass with other dropout draws gives other gradients."""
    _, reference, _, _, _ = run_both(torch.float32, 2, False, 4)
    model = make_tiny_model(seed=0).train()
    torch.manual_seed(8)  # other draws
    chunked_plain_mnr(model, random_batch(2), 4, MultipleNegativesRankingLoss())
    assert (gradients(model) - reference).abs().max().item() > 1e-4


def test_chunks_hold_texts_of_similar_length() -> None:
    batch = random_batch(3)
    plan = chunk_plan(batch, 3)
    assert [column for column, _ in plan] == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # 8 texts per column: chunks of 3, 3, 2
    for column in range(3):
        rows = torch.cat([r for c, r in plan if c == column])
        assert sorted(rows.tolist()) == list(range(ROWS))  # every text once
        lengths = batch["attention_mask"][rows, column].sum(-1)
        assert torch.equal(lengths, lengths.sort(descending=True).values)  # longest first


def test_one_chunk_is_plain_mnr_exactly() -> None:
    model = make_tiny_model(seed=0).train()
    batch = random_batch(3)
    torch.manual_seed(3)
    plain, _ = MultipleNegativesRankingLoss().compute(model, batch, None)
    plain.backward()
    reference = gradients(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    cached, _ = CachedMultipleNegativesRankingLoss(mini_batch_size=ROWS).compute(model, batch, None)
    cached.backward()
    assert torch.equal(cached.detach(), plain.detach())
    assert (gradients(model) - reference).abs().max().item() < 1e-6


def test_bf16_autocast_is_replayed_in_the_second_pass() -> None:
    """The second pass runs in backward(), outside the trainer's autocast; it must run in bf16 again."""
    model = make_tiny_model(seed=0).train()
    batch = random_batch(2)
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        embeddings = chunked_embeddings(model, batch, 4)
        value = MultipleNegativesRankingLoss()(SiameseBertOutput(sentence_embedding=embeddings), None)
    value.backward()
    reference = gradients(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = CachedMultipleNegativesRankingLoss(mini_batch_size=4).compute(model, batch, None)
    loss.backward()
    assert (gradients(model) - reference).abs().max().item() < 1e-3 * reference.abs().max().item()


def test_evaluation_needs_no_graph() -> None:
    model = make_tiny_model(seed=0)
    with torch.no_grad():
        loss, output = CachedMultipleNegativesRankingLoss(mini_batch_size=3).compute(model, random_batch(2), None)
    assert not loss.requires_grad and output.sentence_embedding.shape == (ROWS, 2, 32)


def test_bad_mini_batch_size() -> None:
    with pytest.raises(ValueError, match=r"mini_batch_size=0 must be a positive int"):
        CachedMultipleNegativesRankingLoss(mini_batch_size=0)


def test_trainer_with_gradient_accumulation_matches_plain_mnr(tmp_path, tiny_tokenizer) -> None:
    """Trainer, 2 accumulation steps, 3 optimizer steps, dropout off: cached MNR in chunks of 2 texts ends at plain
    MNR's parameters."""
    rows = Dataset.from_dict({"anchor": SENTENCES * 2, "positive": (SENTENCES[1:] + SENTENCES[:1]) * 2})

    def train(loss) -> dict[str, torch.Tensor]:
        model = make_tiny_model(seed=0).train()
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        args = TrainingArguments(
            str(tmp_path / type(loss).__name__), per_device_train_batch_size=5, gradient_accumulation_steps=2,
            max_steps=3, learning_rate=1e-3, use_cpu=True, report_to=[], seed=11, save_strategy="no",
        )  # fmt: skip
        trainer = SiameseTrainer(
            model=model, args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss=loss,
            no_duplicates_sampler=False,
        )  # fmt: skip
        trainer.train()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    plain = train(MultipleNegativesRankingLoss())
    cached = train(CachedMultipleNegativesRankingLoss(mini_batch_size=2))
    start = make_tiny_model(seed=0).state_dict()
    assert any(not torch.equal(start[k], plain[k]) for k in plain)  # training moved the weights
    assert max((plain[k] - cached[k]).abs().max().item() for k in plain) < 1e-5


def test_model_card_names_the_cached_loss(tmp_path, tiny_tokenizer) -> None:
    from hf_siamese.formats.model_card import build_model_card

    rows = Dataset.from_dict({"anchor": SENTENCES, "positive": SENTENCES[1:] + SENTENCES[:1]})
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to=[], max_steps=1)
    loss = CachedMultipleNegativesRankingLoss(mini_batch_size=16)
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss=loss
    )
    card = build_model_card(trainer.model, trainer=trainer)
    assert "CachedMultipleNegativesRankingLoss" in card and "gradient caching" in card
    assert "mini-batches of 16 texts" in card
