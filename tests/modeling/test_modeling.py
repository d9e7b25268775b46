"""SiameseBertConfig / SiameseBertModel: config, pooling, encode, save/load, AutoModel, remote code."""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import SENTENCES, make_tiny_model, tiny_encoder_config
from helpers import BLOCKED_IMPORT, minilm_path, run_isolated
from transformers import AutoConfig, AutoModel, AutoTokenizer

import hf_siamese
from hf_siamese import SiameseBertConfig, SiameseBertModel, pool_token_states

# ---------------------------------------------------------------------------------------------------- config


def test_config_round_trip(tmp_path: Path) -> None:
    config = SiameseBertConfig(
        encoder_config=tiny_encoder_config(),
        pooling="max",
        normalize=True,
        similarity="dot",
        max_seq_length=48,
        label2id={"entailment": 0, "neutral": 1, "contradiction": 2},
        classifier_features=["u", "v", "|u-v|", "u*v"],
    )
    assert config.classifier_head and config.num_labels == 3
    assert config.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}

    again = SiameseBertConfig.from_dict(config.to_dict())
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    for other in (again, loaded):
        assert isinstance(other, SiameseBertConfig)
        for field in (
            "pooling",
            "normalize",
            "similarity",
            "max_seq_length",
            "classifier_head",
            "classifier_features",
            "id2label",
            "label2id",
        ):
            assert getattr(other, field) == getattr(config, field), field
        assert other.encoder_config.to_dict()["hidden_size"] == 32
        assert type(other.encoder_config).__name__ == "BertConfig"


def test_config_defaults_make_a_working_model() -> None:
    config = SiameseBertConfig()
    assert config.pooling == "mean" and config.normalize is False and config.similarity == "cosine"
    assert config.classifier_head is False
    assert config.effective_max_seq_length == 512
    assert config.hidden_size == 768


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"pooling": "avg"}, "pooling='avg'"),
        ({"similarity": "euclid"}, "similarity='euclid'"),
        ({"normalize": "yes"}, "normalize='yes'"),
        ({"max_seq_length": 0}, "max_seq_length=0"),
        ({"max_seq_length": 1000}, "max_position_embeddings=64"),
        ({"classifier_features": ["u", "w"]}, "classifier_features"),
        ({"classifier_features": []}, "classifier_features"),
        ({"classifier_feature_scale": -1.0}, "classifier_feature_scale=-1.0"),
        ({"num_labels": 1}, "num_labels=1"),
        ({"encoder_config": {"hidden_size": 8}}, "model_type"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict, fragment: str) -> None:
    kwargs.setdefault("encoder_config", tiny_encoder_config())
    with pytest.raises(ValueError) as info:
        SiameseBertConfig(**kwargs)
    assert fragment in str(info.value)


def test_config_error_lists_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"\['mean', 'cls', 'max', 'mean_sqrt_len', 'weightedmean', 'lasttoken'\]"):
        SiameseBertConfig(pooling="first")


# ---------------------------------------------------------------------------------------------------- pooling


@pytest.fixture
def padded_states() -> tuple[torch.Tensor, torch.Tensor]:
    # Row 0 has 2 real tokens, row 1 has 3; padding positions hold huge values that must never leak.
    hidden = torch.tensor(
        [
            [[1.0, -2.0], [3.0, 4.0], [1000.0, 1000.0]],
            [[2.0, 0.0], [-4.0, 6.0], [8.0, -3.0]],
        ]
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return hidden, mask


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [
        ("mean", [[2.0, 1.0], [2.0, 1.0]]),
        ("cls", [[1.0, -2.0], [2.0, 0.0]]),
        ("max", [[3.0, 4.0], [8.0, 6.0]]),
        ("mean_sqrt_len", [[4.0 / 2**0.5, 2.0 / 2**0.5], [6.0 / 3**0.5, 3.0 / 3**0.5]]),
    ],
)
def test_pooling_modes_ignore_padding(padded_states, pooling: str, expected: list) -> None:
    hidden, mask = padded_states
    torch.testing.assert_close(pool_token_states(hidden, mask, pooling), torch.tensor(expected))


