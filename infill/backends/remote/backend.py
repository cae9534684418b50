"""A backend that asks a remote completions endpoint to fill gaps.

Two protocols (`protocol`, "auto" by default):
- "openai": `POST {endpoint}/v1/completions` with `prompt` (text before the gap) and `suffix` (text after it), as
  llama.cpp's server and `infill-ls serve` accept, or the model's FIM template as `prompt` alone.
- "vllm-diffusion": vLLM serving DiffusionGemma, spoken natively (vllm_diffusion.py): the suffix is pinned in the
  canvas, one canvas per candidate middle length, the best join wins. "auto" picks it when `/v1/models` says vLLM
  and vLLM's own validation answers like a diffusion server, or when a diffusion server refuses the OpenAI route.
It exists only when the user configured an endpoint, so nothing leaves the machine otherwise.

Every failure (endpoint down, slow, HTTP error, garbage JSON) becomes an `InfillResult` with outcome "error" and a
message; nothing escapes `infill`. The HTTP exchanges (exchange.py) run on the backend's small pool of HTTP threads
("infill-remote-http") while the caller polls the cancel token and the deadline, so a cancelled or late request
returns at once even while its socket is still blocked.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import infill.backends.remote.vllm_diffusion as vd
from infill import languages
from infill.backends.remote.exchange import Exchanges
from infill.backends.remote.http import (
    RemoteCall,
    RemoteFailure,
    RemoteHTTPError,
    _count,
    _GapAnswer,
    _ms,
    _NotFound,
    json_object,
    normalize_endpoint,
    render_fim,
)
from infill.backends.remote.native import NativeDiffusionRoute
from infill.engine.config import EngineConfig
from infill.types import (
    UNSTEERED,
    BackendInfo,
    Cancelled,
    CancelToken,
    Draft,
    FillControl,
    InfillError,
    InfillRequest,
    InfillResult,
    Outcome,
    Timings,
)

log = logging.getLogger(__name__)

FAILED = "remote infill via"  # how a failed request's log line starts
TOKEN_ENV = "INFILL_ENDPOINT_TOKEN"  # bearer token when none is passed (keeps it out of editor settings files)


PROTOCOLS = ("auto", "openai", "vllm-diffusion")


class RemoteBackend(NativeDiffusionRoute):
    """InfillBackend over an OpenAI-compatible `/v1/completions` endpoint (kind "remote")."""

    def __init__(
        self,
        endpoint: str,
        model: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        send_budget: bool = True,
        fim_template: str | None = None,
        protocol: str = "auto",
    ) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise InfillError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not (isinstance(connect_timeout_s, (int, float)) and connect_timeout_s > 0):
            raise InfillError(f"connect_timeout_s must be > 0, got {connect_timeout_s!r}")
        if fim_template is not None and not ("{prefix}" in fim_template and "{suffix}" in fim_template):
            raise InfillError("fim_template must contain {prefix} and {suffix}")
        if protocol not in PROTOCOLS:
            raise InfillError(f"remote protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        self.endpoint = normalize_endpoint(endpoint)
        self.protocol = protocol
        self._route: str | None = None if protocol == "auto" else protocol  # resolved on first use in "auto"
        self._facts: vd.ServerFacts | None = None  # what a vLLM diffusion server serves (canvas, vocabulary)
        self._max_model_len: int | None = None
        self._pins_exact: bool | None = None  # None: not yet seen; False: the server lacks the infill-vllm plugin
        self._tokens = vd.TokenCache()
        self._stop_ids: frozenset[int] | None = None  # a middle ends at the first of these (end, padding)
        self._drop_ids: frozenset[int] = frozenset()  # never shown (beginning-of-text)
        # Candidate middle lengths and anchor sizes: the in-process engine's defaults, as on a GPU (a team server
        # has one: vd.SERVER_DEVICE).
        self.engine = EngineConfig()
        self._said: set[str] = set()  # messages already logged: a failing server is reported once, not per keystroke
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
        self.http = Exchanges(self.endpoint, token, self.connect_timeout_s)
        self._closed = False

    # -- InfillBackend ------------------------------------------------------------------------------------------

    @property
    def info(self) -> BackendInfo:
        model = self._model or "(model not yet known)"
        host = urlsplit(self.endpoint).netloc
        return BackendInfo(
            name=f"remote:{self._model or host}",
            kind="remote",
            model=model,
            device="remote",
            dtype="n/a",
            is_fallback=False,
            label=f"remote {model} at {self.endpoint}",
        )

    def infill(self, request: InfillRequest, control: FillControl = UNSTEERED) -> InfillResult:
        t0 = time.perf_counter()
        end = self._end_time(control.deadline)
        try:
            if self._closed:
                raise RemoteFailure("remote backend is closed")
            control.raise_if_cancelled()
            model = self._discover_model(control.cancel, end)
            answers = self._route_fill(RemoteCall(request, model, control, end))
        except Cancelled as exc:
            return self._failed(request, "cancelled", str(exc) or "cancelled", t0)
        except RemoteFailure as exc:
            self._say_once(logging.WARNING, f"{FAILED} {self.endpoint} failed: {exc}")
            return self._failed(request, "error", str(exc), t0)
        except Exception as exc:  # a bug here must not take the editor's request down with it
            log.exception("remote infill via %s failed unexpectedly", self.endpoint)
            return self._failed(request, "error", f"remote backend failed: {type(exc).__name__}: {exc}", t0)
        # Served again: a later failure is worth one log line again (one per outage, not per keystroke).
        self._said = {m for m in self._said if not m.startswith(FAILED)}
        return self._result(request, model, answers, t0)

    def close(self) -> None:
        self._closed = True
        self.http.close()

    # -- routes -------------------------------------------------------------------------------------------------

    def _route_fill(self, call: RemoteCall) -> list[_GapAnswer]:
        if self._route == "vllm-diffusion" and not self._native_unusable():
            return self._native_fill(call)
        try:
            return self._fill_gaps(call)
        except RemoteHTTPError as exc:
            # A diffusion server refuses `suffix`/`temperature`: in "auto", that is how it is recognised when
            # the model name was configured (no discovery ran).
            if not (self._route is None and any(r in exc.detail for r in vd.DIFFUSION_REFUSALS)):
                raise
            if not self._detect_diffusion(call.model, call.control.cancel, call.end):
                raise
        return self._native_fill(call)

    def _say_once(self, level: int, message: str) -> None:
        if message not in self._said:
            if len(self._said) > 64:
                self._said.clear()
            self._said.add(message)
            log.log(level, message)

    # -- gaps ---------------------------------------------------------------------------------------------------

    def _fill_gaps(self, call: RemoteCall) -> list[_GapAnswer]:
        """Several gaps are filled left to right: each sees the middles already chosen before it."""
        request, model, end = call.request, call.model, call.end
        cancel, on_draft = call.control.cancel, call.control.on_draft
        answers: list[_GapAnswer] = []
        for index in range(request.gap_count):
            middles = [a.text for a in answers]
            prompt = request.prefix + "".join(m + b for m, b in zip(middles, request.between))
            suffix = "".join(request.between[index:]) + request.suffix
            body = self._completion_body(request, model, prompt, suffix, end)
            answer = self._parse_completion(self.http.one("POST", "/v1/completions", body, cancel, end))
            if request.single_line:  # in case the server ignored `stop`
                answer.text = languages.one_line_fill(answer.text, wraps=request.wraps_lines)
            answers.append(answer)
            if on_draft is not None:
                shown = tuple(a.text for a in answers) + ("",) * (request.gap_count - index - 1)
                on_draft(Draft(step=index + 1, middles=shown, confidence=()))
        return answers

    def _completion_body(
        self, request: InfillRequest, model: str | None, prompt: str, suffix: str, end: float
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt,
            "suffix": suffix,
            "max_tokens": request.max_middle_tokens,
            "temperature": 0,
            "n": 1,
            "stream": False,
        }
        if self._facts is not None:  # a diffusion server refuses `temperature` (its schedule is fixed)
            del body["temperature"]
        if self.fim_template is not None:
            body["prompt"] = render_fim(self.fim_template, prompt, suffix)
            del body["suffix"]
        if request.single_line:
            # Saves the server's tokens past the line, at a price: a server cannot know that code may wrap a call
            # over lines (languages.one_line_fill), so this route's one-line fills end at the first newline.
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

    def _parse_completion(self, data: dict[str, Any]) -> _GapAnswer:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise RemoteFailure(f"response from {self.endpoint} has no choices")
        text = choices[0].get("text")
        if not isinstance(text, str):
            raise RemoteFailure(f"response from {self.endpoint} has no text in choices[0]")
        usage, extension = json_object(data.get("usage")), json_object(data.get("infill"))
        return _GapAnswer(
            text=text,
            finish_reason=choices[0].get("finish_reason"),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            extension=extension,
        )

    def _result(self, request: InfillRequest, model: str | None, answers: list[_GapAnswer], t0: float) -> InfillResult:
        middles = tuple(a.text for a in answers)
        outcomes = {a.extension.get("outcome") for a in answers}
        outcome: Outcome = "empty" if not any(middles) else "cut_short" if "cut_short" in outcomes else "ok"
        completion_tokens = sum(a.completion_tokens for a in answers)
        # `infill-ls serve` reports decoder forwards; other servers decode one token per step.
        steps = sum(_count(a.extension.get("steps")) or a.completion_tokens for a in answers)
        remote_versions = [a.extension.get("versions") for a in answers if a.extension.get("versions")]
        versions: dict[str, Any] = {
            "endpoint": self.endpoint,
            "model": model,
            "remote": remote_versions[0] if remote_versions else {},
            "protocol": self._route or "openai",
        }
        if answers and "canvas_width" in answers[0].extension:  # the native route: which canvas won, pins held
            versions["canvas"] = answers[0].extension
        return InfillResult(
            middles=middles,
            outcome=outcome,
            backend=self.info.name,
            steps=steps,
            tokens_per_forward=completion_tokens / steps if steps else 0.0,
            generated_tokens=completion_tokens,
            timings=Timings(
                encode_ms=sum(_ms(a.extension.get("encode_ms")) for a in answers),
                denoise_ms=sum(_ms(a.extension.get("denoise_ms")) for a in answers),
                total_ms=(time.perf_counter() - t0) * 1000,
            ),
            prompt_tokens=sum(a.prompt_tokens for a in answers),
            version=request.version,
            versions=versions,
        )

    def _failed(self, request: InfillRequest, outcome: Outcome, message: str, t0: float) -> InfillResult:
        return InfillResult(
            middles=(),
            outcome=outcome,
            backend=self.info.name,
            timings=Timings(total_ms=(time.perf_counter() - t0) * 1000),
            version=request.version,
            versions={"endpoint": self.endpoint, "model": self._model},
            error=message,
        )

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
                data = self.http.one("GET", "/v1/models", None, cancel, end)
            except _NotFound:
                log.info("%s has no /v1/models; sending completions without a model name", self.endpoint)
                self._model_known = True
                return None
            entries = data.get("data")
            entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
            entries = [e for e in entries if isinstance(e.get("id"), str) and e["id"]]
            if not entries:
                raise RemoteFailure(f"{self.endpoint}/v1/models lists no models")
            first = entries[0]
            self._model, self._model_known = first["id"], True
            if isinstance(first.get("max_model_len"), int):
                self._max_model_len = first["max_model_len"]
            log.info("remote endpoint %s serves %s", self.endpoint, self._model)
            if self._route is None and first.get("owned_by") == "vllm":
                self._detect_diffusion(self._model, cancel, end)
            return self._model
        finally:
            self._model_lock.release()

    # -- HTTP ---------------------------------------------------------------------------------------------------

    def _end_time(self, deadline: float | None) -> float:
        own = time.monotonic() + self.timeout_s
        return own if deadline is None else min(own, deadline)
