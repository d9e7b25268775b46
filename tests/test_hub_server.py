"""The fake Hub works with the real huggingface_hub / transformers clients (no network, seconds per test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import conftest_hub
import huggingface_hub
import pytest
import torch
from hub_server import FakeHub
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from transformers import BertConfig, BertModel, BertTokenizer

# Make the fixture available even before tests/conftest.py imports it (same object, so no conflict after).
fake_hub = conftest_hub.fake_hub

TOKEN = "hf_test"
REPO = "alice/tiny"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "plays", "guitar", "dog", "runs", "."]


def tiny_bert(seed: int) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=99)
    return BertModel(config).eval()


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture
def tokenizer(tmp_path: Path) -> BertTokenizer:
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n")
    return BertTokenizer(vocab=str(vocab_file))


def test_create_repo_whoami_refs_and_delete(fake_hub: FakeHub) -> None:
    fake_hub.required_token = TOKEN
    api = HfApi(token=TOKEN)

    url = api.create_repo(REPO)
    assert url.repo_id == REPO and url.endpoint == fake_hub.url
    assert api.create_repo(REPO, exist_ok=True).repo_id == REPO
    with pytest.raises(HfHubHTTPError) as exc:
        api.create_repo(REPO)
    assert exc.value.response.status_code == 409
    # No namespace: the server puts the repo under the token's user, like the Hub.
    assert api.create_repo("other").repo_id == "alice/other"

    assert api.whoami()["name"] == "alice"
    refs = api.list_repo_refs(REPO)
    assert [b.name for b in refs.branches] == ["main"]
    assert refs.branches[0].target_commit == fake_hub.resolve(REPO)
    assert api.model_info(REPO).siblings[0].rfilename == ".gitattributes"

    api.delete_repo(REPO)
    assert not fake_hub.repo_exists(REPO)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(REPO)


def test_push_to_hub_then_from_pretrained_roundtrip(fake_hub: FakeHub, tokenizer: BertTokenizer) -> None:
    fake_hub.required_token = TOKEN
    model = tiny_bert(seed=0)

    info = model.push_to_hub(REPO, token=TOKEN)
    tokenizer.push_to_hub(REPO, token=TOKEN)

    assert info.oid in fake_hub.history(REPO)
    files = fake_hub.files(REPO)
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json"} <= files.keys()
    loaded = BertModel.from_pretrained(REPO)
    assert same_weights(model, loaded)
    assert BertTokenizer.from_pretrained(REPO).get_vocab() == tokenizer.get_vocab()

    # Writes carried the token; the log never keeps its value.
    commits = fake_hub.find_requests("POST", "/commit/")
    assert commits and all(r.has_token for r in commits)
    assert all("authorization" not in {k.lower() for k in r.headers} for r in fake_hub.requests)


def test_second_push_is_a_new_commit_and_revision_pins_the_first(fake_hub: FakeHub) -> None:
    first_model, second_model = tiny_bert(seed=0), tiny_bert(seed=1)
    first = first_model.push_to_hub(REPO, token=TOKEN).oid
    second = second_model.push_to_hub(REPO, token=TOKEN).oid

    assert first != second
    assert fake_hub.history(REPO)[:2] == [second, first]
    assert same_weights(BertModel.from_pretrained(REPO), second_model)
    assert same_weights(BertModel.from_pretrained(REPO, revision=first), first_model)
    assert same_weights(BertModel.from_pretrained(REPO, revision=first[:12]), first_model)
    with pytest.raises(OSError, match="not a valid git identifier"):
        BertModel.from_pretrained(REPO, revision="no-such-branch")


def test_push_to_branch_and_load_by_branch_name(fake_hub: FakeHub) -> None:
    main_model, dev_model = tiny_bert(seed=0), tiny_bert(seed=1)
    main_model.push_to_hub(REPO, token=TOKEN)
    # transformers calls create_branch(exist_ok=True) before committing to `revision`.
    dev_model.push_to_hub(REPO, token=TOKEN, revision="dev")

    assert set(fake_hub.branches(REPO)) == {"main", "dev"}
    assert fake_hub.find_requests("POST", "/branch/dev")
    assert same_weights(BertModel.from_pretrained(REPO, revision="dev"), dev_model)
    assert same_weights(BertModel.from_pretrained(REPO), main_model)

    # The Hub never creates a branch on commit: committing to an unknown branch is a RevisionNotFound.
    with pytest.raises(RevisionNotFoundError):
        HfApi(token=TOKEN).upload_file(
            path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=REPO, revision="never-created"
        )


def test_create_pr(fake_hub: FakeHub) -> None:
    main_model, pr_model = tiny_bert(seed=0), tiny_bert(seed=1)
    main_model.push_to_hub(REPO, token=TOKEN)
    main_sha = fake_hub.resolve(REPO)

    info = pr_model.push_to_hub(REPO, token=TOKEN, create_pr=True)

    assert info.pr_revision == "refs/pr/1" and info.pr_num == 1
    assert fake_hub.pull_requests(REPO) == {1: info.oid}
    assert fake_hub.resolve(REPO) == main_sha
    assert same_weights(BertModel.from_pretrained(REPO, revision="refs/pr/1"), pr_model)
    assert same_weights(BertModel.from_pretrained(REPO), main_model)
    refs = HfApi().list_repo_refs(REPO, include_pull_requests=True)
    assert [r.ref for r in refs.pull_requests or []] == ["refs/pr/1"]


def test_private_repo_needs_the_right_token(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.required_token = TOKEN
    model = tiny_bert(seed=0)
    model.push_to_hub(REPO, token=TOKEN, private=True)
    assert fake_hub.is_private(REPO)

    assert same_weights(BertModel.from_pretrained(REPO, token=TOKEN), model)
    # Fresh caches: a failed HEAD would otherwise fall back to the files cached by the load above.
    with pytest.raises(OSError):
        BertModel.from_pretrained(REPO, token="hf_wrong", cache_dir=tmp_path / "c1")
    with pytest.raises(RepositoryNotFoundError):  # no token at all: the repo is hidden, like on the Hub
        hf_hub_download(REPO, "config.json", cache_dir=tmp_path / "c2")
    with pytest.raises(HfHubHTTPError) as exc:
        tiny_bert(seed=1).push_to_hub(REPO, token="hf_wrong")
    assert exc.value.response.status_code == 401
    assert len(fake_hub.history(REPO)) == 2  # initial commit + the one good push


def test_refusing_server_raises_quickly(fake_hub: FakeHub) -> None:
    fake_hub.create_repo(REPO)
    fake_hub.commit(REPO, {"config.json": "{}"})
    start = time.monotonic()

    fake_hub.refuse = True
    with pytest.raises(HfHubHTTPError) as exc:
        HfApi().model_info(REPO)
    assert exc.value.response.status_code == 503
    # hf_hub_download retries a 5xx HEAD (backoff sleeps are skipped by the fixture), then gives up.
    with pytest.raises(LocalEntryNotFoundError) as download_exc:
        hf_hub_download(REPO, "config.json")
    assert isinstance(download_exc.value.__cause__, HfHubHTTPError)
    # huggingface_hub 2.4: one HEAD without retries, then one with up to 5 backoff retries (7 in all).
    assert len(fake_hub.find_requests("HEAD", "/resolve/")) > 2
    with pytest.raises(OSError):
        BertModel.from_pretrained(REPO)

    # Transient failures are retried by the client and succeed.
    fake_hub.refuse = False
    fake_hub.fail_next(2, status=503, method="HEAD")
    assert Path(hf_hub_download(REPO, "config.json")).read_text() == "{}"

    # A failing commit raises and leaves the repo untouched.
    fake_hub.fail_next(1, status=500, path_contains="/commit/")
    before = fake_hub.history(REPO)
    with pytest.raises(HfHubHTTPError):
        tiny_bert(seed=0).push_to_hub(REPO, token=TOKEN)
    assert fake_hub.history(REPO) == before
    assert time.monotonic() - start < 20


def test_missing_entries_revisions_and_repos(fake_hub: FakeHub) -> None:
    fake_hub.create_repo(REPO)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "nope.json")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, ".gitattributes", revision="nope")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("alice/nope", "config.json")
    head = fake_hub.find_requests("HEAD", "/nope.json")[-1]
    assert head.status == 404


def test_upload_folder_snapshot_download_and_tree(fake_hub: FakeHub, tmp_path: Path) -> None:
    model = tiny_bert(seed=0)
    model.push_to_hub(REPO, token=TOKEN)
    local = tmp_path / "local"
    (local / "sub" / "dir").mkdir(parents=True)
    (local / "sub" / "dir" / "a.txt").write_text("a")
    (local / "sub" / "b.txt").write_text("b")
    # Module-level function: bound to `huggingface_hub.hf_api.api`, whose endpoint the fixture patches.
    huggingface_hub.upload_folder(folder_path=local, repo_id=REPO, token=TOKEN)
    assert fake_hub.files(REPO)["sub/dir/a.txt"] == b"a"

    folder = Path(snapshot_download(REPO))
    expected = fake_hub.files(REPO)
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == expected.keys()
    assert all((folder / path).read_bytes() == content for path, content in expected.items())
    assert folder.name == fake_hub.resolve(REPO)

    only_json = Path(snapshot_download(REPO, allow_patterns=["*.json"], cache_dir=folder.parent.parent / "c2"))
    assert [p.name for p in only_json.iterdir()] == ["config.json"]

    api = HfApi()
    assert [e.path for e in api.list_repo_tree(REPO, "sub")] == ["sub/dir", "sub/b.txt"]
    assert "sub/dir/a.txt" in api.list_repo_files(REPO)
    assert api.file_exists(REPO, "sub/b.txt") and not api.file_exists(REPO, "sub/c.txt")


# The client's own LFS PUT (`data=fileobj`) triggers this httpx2 deprecation; nothing to do with the server.
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
def test_lfs_upload_path_for_a_1mb_safetensors(fake_hub: FakeHub, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    fake_hub.lfs_threshold = 100_000
    path = tmp_path / "big.safetensors"
    save_file({"w": torch.randn(256, 1024)}, str(path))
    api = HfApi(token=TOKEN)
    api.create_repo(REPO)

    api.upload_file(path_or_fileobj=str(path), path_in_repo="big.safetensors", repo_id=REPO)

    assert fake_hub.find_requests("POST", ".git/info/lfs/objects/batch")
    assert fake_hub.find_requests("PUT", "/_fakehub/lfs/")
    assert list(fake_hub.lfs_objects().values()) == [path.stat().st_size]
    (entry,) = [e for e in api.list_repo_tree(REPO) if e.path == "big.safetensors"]
    assert entry.lfs is not None and entry.lfs.size == path.stat().st_size
    downloaded = hf_hub_download(REPO, "big.safetensors")
    # LFS files are cached under their sha256 (X-Linked-Etag), like real Hub downloads.
    assert Path(downloaded).resolve().name == entry.lfs.sha256
    assert torch.equal(load_file(downloaded)["w"], load_file(str(path))["w"])


def test_subprocess_reaches_the_hub_through_env_vars(fake_hub: FakeHub) -> None:
    fake_hub.create_repo(REPO)
    fake_hub.commit(REPO, {"hello.txt": "from the fake hub"})
    code = (
        "import json, pathlib; from huggingface_hub import hf_hub_download, constants;"
        f"p = hf_hub_download({REPO!r}, 'hello.txt');"
        "print(json.dumps([constants.ENDPOINT, pathlib.Path(p).read_text()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=os.environ.copy(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [fake_hub.url, "from the fake hub"]
    assert fake_hub.env["HF_ENDPOINT"] == fake_hub.url


def test_fake_hub_standalone_context_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    # Without the fixture only an explicit endpoint points the client here; just make sure it is online.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with FakeHub(required_token=TOKEN) as hub:
        api = HfApi(endpoint=hub.url, token=TOKEN)
        assert api.create_repo("bob/x", repo_type="dataset").repo_id == "bob/x"
        api.upload_file(path_or_fileobj=b"a,b\n", path_in_repo="data.csv", repo_id="bob/x", repo_type="dataset")
        assert hub.files("bob/x", repo_type="dataset")["data.csv"] == b"a,b\n"
        url = hub.url
    with pytest.raises(RuntimeError):
        _ = hub.url
    assert url.startswith("http://127.0.0.1:")