def test_max_pooling_with_negative_values_ignores_zero_padding() -> None:
    hidden = torch.tensor([[[-5.0], [-1.0], [0.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool_token_states(hidden, mask, "max").item() == -1.0


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "mean_sqrt_len"])
def test_model_embedding_independent_of_padding(pooling: str, tiny_tokenizer) -> None:
    model = make_tiny_model(pooling=pooling)
    alone = model.encode(["a man plays guitar ."], tokenizer=tiny_tokenizer)
    batched = model.encode(
        ["a man plays guitar .", "two dogs are playing in the park and the red car is fast ."],
        tokenizer=tiny_tokenizer,
    )
    torch.testing.assert_close(alone[0], batched[0], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------- forward


def test_forward_single_and_grouped(tiny_model, tiny_tokenizer) -> None:
    batch = tiny_tokenizer(SENTENCES[:4], padding=True, return_tensors="pt")
    single = tiny_model(**batch)
    assert single.sentence_embedding.shape == (4, 32)
    assert single.last_hidden_state.shape[:2] == batch["input_ids"].shape
    assert single.similarity is None and single.logits is None

    grouped = {k: v.reshape(2, 2, -1) for k, v in batch.items()}
    pair = tiny_model(**grouped)
    assert pair.sentence_embedding.shape == (2, 2, 32)
    torch.testing.assert_close(pair.sentence_embedding.reshape(4, 32), single.sentence_embedding)
    u, v = single.sentence_embedding[0::2], single.sentence_embedding[1::2]
    torch.testing.assert_close(pair.similarity, torch.nn.functional.cosine_similarity(u, v))


def test_classifier_head_logits(tiny_tokenizer) -> None:
    model = make_tiny_model(num_labels=3, normalize=True, classifier_features=["u", "v", "|u-v|", "u*v"])
    assert model.classifier.in_features == 4 * 32 and model.classifier.out_features == 3
    batch = tiny_tokenizer(SENTENCES[:4], padding=True, return_tensors="pt")
    out = model(**{k: v.reshape(2, 2, -1) for k, v in batch.items()})
    assert out.logits.shape == (2, 3)
    u, v = out.sentence_embedding[:, 0], out.sentence_embedding[:, 1]
    features = torch.cat([u, v, (u - v).abs(), u * v], dim=-1) * 32**0.5
    torch.testing.assert_close(out.logits, model.classifier(features))


def test_model_without_head_refuses_to_classify(tiny_model) -> None:
    with pytest.raises(ValueError, match="no classifier head"):
        tiny_model.classify(torch.zeros(1, 32), torch.zeros(1, 32))


def test_normalize_gives_unit_vectors(tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True)
    emb = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(len(SENTENCES)))


# ---------------------------------------------------------------------------------------------------- encode


def test_encode_keeps_input_order(tiny_model, tiny_tokenizer) -> None:
    together = tiny_model.encode(SENTENCES, tokenizer=tiny_tokenizer, batch_size=2)
    for i, text in enumerate(SENTENCES):
        torch.testing.assert_close(together[i], tiny_model.encode(text, tokenizer=tiny_tokenizer), atol=1e-5, rtol=0)


def test_encode_outputs(tiny_model, tiny_tokenizer) -> None:
    emb = tiny_model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    assert isinstance(emb, torch.Tensor) and emb.shape == (5, 32) and not emb.requires_grad
    arr = tiny_model.encode(SENTENCES, tokenizer=tiny_tokenizer, convert_to_numpy=True)
    assert arr.shape == (5, 32) and arr.dtype.name == "float32"
    assert tiny_model.encode("a man", tokenizer=tiny_tokenizer).shape == (32,)
    assert tiny_model.training is False


def test_encode_empty_list_and_empty_string(tiny_model, tiny_tokenizer) -> None:
    assert tiny_model.encode([], tokenizer=tiny_tokenizer).shape == (0, 32)
    assert tiny_model.encode([], tokenizer=tiny_tokenizer, convert_to_numpy=True).shape == (0, 32)
    emb = tiny_model.encode(["", "a man"], tokenizer=tiny_tokenizer)
    assert emb.shape == (2, 32) and torch.isfinite(emb).all()


@pytest.mark.parametrize(("texts", "index"), [(["ok", None], 1), ([3, "ok"], 0), (["a", "b", b"c"], 2)])
def test_encode_rejects_non_strings(tiny_model, tiny_tokenizer, texts: list, index: int) -> None:
    with pytest.raises(TypeError, match=rf"texts\[{index}\]"):
        tiny_model.encode(texts, tokenizer=tiny_tokenizer)


def test_encode_rejects_none_and_bad_batch_size(tiny_model, tiny_tokenizer) -> None:
    with pytest.raises(TypeError, match="NoneType"):
        tiny_model.encode(None, tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="batch_size=0"):
        tiny_model.encode(["a"], tokenizer=tiny_tokenizer, batch_size=0)


def test_encode_truncates_long_texts_with_one_warning(tiny_tokenizer, caplog) -> None:
    model = make_tiny_model(max_seq_length=8)
    long_text = " ".join(["the man plays the guitar"] * 10)
    with caplog.at_level(logging.WARNING, logger="hf_siamese.modeling.modeling_siamese"):
        emb = model.encode([long_text, "a man", long_text], tokenizer=tiny_tokenizer)
    assert emb.shape == (3, 32)
    warnings = [r for r in caplog.records if "truncated" in r.getMessage()]
    assert len(warnings) == 1
    assert "2 of 3 texts" in warnings[0].getMessage() and "max_length=8" in warnings[0].getMessage()
    torch.testing.assert_close(emb[0], emb[2])


def test_encode_without_tokenizer_explains(tiny_model) -> None:
    with pytest.raises(ValueError, match="needs a tokenizer"):
        tiny_model.encode(["a"])


# ---------------------------------------------------------------------------------------------------- save / load


def test_save_load_round_trip(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True, num_labels=3)
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert {"config.json", "model.safetensors.index.json", "modeling_siamese.py", "configuration_siamese.py"} <= files
    assert not any(f.endswith((".bin", ".pt", ".pkl")) for f in files)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_siamese.SiameseBertConfig",
        "AutoModel": "modeling_siamese.SiameseBertModel",
    }

    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, SiameseBertModel)
    assert loaded.encoder.pooler is None if hasattr(loaded.encoder, "pooler") else True
    original = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    # The tokenizer saved beside the model is found on its own.
    torch.testing.assert_close(loaded.encode(SENTENCES), original, atol=0, rtol=0)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "roberta"])
