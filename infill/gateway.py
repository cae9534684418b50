"""`infill-ls serve`: the completion pipeline behind an OpenAI-compatible HTTP API.

`GET /v1/models`, `POST /v1/completions` (prompt + suffix = fill-in-the-middle, as vLLM and llama.cpp accept) and
`GET /health`. Every completion goes through `infill.pipeline.Pipeline`, so what the gateway returns is what an
editor would show. Standard library only (`ThreadingHTTPServer`); binds 127.0.0.1 unless told otherwise, and with a
token every `/v1` route needs `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import socket
import socketserver
import sys
import threading
import time
import uuid
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from .pipeline import CompletionRequest, Pipeline, PipelineResult
from .types import InfillError

log = logging.getLogger(__name__)

ROUTES = {"/v1/models": "GET", "/v1/completions": "POST", "/health": "GET"}
MAX_STOP_SEQUENCES = 4
DRAIN_LIMIT_BYTES = 16 << 20  # unread bodies up to this are read and dropped so the client sees the error reply


class HttpError(Exception):
    """An answer other than 200, with the message the client sees (OpenAI error shape)."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error", headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class GatewaySettings:
    token: str | None = None
    max_body_bytes: int = 1 << 20
    max_tokens_limit: int = 4096  # max_tokens above this is refused as absurd
    request_timeout_s: float = 60.0  # every completion is cut short by then
    model_name: str | None = None  # the id /v1/models lists; default: the backend's model

    def __post_init__(self) -> None:
        checks = [(self.token is None or isinstance(self.token, str) and bool(self.token.strip()),
                   "token must be a non-empty string"),
                  (isinstance(self.max_body_bytes, int) and self.max_body_bytes >= 1024,
                   f"max_body_bytes must be an integer >= 1024, got {self.max_body_bytes!r}"),
                  (isinstance(self.max_tokens_limit, int) and self.max_tokens_limit >= 1,
                   f"max_tokens_limit must be a positive integer, got {self.max_tokens_limit!r}"),
                  (isinstance(self.request_timeout_s, (int, float)) and self.request_timeout_s > 0,
                   f"request_timeout_s must be > 0, got {self.request_timeout_s!r}")]
        for ok, message in checks:
            if not ok:
                raise InfillError(f"invalid gateway setting: {message}")


@dataclass(frozen=True)
class CompletionParams:
    prompt: str
    suffix: str
    max_tokens: int | None
    stop: tuple[str, ...]
    stream: bool
    mode: str
    language: str | None
    budget_ms: float | None  # `infill_budget_ms`: the caller's remaining time (RemoteBackend sends it)


# -- request validation -----------------------------------------------------------------------------------------

def _optional(body: dict, name: str, kinds: type | tuple, what: str):
    value = body.get(name)
    accepts_bool = bool in (kinds if isinstance(kinds, tuple) else (kinds,))
    if value is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and not accepts_bool)):
        raise HttpError(400, f"{name} must be {what}, got {type(value).__name__}", param=name)
    return value


def parse_completion_params(body: object, settings: GatewaySettings) -> CompletionParams:
    if not isinstance(body, dict):
        raise HttpError(400, f"request body must be a JSON object, got {type(body).__name__}")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise HttpError(400, "prompt must be a string (the text before the gap)", param="prompt")
    suffix = _optional(body, "suffix", str, "a string (the text after the gap)") or ""
    max_tokens = _optional(body, "max_tokens", int, "an integer")
    if max_tokens is not None and not 1 <= max_tokens <= settings.max_tokens_limit:
        raise HttpError(400, f"max_tokens must be between 1 and {settings.max_tokens_limit}, got {max_tokens}",
                        param="max_tokens")
    for name in ("n", "best_of"):
        if _optional(body, name, int, "an integer") not in (None, 1):
            raise HttpError(400, f"{name} must be 1: this server returns one completion per request", param=name)
    temperature = _optional(body, "temperature", (int, float), "a number")
    if temperature is not None and not 0 <= temperature <= 2:
        raise HttpError(400, f"temperature must be between 0 and 2, got {temperature}", param="temperature")
    if body.get("echo"):
        raise HttpError(400, "echo is not supported", param="echo")
    if body.get("logprobs") is not None:
        raise HttpError(400, "logprobs are not supported", param="logprobs")
    _optional(body, "model", str, "a string")
    mode = _optional(body, "mode", str, "a string") or "inline"
    if mode not in ("inline", "gap"):
        raise HttpError(400, f"mode must be 'inline' or 'gap', got {mode!r}", param="mode")
    budget_ms = _optional(body, "infill_budget_ms", (int, float), "a number of milliseconds")
    if budget_ms is not None and budget_ms <= 0:
        raise HttpError(400, "infill_budget_ms must be > 0", param="infill_budget_ms")
    return CompletionParams(prompt=prompt, suffix=suffix, max_tokens=max_tokens, stop=_parse_stop(body.get("stop")),
                            stream=bool(_optional(body, "stream", bool, "true or false")), mode=mode,
                            language=_optional(body, "language", str, "a string"), budget_ms=budget_ms)


