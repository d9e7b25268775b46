"""`fake_hub` fixture: a started `FakeHub` with the real huggingface_hub / transformers clients pointed at it.

Wire it into ``tests/conftest.py`` with ``from conftest_hub import fake_hub  # noqa: F401``.

huggingface_hub reads most settings into module constants at import time (``constants.ENDPOINT``,
``HUGGINGFACE_CO_URL_TEMPLATE``, ``HF_HUB_OFFLINE``, cache/token paths, ``HF_HUB_DISABLE_XET``, ...), it
keeps a module-level ``HfApi`` (``huggingface_hub.hf_api.api``) whose endpoint was frozen at import, and
transformers caches a shared ``HfApi`` in ``transformers.utils.hub._hf_api``. Setting env vars is therefore
enough for a *subprocess*, but in-process those objects must be patched too, which is what this fixture does
(all undone by monkeypatch).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hub_server import FakeHub

# Client timeouts while talking to the fake hub: a hung request fails a test in seconds, not minutes.
CLIENT_TIMEOUT_S = 5


class _NoSleepTime:
    """Stand-in for the `time` module of huggingface_hub.utils._http: retries happen, their backoff doesn't.

    The client retries 5xx/429 up to 5 times with 1, 2, 4, 8, 8 s sleeps (`_http_backoff_base`); against a
    local fake that only makes failure-path tests slow.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        return None


def hub_client_env(hub: FakeHub, hf_home: Path) -> dict[str, str]:
    """Env vars that make a (sub)process's huggingface_hub / transformers use ``hub`` and a private cache."""
    return {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(hf_home),
        "HF_HUB_CACHE": str(hf_home / "hub"),
        "HF_TOKEN_PATH": str(hf_home / "token"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_ETAG_TIMEOUT": str(CLIENT_TIMEOUT_S),
        "HF_HUB_DOWNLOAD_TIMEOUT": str(CLIENT_TIMEOUT_S),
    }


# Env vars that would send the client offline, or send a developer's real token to the fake server.
_UNSET_ENV = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_OIDC_RESOURCE",
)


def patch_clients_for_hub(monkeypatch: pytest.MonkeyPatch, hub: FakeHub, hf_home: Path) -> dict[str, str]:
    """Point the already-imported clients of this process at ``hub``; returns the env that was set."""
    import huggingface_hub.hf_api
    import huggingface_hub.utils._cache_manager
    import huggingface_hub.utils._git_credential
    import huggingface_hub.utils._http
    from huggingface_hub import constants

    env = hub_client_env(hub, hf_home)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in _UNSET_ENV:
        monkeypatch.delenv(name, raising=False)

    hub_cache = env["HF_HUB_CACHE"]
    host = urlsplit(hub.url).hostname or hub.host
    for name, value in {
        "ENDPOINT": hub.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": hub.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_URL_HOSTS": constants.HF_URL_HOSTS | {host},
        "HF_HOME": str(hf_home),
        "HF_HUB_CACHE": hub_cache,
        "HUGGINGFACE_HUB_CACHE": hub_cache,
        "HF_ASSETS_CACHE": str(hf_home / "assets"),
        "HUGGINGFACE_ASSETS_CACHE": str(hf_home / "assets"),
        "HF_XET_CACHE": str(hf_home / "xet"),
        "HF_TOKEN_PATH": env["HF_TOKEN_PATH"],
        "HF_STORED_TOKENS_PATH": str(hf_home / "stored_tokens"),
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_ETAG_TIMEOUT": CLIENT_TIMEOUT_S,
        "HF_HUB_DOWNLOAD_TIMEOUT": CLIENT_TIMEOUT_S,
    }.items():
        monkeypatch.setattr(constants, name, value)

    http = huggingface_hub.utils._http
    # Redirect/auth-forwarding decisions use origins computed from ENDPOINT at import time.
    monkeypatch.setattr(http, "_HUB_ORIGINS", http._HUB_ORIGINS | {http._url_origin(hub.url)})
    monkeypatch.setattr(http, "time", _NoSleepTime())
    # Module-level HfApi behind `huggingface_hub.create_repo`, `upload_folder`, `model_info`, ...
    monkeypatch.setattr(huggingface_hub.hf_api.api, "endpoint", hub.url)
    monkeypatch.setattr(huggingface_hub.utils._git_credential, "ENDPOINT", hub.url)
    monkeypatch.setattr(huggingface_hub.utils._cache_manager, "HF_HUB_CACHE", hub_cache)

    # transformers routes push_to_hub/create_repo through a lazily created, cached HfApi: drop it so the next
    # `hf_api()` call builds one with the patched endpoint (monkeypatch restores the old one afterwards).
    transformers_hub = sys.modules.get("transformers.utils.hub")
    if transformers_hub is not None:
        monkeypatch.setattr(transformers_hub, "_hf_api", None)

    # datasets copies HF_ENDPOINT at import as well; only patch it if some test already imported it.
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        monkeypatch.setattr(datasets_config, "HF_ENDPOINT", hub.url)
        monkeypatch.setattr(
            datasets_config, "HUB_DATASETS_URL", hub.url + "/datasets/{repo_id}/resolve/{revision}/{path}"
        )
        monkeypatch.setattr(datasets_config, "HF_HUB_OFFLINE", False)
    return env


@pytest.fixture
def fake_hub(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A started FakeHub (``required_token=None``) that in-process clients and subprocesses talk to.

    Tweak the server inside the test (``fake_hub.required_token = "hf_test"``, ``fake_hub.refuse = True``,
    ``fake_hub.fail_next(...)``); ``fake_hub.env`` holds the env vars to give a subprocess (they are also set
    in ``os.environ``, so a plain ``subprocess.run`` inherits them).
    """
    from huggingface_hub.utils import close_session

    hf_home = tmp_path_factory.mktemp("hf_home")
    with FakeHub() as hub:
        hub.env = patch_clients_for_hub(monkeypatch, hub, hf_home)
        # The shared httpx client pools connections: start clean and never reuse one to a stopped server.
        close_session()
        try:
            yield hub
        finally:
            close_session()