def test_encoder_families_build_run_and_round_trip(model_type: str, tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(model_type)
    assert model.config.encoder_config.model_type == model_type
    emb = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    assert emb.shape == (5, 32) and torch.isfinite(emb).all()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, SiameseBertModel)
    assert loaded.config.encoder_config.model_type == model_type
    torch.testing.assert_close(loaded.encode(SENTENCES, tokenizer=tiny_tokenizer), emb, atol=0, rtol=0)


def test_from_encoder_keeps_weights_and_cleans_local_path(tmp_path: Path, tiny_tokenizer) -> None:
    torch.manual_seed(1)
    encoder = AutoModel.from_config(tiny_encoder_config())
    base = tmp_path / "base"
    encoder.save_pretrained(base)
    tiny_tokenizer.save_pretrained(base)

    model = SiameseBertModel.from_encoder(base, pooling="cls")
    for name, tensor in encoder.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(tensor, model.encoder.state_dict()[name]), name
    # Without an explicit tokenizer, encode finds the base checkpoint's.
    assert model.encode(SENTENCES).shape == (5, 32)

    out = tmp_path / "out"
    model.save_pretrained(out)
    text = (out / "config.json").read_text()
    assert str(base) not in text and str(tmp_path) not in text
    assert "_name_or_path" not in json.loads(text)["encoder_config"]


