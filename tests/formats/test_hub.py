"""Sharing on the Hub (against the local fake Hub): one commit with weights, code, tokenizer and a generated card;
loading by id with and without hf_siamese; revisions, PRs, private repos; failures; no token or local path leaks."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import SENTENCES, make_tiny_model, tiny_encoder_config
from datasets import Dataset
from hub_server import FakeHub
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.utils import close_session
from transformers import AutoModel, BertModel, TrainingArguments

from hf_siamese import SiameseBertModel, SiameseTrainer, losses
from hf_siamese.formats.hub import MACHINE_SPECIFIC_TOKENIZER_KEYS, HubPushError
from hf_siamese.formats.model_card import build_model_card, split_front_matter, write_model_card

REPO = "alice/minilm-sts"
TOKEN = "hf_fakeSecretToken1234567890"
CODE_FILES = ("modeling_siamese.py", "configuration_siamese.py")


def embed(model, tokenizer=None) -> torch.Tensor:
    return model.encode(SENTENCES, tokenizer=tokenizer)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def card_of(hub: FakeHub, repo: str = REPO, revision: str = "main") -> tuple[dict, str, str]:
    text = hub.files(repo, revision)["README.md"].decode()
    metadata, body = split_front_matter(text)
    return metadata, body, text


def scored_pairs(n: int, seed: int) -> Dataset:
    words = "man woman dog cat plays guitar piano music car bus train food soup bread market rain sun park".split()
    rng = random.Random(seed)
    s1, s2, score = [], [], []
    for _ in range(n):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(2, 5)))
        same = rng.random() < 0.5
        s1.append(a)
        s2.append(a if same else " ".join(rng.choice(words) for _ in range(rng.randint(2, 5))))
        score.append(5.0 if same else rng.choice([0.5, 1.5, 2.5]))
    return Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": score})


# ---------------------------------------------------------------------------------------------------- round trips


def test_push_then_load_by_id(fake_hub: FakeHub, tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True, pooling="mean_sqrt_len")
    expected = embed(model, tiny_tokenizer)

    info = model.push_to_hub(REPO, tokenizer=tiny_tokenizer, token=TOKEN)

    # One commit on top of the repo's initial one, holding everything.
    assert fake_hub.history(REPO) == [info.oid, fake_hub.history(REPO)[-1]]
    files = fake_hub.files(REPO)
    assert {
        "config.json",
        "model.safetensors.index.json",
        "tokenizer_config.json",
        "README.md",
        *CODE_FILES,
    } <= files.keys()
    assert {"modules.json", "0_Transformer/model.safetensors", "0_Transformer/tokenizer_config.json"} <= files.keys()
    config = json.loads(files["config.json"])
    assert config["auto_map"] == {
        "AutoConfig": "configuration_siamese.SiameseBertConfig",
        "AutoModel": "modeling_siamese.SiameseBertModel",
    }
    assert not MACHINE_SPECIFIC_TOKENIZER_KEYS & json.loads(files["tokenizer_config.json"]).keys()
    assert "training_args.bin" not in files

    loaded = AutoModel.from_pretrained(REPO)
    assert isinstance(loaded, SiameseBertModel)
    assert torch.allclose(embed(loaded), expected, atol=1e-6)  # the tokenizer comes from the repo too


def test_push_then_load_without_hf_siamese(fake_hub: FakeHub, tiny_tokenizer, tmp_path: Path) -> None:
    """A Hub user without hf_siamese: trust_remote_code=True on both auto classes; their own push still works."""
    model = make_tiny_model(normalize=True)
    model.push_to_hub(REPO, tokenizer=tiny_tokenizer, token=TOKEN)
    torch.save(embed(model, tiny_tokenizer), tmp_path / "expected.pt")

    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["hf_siamese"] = None  # `import hf_siamese` now raises ImportError
        try:
            import hf_siamese  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("hf_siamese is importable; the test would prove nothing")
        import torch
        from transformers import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained({REPO!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        tokenizer = AutoTokenizer.from_pretrained({REPO!r}, trust_remote_code=True)
        expected = torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True)
        print("MAXDIFF", float((model.encode({SENTENCES!r}, tokenizer=tokenizer) - expected).abs().max()))
        # Without hf_siamese, push_to_hub falls back to transformers' push (model and tokenizer commits).
        model.push_to_hub("alice/copy", tokenizer=tokenizer, token={TOKEN!r})
        print("PUSHED")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, **fake_hub.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert float(output.split("MAXDIFF")[1].split()[0]) < 1e-6, output
    assert "PUSHED" in output and "Do you wish to run the custom code" not in output

    copy = fake_hub.files("alice/copy")
    # Without hf_siamese the copy is saved in transformers' own layout (no sentence-transformers files).
    assert {"config.json", "model.safetensors", "tokenizer_config.json", *CODE_FILES} <= copy.keys()
    assert torch.allclose(embed(AutoModel.from_pretrained("alice/copy")), embed(model, tiny_tokenizer), atol=1e-6)


def test_revisions_branches_and_pull_requests(fake_hub: FakeHub, tiny_tokenizer) -> None:
    first, second, dev, proposal = (make_tiny_model(seed=s) for s in range(4))
    first_sha = first.push_to_hub(REPO, tokenizer=tiny_tokenizer).oid
    second_sha = second.push_to_hub(REPO, tokenizer=tiny_tokenizer, commit_message="Second").oid
    assert fake_hub.commit_title(REPO, second_sha) == "Second"

    # A pinned commit keeps serving the first weights; main moved on.
    assert torch.allclose(embed(AutoModel.from_pretrained(REPO, revision=first_sha)), embed(first, tiny_tokenizer))
    assert torch.allclose(embed(AutoModel.from_pretrained(REPO)), embed(second, tiny_tokenizer))

    # A new branch is created from main, then committed to.
    dev.push_to_hub(REPO, tokenizer=tiny_tokenizer, revision="dev")
    assert set(fake_hub.branches(REPO)) == {"main", "dev"}
    assert fake_hub.resolve(REPO) == second_sha
    assert torch.allclose(embed(AutoModel.from_pretrained(REPO, revision="dev")), embed(dev, tiny_tokenizer))

    info = proposal.push_to_hub(REPO, tokenizer=tiny_tokenizer, create_pr=True)
    assert info.pr_revision == "refs/pr/1"
    assert fake_hub.pull_requests(REPO) == {1: info.oid}
    assert fake_hub.resolve(REPO) == second_sha
    pr_model = AutoModel.from_pretrained(REPO, revision="refs/pr/1")
    assert torch.allclose(embed(pr_model), embed(proposal, tiny_tokenizer))


# ---------------------------------------------------------------------------------------------------- failures


def test_private_repo_and_wrong_token(fake_hub: FakeHub, tiny_tokenizer, tmp_path: Path) -> None:
    fake_hub.required_token = TOKEN
    model = make_tiny_model()
    model.push_to_hub(REPO, tokenizer=tiny_tokenizer, token=TOKEN, private=True)
    assert fake_hub.is_private(REPO)
    commits = fake_hub.history(REPO)

    with pytest.raises(HubPushError) as exc:
        make_tiny_model(seed=1).push_to_hub(REPO, tokenizer=tiny_tokenizer, token="hf_wrongToken987654321")
    message = str(exc.value)
    assert exc.value.status_code == 401 and exc.value.repo_id == REPO
    assert fake_hub.url in message and REPO in message and "token" in message
    assert "hf_wrongToken987654321" not in message and TOKEN not in message
    assert fake_hub.history(REPO) == commits

    with pytest.raises(OSError):
        AutoModel.from_pretrained(REPO, token="hf_wrongToken987654321", cache_dir=tmp_path / "cache")
    loaded = AutoModel.from_pretrained(REPO, token=TOKEN, cache_dir=tmp_path / "cache2")
    assert torch.allclose(embed(loaded, tiny_tokenizer), embed(model, tiny_tokenizer))


def test_hub_down_leaves_local_files_alone_and_a_retry_succeeds(
    fake_hub: FakeHub, tiny_tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    model = make_tiny_model()
    out = tmp_path / "out"
    model.save_pretrained(out)
    tiny_tokenizer.save_pretrained(out)
    before = snapshot(out)

    fake_hub.refuse = True  # every request answered 503
    with pytest.raises(HubPushError) as exc:
        model.push_to_hub(REPO, tokenizer=tiny_tokenizer)
    assert exc.value.status_code == 503 and exc.value.endpoint == fake_hub.url
    assert fake_hub.url in str(exc.value) and REPO in str(exc.value) and "retry" in str(exc.value)
    assert not fake_hub.repo_exists(REPO)
    fake_hub.refuse = False

    # Connection refused: nobody listens on the port.
    fake_hub.stop()
    close_session()
    with pytest.raises(HubPushError) as exc:
        model.push_to_hub(REPO, tokenizer=tiny_tokenizer)
    assert exc.value.status_code is None and "could not be reached" in str(exc.value)
    assert f"127.0.0.1:{fake_hub.port}" in str(exc.value) and REPO in str(exc.value)
    fake_hub.start()

    info = model.push_to_hub(REPO, tokenizer=tiny_tokenizer)
    assert fake_hub.resolve(REPO) == info.oid

    # The commit itself fails (repo and branch exist): nothing changes, and pushing again works.
    fake_hub.fail_next(1, status=500, path_contains="/commit/")
    with pytest.raises(HubPushError, match="could not upload the files") as exc:
        make_tiny_model(seed=1).push_to_hub(REPO, tokenizer=tiny_tokenizer)
    assert exc.value.status_code == 500 and fake_hub.resolve(REPO) == info.oid
    assert make_tiny_model(seed=1).push_to_hub(REPO, tokenizer=tiny_tokenizer).oid == fake_hub.resolve(REPO)
    assert snapshot(out) == before
    assert not list(staging.glob("hf_siamese_push_*"))  # every staging folder was removed


def test_repo_name_without_namespace_goes_to_the_token_owner(fake_hub: FakeHub, tiny_model, tiny_tokenizer) -> None:
    info = tiny_model.push_to_hub("plain", tokenizer=tiny_tokenizer, token=TOKEN)
    assert info.repo_url.repo_id == "alice/plain" and fake_hub.repo_exists("alice/plain")
    _, body, _ = card_of(fake_hub, "alice/plain")
    assert 'AutoModel.from_pretrained("alice/plain")' in body and "# plain" in body


def test_hub_base_model_is_named_in_the_card(fake_hub: FakeHub, tiny_tokenizer) -> None:
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).push_to_hub("alice/tiny-bert", token=TOKEN)
    tiny_tokenizer.push_to_hub("alice/tiny-bert", token=TOKEN)
    model = SiameseBertModel.from_encoder("alice/tiny-bert", normalize=True)
    model.push_to_hub(REPO, token=TOKEN, loss_name="MultipleNegativesRankingLoss")  # tokenizer found at the base
    metadata, body, _ = card_of(fake_hub)
    assert metadata["base_model"] == "alice/tiny-bert" and "loss:MultipleNegativesRankingLoss" in metadata["tags"]
    assert "[alice/tiny-bert](https://huggingface.co/alice/tiny-bert)" in body and "in-batch negatives" in body
    assert "tokenizer_config.json" in fake_hub.files(REPO)


def test_bad_arguments_are_named(fake_hub: FakeHub, tiny_model, tiny_tokenizer) -> None:
    with pytest.raises(ValueError, match="repo_id='not a repo'"):
        tiny_model.push_to_hub("not a repo", tokenizer=tiny_tokenizer)
    with pytest.raises(TypeError, match="unknown argument 'licence'"):
        tiny_model.push_to_hub(REPO, tokenizer=tiny_tokenizer, licence="mit")
    assert not fake_hub.repo_exists(REPO)


# ---------------------------------------------------------------------------------------------------- no leaks


def test_token_and_local_paths_never_leave_the_machine(
    fake_hub: FakeHub, tiny_tokenizer, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd
) -> None:
    fake_hub.required_token = TOKEN
    base = tmp_path / "base"
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(base)
    tiny_tokenizer.save_pretrained(base)
    model = SiameseBertModel.from_encoder(base, normalize=True)
    out = tmp_path / "out"
    model.save_pretrained(out)
    caplog.set_level(logging.DEBUG)

    # No tokenizer passed: the one next to the base encoder is found and pushed (cleaned of local settings).
    model.push_to_hub(REPO, token=TOKEN, datasets=[str(tmp_path)], base_model=str(base))

    files = fake_hub.files(REPO)
    assert "tokenizer_config.json" in files
    for name, content in files.items():
        for secret in (TOKEN, str(base), str(tmp_path), str(Path.home())):
            assert secret.encode() not in content, (name, secret)
    metadata, _, _ = card_of(fake_hub)
    assert "base_model" not in metadata and "datasets" not in metadata
    for name, content in snapshot(out).items():
        assert TOKEN.encode() not in content, name
    captured = capfd.readouterr()
    assert TOKEN not in caplog.text + captured.out + captured.err
    assert all(r.has_token for r in fake_hub.find_requests("POST", "/commit/"))
    assert torch.allclose(embed(AutoModel.from_pretrained(REPO, token=TOKEN)), embed(model, tiny_tokenizer))

    # A hand-written card: a local path is replaced, the token makes the push stop before anything is uploaded.
    commits = fake_hub.history(REPO)
    model.push_to_hub(REPO, token=TOKEN, model_card=f"---\nlicense: mit\n---\n\nTrained in {base}/run.\n")
    assert "Trained in <local path>" in card_of(fake_hub)[2]
    fake_hub.clear_log()
    with pytest.raises(ValueError, match="README.md: it contains your Hub token"):
        model.push_to_hub(REPO, token=TOKEN, model_card=f"---\nlicense: mit\n---\n\nmy token is {TOKEN}\n")
    assert fake_hub.requests == []  # stopped before talking to the Hub
    assert len(fake_hub.history(REPO)) == len(commits) + 1


# ---------------------------------------------------------------------------------------------------- model card


def test_card_without_training_facts(fake_hub: FakeHub, tmp_path: Path) -> None:
    model = make_tiny_model(label2id={"entailment": 0, "neutral": 1, "contradiction": 2}, normalize=True)
    card = build_model_card(model, repo_id=REPO, base_model="sentence-transformers/all-MiniLM-L6-v2")
    metadata, body = split_front_matter(card)
    assert metadata["library_name"] == "sentence-transformers" and metadata["pipeline_tag"] == "sentence-similarity"
    assert {"sentence-transformers", "transformers"} <= set(metadata["tags"])
    assert f'SentenceTransformer("{REPO}")' in body
    assert metadata["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and metadata["license"] == "apache-2.0"
    assert {"sentence-similarity", "feature-extraction", "siamese", "hf-siamese"} <= set(metadata["tags"])
    assert "model-index" not in metadata
    assert "## Training" not in body and "## Evaluation" not in body and "TBD" not in body and "${" not in body
    assert "softmax over 3 labels" in body and "trust_remote_code=True" in body and f'"{REPO}"' in body
    data = ModelCard(card).data
    assert isinstance(data, ModelCardData) and data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    ModelCard(card).validate()  # the (fake) Hub's YAML validation endpoint

    path = write_model_card(model, tmp_path, eval_results={"eval_dev_spearman_cosine": 0.5, "eval_loss": 1.0})
    metadata, body = split_front_matter(path.read_text())
    assert metadata["model-index"][0]["results"][0]["dataset"]["name"] == "dev"
    assert "| Spearman (cosine) | 0.5000 |" in body and "path/to/this/model" in body


def test_card_states_how_the_final_weights_were_chosen(tmp_path: Path) -> None:
    model = make_tiny_model()
    note = "the mean of the 4 epoch-end weights, then (1 - 0.8) * base + 0.8 * trained"
    _, body = split_front_matter(build_model_card(model, final_weights=note))
    assert "## Training" in body and f"Final weights: {note}." in body
    _, body = split_front_matter(build_model_card(model, final_weights="  "))
    assert "Final weights" not in body
    with pytest.raises(TypeError, match="final_weights must be a sentence"):
        build_model_card(model, final_weights=["mean"])


def test_trainer_push_carries_the_real_metrics(fake_hub: FakeHub, tiny_tokenizer, tmp_path: Path) -> None:
    fake_hub.required_token = TOKEN
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=8,
        max_steps=2,
        learning_rate=5e-4,
        warmup_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        logging_steps=1,
        save_strategy="no",
        seed=7,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        hub_model_id="alice/trained",
        hub_token=TOKEN,
        hub_private_repo=True,
    )
    trainer = SiameseTrainer(
        model=make_tiny_model(),
        args=args,
        train_dataset=scored_pairs(32, seed=0),
        eval_dataset=scored_pairs(16, seed=1),
        processing_class=tiny_tokenizer,
        loss=losses.CosineSimilarityLoss(score_range=(0, 5)),
    )
    trainer.train()
    last_eval = [e for e in trainer.state.log_history if "eval_spearman_cosine" in e][-1]
    spearman = last_eval["eval_spearman_cosine"]
    output_before = snapshot(tmp_path / "run") if (tmp_path / "run").exists() else {}

    info = trainer.push_to_hub(datasets="sentence-transformers/stsb")

    assert fake_hub.resolve("alice/trained") == info.oid and fake_hub.is_private("alice/trained")
    assert (snapshot(tmp_path / "run") if (tmp_path / "run").exists() else {}) == output_before
    metadata, body, text = card_of(fake_hub, "alice/trained")
    results = metadata["model-index"][0]["results"]
    assert results[0]["task"]["type"] == "sentence-similarity"
    metrics = {m["type"]: m["value"] for m in results[0]["metrics"]}
    assert metrics["spearman_cosine"] == pytest.approx(spearman, abs=1e-12)
    assert {"pearson_cosine", "mse_cosine"} <= metrics.keys()
    assert f"| Spearman (cosine) | {spearman:.4f} |" in body
    assert "at step 2" in body
    assert {"loss:CosineSimilarityLoss", "generated_from_trainer", "dataset_size:32"} <= set(metadata["tags"])
    assert metadata["datasets"] == ["sentence-transformers/stsb"]
    assert "| learning rate | 0.0005 |" in body and "| max steps | 2 |" in body and "| seed | 7 |" in body
    assert "gold scores range from 0 to 5" in body
    for content in fake_hub.files("alice/trained").values():
        assert TOKEN.encode() not in content and str(tmp_path).encode() not in content

    # Trainer's card hook writes our card, and a non-blocking push returns a future of the commit.
    trainer.create_model_card()
    assert "loss:CosineSimilarityLoss" in (tmp_path / "run" / "README.md").read_text()
    future = trainer.push_to_hub(blocking=False, commit_message="async")
    assert fake_hub.commit_title("alice/trained", future.result(timeout=60).oid) == "async"
