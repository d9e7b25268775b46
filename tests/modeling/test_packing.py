"""Packed execution: texts laid end to end with a block mask give the same embeddings and gradients as padded ones."""

from __future__ import annotations

import pytest
import torch
from conftest import SENTENCES, make_tiny_model, tiny_encoder_config
from transformers import AutoModel, Qwen2Config

import hf_siamese
from hf_siamese.losses import CosineSimilarityLoss, MultipleNegativesRankingLoss
from hf_siamese.modeling.packing import can_pack, first_fit_rows, pack_texts, unpack_states
from hf_siamese.training.collator import SiamesePairCollator

PAIRS = [
    {"sentence1": SENTENCES[i], "sentence2": SENTENCES[(i * 2 + 1) % 5] + " the red car", "score": float(i)}
    for i in range(5)
] + [{"sentence1": "a", "sentence2": "two dogs are playing in the park and the sun is hot today", "score": 4.0}]
TRIPLETS = [
    {"anchor": SENTENCES[i], "positive": SENTENCES[(i + 1) % 5] + " today", "negative": "a " * (i + 1)}
    for i in range(5)
]


def test_first_fit_rows_places_longest_first_into_the_first_row_with_room() -> None:
    # lengths 3, 5, 2, 5, 1 into rows of 5: 5 -> row 0, 5 -> row 1, 3 -> row 2, 2 -> row 2 (at 3), 1 -> row 0? no:
    # row 0 is full (5), row 1 full, row 2 has 3 + 2 = 5: the 1 opens row 3.
    row, column, rows = first_fit_rows([3, 5, 2, 5, 1], capacity=5)
    assert rows == 4
    assert (row, column) == ([2, 0, 2, 1, 3], [0, 0, 3, 0, 0])


@pytest.mark.parametrize("side", ["right", "left"])
def test_pack_texts_by_hand(side: str) -> None:
    # Three texts of 3, 1 and 2 tokens; capacity 3: rows [t0 t0 t0], [t2 t2 t1].
    ids = {0: [11, 12, 13], 1: [21], 2: [31, 32]}
    width = 4
    input_ids = torch.zeros(3, width, dtype=torch.long)
    mask = torch.zeros(3, width, dtype=torch.long)
    for t, tokens in ids.items():
        span = slice(0, len(tokens)) if side == "right" else slice(width - len(tokens), width)
        input_ids[t, span] = torch.tensor(tokens)
        mask[t, span] = 1
    packed = pack_texts(input_ids, mask, pad_token_id=0, first_position=2)
    assert packed.input_ids.tolist() == [[11, 12, 13], [31, 32, 21]]
    assert packed.position_ids.tolist() == [[2, 3, 4], [2, 3, 2]]
    block = packed.attention_mask[:, 0].long().tolist()
    assert block[0] == [[1, 1, 1]] * 3
    assert block[1] == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    assert packed.text_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert packed.padding_share == 0.0
    # Unpacking puts each text's token states back in order (padding positions are masked by text_mask).
    states = packed.input_ids.unsqueeze(-1).float()
    unpacked = unpack_states(states, packed).squeeze(-1) * packed.text_mask
    assert unpacked.tolist() == [[11, 12, 13], [21, 0, 0], [31, 32, 0]]


def test_pack_texts_pads_the_end_of_a_row_as_its_own_block() -> None:
    input_ids = torch.tensor([[5, 6, 7], [8, 0, 0]])
    packed = pack_texts(input_ids, (input_ids > 0).long())
    assert packed.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert packed.attention_mask[1, 0].long().tolist() == [[1, 0, 0], [0, 1, 1], [0, 1, 1]]
    assert packed.padding_share == pytest.approx(2 / 6)


def _encoder(model_type: str, attention: str) -> torch.nn.Module:
    config = tiny_encoder_config(model_type)
    return AutoModel.from_config(config, attn_implementation=attention)


def _model(model_type: str, attention: str, **config_kwargs) -> hf_siamese.SiameseBertModel:
    torch.manual_seed(0)
    encoder = _encoder(model_type, attention)
    config = hf_siamese.SiameseBertConfig(encoder_config=encoder.config, **config_kwargs)
    encoder.config._attn_implementation = attention  # building the outer config resets it (as from_encoder knows)
    return hf_siamese.SiameseBertModel(config, encoder=encoder).eval()


def _grouped_embeddings(model, batch, packing: bool) -> torch.Tensor:
    model.packing = packing
    with torch.no_grad():
        return model(**batch).sentence_embedding


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken"])
def test_packed_equals_padded(tiny_tokenizer, model_type: str, attention: str, pooling: str) -> None:
    model = _model(model_type, attention, pooling=pooling)
    assert can_pack(model.encoder)
    for rows in (PAIRS, TRIPLETS):
        batch = SiamesePairCollator(tiny_tokenizer)(rows)
        batch.pop("labels", None)
        packed, padded = (_grouped_embeddings(model, batch, p) for p in (True, False))
        assert packed.shape == padded.shape
        assert (packed - padded).abs().max() < 1e-5