# ---------------------------------------------------------------------------------------------------- remote code


def test_remote_code_loads_without_package(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True, pooling="mean_sqrt_len")
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    expected = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    torch.save(expected, tmp_path / "expected.pt")  # a test artefact, read back with weights_only=True

    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        import torch
        from transformers import AutoModel, AutoTokenizer
        path = {str(tmp_path)!r}
        model = AutoModel.from_pretrained(path, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        batch = tokenizer({SENTENCES!r}, padding=True, return_tensors="pt")
        with torch.no_grad():
            direct = model(**batch).sentence_embedding
        via_encode = model.encode({SENTENCES!r})
        expected = torch.load(path + "/expected.pt", weights_only=True)
        print("MAXDIFF", float((via_encode - expected).abs().max()), float((direct - expected).abs().max()))
        """
    )
    result = run_isolated(script, tmp_path)
    diffs = [float(x) for x in result.split("MAXDIFF")[1].split()[:2]]
    assert max(diffs) < 1e-6, result


def test_tokenizer_beside_remote_code_never_prompts(tmp_path: Path, tiny_tokenizer) -> None:
    """transformers 5's AutoTokenizer reads config.json first; the `auto_map` there makes it ask before running
    the remote config class, so without hf_siamese installed users must pass trust_remote_code=True (README and
    model card say so). With stdin closed the prompt must fail fast rather than hang, and with the flag it loads."""
    make_tiny_model().save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
        print("IDS", tok("a man")["input_ids"])
        """
    )
    out = run_isolated(script, tmp_path)
    assert "IDS [2, 5, 6, 3]" in out
    assert "Do you wish to run the custom code" not in out


def test_tokenizer_with_package_installed_does_not_prompt(tmp_path: Path, tiny_tokenizer) -> None:
    make_tiny_model().save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    script = textwrap.dedent(
        f"""
        import hf_siamese  # noqa: F401
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained({str(tmp_path)!r})
        print("IDS", tok("a man")["input_ids"])
        """
    )
    out = run_isolated(script, tmp_path)
    assert "IDS [2, 5, 6, 3]" in out and "Do you wish" not in out


# ---------------------------------------------------------------------------------------------------- real weights


