"""A backend that asks a remote OpenAI-compatible completions endpoint to fill gaps.

Speaks `POST {endpoint}/v1/completions` with `prompt` (text before the gap) and `suffix` (text after it), as vLLM,
llama.cpp's server and `infill-ls serve` accept. It exists only when the user configured an endpoint, so nothing
leaves the machine otherwise.

Every failure (endpoint down, slow, HTTP error, garbage JSON) becomes an `InfillResult` with outcome "error" and a
message; nothing escapes `infill`. The HTTP exchange runs in a daemon thread while the caller polls the cancel token
and the deadline, so a cancelled or late request returns at once even while the socket is still blocked.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from infill.types import (BackendInfo, CancelToken, Cancelled, Draft, DraftCallback, InfillError, InfillRequest,
                    InfillResult, Timings)

log = logging.getLogger(__name__)

POLL_S = 0.01  # how often the waiting caller looks at its cancel token and deadline
TOKEN_ENV = "INFILL_ENDPOINT_TOKEN"  # bearer token when none is passed (keeps it out of editor settings files)
SUFFIX_HINT = ("; this server does not take `suffix` (stock vLLM answers so): put `infill-ls serve` in front of "
               "the model, or give RemoteBackend a fim_template")


class RemoteFailure(Exception):
    """One failed exchange with the endpoint; the message says what happened and where."""


@dataclass
class _GapAnswer:
    text: str
    finish_reason: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extension: dict = field(default_factory=dict)  # the `infill` object `infill-ls serve` adds, if any


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


class RemoteBackend:
    """InfillBackend over an OpenAI-compatible `/v1/completions` endpoint (kind "remote")."""

    def __init__(self, endpoint: str, model: str | None = None, token: str | None = None, *,
                 timeout_s: float = 30.0, connect_timeout_s: float = 5.0, send_budget: bool = True,
                 fim_template: str | None = None) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise InfillError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not (isinstance(connect_timeout_s, (int, float)) and connect_timeout_s > 0):
            raise InfillError(f"connect_timeout_s must be > 0, got {connect_timeout_s!r}")
        if fim_template is not None and not ("{prefix}" in fim_template and "{suffix}" in fim_template):
            raise InfillError("fim_template must contain {prefix} and {suffix}")
        self.endpoint = normalize_endpoint(endpoint)
        # For servers that refuse `suffix`: the model's own fill-in-the-middle prompt, e.g.
        # "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>", sent as `prompt` alone.
        self.fim_template = fim_template
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        # The remaining budget travels as `infill_budget_ms` so `infill-ls serve` can answer with a cut-short draft
        # in time; vLLM and llama.cpp ignore unknown fields.
        self.send_budget = send_budget
        self._model = model or None
        self._model_known = self._model is not None
        self._model_lock = threading.Lock()
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # A proxy from the environment (HTTP_PROXY, ALL_PROXY) is used for remote hosts only: code for an endpoint
        # on this machine must not travel through a proxy, with the token, unless NO_PROXY happens to say so.
        self._client = httpx.Client(headers=headers, follow_redirects=False,
                                    trust_env=not _is_loopback(urlsplit(self.endpoint).hostname))
        self._closed = False

    # -- InfillBackend ------------------------------------------------------------------------------------------

    @property
    def info(self) -> BackendInfo:
        model = self._model or "(model not yet known)"
        host = urlsplit(self.endpoint).netloc
        return BackendInfo(name=f"remote:{self._model or host}", kind="remote", model=model, device="remote",
                           dtype="n/a", is_fallback=False, label=f"remote {model} at {self.endpoint}")

    def infill(self, request: InfillRequest, *, cancel: CancelToken | None = None, deadline: float | None = None,
               on_draft: DraftCallback | None = None) -> InfillResult:
        t0 = time.perf_counter()
        end = self._end_time(deadline)
        try:
            if self._closed:
                raise RemoteFailure("remote backend is closed")
            if cancel is not None:
                cancel.raise_if_cancelled()
            model = self._discover_model(cancel, end)
            answers = self._fill_gaps(request, model, cancel, end, on_draft)
        except Cancelled as exc:
            return self._failed(request, "cancelled", str(exc) or "cancelled", t0)
        except RemoteFailure as exc:
            log.warning("remote infill via %s failed: %s", self.endpoint, exc)
            return self._failed(request, "error", str(exc), t0)
        except Exception as exc:  # a bug here must not take the editor's request down with it
            log.exception("remote infill via %s failed unexpectedly", self.endpoint)
            return self._failed(request, "error", f"remote backend failed: {type(exc).__name__}: {exc}", t0)
        return self._result(request, model, answers, t0)

    def close(self) -> None:
        self._closed = True
        self._client.close()

    # -- gaps ---------------------------------------------------------------------------------------------------

    def _fill_gaps(self, request: InfillRequest, model: str | None, cancel: CancelToken | None, end: float,
                   on_draft: DraftCallback | None) -> list[_GapAnswer]:
        """Several gaps are filled left to right: each sees the middles already chosen before it."""
        answers: list[_GapAnswer] = []
        for index in range(request.gap_count):
            middles = [a.text for a in answers]
            prompt = request.prefix + "".join(m + b for m, b in zip(middles, request.between))
            suffix = "".join(request.between[index:]) + request.suffix
            body = self._completion_body(request, model, prompt, suffix, end)
            answer = self._parse_completion(self._exchange("POST", "/v1/completions", body, cancel, end))
            if request.single_line:  # in case the server ignored `stop`
                answer.text = answer.text.split("\n", 1)[0]
            answers.append(answer)
            if on_draft is not None:
                shown = tuple(a.text for a in answers) + ("",) * (request.gap_count - index - 1)
                on_draft(Draft(step=index + 1, middles=shown, confidence=()))
        return answers

    def _completion_body(self, request: InfillRequest, model: str | None, prompt: str, suffix: str,
                         end: float) -> dict:
        body: dict = {"prompt": prompt, "suffix": suffix, "max_tokens": request.max_middle_tokens,
                      "temperature": 0, "n": 1, "stream": False}
        if self.fim_template is not None:
            body["prompt"] = render_fim(self.fim_template, prompt, suffix)
            del body["suffix"]
        if request.single_line:
            body["stop"] = ["\n"]
        # For `infill-ls serve` (others ignore it): complete a line, or fill a gap that may span lines.
        body["mode"] = "inline" if request.single_line else "gap"
        if model:
            body["model"] = model
        if request.language:
            body["language"] = request.language
        if self.send_budget:
            body["infill_budget_ms"] = max(1, int((end - time.monotonic()) * 1000))
            if request.document_id:
                # `infill-ls serve` lets a newer request for the same document stop an older one (a keystroke
                # cancelled here cannot reach it otherwise); a hash, so no file path leaves the machine.
                key = hashlib.sha256(request.document_id.encode("utf-8", "replace")).hexdigest()
                body["infill_document"] = key[:24]
        return body

    def _parse_completion(self, data: dict) -> _GapAnswer:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise RemoteFailure(f"response from {self.endpoint} has no choices")
        text = choices[0].get("text")
        if not isinstance(text, str):
            raise RemoteFailure(f"response from {self.endpoint} has no text in choices[0]")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        extension = data.get("infill") if isinstance(data.get("infill"), dict) else {}
        return _GapAnswer(text=text, finish_reason=choices[0].get("finish_reason"),
                          prompt_tokens=_count(usage.get("prompt_tokens")),
                          completion_tokens=_count(usage.get("completion_tokens")), extension=extension)

    def _result(self, request: InfillRequest, model: str | None, answers: list[_GapAnswer],
                t0: float) -> InfillResult:
        middles = tuple(a.text for a in answers)
        outcomes = {a.extension.get("outcome") for a in answers}
        outcome = "empty" if not any(middles) else "cut_short" if "cut_short" in outcomes else "ok"
        completion_tokens = sum(a.completion_tokens for a in answers)
        # `infill-ls serve` reports decoder forwards; other servers decode one token per step.
        steps = sum(_count(a.extension.get("steps")) or a.completion_tokens for a in answers)
        remote_versions = [a.extension.get("versions") for a in answers if a.extension.get("versions")]
        versions = {"endpoint": self.endpoint, "model": model, "remote": remote_versions[0] if remote_versions else {}}
        return InfillResult(
            middles=middles, outcome=outcome, backend=self.info.name, steps=steps,
            tokens_per_forward=completion_tokens / steps if steps else 0.0,
            timings=Timings(encode_ms=sum(_ms(a.extension.get("encode_ms")) for a in answers),
                            denoise_ms=sum(_ms(a.extension.get("denoise_ms")) for a in answers),
                            total_ms=(time.perf_counter() - t0) * 1000),
            prompt_tokens=sum(a.prompt_tokens for a in answers), version=request.version, versions=versions)

    def _failed(self, request: InfillRequest, outcome: str, message: str, t0: float) -> InfillResult:
        return InfillResult(middles=(), outcome=outcome, backend=self.info.name,  # type: ignore[arg-type]
                            timings=Timings(total_ms=(time.perf_counter() - t0) * 1000), version=request.version,
                            versions={"endpoint": self.endpoint, "model": self._model}, error=message)

    # -- model discovery ----------------------------------------------------------------------------------------

    def _discover_model(self, cancel: CancelToken | None, end: float) -> str | None:
        """Ask `/v1/models` once; a server without that route (404) is sent requests without a model name."""
        if self._model_known:
            return self._model
        # Bounded wait: a second request must not outlive its own deadline behind a slow discovery.
        if not self._model_lock.acquire(timeout=max(0.0, end - time.monotonic())):
            raise RemoteFailure(f"no answer from {self.endpoint}/v1/models before the deadline")
        try:
            if self._model_known:
                return self._model
            try:
                data = self._exchange("GET", "/v1/models", None, cancel, end)
            except _NotFound:
                log.info("%s has no /v1/models; sending completions without a model name", self.endpoint)
                self._model_known = True
                return None
            entries = data.get("data")
            ids = [e.get("id") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
            ids = [i for i in ids if isinstance(i, str) and i]
            if not ids:
                raise RemoteFailure(f"{self.endpoint}/v1/models lists no models")
            self._model, self._model_known = ids[0], True
            log.info("remote endpoint %s serves %s", self.endpoint, self._model)
            return self._model
        finally:
            self._model_lock.release()

    # -- HTTP ---------------------------------------------------------------------------------------------------

    def _end_time(self, deadline: float | None) -> float:
        own = time.monotonic() + self.timeout_s
        return own if deadline is None else min(own, deadline)

    def _exchange(self, method: str, path: str, body: dict | None, cancel: CancelToken | None, end: float) -> dict:
        """One request, bounded by `end` (time.monotonic()) and abandoned at once when `cancel` fires."""
        url = self.endpoint + path
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise RemoteFailure(f"deadline passed before the request to {url} was sent")
        box: dict = {}
        done = threading.Event()
        timeout = httpx.Timeout(remaining, connect=min(self.connect_timeout_s, remaining))

        def send() -> None:
            try:
                box["response"] = self._client.request(method, url, json=body, timeout=timeout)
            except BaseException as exc:  # reported to the waiting caller
                box["error"] = exc
            finally:
                done.set()

        # A daemon thread: an abandoned exchange ends by itself within its own timeout.
        threading.Thread(target=send, name="infill-remote-http", daemon=True).start()
        while not done.wait(POLL_S):
            if cancel is not None and cancel.cancelled:
                raise Cancelled(cancel.reason)
            if time.monotonic() >= end:
                raise RemoteFailure(f"no answer from {url} within {remaining:.2f} s")
        if "error" in box:
            raise RemoteFailure(_describe_http_error(url, box["error"], remaining))
        return _decode(url, box["response"])


class _NotFound(RemoteFailure):
    pass


def _decode(url: str, response: httpx.Response) -> dict:
    if response.status_code == 404:
        raise _NotFound(f"HTTP 404 from {url}: {_error_text(response)}")
    if response.status_code != 200:
        message = _error_text(response)
        hint = SUFFIX_HINT if response.status_code == 400 and "suffix" in message.lower() else ""
        raise RemoteFailure(f"HTTP {response.status_code} from {url}: {message}{hint}")
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


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _ms(value) -> float:
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
