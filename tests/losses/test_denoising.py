"""TSDAE: the deletion noise deletes the share of words it says (drawn anew each step, special tokens and one word
kept), the decoder's shared weights ARE the encoder's (cross-attention its own), training moves the decoder's own
weights too and saves the encoder alone, and an encoder with no decoder class is named."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model
from datasets import Dataset
from transformers import TrainingArguments

from hf_siamese import SiameseTrainer
from hf_siamese.losses import DenoisingAutoEncoderLoss

TEXT = "a man plays the guitar in the park on a sunny day"  # 12 words, one token each in the tiny vocabulary


def _ids(tokenizer, texts):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return batch["input_ids"], batch["attention_mask"]


def test_the_ratio_means_what_it_says(tiny_tokenizer):
    loss = DenoisingAutoEncoderLoss(make_tiny_model(), tiny_tokenizer, deletion_ratio=0.6)
    ids, mask = _ids(tiny_tokenizer, [TEXT, "music"])
    torch.manual_seed(0)
    noisy, noisy_mask = loss.noisy(ids, mask)
    kept = noisy[0][noisy_mask[0].bool()].tolist()
    assert kept[0] == tiny_tokenizer.cls_token_id and kept[-1] == tiny_tokenizer.sep_token_id
    words = tiny_tokenizer.convert_ids_to_tokens(kept[1:-1])
    assert len(words) == 12 - round(12 * 0.6)  # 5 of 12 words kept: 60% deleted
    assert words == [w for w in TEXT.split() if w in words][: len(words)] or set(words) <= set(TEXT.split())
    assert noisy[1][noisy_mask[1].bool()].tolist() == ids[1][mask[1].bool()].tolist()  # one word: kept
    draws = {tuple(loss.noisy(ids, mask)[0][0].tolist()) for _ in range(10)}
    assert len(draws) > 1  # drawn anew each call (each step, so each epoch)


def test_wordpiece_continuations_stay_with_their_word():
    from transformers import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing", "guitar", "##s", "the", "man"]
    tokenizer = BertTokenizer(vocab={t: i for i, t in enumerate(vocab)})
    loss = DenoisingAutoEncoderLoss(make_tiny_model(), tokenizer, deletion_ratio=0.5)
    ids, mask = _ids(tokenizer, ["the man playing guitars"])
    for seed in range(20):
        torch.manual_seed(seed)
        noisy, noisy_mask = loss.noisy(ids, mask)
        tokens = tokenizer.convert_ids_to_tokens(noisy[0][noisy_mask[0].bool()].tolist())[1:-1]
        assert len([t for t in tokens if not t.startswith("##")]) == 2
        for index, token in enumerate(tokens):
            if token.startswith("##"):
                assert index > 0 and tokens[index - 1] == {"##ing": "play", "##s": "guitar"}[token]


def test_the_decoder_is_tied_to_the_encoder(tiny_tokenizer):
    model = make_tiny_model()
    loss = DenoisingAutoEncoderLoss(model, tiny_tokenizer)
    encoder = dict(model.encoder.named_parameters())
    decoder = dict(loss.decoder.base_model.named_parameters())
    shared = [name for name in decoder if name in encoder and decoder[name] is encoder[name]]
    assert "embeddings.word_embeddings.weight" in shared and "encoder.layer.1.attention.self.query.weight" in shared
    own = [name for name in decoder if not any(decoder[name] is p for p in encoder.values())]
    assert own and all("crossattention" in name for name in own)
    assert loss.decoder.get_output_embeddings().weight is model.encoder.get_input_embeddings().weight


def test_training_moves_the_decoder_and_saves_the_encoder_alone(tiny_tokenizer, tmp_path):
    model = make_tiny_model()
    loss = DenoisingAutoEncoderLoss(model, tiny_tokenizer)
    # with one key (the embedding) the attention weight is 1 whatever the query: the value projection learns
    cross = next(p for n, p in loss.decoder.named_parameters() if "crossattention" in n and "value.weight" in n)
    before = cross.detach().clone()
    rows = Dataset.from_dict({"text": [TEXT, "a dog runs in the park today", "the stock market fell today"] * 4})
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, max_steps=3, learning_rate=1e-3,
        report_to=[], use_cpu=True, save_strategy="no",
    )  # fmt: skip
    trainer = SiameseTrainer(model=model, args=args, train_dataset=rows, processing_class=tiny_tokenizer, loss=loss)
    trainer.train()
    assert not torch.equal(before, cross.detach())
    trainer.save_model(str(tmp_path / "saved"))
    from safetensors import safe_open

    files = list((tmp_path / "saved").rglob("*.safetensors"))
    assert files
    for path in files:
        with safe_open(str(path), "pt") as handle:
            assert not [key for key in handle.keys() if "crossattention" in key or "decoder" in key]


def test_bad_input(tiny_tokenizer):
    with pytest.raises(ValueError, match=r"no causal-LM class with cross-attention for it|'distilbert'"):
        DenoisingAutoEncoderLoss(make_tiny_model("distilbert"), tiny_tokenizer)
    with pytest.raises(ValueError, match=r"deletion_ratio=1: expected a share"):
        DenoisingAutoEncoderLoss(make_tiny_model(), tiny_tokenizer, deletion_ratio=1)
    with pytest.raises(ValueError, match="expected a SiameseBertModel"):
        DenoisingAutoEncoderLoss("bert", tiny_tokenizer)
