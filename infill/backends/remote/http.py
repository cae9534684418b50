"""HTTP plumbing of RemoteBackend: endpoint URLs, error types, decoding answers and describing failures."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from infill.types import FillControl, InfillError, InfillRequest

SUFFIX_HINT = (
    "; this server does not take `suffix` (stock vLLM answers so): put `infill-ls serve` in front of "
    "the model, or give RemoteBackend a fim_template"
)


@dataclass
class _GapAnswer:
    text: str
    finish_reason: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extension: dict[str, Any] = field(
        default_factory=dict[str, Any]
    )  # the `infill` object `infill-ls serve` adds, if any


@dataclass(frozen=True)
class RemoteCall:
    """One request on its way through the routes: what it asks, the model named, the caller's control (its cancel
    token and who sees drafts), and when the exchanges must be done."""

    request: InfillRequest
    model: str | None
    control: FillControl
    end: float  # time.monotonic(): the control's deadline, or the backend's own timeout where that comes first


class RemoteFailure(Exception):
    """One failed exchange with the endpoint; the message says what happened and where."""


class RemoteHTTPError(RemoteFailure):
    """The server answered with an error status; `detail` is its own message."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status, self.detail = status, detail


def normalize_endpoint(endpoint: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` all mean the same server root."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise InfillError("remote endpoint must be a non-empty URL")
    base = endpoint.strip().rstrip("/")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InfillError(f"remote endpoint must be an http(s) URL like http://host:8000/v1, got {endpoint!r}")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base


def render_fim(template: str, prefix: str, suffix: str) -> str:
    """One pass over the template (not str.format: code is full of braces, and may contain "{suffix}")."""
    return re.sub(r"\{prefix\}|\{suffix\}", lambda m: prefix if m.group(0) == "{prefix}" else suffix, template)


class _NotFound(RemoteHTTPError):
    pass


def _decode(url: str, response: httpx.Response) -> dict[str, Any]:
    if response.status_code == 404:
        raise _NotFound(f"HTTP 404 from {url}: {_error_text(response)}", 404, _error_text(response))
    if response.status_code != 200:
        message = _error_text(response)
        hint = SUFFIX_HINT if response.status_code == 400 and "suffix" in message.lower() else ""
        raise RemoteHTTPError(f"HTTP {response.status_code} from {url}: {message}{hint}", response.status_code, message)
    try:
        data = response.json()
    except ValueError:
        raise RemoteFailure(f"invalid JSON from {url}: {response.text[:120]!r}") from None
    if not isinstance(data, dict):
        raise RemoteFailure(f"unexpected JSON from {url}: expected an object, got {type(data).__name__}")
    return data


def _error_text(response: httpx.Response) -> str:
    """The OpenAI-style `error.message` if there is one, else the start of the body."""
    try:
        data = response.json()
        message = data["error"]["message"] if isinstance(data.get("error"), dict) else data.get("error")
        if isinstance(message, str) and message:
            return message[:300]
    except (ValueError, AttributeError, KeyError, TypeError):
        pass
    return response.text[:300].strip() or response.reason_phrase


def _describe_http_error(url: str, exc: BaseException, waited_s: float) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {url}: {exc}"
    if isinstance(exc, httpx.TimeoutException):  # the same failure as the caller's own deadline check
        return f"no answer from {url} within {waited_s:.2f} s ({type(exc).__name__})"
    if isinstance(exc, httpx.HTTPError):
        return f"request to {url} failed: {type(exc).__name__}: {exc}"
    return f"request to {url} failed unexpectedly: {type(exc).__name__}: {exc}"


def json_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (a field a server left out or sent malformed)."""
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _ms(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0.0


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
