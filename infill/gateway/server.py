"""`infill-ls serve`: the completion pipeline behind an OpenAI-compatible HTTP API, and llama.cpp's.

`GET /v1/models`, `POST /v1/completions` (prompt + suffix = fill-in-the-middle, as vLLM and llama.cpp accept),
`POST /infill` (llama.cpp's infill API, as llama.vim and llama.vscode send it: llama_infill.py) and `GET /health`.
Every completion goes through `infill.pipeline.Pipeline`, so what the gateway returns is what an editor would show.
Standard library only (`ThreadingHTTPServer` accepting, `front.Front` reading each request in full under deadlines,
a bounded pool of handler threads answering through arrival_handler.py); binds 127.0.0.1 unless told otherwise,
and with a token every route but `/health` needs `Authorization: Bearer <token>`.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from infill.backends.choose import BackendSpec, add_model_options, spec_from_args
from infill.gateway import llama_infill
from infill.gateway.arrival_handler import DRAIN_LIMIT_BYTES, ArrivalHandler
from infill.gateway.front import Arrival, ConnectionLimits, Front
from infill.gateway.openai_api import (
    GatewaySettings,
    HttpError,
    completion_body,
    parse_completion_params,
    run_completion,
)
from infill.loader import FallbackChoice, add_fallback_options, fallback_from_args, open_pipeline
from infill.pipeline import Pipeline
from infill.types import InfillError
from infill.worker import ModelWorker, OnWorker

log = logging.getLogger(__name__)

ROUTES = {"/v1/models": "GET", "/v1/completions": "POST", "/infill": "POST", "/health": "GET"}
QUICK_ROUTES = ("/health", "/v1/models")  # never run the model: served by their own threads, never queued behind it


# -- HTTP -------------------------------------------------------------------------------------------------------


class GatewayServer(ThreadingHTTPServer):
    """The HTTP server plus its readiness: requests before `set_pipeline` get 503 with the loading state.

    The accepting thread hands each connection to the front (front.py), which reads every request in full, under
    deadlines, before a worker takes it: a slow client holds a socket, never a worker. A bounded pool answers
    (`workers`), quick routes a small pool of their own; connections are bounded in total and per client (503 with
    Retry-After past either). socketserver's default backlog of 5 made the kernel reset a burst's connections."""

    daemon_threads = True
    request_queue_size = 1024  # listen backlog (the kernel caps it at net.core.somaxconn)
    workers = 32
    quick_workers = 4
    limits = ConnectionLimits()  # docs/gateway.md, "Limits"

    def __init__(
        self,
        address: tuple[str, int],
        settings: GatewaySettings,
        pipeline: Pipeline | None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        # Every completion runs on this one thread; a newer request for the same document stops the older one.
        # (Made first: a failed bind calls server_close, which stops it.)
        self.worker = ModelWorker("infill-gateway-model")
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="infill-gateway-http")
        self._quick_pool = ThreadPoolExecutor(self.quick_workers, thread_name_prefix="infill-gateway-quick")
        limits = limits or self.limits
        self.limits = replace(
            limits,
            max_body_bytes=settings.max_body_bytes,
            drain_limit_bytes=max(DRAIN_LIMIT_BYTES, settings.max_body_bytes),
        )
        self.front = Front(self.limits, self._dispatch)
        super().__init__(address, _Handler)
        self.settings = settings
        self._pipeline = pipeline
        self._load_error: str | None = None
        self._state_lock = threading.Lock()

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS lookup); the name is never used here.
        socketserver.TCPServer.server_bind(self)
        host, self.server_port = self.server_address[:2]
        self.server_name = str(host)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.front.admit(request, client_address)  # the front owns the connection from here to its close

    def _dispatch(self, arrival: Arrival) -> None:
        """On the front's thread: a request read in full goes to a worker."""
        pool = self._quick_pool if arrival.path in QUICK_ROUTES else self._pool
        pool.submit(self._serve_arrival, arrival)

    def _serve_arrival(self, arrival: Arrival) -> None:
        keep_alive = False
        try:
            # (the Arrival stands where socketserver passes a socket: ArrivalHandler.setup reads it)
            handler = _Handler(arrival, arrival.client_address, self)  # type: ignore[arg-type]
            keep_alive = not handler.close_connection
        except Exception:  # noqa: BLE001 - one connection's failure is logged by handle_error, the rest go on
            self.handle_error(arrival.sock, arrival.client_address)
        finally:
            self.front.resume(arrival, keep_alive)

    @property
    def url(self) -> str:
        host = self.server_name if ":" not in str(self.server_name) else f"[{self.server_name}]"
        return f"http://{host}:{self.server_port}"

    def server_close(self) -> None:
        super().server_close()
        self.front.stop()
        self.worker.shutdown()
        self._pool.shutdown(wait=False)  # requests already read are still answered
        self._quick_pool.shutdown(wait=False)

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

    def health(self) -> tuple[int, dict[str, Any]]:
        with self._state_lock:
            pipeline, error = self._pipeline, self._load_error
        if pipeline is not None:
            return 200, {"status": "ready", "model": self.model_name(pipeline)}
        return 503, {"status": "error" if error else "loading", "error": error}


