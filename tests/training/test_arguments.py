"""The trainers' options as `TrainingArguments` subclasses: parsed by `HfArgumentParser`, read by the trainers, saved
with the run, refused when bad; the old trainer keywords still work for one release, with a `FutureWarning`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import make_tiny_model
from datasets import Dataset
from helpers import make_args
from transformers import BertConfig, BertForSequenceClassification, HfArgumentParser, TrainingArguments

from hf_siamese import CrossEncoderTrainingArguments, SiameseTrainer, SiameseTrainingArguments
from hf_siamese.cross_encoder import CrossEncoderTrainer

OURS = (
    "head_learning_rate",
    "pretokenize",
    "no_duplicates_sampler",
    "prompts",
    "stream_buffer_size",
    "group_by_length",
)


def tiny_classifier() -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, num_labels=1
    )
    return BertForSequenceClassification(config)


def rows(n: int = 16) -> Dataset:
    return Dataset.from_dict(
        {"anchor": [f"a man plays {i}" for i in range(n)], "positive": [f"someone plays music {i}" for i in range(n)]}
    )


def siamese_args(tmp_path: Path, **options) -> SiameseTrainingArguments:
    plain = make_args(tmp_path)
    own = {f.name: getattr(plain, f.name) for f in dataclasses.fields(TrainingArguments) if f.init}
    return SiameseTrainingArguments(**{**own, **options})


def test_command_line_parses_every_option(tmp_path: Path) -> None:
    (args,) = HfArgumentParser(SiameseTrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--prompts", '{"anchor": "query: "}', "--group_by_length", "false"]
        + ["--head_learning_rate", "0.01", "--pretokenize", "false", "--no_duplicates_sampler", "true"]
        + ["--stream_buffer_size", "64", "--learning_rate", "3e-5"]
    )
    assert (args.prompts, args.group_by_length, args.head_learning_rate) == ({"anchor": "query: "}, False, 0.01)
    assert (args.pretokenize, args.no_duplicates_sampler, args.stream_buffer_size) == (False, True, 64)
    assert args.learning_rate == 3e-5
    (plain,) = HfArgumentParser(SiameseTrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--prompts", "query: "]
    )
    assert (plain.prompts, plain.group_by_length, plain.pretokenize, plain.no_duplicates_sampler) == (
        "query: ",
        "auto",
        True,
        None,
    )
    (cross,) = HfArgumentParser(CrossEncoderTrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--head_learning_rate", "1e-3"]
    )
    assert cross.head_learning_rate == 1e-3 and cross.pretokenize is True


def test_saved_settings_parse_back_equal(tmp_path: Path) -> None:
    args = siamese_args(tmp_path, prompts={"anchor": "q: "}, group_by_length=True, stream_buffer_size=32)
    saved = json.loads(args.to_json_string())
    (again,) = HfArgumentParser(SiameseTrainingArguments).parse_dict(saved)
    for name in OURS:
        assert getattr(again, name) == getattr(args, name), name


def test_trainer_reads_its_options_from_the_arguments(tmp_path: Path, tiny_tokenizer) -> None:
    args = siamese_args(tmp_path, prompts={"anchor": "the "}, no_duplicates_sampler=False, save_strategy="no")
    trainer = SiameseTrainer(
        model=make_tiny_model(), args=args, train_dataset=rows(), processing_class=tiny_tokenizer, loss="mnr"
    )
    assert trainer.data_collator.prompts == {"anchor": "the "}
    assert trainer.no_duplicates_sampler is False  # the arguments' choice, not the loss's default
    trainer.train()
    trainer.save_model(str(tmp_path / "model"))
    assert (tmp_path / "model" / "training_args.bin").exists()  # Trainer's own file, holding these arguments


def test_plain_training_arguments_are_copied_with_the_defaults(tmp_path: Path, tiny_tokenizer) -> None:
    plain = make_args(tmp_path, learning_rate=3e-5)
    trainer = SiameseTrainer(model=make_tiny_model(), args=plain, train_dataset=rows(), processing_class=tiny_tokenizer)
    assert isinstance(trainer.args, SiameseTrainingArguments)
    assert trainer.args.learning_rate == 3e-5 and trainer.args.output_dir == plain.output_dir
    assert (trainer.args.group_by_length, trainer.args.prompts, trainer.args.pretokenize) == ("auto", None, True)
    with pytest.raises(TypeError, match="SiameseTrainer takes SiameseTrainingArguments, got CrossEncoderTrainingArg"):
        SiameseTrainer(
            model=make_tiny_model(),
            args=CrossEncoderTrainingArguments(output_dir=str(tmp_path / "x"), use_cpu=True),
            train_dataset=rows(),
            processing_class=tiny_tokenizer,
        )


def test_old_keywords_warn_and_conflicts_are_refused(tmp_path: Path, tiny_tokenizer) -> None:
    with pytest.warns(FutureWarning, match=r"SiameseTrainer\(prompts=...\) is deprecated.*SiameseTrainingArguments"):
        trainer = SiameseTrainer(
            model=make_tiny_model(),
            args=make_args(tmp_path),
            train_dataset=rows(),
            processing_class=tiny_tokenizer,
            prompts="the ",
        )
    assert trainer.args.prompts == "the " and trainer.data_collator.prompts == "the "
    with pytest.raises(
        ValueError, match=r"SiameseTrainer\(prompts='a '\) conflicts with SiameseTrainingArguments\(prompts='the '\)"
    ):
        SiameseTrainer(
            model=make_tiny_model(),
            args=siamese_args(tmp_path, prompts="the "),
            train_dataset=rows(),
            processing_class=tiny_tokenizer,
            prompts="a ",
        )
    with pytest.warns(FutureWarning, match=r"CrossEncoderTrainer\(head_learning_rate=...\) is deprecated"):
        cross = CrossEncoderTrainer(
            tiny_classifier(),
            make_args(tmp_path),
            train_dataset=Dataset.from_dict(
                {"query": ["a man", "a dog"], "document": ["plays", "runs"], "label": [1.0, 0.0]}
            ),
            processing_class=tiny_tokenizer,
            head_learning_rate=1e-3,
        )
    assert isinstance(cross.args, CrossEncoderTrainingArguments) and cross.args.head_learning_rate == 1e-3


def test_an_old_keyword_contradicting_a_value_given_to_the_arguments_is_refused(tmp_path: Path, tiny_tokenizer):
    """Given to the arguments by name, pretokenize=True is the user's choice even though it is the default: the old
    keyword saying False contradicts it, as any other pair does."""
    with pytest.raises(
        ValueError,
        match=r"SiameseTrainer\(pretokenize=False\) conflicts with SiameseTrainingArguments\(pretokenize=True\); "
        r"give it in one place",
    ):
        SiameseTrainer(
            model=make_tiny_model(),
            args=siamese_args(tmp_path, pretokenize=True),
            train_dataset=rows(),
            processing_class=tiny_tokenizer,
            pretokenize=False,
        )
    cross_rows = Dataset.from_dict({"query": ["a man", "a dog"], "document": ["plays", "runs"], "label": [1.0, 0.0]})
    with pytest.raises(ValueError, match=r"CrossEncoderTrainer\(pretokenize=False\) conflicts with Cross"):
        CrossEncoderTrainer(
            tiny_classifier(),
            CrossEncoderTrainingArguments(output_dir=str(tmp_path), use_cpu=True, pretokenize=True),
            train_dataset=cross_rows,
            processing_class=tiny_tokenizer,
            pretokenize=False,
        )
    # Not given to the arguments (the default), the old keyword still sets it, with its warning.
    with pytest.warns(FutureWarning, match=r"SiameseTrainer\(pretokenize=...\) is deprecated"):
        trainer = SiameseTrainer(
            model=make_tiny_model(),
            args=siamese_args(tmp_path),
            train_dataset=rows(),
            processing_class=tiny_tokenizer,
            pretokenize=False,
        )
    assert trainer.args.pretokenize is False


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("group_by_length", "yes", r"group_by_length='yes'; accepted: True, False, 'auto'"),
        ("prompts", {"anchor": 3}, r"prompts=\{'anchor': 3\}; accepted: a string, or a dict"),
        ("prompts", '{"anchor": ', r"prompts='\{\"anchor\": ' is not a JSON object"),
        ("head_learning_rate", -1.0, r"head_learning_rate=-1.0 must be a positive finite number or None"),
        ("head_learning_rate", float("inf"), r"head_learning_rate=inf must be a positive finite number or None"),
        ("head_learning_rate", float("nan"), r"head_learning_rate=nan must be a positive finite number or None"),
        ("stream_buffer_size", 0, r"stream_buffer_size=0 must be a positive whole number or None"),
        ("pretokenize", "yes", r"pretokenize='yes'; accepted: True, False"),
        ("no_duplicates_sampler", "no", r"no_duplicates_sampler='no'; accepted: True, False, None"),
    ],
)
def test_bad_options_are_named(tmp_path: Path, option: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=rf"SiameseTrainingArguments: {message}"):
        SiameseTrainingArguments(output_dir=str(tmp_path), use_cpu=True, **{option: value})
