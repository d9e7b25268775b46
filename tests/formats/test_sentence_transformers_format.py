"""The sentence-transformers layout in and out: checkpoints saved by sentence-transformers load through `from_encoder`
with its exact embedding, and every folder we save loads in `SentenceTransformer`, `AutoModel` and remote code with
the same embedding."""

from __future__ import annotations

import json
import logging
import shutil
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from conftest import SENTENCES, TINY
from helpers import BLOCKED_IMPORT, minilm_path, run_isolated
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, Qwen2Config

from hf_siamese import SiameseBertConfig, SiameseBertModel
from hf_siamese.formats.sentence_transformers_read import SentenceTransformersFormatError

st = pytest.importorskip("sentence_transformers", reason="pip install 'hf-siamese[dev]' for the interop tests")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer  # noqa: E402

TOLERANCE = 1e-5
PROMPTS = {"query": "the weather : ", "passage": "a new song : "}


@pytest.fixture(scope="module")
def tiny_bert_folder(tmp_path_factory, tiny_tokenizer) -> Path:
    """A plain transformers checkpoint (random tiny BERT + tokenizer) for sentence-transformers to build on."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY, max_position_embeddings=64)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def build_st_model(
    encoder_folder: Path,
    folder: Path,
    pooling: str,
    dense: bool = False,
    normalize: bool = False,
    prompts: dict | None = None,
    include_prompt: bool = True,
    **kwargs,
) -> SentenceTransformer:
    """A sentence-transformers model built and saved with its own API."""
    torch.manual_seed(1)
    modules = [
        Transformer(str(encoder_folder), max_seq_length=48),
        Pooling(32, pooling_mode=pooling, include_prompt=include_prompt),
    ]
    if dense:
        modules.append(Dense(32, 16, activation_function=torch.nn.Tanh()))
    if normalize:
        modules.append(Normalize())
    model = SentenceTransformer(modules=modules, prompts=prompts, device="cpu", **kwargs)
    model.save(str(folder))
    return SentenceTransformer(str(folder), device="cpu")


def assert_close(ours, theirs) -> None:
    ours, theirs = torch.as_tensor(ours), torch.as_tensor(theirs)
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() < TOLERANCE


CASES = {
    "cls": dict(pooling="cls"),
    "max": dict(pooling="max"),
    "mean_sqrt_len": dict(pooling="mean_sqrt_len_tokens"),
    "weightedmean": dict(pooling="weightedmean"),
    "lasttoken": dict(pooling="lasttoken"),
    "cls+dense+normalize": dict(pooling="cls", dense=True, normalize=True),
    "prompts": dict(pooling="mean", prompts=PROMPTS, default_prompt_name="query", similarity_fn_name="dot"),
    "prompts-excluded": dict(pooling="mean", prompts=PROMPTS, include_prompt=False, normalize=True),
}


@pytest.fixture(scope="module")
def round_trips(tiny_bert_folder: Path, tmp_path_factory) -> dict[str, dict]:
    """Each case built and saved by sentence-transformers, loaded by `from_encoder` and saved by us; with the
    reference embeddings of sentence-transformers on its own folder, per prompt name."""
    results = {}
    for case, kwargs in CASES.items():
        folder = tmp_path_factory.mktemp(case)
        reference = build_st_model(tiny_bert_folder, folder / "st", **kwargs)
        names = [None, *sorted(kwargs.get("prompts") or {})]
        model = SiameseBertModel.from_encoder(folder / "st")
        model.save_pretrained(folder / "ours")
        expected = {name: reference.encode(SENTENCES, prompt_name=name, convert_to_tensor=True) for name in names}
        results[case] = {"folder": folder, "model": model, "expected": expected}
    return results


@pytest.mark.parametrize("case", list(CASES))
def test_sentence_transformers_round_trip(case: str, round_trips: dict) -> None:
    model, expected, folder = (round_trips[case][k] for k in ("model", "expected", "folder"))
    for name, reference in expected.items():
        assert_close(model.encode(SENTENCES, prompt_name=name), reference)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when sentence-transformers reads our folder
        reloaded = SentenceTransformer(str(folder / "ours"), device="cpu")
    auto = AutoModel.from_pretrained(folder / "ours")
    assert isinstance(auto, SiameseBertModel)
    for name, reference in expected.items():
        assert_close(reloaded.encode(SENTENCES, prompt_name=name), reference)
        assert_close(auto.encode(SENTENCES, prompt_name=name), reference)
    assert reloaded.similarity_fn_name == model.config.similarity


def test_remote_code_reads_every_saved_layout(round_trips: dict, tmp_path: Path) -> None:
    """Each saved folder, loaded as remote code in a process where hf_siamese cannot be imported."""
    checks = []
    for case, result in round_trips.items():
        for index, (name, reference) in enumerate(result["expected"].items()):
            torch.save(reference, tmp_path / f"{case}-{index}.pt")
            checks.append((case, str(result["folder"] / "ours"), name, str(tmp_path / f"{case}-{index}.pt")))
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        import torch
        from transformers import AutoModel
        for case, path, name, expected in {checks!r}:
            model = AutoModel.from_pretrained(path, trust_remote_code=True)
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            got = model.encode({SENTENCES!r}, prompt_name=name)  # its tokenizer: 0_Transformer/
            diff = float((got - torch.load(expected, weights_only=True)).abs().max())
            print("MAXDIFF", case, name, diff)
        """
    )
    output = run_isolated(script, tmp_path)
    diffs = [line.split() for line in output.splitlines() if line.startswith("MAXDIFF")]
    assert len(diffs) == len(checks), output
    assert all(float(diff[-1]) < TOLERANCE for diff in diffs), output