class _Handler(ArrivalHandler):
    """The gateway's routes, over the plumbing of arrival_handler.py."""

    server: GatewayServer
    server_version = "infill-ls"

    def do_GET(self) -> None:
        t0 = time.perf_counter()
        self._body_read = False
        try:
            status = self._answer(self.command)
        except OSError as exc:  # the client went away (or stopped reading past `timeout`) mid-reply
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
            elif path == "/infill":
                self._infill()
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
            raise HttpError(
                401,
                "missing bearer token: send 'Authorization: Bearer <token>'",
                kind="authentication_error",
                headers=challenge,
            )
        if not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise HttpError(401, "invalid bearer token", kind="authentication_error", headers=challenge)

    def _models(self) -> None:
        model = self.server.model_name(self.server.ready_pipeline())
        entry = {"id": model, "object": "model", "created": int(time.time()), "owned_by": "infill-ls"}
        self._send_json(200, {"object": "list", "data": [entry]})

    def _completions(self) -> None:
        params = parse_completion_params(self._read_json(), self.server.settings)
        pipeline = self.server.ready_pipeline()
        on_worker = OnWorker(pipeline, self.server.worker, abandoned=self._client_gone)
        extension, text, finish = run_completion(on_worker, params, self.server.settings)
        body = completion_body(self.server.model_name(pipeline), text, finish, extension)
        if params.stream:
            # Diffusion drafts replace the whole middle, so they cannot be streamed as appended deltas: one chunk
            # carries the final text, then the end marker.
            payload = f"data: {json.dumps(body, default=str)}\n\ndata: [DONE]\n\n".encode()
            self._send_bytes(200, payload, "text/event-stream")
        else:
            self._send_json(200, body)

    def _infill(self) -> None:
        """llama.cpp's /infill (llama.vim, llama.vscode): infill/gateway/llama_infill.py."""
        params = llama_infill.parse_infill_params(self._read_json(), self.server.settings)
        answer = llama_infill.answer_infill(
            params, self.server.settings, self.server.ready_pipeline(), self.server.worker, self._client_gone
        )
        payload = llama_infill.encode_body(llama_infill.pick_fields(answer, params.response_fields))
        self._send_bytes(200, payload, "application/json")


def make_server(
    pipeline: Pipeline | None,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    limits: ConnectionLimits | None = None,
    **settings: Any,
) -> GatewayServer:
    """A bound, not yet serving gateway (port 0: any free port, see `.server_port`). With `pipeline=None` it
    answers 503 until `set_pipeline`. Run it with `.serve_forever()`, stop it with `.shutdown()`."""
    return GatewayServer((host, port), GatewaySettings(token=token, **settings), pipeline, limits)


# -- command line -----------------------------------------------------------------------------------------------


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="infill-ls serve", description="OpenAI-compatible gateway to infill-ls")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="port (0: any free port; default 8765)")
    parser.add_argument(
        "--token", default=None, help="require 'Authorization: Bearer TOKEN' (or set INFILL_GATEWAY_TOKEN)"
    )
    parser.add_argument("--served-model-name", default=None, help="model id /v1/models lists")
    parser.add_argument("--max-body-bytes", type=int, default=GatewaySettings.max_body_bytes)
    parser.add_argument("--max-tokens-limit", type=int, default=GatewaySettings.max_tokens_limit)
    parser.add_argument("--request-timeout-s", type=float, default=GatewaySettings.request_timeout_s)
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper)
    add_model_options(parser)
    add_fallback_options(parser)
    return parser.parse_args(argv)


def _load_in_background(server: GatewayServer, spec: BackendSpec, fallback: FallbackChoice, holder: list[Any]) -> None:
    try:
        opened = open_pipeline(spec, fallback=fallback, progress=lambda message, fraction: log.info("%s", message))
    except Exception as exc:  # reported by /health and as 503 on every request
        log.exception("model failed to load")
        server.set_error(f"{type(exc).__name__}: {exc}")
        return
    holder.extend(opened.backends)
    server.set_pipeline(opened.pipeline)
    info, behind = opened.pipeline.backend.info, opened.pipeline.fallback
    log.info(
        "ready: serving %s (%s); fallback: %s",
        info.model,
        info.label or info.kind,
        behind.info.name
        if behind is not None
        else f"none ({opened.fallback_error})"
        if opened.fallback_error
        else "none",
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = args.token or os.environ.get("INFILL_GATEWAY_TOKEN") or None
    try:
        spec = spec_from_args(args)
        server = make_server(
            None,
            args.host,
            args.port,
            token,
            max_body_bytes=args.max_body_bytes,
            max_tokens_limit=args.max_tokens_limit,
            request_timeout_s=args.request_timeout_s,
            model_name=args.served_model_name,
        )
    except (InfillError, OSError, OverflowError) as exc:  # bad settings, port in use, port out of range
        print(f"infill-ls serve: {exc}", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        log.warning("listening on %s without a token: anyone who can reach this address can use it", args.host)
    backends: list[Any] = []
    threading.Thread(
        target=_load_in_background,
        args=(server, spec, fallback_from_args(args), backends),
        name="infill-gateway-load",
        daemon=True,
    ).start()
    log.info(
        "infill-ls gateway listening on %s (POST %s/v1/completions)%s",
        server.url,
        server.url,
        " with token auth" if token else "",
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.server_close()
        for backend in backends:
            backend.close()
    return 0