def _parse_stop(stop: object) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or len(stops) > MAX_STOP_SEQUENCES
            or not all(isinstance(s, str) and s for s in stops)):
        raise HttpError(400, f"stop must be a non-empty string or a list of up to {MAX_STOP_SEQUENCES} of them",
                        param="stop")
    return tuple(stops)


# -- completion -------------------------------------------------------------------------------------------------

_REQUEST_FIELDS = {f.name for f in fields(CompletionRequest)}


def run_completion(pipeline: Pipeline, params: CompletionParams, settings: GatewaySettings) -> tuple[dict, str, str]:
    """Run one completion; returns (infill extension object, text, finish_reason)."""
    start = len(params.prompt)
    extra = {}
    if params.max_tokens is not None and "max_middle_tokens" in _REQUEST_FIELDS:
        extra["max_middle_tokens"] = params.max_tokens  # honoured once the pipeline takes a per-request budget
    request = CompletionRequest(text=params.prompt + params.suffix, start=start, end=start, mode=params.mode,
                                language=params.language, **extra)  # type: ignore[arg-type]
    budget_s = settings.request_timeout_s
    if params.budget_ms is not None:
        budget_s = min(budget_s, params.budget_ms / 1000)
    t0 = time.perf_counter()
    try:
        outcome = pipeline.complete(request, deadline=time.monotonic() + budget_s)
    except InfillError as exc:
        raise HttpError(400, str(exc)) from exc
    latency_ms = (time.perf_counter() - t0) * 1000
    result = outcome.result
    if not outcome.fills and result is not None and result.outcome == "error":
        raise HttpError(500, f"backend error: {result.error or 'unknown'}", kind="server_error")
    text = outcome.fills[0].text if outcome.fills else ""
    text, stopped = _apply_stop(text, params.stop)
    finish = "stop" if stopped or result is None or result.outcome != "cut_short" else "length"
    return _extension(outcome, latency_ms, start), text, finish


def _apply_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _extension(outcome: PipelineResult, latency_ms: float, start: int) -> dict:
    result = outcome.result
    fill = outcome.fills[0] if outcome.fills else None
    return {
        "outcome": result.outcome if result else "empty", "route": outcome.route,
        "backend": result.backend if result else None, "steps": result.steps if result else 0,
        "tokens_per_forward": result.tokens_per_forward if result else 0.0,
        "latency_ms": round(latency_ms, 2), "pipeline_ms": round(outcome.total_ms, 2),
        "context_ms": round(outcome.context_ms, 2),
        "encode_ms": round(result.timings.encode_ms, 2) if result else 0.0,
        "denoise_ms": round(result.timings.denoise_ms, 2) if result else 0.0,
        "prompt_tokens": result.prompt_tokens if result else 0,
        "max_middle_tokens": outcome.max_middle_tokens, "single_line": outcome.single_line,
        "rejections": [list(r) for r in outcome.rejections], "error": result.error if result else None,
        "versions": result.versions if result else {},
        # Where the text goes, as offsets into prompt + suffix (a fill may replace more than the empty gap).
        "replace": [fill.start, fill.end] if fill else [start, start],
    }


def completion_body(model: str, text: str, finish: str, extension: dict) -> dict:
    steps, per_forward, prompt_tokens = extension["steps"], extension["tokens_per_forward"], extension["prompt_tokens"]
    completion_tokens = round(steps * per_forward) if per_forward else 0
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"text": text, "index": 0, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "infill": extension,
    }


# -- HTTP -------------------------------------------------------------------------------------------------------

