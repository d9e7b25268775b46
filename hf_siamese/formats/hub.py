"""Share a `SiameseBertModel` on the Hugging Face Hub: weights, config, modeling code, tokenizer and model card in one
commit.

`push_to_hub` saves everything into a temporary folder (the user's own folders are never touched), removes what is
specific to this machine (absolute paths, `is_local`-style tokenizer settings), refuses to upload anything that holds
the Hub token or a local path, and uploads the folder as a single commit. Any failure to talk to the Hub is a
`HubPushError` that names the endpoint and the repository; retrying once the Hub is reachable again just works.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..storage import temporary_folder
from .hub_errors import HubPushError, hub_errors
from .local_paths import looks_like_local_path, scrub_local_paths
from .model_card import build_model_card
from .model_card_facts import _CARD_FACT_NAMES

logger = logging.getLogger(__name__)

# Settings transformers 5 writes into tokenizer_config.json that describe where *this* machine loaded the tokenizer
# from; on the Hub they are wrong at best (`local_files_only: true` would stop every download).
MACHINE_SPECIFIC_TOKENIZER_KEYS = (
    "is_local",
    "local_files_only",
    "name_or_path",
    "_name_or_path",
    "cache_dir",
    "token",
    "use_auth_token",
    "force_download",
    "proxies",
    "trust_remote_code",
    "_commit_hash",
)
# Files too large or too opaque to search for paths (binary weights, vocabularies); they are still searched for the
# token.
_NO_PATH_SCAN_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5", ".onnx", ".model", ".gguf")
_NO_PATH_SCAN_NAMES = ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model")
_REQUIRED_FILES = ("config.json", "configuration_siamese.py", "modeling_siamese.py")
_CHUNK = 1 << 24


def push_to_hub(
    model: Any,
    repo_id: str,
    *,
    tokenizer: Any = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    token: str | bool | None = None,
    create_pr: bool = False,
    model_card: str | None = None,
    max_shard_size: int | str = "5GB",
    run_as_future: bool = False,
    **card_facts: Any,
) -> Any:
    """Upload a `SiameseBertModel` with its tokenizer, modeling code and a generated model card in one commit.

    Args:
        model: the model to share.
        repo_id: `"namespace/name"`, or `"name"` for the token owner's namespace. Created when missing.
        tokenizer: saved next to the weights; defaults to `model.tokenizer`, else the tokenizer of the folder or Hub
            id the model was loaded from.
        private: visibility of a repository created by this call (an existing one keeps its own).
        revision: branch to commit to; created from `main` when it does not exist yet.
        commit_message, commit_description: of the commit (or pull request).
        token: Hub token with write access; defaults to the logged-in one (`hf auth login` / `HF_TOKEN`).
        create_pr: open a pull request instead of committing to the branch.
        model_card: the card's markdown to upload instead of a generated one.
        max_shard_size: passed to `save_pretrained`.
        run_as_future: stage the files now and upload in a background thread; returns a `Future` of the
            `CommitInfo` (whose `result()` raises `HubPushError` on failure).
        card_facts: `build_model_card` arguments (`trainer`, `base_model`, `datasets`, `license`, `eval_results`,
            `training_args`, `loss_name`, `tags`, `language`, `title`).

    Returns:
        The `huggingface_hub.CommitInfo` of the commit (`.oid`, `.commit_url`, `.pr_url`, `.pr_revision`).

    Raises:
        HubPushError: the Hub could not be reached or refused the push (bad token, no write access, server error).
        ValueError / TypeError: bad arguments, or a file would carry the token or a local path.
    """
    from huggingface_hub import HfApi, get_token

    _check_push_arguments(model, repo_id, token=token, revision=revision, model_card=model_card, card_facts=card_facts)
    api = HfApi(token=token)
    endpoint = api.endpoint
    secrets = [s for s in (token if isinstance(token, str) else None, _safe_get_token(get_token)) if s]
    tokenizer = _push_tokenizer(model, tokenizer, repo_id)

    # Everything local happens first: a push that would leak the token stops before any request is made.
    with contextlib.ExitStack() as staged:
        folder = staged.enter_context(temporary_folder("push"))  # removed at once if anything below fails
        card = model_card if model_card is not None else build_model_card(model, repo_id=repo_id, **card_facts)
        stage_folder(model, folder, tokenizer=tokenizer, model_card=card, max_shard_size=max_shard_size)
        verify_folder(folder, secrets=secrets)
        repo_id = _create_repo(api, endpoint, model, repo_id, folder, private=private, revision=revision,
                               card_facts=None if model_card is not None else card_facts, secrets=secrets)  # fmt: skip
        removal = staged.pop_all()  # from here the upload removes the folder, whatever happens
    commit = _Commit(
        message=commit_message or f"Upload {type(model).__name__} with hf-siamese",
        description=commit_description,
        revision=revision,
        create_pr=create_pr,
    )
    upload = functools.partial(_upload, api, endpoint, repo_id, folder, removal, type(model).__name__, commit)
    if run_as_future:
        return api.run_as_future(upload)
    return upload()


@dataclass(frozen=True)
class _Commit:
    """The commit a push makes: its message and description, the branch, and whether it opens a pull request."""

    message: str
    description: str | None
    revision: str | None
    create_pr: bool


def _check_push_arguments(
    model: Any, repo_id: Any, *, token: Any, revision: Any, model_card: Any, card_facts: dict[str, Any]
) -> None:
    """Refuse what `push_to_hub` cannot push: a bad repo id or revision, unknown card facts, a card that is not
    text or comes with card facts, something that is no model, a token of the wrong type."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not isinstance(repo_id, str) or not repo_id:
        raise ValueError(f"push_to_hub: repo_id={repo_id!r} must be a non-empty str such as 'alice/minilm-sts'.")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(
            f"push_to_hub: repo_id={repo_id!r} is not a valid Hub repo id ('name' or 'namespace/name' with letters, "
            f"digits, '-', '_', '.'): {error}"
        ) from None
    if os.path.isdir(repo_id):
        logger.warning("push_to_hub: %r is also a local folder; it is pushed to the Hub repo of that name.", repo_id)
    unknown = sorted(set(card_facts) - set(_CARD_FACT_NAMES))
    if unknown:
        raise TypeError(f"push_to_hub: unknown argument {unknown[0]!r}; card facts accepted: {list(_CARD_FACT_NAMES)}.")
    if model_card is not None and not isinstance(model_card, str):
        raise TypeError(f"push_to_hub: model_card must be the card's markdown text (str), got {type(model_card)}.")
    if model_card is not None and card_facts:
        raise TypeError(f"push_to_hub: pass either model_card= or card facts ({sorted(card_facts)}), not both.")
    if not callable(getattr(model, "save_pretrained", None)) or not hasattr(model, "config"):
        raise TypeError(f"push_to_hub needs a SiameseBertModel, got {type(model).__name__}.")
    if token is not None and not isinstance(token, (str, bool)):
        raise TypeError(f"push_to_hub: token must be a str, True/False or None, got {type(token).__name__}.")
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise ValueError(f"push_to_hub: revision={revision!r} must be a branch name such as 'main' or 'v2'.")