def test_saved_folder_is_read_without_warnings(tiny_bert_folder: Path, tmp_path: Path, caplog) -> None:
    build_st_model(tiny_bert_folder, tmp_path / "st", pooling="cls", dense=True, normalize=True)
    SiameseBertModel.from_encoder(tmp_path / "st").save_pretrained(tmp_path / "ours")
    with caplog.at_level(logging.WARNING):
        SentenceTransformer(str(tmp_path / "ours"), device="cpu")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_encoder_weights_are_stored_once(tiny_bert_folder: Path, tmp_path: Path) -> None:
    build_st_model(tiny_bert_folder, tmp_path / "st", pooling="cls", dense=True, normalize=True)
    model = SiameseBertModel.from_encoder(tmp_path / "st", num_labels=3)
    model.save_pretrained(tmp_path / "ours")
    files = sorted(p.relative_to(tmp_path / "ours").as_posix() for p in (tmp_path / "ours").rglob("*.safetensors"))
    assert files == ["0_Transformer/model.safetensors", "2_Dense/model.safetensors", "siamese_head.safetensors"]
    index = json.loads((tmp_path / "ours" / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(model.state_dict())
    assert {name for name, file in index.items() if file == "0_Transformer/model.safetensors"} == {
        name for name in model.state_dict() if name.startswith("encoder.")
    }
    reloaded = AutoModel.from_pretrained(tmp_path / "ours")
    for name, value in model.state_dict().items():
        assert torch.equal(value, reloaded.state_dict()[name]), name


def test_explicit_arguments_override_the_checkpoint(tiny_bert_folder: Path, tmp_path: Path) -> None:
    build_st_model(tiny_bert_folder, tmp_path / "st", pooling="cls", normalize=True, prompts=PROMPTS)
    model = SiameseBertModel.from_encoder(tmp_path / "st", pooling="max", normalize=False, prompts={"q": "a "})
    assert (model.config.pooling, model.config.normalize, model.config.prompts) == ("max", False, {"q": "a "})
    plain = SiameseBertModel.from_encoder(tiny_bert_folder)  # no modules.json: today's defaults
    assert (plain.config.pooling, plain.config.normalize, plain.config.similarity) == ("mean", False, "cosine")


def test_unknown_prompt_name_lists_the_known_ones(tiny_bert_folder: Path, tmp_path: Path) -> None:
    build_st_model(tiny_bert_folder, tmp_path / "st", pooling="mean", prompts=PROMPTS)
    model = SiameseBertModel.from_encoder(tmp_path / "st")
    with pytest.raises(ValueError, match=r"prompt_name='qeury' is not one of .*\['passage', 'query'\]"):
        model.encode(SENTENCES, prompt_name="qeury")
    assert_close(model.encode(["dog"], prompt="the weather : "), model.encode(["dog"], prompt_name="query"))


# ----------------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def st_folder(tiny_bert_folder: Path, tmp_path: Path) -> Path:
    build_st_model(tiny_bert_folder, tmp_path / "st", pooling="cls", dense=True, normalize=True)
    return tmp_path / "st"


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(edit(data) or data))


def test_unknown_module_type_is_named(st_folder: Path) -> None:
    _edit_json(
        st_folder / "modules.json",
        lambda m: m.insert(2, {"idx": 9, "name": "9", "path": "9_LSTM", "type": "sentence_transformers.models.LSTM"}),
    )
    with pytest.raises(SentenceTransformersFormatError, match=r"modules\.json.*'sentence_transformers\.models\.LSTM'"):
        SiameseBertModel.from_encoder(st_folder)


def test_pickle_only_dense_is_refused(st_folder: Path) -> None:
    dense = st_folder / "2_Dense"
    (dense / "model.safetensors").rename(dense / "pytorch_model.bin")
    with pytest.raises(SentenceTransformersFormatError, match=r"2_Dense.*pytorch_model\.bin, a pickle"):
        SiameseBertModel.from_encoder(st_folder)


def test_two_pooling_modes_are_refused(st_folder: Path) -> None:
    _edit_json(st_folder / "1_Pooling" / "config.json", lambda c: c.update(pooling_mode=["cls", "mean"]))
    with pytest.raises(SentenceTransformersFormatError, match=r"1_Pooling/config\.json.*\['cls', 'mean'\].*at once"):
        SiameseBertModel.from_encoder(st_folder)


def test_missing_module_folder_is_named(st_folder: Path) -> None:
    shutil.rmtree(st_folder / "2_Dense")
    with pytest.raises(SentenceTransformersFormatError, match=r"Dense module at path '2_Dense'.*does not exist"):
        SiameseBertModel.from_encoder(st_folder)


def test_unsupported_activation_is_named(st_folder: Path) -> None:
    _edit_json(st_folder / "2_Dense" / "config.json", lambda c: c.update(activation_function="my.module.Swish"))
    with pytest.raises(SentenceTransformersFormatError, match=r"2_Dense/config\.json.*'my\.module\.Swish'"):
        SiameseBertModel.from_encoder(st_folder)


def test_failed_save_keeps_the_earlier_one(st_folder: Path, tmp_path: Path, monkeypatch) -> None:
    model = SiameseBertModel.from_encoder(st_folder)
    model.save_pretrained(tmp_path / "ours")
    before = {p.relative_to(tmp_path / "ours"): p.read_bytes() for p in (tmp_path / "ours").rglob("*") if p.is_file()}

    import hf_siamese.formats.sentence_transformers_save as layout

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(layout, "write_layout", broken)
    with pytest.raises(OSError, match="disk full"):
        model.save_pretrained(tmp_path / "ours")
    after = {p.relative_to(tmp_path / "ours"): p.read_bytes() for p in (tmp_path / "ours").rglob("*") if p.is_file()}
    assert after == before


def test_config_rejects_bad_projection_and_prompt() -> None:
    encoder = BertConfig(**TINY)
    with pytest.raises(ValueError, match=r"projections\[0\]\.in_features=8 does not match .*\(32\)"):
        SiameseBertConfig(encoder_config=encoder, projections=[{"in_features": 8, "out_features": 4}])
    with pytest.raises(ValueError, match=r"activation='swish' is not one of"):
        SiameseBertConfig(
            encoder_config=encoder, projections=[{"in_features": 32, "out_features": 4, "activation": "swish"}]
        )
    with pytest.raises(ValueError, match=r"default_prompt_name='query' is not one of the prompts \['q'\]"):
        SiameseBertConfig(encoder_config=encoder, prompts={"q": "x"}, default_prompt_name="query")


# ----------------------------------------------------------------------------------------------- decoder embedders


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_decoder_embedder_with_last_token_pooling(padding_side: str, tmp_path: Path, tiny_tokenizer) -> None:
    torch.manual_seed(0)
    encoder = Qwen2Config(
        vocab_size=99,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    model = SiameseBertModel(SiameseBertConfig(encoder_config=encoder, pooling="lasttoken", normalize=True)).eval()
    tokenizer = AutoTokenizer.from_pretrained(_save_tokenizer(tiny_tokenizer, tmp_path), padding_side=padding_side)
    embeddings = model.encode(SENTENCES, tokenizer=tokenizer)
    one_by_one = torch.stack([model.encode(text, tokenizer=tokenizer) for text in SENTENCES])
    assert_close(embeddings, one_by_one)  # padding, left or right, never changes the last token's state

    model.save_pretrained(tmp_path / "qwen", tokenizer=tokenizer)
    reloaded = AutoModel.from_pretrained(tmp_path / "qwen")
    assert type(reloaded.encoder).__name__ == "Qwen2Model"
    assert_close(reloaded.encode(SENTENCES, tokenizer=tokenizer), embeddings)
    # transformers picks the tokenizer class from the encoder's model type (a Qwen2 tokenizer over this test's BERT
    # vocabulary, tokenizing differently), so compare the two pipelines on sentence-transformers' own tokenizer.
    their = SentenceTransformer(str(tmp_path / "qwen"), device="cpu")
    assert their.tokenizer.padding_side == padding_side
    assert_close(their.encode(SENTENCES), reloaded.encode(SENTENCES, tokenizer=their.tokenizer))


def _save_tokenizer(tokenizer, tmp_path: Path) -> Path:
    tokenizer.save_pretrained(tmp_path / "tok")
    return tmp_path / "tok"


# ---------------------------------------------------------------------------------------------------- real weights


@pytest.mark.slow
def test_minilm_matches_sentence_transformers_both_ways(tmp_path: Path) -> None:
    path = minilm_path()
    texts = ["A man is playing a guitar.", "Someone plays a musical instrument.", "The stock market fell today."]
    reference = SentenceTransformer(str(path), device="cpu").encode(texts)
    model = SiameseBertModel.from_encoder(path)  # mean pooling + Normalize + max length, all from the folder
    assert (model.config.pooling, model.config.normalize, model.config.max_seq_length) == ("mean", True, 256)
    assert_close(model.encode(texts), reference)
    model.save_pretrained(tmp_path / "ours")
    assert_close(SentenceTransformer(str(tmp_path / "ours"), device="cpu").encode(texts), reference)
    assert_close(AutoModel.from_pretrained(tmp_path / "ours").encode(texts), reference)


def test_model_card_describes_the_pipeline(st_folder: Path) -> None:
    from hf_siamese.formats.model_card import build_model_card, split_front_matter

    model = SiameseBertModel.from_encoder(st_folder, prompts=PROMPTS, default_prompt_name="query")
    metadata, body = split_front_matter(build_model_card(model, repo_id="alice/tiny"))
    assert metadata["library_name"] == "sentence-transformers" and "transformers" in metadata["tags"]
    assert "16-dimensional sentence embedding" in body and "dense 32 -> 16, tanh" in body
    assert "`query`: `'the weather : '`" in body and "(default: `query`)" in body
    assert 'SentenceTransformer("alice/tiny")' in body


def test_hub_id_and_revision(fake_hub, tiny_bert_folder: Path, tmp_path: Path) -> None:
    """A sentence-transformers repo on the (local) Hub: every module file is fetched by id, at the asked revision."""
    import huggingface_hub

    repo, token = "bob/tiny-st", "hf_test"
    first = build_st_model(tiny_bert_folder, tmp_path / "first", pooling="cls", normalize=True)
    huggingface_hub.create_repo(repo, token=token)
    sha = huggingface_hub.upload_folder(folder_path=tmp_path / "first", repo_id=repo, token=token).oid
    second = build_st_model(tiny_bert_folder, tmp_path / "second", pooling="max", dense=True)
    huggingface_hub.upload_folder(folder_path=tmp_path / "second", repo_id=repo, token=token)

    latest = SiameseBertModel.from_encoder(repo)
    assert (latest.config.pooling, len(latest.config.projections)) == ("max", 1)
    assert_close(latest.encode(SENTENCES), second.encode(SENTENCES))
    pinned = SiameseBertModel.from_encoder(repo, revision=sha)
    assert (pinned.config.pooling, pinned.config.normalize, pinned.config.projections) == ("cls", True, [])
    assert_close(pinned.encode(SENTENCES), first.encode(SENTENCES))


def test_save_pretrained_options(st_folder: Path, tmp_path: Path) -> None:
    model = SiameseBertModel.from_encoder(st_folder)
    model.save_pretrained(tmp_path / "other-rank", is_main_process=False)
    assert not (tmp_path / "other-rank").exists() or not any((tmp_path / "other-rank").iterdir())
    with pytest.raises(ValueError, match=r"variant='fp16'\) is not supported"):
        model.save_pretrained(tmp_path / "variant", variant="fp16")
    with pytest.raises(ValueError, match=r"push_to_hub=True.*model\.push_to_hub"):
        model.save_pretrained(tmp_path / "push", push_to_hub=True)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ValueError, match=r"is a file; give a folder"):
        model.save_pretrained(tmp_path / "file")