@pytest.mark.slow
def test_from_encoder_matches_independent_mean_pooling() -> None:
    path = minilm_path()
    model = SiameseBertModel.from_encoder(path, pooling="mean", normalize=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts = ["A man is playing a guitar.", "Someone plays a musical instrument.", "The stock market fell today."]
    emb = model.encode(texts, tokenizer=tokenizer)

    reference = AutoModel.from_pretrained(path).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        states = reference(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    assert (emb - expected).abs().max().item() < 1e-5
    cos = model.similarity(emb, emb)
    assert cos[0, 1] > cos[0, 2]
    assert model.config.max_seq_length == 256  # read from the sentence-transformers folder


def test_package_registers_auto_classes() -> None:
    assert AutoConfig.for_model("siamese-bert").__class__ is SiameseBertConfig
    assert hf_siamese.SiameseBertModel is SiameseBertModel


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_grouped_columns_are_cut_to_their_own_length(padding_side: str, tiny_tokenizer) -> None:
    """Each column is encoded as if it had been padded on its own (BERT positions make left padding matter)."""
    model = make_tiny_model()
    long = "two dogs are playing in the park and the red car is fast ."
    columns = [[long, "a cat"], ["a man", "a dog"]]  # column 0: long + short, column 1: short only
    # A copy: the session's tokenizer must not carry this padding side into other tests (a CLI test saved it).
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.padding_side = padding_side
    together = tokenizer([t for pair in zip(*columns, strict=True) for t in pair], padding=True, return_tensors="pt")
    alone = [tokenizer(column, padding=True, return_tensors="pt") for column in columns]
    grouped = model(**{k: v.reshape(2, 2, -1) for k, v in together.items()})
    for j, batch in enumerate(alone):
        assert batch["input_ids"].shape[1] < together["input_ids"].shape[1] or j == 0
        torch.testing.assert_close(
            grouped.sentence_embedding[:, j], model(**batch).sentence_embedding, atol=1e-5, rtol=1e-5
        )
    assert grouped.last_hidden_state is None


# A folder saved by main before the package layout moved the modules into subpackages (commit d32952e): its remote code
# still imports `hf_siamese.sentence_transformers_format` / `hf_siamese.hub` in its optional hooks.
SAVED_BEFORE_LAYOUT = Path(__file__).resolve().parents[1] / "fixtures" / "saved_before_layout"


def _expected_before_layout() -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(SAVED_BEFORE_LAYOUT.parent / "saved_before_layout_embeddings.safetensors"))["embeddings"]


def test_folder_saved_before_layout_loads_with_package(tmp_path: Path) -> None:
    model = AutoModel.from_pretrained(SAVED_BEFORE_LAYOUT)
    assert isinstance(model, SiameseBertModel)
    torch.testing.assert_close(model.encode(SENTENCES), _expected_before_layout(), atol=1e-6, rtol=0)
    # Saved again by today's package, it still gives the same embeddings, also as remote code without hf_siamese.
    model.save_pretrained(tmp_path / "again")
    again = AutoModel.from_pretrained(tmp_path / "again")
    torch.testing.assert_close(again.encode(SENTENCES), _expected_before_layout(), atol=1e-6, rtol=0)
    assert (tmp_path / "again" / "modules.json").exists()


def test_folder_saved_before_layout_loads_without_package(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    shutil.copytree(SAVED_BEFORE_LAYOUT, folder)
    shutil.copy(SAVED_BEFORE_LAYOUT.parent / "saved_before_layout_embeddings.safetensors", tmp_path / "expected.st")
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        from safetensors.torch import load_file
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        expected = load_file({str(tmp_path / "expected.st")!r})["embeddings"]
        print("MAXDIFF", float((model.encode({SENTENCES!r}) - expected).abs().max()))
        """
    )
    out = run_isolated(script, tmp_path)
    assert float(out.split("MAXDIFF")[1].split()[0]) < 1e-6, out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pooling", ["mean", "mean_sqrt_len", "weightedmean", "max", "cls", "lasttoken"])
def test_pooling_in_half_precision_is_finite_and_close(pooling: str, dtype: torch.dtype) -> None:
    """Long texts (512 tokens: weightedmean weights sum to 131,328, past float16's 65504) and an all-padding row
    pool to finite values in float16 and bfloat16, close to the float32 pooling of the same states."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 512, 16) * 4
    mask = torch.ones(3, 512, dtype=torch.long)
    mask[1, 300:] = 0
    mask[2] = 0  # an all-padding row
    reference = pool_token_states(hidden.to(dtype).float(), mask, pooling)
    pooled = pool_token_states(hidden.to(dtype), mask, pooling)
    assert pooled.dtype == dtype
    assert torch.isfinite(pooled).all(), pooled
    if pooling not in ("max", "cls"):  # as in float32: max gives the dtype's minimum, cls the first position's state
        assert pooled[2].abs().max() == 0
    scale = reference[:2].abs().max()
    torch.testing.assert_close(pooled[:2].float(), reference[:2], atol=float(scale) * 1e-2, rtol=1e-2)


@pytest.mark.parametrize("source", ["./no-such-model", "/no/such/model", "runs/a/b"])
def test_from_encoder_names_a_missing_local_folder(source: str) -> None:
    """A path that does not exist is said to be missing, not answered with transformers' complaint about repo ids."""
    with pytest.raises(FileNotFoundError, match=f"model folder not found: '{source}'"):
        SiameseBertModel.from_encoder(source)