def test_packed_equals_padded_with_prompts_left_out_of_pooling(tiny_tokenizer) -> None:
    model = _model("bert", "sdpa", include_prompt=False)
    collator = SiamesePairCollator(tiny_tokenizer, prompts={"anchor": "the ", "positive": "a red "})
    batch = collator(TRIPLETS)
    assert "prompt_length" in batch
    packed, padded = (_grouped_embeddings(model, batch, p) for p in (True, False))
    assert (packed - padded).abs().max() < 1e-5


def test_packed_runs_the_encoder_once_and_gives_the_same_gradients(tiny_tokenizer) -> None:
    model = _model("bert", "sdpa")  # eval(): dropout off, so both runs are deterministic
    batch = SiamesePairCollator(tiny_tokenizer)(PAIRS)
    labels = batch.pop("labels")
    calls: list[tuple[int, ...]] = []
    hook = model.encoder.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    gradients = []
    for packing in (True, False):
        model.packing = packing
        model.zero_grad()
        loss, _ = CosineSimilarityLoss(score_range=(0, 5)).compute(model, batch, labels)
        loss.backward()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    hook.remove()
    assert len(calls) == 3  # one packed call, then one per column
    assert calls[0][0] < 2 * len(PAIRS)  # some texts share a row
    assert gradients[0].keys() == gradients[1].keys()
    for name, grad in gradients[0].items():
        assert (grad - gradients[1][name]).abs().max() < 1e-6, name


def test_packed_training_step_with_dropout_and_mnr(tiny_tokenizer) -> None:
    model = _model("bert", "sdpa").train()
    batch = SiamesePairCollator(tiny_tokenizer)(TRIPLETS)
    loss, output = MultipleNegativesRankingLoss().compute(model, batch, None)
    loss.backward()
    assert torch.isfinite(loss)
    assert output.sentence_embedding.shape == (5, 3, 32)
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_encoders_packing_is_not_exact_for_run_padded(tiny_tokenizer) -> None:
    # DistilBERT takes no position ids; a decoder (Qwen2, rotary, left padding) neither: both run one call per column.
    distil = make_tiny_model("distilbert")
    qwen = Qwen2Config(
        vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0,
    )  # fmt: skip
    decoder = hf_siamese.SiameseBertModel(
        hf_siamese.SiameseBertConfig(encoder_config=qwen, pooling="lasttoken"), encoder=AutoModel.from_config(qwen)
    ).eval()
    batch = SiamesePairCollator(tiny_tokenizer)(PAIRS)
    batch.pop("labels")
    for model in (distil, decoder):
        assert not can_pack(model.encoder)
        calls: list[int] = []
        hook = model.encoder.register_forward_pre_hook(lambda *a, calls=calls: calls.append(1))
        with torch.no_grad():
            output = model(**batch)
        hook.remove()
        assert len(calls) == 2
        assert output.sentence_embedding.shape[:2] == (len(PAIRS), 2)


def test_packing_can_be_turned_off_and_hidden_states_run_padded(tiny_tokenizer) -> None:
    model = _model("bert", "sdpa")
    batch = SiamesePairCollator(tiny_tokenizer)(PAIRS)
    batch.pop("labels")
    calls: list[int] = []
    hook = model.encoder.register_forward_pre_hook(lambda *a, **k: calls.append(1))
    model.packing = False
    with torch.no_grad():
        model(**batch)
    model.packing = True
    with torch.no_grad():
        model(**batch)
        model(**batch, output_hidden_states=True)
    hook.remove()
    assert calls == [1, 1, 1, 1, 1]  # 2 (off) + 1 (packed) + 2 (hidden states asked: padded, per column)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_given_encoder_keeps_its_attention_and_masks_padding(tiny_tokenizer, attention: str) -> None:
    # SiameseBertModel(config, encoder=...) once left the encoder's attention implementation None, and its padded
    # batches then attended to padding: a text embedded in a batch differed from the same text alone (by 1e-2).
    model = _model("bert", attention)
    assert model.encoder.config._attn_implementation in ("sdpa", "eager")
    encoded = tiny_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        batch = model(**encoded).sentence_embedding
        alone = [model(**tiny_tokenizer([text], return_tensors="pt")).sentence_embedding[0] for text in SENTENCES]
    assert (batch - torch.stack(alone)).abs().max() < 1e-5


def test_an_encoder_whose_attention_the_config_reset_still_masks_padding(tiny_tokenizer) -> None:
    encoder = _encoder("bert", "sdpa")
    config = hf_siamese.SiameseBertConfig(encoder_config=encoder.config)  # resets encoder.config's attention
    model = hf_siamese.SiameseBertModel(config, encoder=encoder).eval()
    assert model.encoder.config._attn_implementation == "sdpa"
    encoded = tiny_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        batch = model(**encoded).sentence_embedding
        alone = [model(**tiny_tokenizer([text], return_tensors="pt")).sentence_embedding[0] for text in SENTENCES]
    assert (batch - torch.stack(alone)).abs().max() < 1e-5