class GatewayServer(ThreadingHTTPServer):
    """The HTTP server plus its readiness: requests before `set_pipeline` get 503 with the loading state."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], settings: GatewaySettings, pipeline: Pipeline | None) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.settings = settings
        self._pipeline = pipeline
        self._load_error: str | None = None
        self._state_lock = threading.Lock()

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS lookup); the name is never used here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    @property
    def url(self) -> str:
        host = self.server_name if ":" not in str(self.server_name) else f"[{self.server_name}]"
        return f"http://{host}:{self.server_port}"

    def set_pipeline(self, pipeline: Pipeline) -> None:
        with self._state_lock:
            self._pipeline, self._load_error = pipeline, None

    def set_error(self, message: str) -> None:
        with self._state_lock:
            self._load_error = message

    def ready_pipeline(self) -> Pipeline:
        with self._state_lock:
            pipeline, error = self._pipeline, self._load_error
        if pipeline is None:
            message = f"model failed to load: {error}" if error else "model is still loading; retry shortly"
            raise HttpError(503, message, kind="service_unavailable", headers={"Retry-After": "5"})
        return pipeline

    def model_name(self, pipeline: Pipeline) -> str:
        return self.settings.model_name or pipeline.backend.info.model

    def health(self) -> tuple[int, dict]:
        with self._state_lock:
            pipeline, error = self._pipeline, self._load_error
        if pipeline is not None:
            return 200, {"status": "ready", "model": self.model_name(pipeline)}
        return 503, {"status": "error" if error else "loading", "error": error}


class _Handler(BaseHTTPRequestHandler):
    server: GatewayServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: Nagle + delayed ACK would add ~40 ms
    timeout = 30  # socket timeout: a client that stops sending mid-body cannot hold a thread forever
    server_version = "infill-ls"

    def do_GET(self) -> None:
        t0 = time.perf_counter()
        self._body_read = False
        try:
            status = self._answer(self.command)
        except OSError as exc:  # the client went away (or stalled past `timeout`) mid-request
            self.close_connection = True
            status = 499
            log.info("%s %s: client gone: %s", self.command, self.path, exc)
        log.info("%s %s -> %d in %.1f ms", self.command, self.path, status, (time.perf_counter() - t0) * 1000)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET  # routed (and refused with 405) by _answer

    def _answer(self, method: str) -> int:
        try:
            path = urlsplit(self.path).path.rstrip("/") or "/"
            allowed = ROUTES.get(path)
            if allowed is None:
                raise HttpError(404, f"no route {path}; this server has {', '.join(ROUTES)}", kind="not_found_error")
            if path != "/health":
                self._check_token()
            if method != allowed:
                raise HttpError(405, f"{method} is not allowed on {path}; use {allowed}", headers={"Allow": allowed})
            if path == "/health":
                status, body = self.server.health()
                self._send_json(status, body)
                return status
            if path == "/v1/models":
                self._models()
            else:
                self._completions()
            return 200
        except HttpError as exc:
            self._send_error(exc)
            return exc.status
        except OSError:
            raise
        except Exception as exc:  # keep serving: one broken request must not take the gateway down
            log.exception("gateway request %s %s failed", method, self.path)
            self._send_error(HttpError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error"))
            return 500

    def _check_token(self) -> None:
        expected = self.server.settings.token
        if expected is None:
            return
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        challenge = {"WWW-Authenticate": "Bearer"}
        if scheme.lower() != "bearer" or not given.strip():
            raise HttpError(401, "missing bearer token: send 'Authorization: Bearer <token>'",
                            kind="authentication_error", headers=challenge)
        if not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise HttpError(401, "invalid bearer token", kind="authentication_error", headers=challenge)

    def _models(self) -> None:
        model = self.server.model_name(self.server.ready_pipeline())
        entry = {"id": model, "object": "model", "created": int(time.time()), "owned_by": "infill-ls"}
        self._send_json(200, {"object": "list", "data": [entry]})

    def _completions(self) -> None:
        params = parse_completion_params(self._read_json(), self.server.settings)
        pipeline = self.server.ready_pipeline()
        extension, text, finish = run_completion(pipeline, params, self.server.settings)
        body = completion_body(self.server.model_name(pipeline), text, finish, extension)
        if params.stream:
            # Diffusion drafts replace the whole middle, so they cannot be streamed as appended deltas: one chunk
            # carries the final text, then the end marker.
            payload = f"data: {json.dumps(body, default=str)}\n\ndata: [DONE]\n\n".encode()
            self._send_bytes(200, payload, "text/event-stream")
        else:
            self._send_json(200, body)

    def _read_json(self) -> object:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise HttpError(411, "chunked request bodies are not supported; send Content-Length")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise HttpError(411, "Content-Length is required")
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            raise HttpError(400, f"invalid Content-Length {length_text!r}") from None
        limit = self.server.settings.max_body_bytes
        if length > limit:
            raise HttpError(413, f"request body is {length} bytes; the limit is {limit}")
        raw = self.rfile.read(length)
        self._body_read = True  # checked by _send_error
        if len(raw) < length:
            raise HttpError(400, "request body ended before Content-Length bytes")
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise HttpError(400, f"invalid JSON: {exc}") from None

    def _send_error(self, exc: HttpError) -> None:
        if not self._body_read:
            self._drain_body()
        self._send_json(exc.status, exc.body(), exc.headers)

    def _drain_body(self) -> None:
        """Read and drop a body we refused: closing on unread bytes resets the connection, and the client may
        lose our error reply. Bodies too large or of unknown length are not drained; the connection closes."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or not 0 <= length <= DRAIN_LIMIT_BYTES:
            self.close_connection = True
            return
        try:
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:
                    break
                length -= len(chunk)
        except OSError:
            pass
        if length > 0:
            self.close_connection = True

    def _send_json(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(body, default=str).encode(), "application/json", headers)

    def _send_bytes(self, status: int, payload: bytes, content_type: str,
                    headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s - %s", self.address_string(), format % args)


def make_server(pipeline: Pipeline | None, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                **settings) -> GatewayServer:
    """A bound, not yet serving gateway (port 0: any free port, see `.server_port`). With `pipeline=None` it
    answers 503 until `set_pipeline`. Run it with `.serve_forever()`, stop it with `.shutdown()`."""
    return GatewayServer((host, port), GatewaySettings(token=token, **settings), pipeline)


# -- command line -----------------------------------------------------------------------------------------------

def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="infill-ls serve", description="OpenAI-compatible gateway to infill-ls")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="port (0: any free port; default 8765)")
    parser.add_argument("--token", default=None,
                        help="require 'Authorization: Bearer TOKEN' (or set INFILL_GATEWAY_TOKEN)")
    parser.add_argument("--model", default=None, help="DiffusionGemma checkpoint (dir or hub id; env INFILL_MODEL); "
                                                      "default: the offline Gemma 3 270M fallback")
    parser.add_argument("--load-format", default=None, choices=["auto", "dummy"])
    parser.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:1")
    parser.add_argument("--dtype", default=None, help="auto, float32, bfloat16")
    parser.add_argument("--served-model-name", default=None, help="model id /v1/models lists")
    parser.add_argument("--max-body-bytes", type=int, default=GatewaySettings.max_body_bytes)
    parser.add_argument("--max-tokens-limit", type=int, default=GatewaySettings.max_tokens_limit)
    parser.add_argument("--request-timeout-s", type=float, default=GatewaySettings.request_timeout_s)
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        type=str.upper)
    return parser.parse_args(argv)