def _push_tokenizer(model: Any, tokenizer: Any, repo_id: str) -> Any:
    """The tokenizer to push: the given one, else the model's (`_default_tokenizer`); warns when there is none."""
    tokenizer = tokenizer if tokenizer is not None else _default_tokenizer(model)
    if tokenizer is None:
        logger.warning(
            "push_to_hub: no tokenizer given and none found with the model; %s will hold no tokenizer files, so "
            "`encode` there needs an explicit tokenizer. Pass tokenizer=...",
            repo_id,
        )
    return tokenizer


def _create_repo(
    api: Any, endpoint: str, model: Any, repo_id: str, folder: Path, *, private: bool | None, revision: str | None,
    card_facts: dict[str, Any] | None, secrets: list[str],
) -> str:  # fmt: skip
    """Create the repository (and the branch `revision`) when missing; returns the full repo id. A generated card
    (`card_facts` not None) is written again for the full id when the Hub added the owner's namespace."""
    with hub_errors(endpoint, repo_id, "create the repository"):
        full_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if full_id != repo_id and card_facts is not None:
        # "name" became "owner/name": the card's usage snippets must say so.
        card = build_model_card(model, repo_id=full_id, **card_facts)
        (folder / "README.md").write_text(scrub_local_paths(card), encoding="utf-8")
        verify_folder(folder, secrets=secrets)
    branch = revision.removeprefix("refs/heads/") if revision else None
    if branch and branch != "main" and not branch.startswith("refs/"):
        with hub_errors(endpoint, full_id, f"create the branch {branch!r}"):
            api.create_branch(full_id, branch=branch, exist_ok=True)
    return full_id


def _upload(
    api: Any, endpoint: str, repo_id: str, folder: Path, removal: contextlib.ExitStack, model_name: str, commit: _Commit
) -> Any:
    """Upload the staged `folder` as one commit and delete it (closing `removal`, which holds its `temporary_folder`),
    whatever happens; returns the `CommitInfo`."""
    with removal, hub_errors(endpoint, repo_id, "upload the files"):
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            commit_message=commit.message,
            commit_description=commit.description,
            revision=commit.revision,
            create_pr=commit.create_pr,
        )
    logger.info("Pushed %s to %s/%s (commit %s).", model_name, endpoint, repo_id, info.oid)
    return info


