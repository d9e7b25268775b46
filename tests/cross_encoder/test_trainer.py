"""CrossEncoderTrainer: short training runs on a tiny random BERT for each row shape, the default loss per shape, the
head learning rate, and the rows / labels it refuses before training."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

from hf_siamese.cross_encoder.losses import BinaryCrossEntropyLoss, CrossEntropyLoss, MSELoss, PListMLELoss
from hf_siamese.cross_encoder.trainer import CrossEncoderTrainer

VOCAB_SIZE = 99
WORDS = ["a man plays guitar", "the dog runs in the park", "someone sings a song", "the stock market fell today"]


def tiny_cross_encoder(num_labels: int = 1) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        num_labels=num_labels,
    )
    return BertForSequenceClassification(config)


def arguments(tmp_path, **overrides) -> TrainingArguments:
    settings = dict(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        learning_rate=1e-3,
    )
    return TrainingArguments(**{**settings, **overrides})


def pair_rows(n: int = 16) -> Dataset:
    return Dataset.from_list(
        [{"query": WORDS[i % 4], "document": WORDS[(i + i // 4) % 4], "label": float(i % 4 == 0)} for i in range(n)]
    )


def tuple_rows(n: int = 16) -> Dataset:
    return Dataset.from_list(
        [
            {
                "query": WORDS[i % 4],
                "positive": WORDS[i % 4],
                "negative_1": WORDS[(i + 1) % 4],
                "negative_2": WORDS[(i + 2) % 4],
            }
            for i in range(n)
        ]
    )


def list_rows(n: int = 16) -> Dataset:
    rows = []
    for i in range(n):
        count = 2 + i % 3
        rows.append(
            {"query": WORDS[i % 4], "documents": WORDS[:count], "scores": [float(j == i % count) for j in range(count)]}
        )
    return Dataset.from_list(rows)


@pytest.mark.parametrize(
    ("dataset", "loss", "expected"),
    [
        (pair_rows, None, BinaryCrossEntropyLoss),
        (tuple_rows, None, PListMLELoss),
        (list_rows, None, PListMLELoss),
        (list_rows, "plistmle", PListMLELoss),
    ],
)
def test_two_training_steps_change_the_weights(tmp_path, tiny_tokenizer, dataset, loss, expected):
    model = tiny_cross_encoder()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = CrossEncoderTrainer(
        model, arguments(tmp_path), train_dataset=dataset(), processing_class=tiny_tokenizer, loss=loss
    )
    assert isinstance(trainer.loss, expected)
    result = trainer.train()
    assert result.global_step == 2
    assert torch.isfinite(torch.tensor(result.training_loss))
    changed = [name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())]
    assert "classifier.weight" in changed
    assert any(name.startswith("bert.encoder") for name in changed)
    metrics = trainer.evaluate(dataset(4))
    assert torch.isfinite(torch.tensor(metrics["eval_loss"]))


def test_head_learning_rate_gets_its_own_group(tmp_path, tiny_tokenizer):
    model = tiny_cross_encoder()
    trainer = CrossEncoderTrainer(
        model,
        arguments(tmp_path, learning_rate=2e-5),
        train_dataset=pair_rows(),
        processing_class=tiny_tokenizer,
        head_learning_rate=1e-3,
    )
    optimizer = trainer.create_optimizer()
    head = {id(p) for p in model.classifier.parameters()}
    for group in optimizer.param_groups:
        ids = {id(p) for p in group["params"]}
        assert ids <= head or not ids & head
        assert group["lr"] == (1e-3 if ids <= head else 2e-5)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_default_loss_for_scores_outside_0_1_and_class_labels(tmp_path, tiny_tokenizer):
    # one score outside [0, 1], not in the first row, is enough for MSE
    scored = Dataset.from_list([{"sentence1": "a man", "sentence2": "a dog", "score": 0.5 + 3.0 * i} for i in range(4)])
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(), arguments(tmp_path), train_dataset=scored, processing_class=tiny_tokenizer
    )
    assert isinstance(trainer.loss, MSELoss)
    nli = Dataset.from_list([{"premise": "a man", "hypothesis": "a dog", "label": i % 3} for i in range(16)])
    trainer = CrossEncoderTrainer(
        tiny_cross_encoder(3), arguments(tmp_path), train_dataset=nli, processing_class=tiny_tokenizer
    )
    assert isinstance(trainer.loss, CrossEntropyLoss)
    assert torch.isfinite(torch.tensor(trainer.train().training_loss))


def test_refuses_labels_the_loss_cannot_take_naming_the_row(tmp_path, tiny_tokenizer):
    rows = pair_rows().to_list()
    rows[5]["label"] = 2.0
    with pytest.raises(ValueError, match=r"train_dataset row 5: BinaryCrossEntropyLoss: label 2.0 is outside \[0, 1\]"):
        CrossEncoderTrainer(
            tiny_cross_encoder(),
            arguments(tmp_path),
            train_dataset=Dataset.from_list(rows),
            processing_class=tiny_tokenizer,
            loss="bce",
        )
    nli = Dataset.from_list([{"premise": "a man", "hypothesis": "a dog", "label": i} for i in range(4)])
    with pytest.raises(ValueError, match=r"train_dataset row 3: CrossEntropyLoss: class id 3 .*num_labels=3"):
        CrossEncoderTrainer(
            tiny_cross_encoder(3), arguments(tmp_path), train_dataset=nli, processing_class=tiny_tokenizer
        )


def test_refuses_a_loss_for_other_rows_or_outputs(tmp_path, tiny_tokenizer):
    with pytest.raises(
        ValueError, match="MultipleNegativesRankingLoss reads tuples rows, but train_dataset has pairs rows"
    ):
        CrossEncoderTrainer(
            tiny_cross_encoder(),
            arguments(tmp_path),
            train_dataset=pair_rows(),
            processing_class=tiny_tokenizer,
            loss="mnr",
        )
    with pytest.raises(
        ValueError, match="BinaryCrossEntropyLoss needs a model with num_labels=1; this one has num_labels=3"
    ):
        CrossEncoderTrainer(
            tiny_cross_encoder(3),
            arguments(tmp_path),
            train_dataset=pair_rows(),
            processing_class=tiny_tokenizer,
            loss="bce",
        )
    bad = Dataset.from_list(
        [{"query": "a", "documents": ["b"], "scores": [1.0]}, {"query": "a", "documents": [], "scores": []}]
    )
    with pytest.raises(ValueError, match=r"train_dataset row 1: column 'documents' holds \[\]"):
        CrossEncoderTrainer(
            tiny_cross_encoder(), arguments(tmp_path), train_dataset=bad, processing_class=tiny_tokenizer
        )
    with pytest.raises(ValueError, match=r"eval_dataset row 1: BinaryCrossEntropyLoss: label 5.0"):
        CrossEncoderTrainer(
            tiny_cross_encoder(),
            arguments(tmp_path),
            train_dataset=pair_rows(),
            eval_dataset=Dataset.from_list([{"query": "a", "document": "b", "label": x} for x in (1.0, 5.0)]),
            processing_class=tiny_tokenizer,
        )
    with pytest.raises(TypeError, match="needs a transformers ...ForSequenceClassification"):
        CrossEncoderTrainer(object(), arguments(tmp_path))


def test_takes_a_cross_encoder_wrapper(tmp_path, tiny_tokenizer):
    from hf_siamese.cross_encoder import CrossEncoder

    model = tiny_cross_encoder()
    trainer = CrossEncoderTrainer(CrossEncoder(model, tiny_tokenizer), arguments(tmp_path), train_dataset=pair_rows())
    assert trainer.model is model and trainer.processing_class is tiny_tokenizer
    assert trainer.data_collator.max_length == 64
