"""What a failed push says: `HubPushError`, and `hub_errors`, which turns what the Hub client raises into one that
names the action, the endpoint and the repository, and says what to do."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager


class HubPushError(OSError):
    """Pushing to the Hub failed: the server could not be reached, refused the request, or rejected the token.

    Attributes: `endpoint`, `repo_id` and `status_code` (None when no HTTP answer came back).
    """

    def __init__(self, message: str, *, endpoint: str, repo_id: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.repo_id = repo_id
        self.status_code = status_code

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@contextmanager
def hub_errors(endpoint: str, repo_id: str, action: str) -> Iterator[None]:
    """Turn what the Hub client raises into a `HubPushError` that says what failed, where, and what to do."""
    try:
        yield
    except HubPushError:
        raise
    except Exception as error:
        converted = convert_error(error, endpoint, repo_id, action)
        if converted is None:
            raise
        raise converted from error


def _transport_errors() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx", "requests"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attribute in ("TransportError", "ConnectionError", "Timeout"):
            kind = getattr(module, attribute, None)
            if isinstance(kind, type) and issubclass(kind, BaseException):
                types.append(kind)
    return tuple(types)


def convert_error(error: Exception, endpoint: str, repo_id: str, action: str) -> HubPushError | None:
    """The `HubPushError` for what the Hub client raised while trying `action` (offline mode, an HTTP error, an
    unreachable server), or None for any other error (raised as it is)."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    where = f"{endpoint}/{repo_id}"
    prefix = f"push_to_hub: could not {action} for {repo_id!r} on {endpoint}"
    if action == "upload the files":
        untouched = "No local file was changed; running the same push again once this is fixed is safe."
    else:
        untouched = "Nothing was uploaded and no local file was changed; run the same push again once this is fixed."
    if isinstance(error, OfflineModeIsEnabled):
        return HubPushError(
            f"{prefix}: offline mode is on (HF_HUB_OFFLINE=1). Unset it to push. {untouched}",
            endpoint=endpoint,
            repo_id=repo_id,
        )
    if isinstance(error, HfHubHTTPError):
        response = getattr(error, "response", None)
        status = getattr(response, "status_code", None)
        server = getattr(error, "server_message", None) or ""
        detail = f" (HTTP {status}{': ' + server if server else ''})" if status is not None else ""
        if status in (401, 403) or isinstance(error, RepositoryNotFoundError):
            hint = (
                f"the Hub refused the credentials{detail}. Log in with `hf auth login` or pass token= with a token "
                f"that has write access to {repo_id!r} (and check the namespace in the repo id)."
            )
        elif status is not None and status >= 500:
            hint = f"the Hub is unavailable{detail}. Check {endpoint} (or HF_ENDPOINT) and retry later."
        elif status == 404:
            hint = f"not found{detail}; check the repo id and revision."
        else:
            hint = f"the Hub rejected the request{detail}."
        return HubPushError(
            f"{prefix} ({where}): {hint} {untouched}", endpoint=endpoint, repo_id=repo_id, status_code=status
        )
    if isinstance(error, _transport_errors()):
        return HubPushError(
            f"{prefix} ({where}): the server could not be reached ({type(error).__name__}: {error}). Check the "
            f"network and the endpoint ({endpoint}, set by HF_ENDPOINT), then retry. {untouched}",
            endpoint=endpoint,
            repo_id=repo_id,
        )
    return None


__all__ = ["HubPushError", "convert_error", "hub_errors"]