def _safe_get_token(get_token: Any) -> str | None:
    try:
        return get_token()
    except Exception:  # noqa: BLE001 - no readable token store just means nothing more to look for
        return None


def _default_tokenizer(model: Any) -> Any:
    """`model.tokenizer`, else the tokenizer stored where the model came from (a folder or Hub id), else None."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        return tokenizer
    resolve = getattr(model, "_resolve_tokenizer", None)
    if not callable(resolve) or not getattr(model.config, "name_or_path", None):
        return None
    try:
        return resolve(None)
    except Exception as error:  # noqa: BLE001 - best effort: without one the push warns and goes on
        logger.info("push_to_hub: no tokenizer found where the model came from: %s", error)
        return None


def stage_folder(
    model: Any,
    folder: str | os.PathLike,
    *,
    tokenizer: Any = None,
    model_card: str | None = None,
    max_shard_size: int | str = "5GB",
) -> Path:
    """Save what a push uploads into `folder`: weights, config (with `auto_map`), modeling code, tokenizer files
    and `README.md`; machine-specific tokenizer settings and local paths are removed from the JSON files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if "tokenizer" in inspect.signature(model.save_pretrained).parameters:
        # A SiameseBertModel also puts the tokenizer with its encoder, where sentence-transformers reads it.
        model.save_pretrained(folder, max_shard_size=max_shard_size, tokenizer=tokenizer)
    else:
        model.save_pretrained(folder, max_shard_size=max_shard_size)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    missing = [name for name in _REQUIRED_FILES if not (folder / name).is_file()]
    config = (
        json.loads((folder / "config.json").read_text(encoding="utf-8")) if (folder / "config.json").is_file() else {}
    )
    if missing or "auto_map" not in config:
        raise RuntimeError(
            f"push_to_hub: save_pretrained wrote no {missing or ['auto_map in config.json']}; without them the Hub "
            "copy cannot load with trust_remote_code=True. Import hf_siamese before building the model (it registers "
            "the classes for auto-class export)."
        )
    for path in sorted(folder.rglob("*.json")):
        _clean_json_file(
            path, drop_keys=MACHINE_SPECIFIC_TOKENIZER_KEYS if path.name == "tokenizer_config.json" else ()
        )
    if model_card is not None:
        (folder / "README.md").write_text(scrub_local_paths(model_card), encoding="utf-8")
    return folder


def _clean_json_file(path: Path, drop_keys: Iterable[str] = ()) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        return  # not JSON after all: verify_folder still searches it
    if not isinstance(data, dict):
        return
    cleaned = _drop_local_paths({k: v for k, v in data.items() if k not in set(drop_keys)}, path.name)
    if cleaned != data:
        path.write_text(json.dumps(cleaned, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _drop_local_paths(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(item, str) and looks_like_local_path(item):
                logger.info("push_to_hub: dropped %s from %s (a local path).", key, where)
                continue
            out[key] = _drop_local_paths(item, where)
        return out
    if isinstance(value, list):
        return [
            _drop_local_paths(item, where)
            for item in value
            if not (isinstance(item, str) and looks_like_local_path(item))
        ]
    return value


def verify_folder(folder: str | os.PathLike, *, secrets: Iterable[str] = ()) -> None:
    """Raise ValueError if a file under `folder` contains one of `secrets` (the Hub token) or, in text files, an
    absolute path that exists on this machine or the home directory. The token itself is never printed."""
    folder = Path(folder)
    needles = [s.encode() for s in secrets if isinstance(s, str) and len(s) >= 4]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if needles and _file_contains(path, needles):
            raise ValueError(
                f"push_to_hub: refusing to upload {name}: it contains your Hub token. Nothing was uploaded."
            )
        if path.suffix in _NO_PATH_SCAN_SUFFIXES or path.name in _NO_PATH_SCAN_NAMES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if scrub_local_paths(text) != text:
            raise ValueError(
                f"push_to_hub: refusing to upload {name}: it mentions a local path of this machine (or the home "
                "directory). Remove it from the file's source (e.g. the model card text). Nothing was uploaded."
            )


def _file_contains(path: Path, needles: list[bytes]) -> bool:
    overlap = max(len(n) for n in needles) - 1
    with open(path, "rb") as handle:
        tail = b""
        while chunk := handle.read(_CHUNK):
            window = tail + chunk
            if any(n in window for n in needles):
                return True
            tail = window[-overlap:] if overlap else b""
    return False


__all__ = ["HubPushError", "push_to_hub", "stage_folder", "verify_folder", "MACHINE_SPECIFIC_TOKENIZER_KEYS"]