def _load_in_background(server: GatewayServer, spec, holder: list) -> None:
    from .backends import open_backend

    try:
        backend = open_backend(spec, progress=lambda message, fraction: log.info("%s", message))
    except Exception as exc:  # reported by /health and as 503 on every request
        log.exception("model failed to load")
        server.set_error(f"{type(exc).__name__}: {exc}")
        return
    holder.append(backend)
    server.set_pipeline(Pipeline(backend))
    log.info("ready: serving %s (%s)", backend.info.model, backend.info.label or backend.info.kind)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .backends import BackendSpec

    token = args.token or os.environ.get("INFILL_GATEWAY_TOKEN") or None
    try:
        spec = BackendSpec.from_env(model=args.model, load_format=args.load_format, device=args.device,
                                    dtype=args.dtype)
        server = make_server(None, args.host, args.port, token, max_body_bytes=args.max_body_bytes,
                             max_tokens_limit=args.max_tokens_limit, request_timeout_s=args.request_timeout_s,
                             model_name=args.served_model_name)
    except (InfillError, OSError, OverflowError) as exc:  # bad settings, port in use, port out of range
        print(f"infill-ls serve: {exc}", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        log.warning("listening on %s without a token: anyone who can reach this address can use it", args.host)
    backends: list = []
    threading.Thread(target=_load_in_background, args=(server, spec, backends), name="infill-gateway-load",
                     daemon=True).start()
    log.info("infill-ls gateway listening on %s (POST %s/v1/completions)%s", server.url, server.url,
             " with token auth" if token else "")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.server_close()
        for backend in backends:
            backend.close()
    return 0
