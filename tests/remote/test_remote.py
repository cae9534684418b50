"""RemoteBackend against real HTTP servers on 127.0.0.1: the gateway over the real tiny DiffusionGemma engine, and
small stdlib servers that are down, slow, failing or talking nonsense (real servers, written here)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infill.backends.choose import BackendSpec, open_backend
from infill.backends.remote import RemoteBackend
from infill.backends.remote.exchange import HTTP_THREADS
from infill.pipeline import CompletionRequest, Pipeline
from infill.types import UNSTEERED, CancelToken, FillControl, InfillError, InfillRequest, deadline_in

PROMPT = "def add(a, b):\n    return"
SUFFIX = "\n\n\nprint(add(1, 2))\n"
TOKEN = "team-token"
# The gateway detects a language when a request names none, and the watchdog then rejects the tiny random model's
# text as broken Python; named as plain text, a fill comes back to compare end to end.
LANGUAGE = "plaintext"


# -- servers ----------------------------------------------------------------------------------------------------


class ScriptedServer:
    """A real HTTP server whose answers come from `reply(method, path, body) -> (status, bytes)`; it records every
    request (method, path, headers, JSON body) and can be told to hang until released."""

    def __init__(self, reply) -> None:
        self.requests: list[tuple[str, str, dict, object]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def _answer(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw) if raw else None
                outer.requests.append((method, self.path, dict(self.headers), body))
                status, payload = reply(outer, method, self.path, body)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (deadline, cancel): that is the point of those tests
                    self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": "team-model",
            "choices": [{"text": text, "index": 0, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
    ).encode()


def models(*ids: str) -> bytes:
    return json.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}).encode()


@pytest.fixture
def scripted():
    servers: list[ScriptedServer] = []

    def start(reply) -> ScriptedServer:
        servers.append(ScriptedServer(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def pipeline(tiny_engine):
    return Pipeline(tiny_engine)


@pytest.fixture(scope="module")
def gateway(pipeline, gateway_running):
    with gateway_running(pipeline, token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def expected(pipeline) -> str:
    """What the pipeline itself shows for the gap, called directly: text, so that every comparison with it compares
    something (an empty fill would make them pass as "" == "")."""
    result = pipeline.complete(
        CompletionRequest(text=PROMPT + SUFFIX, start=len(PROMPT), end=len(PROMPT), language=LANGUAGE)
    )
    assert result.fills and result.fills[0].text, f"the tiny model showed nothing: {result}"
    return result.fills[0].text


def gap_request(**overrides) -> InfillRequest:
    # What the pipeline builds for this cursor: text before it on its line, so one line only.
    return InfillRequest(
        **{
            "prefix": PROMPT,
            "suffix": SUFFIX,
            "single_line": True,
            "max_middle_tokens": 64,
            "language": LANGUAGE,
            **overrides,
        }
    )


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed again: nothing listens there


def timed(backend: RemoteBackend, request: InfillRequest, control: FillControl = UNSTEERED):
    t0 = time.monotonic()
    result = backend.infill(request, control)
    return result, time.monotonic() - t0


@pytest.fixture(scope="module")
def bound_s() -> float:
    """How long a failure may take to come back: a multiple of what an answered request takes here, now (the
    slowest of three, each with a new backend as in the tests), so a slow or loaded machine gets what it needs;
    a failure that waits out its deadline or timeout (`far(bound_s)`, `hang`) takes far longer."""
    server = ScriptedServer(lambda s, m, p, b: (200, completion("x")))
    try:
        answered_s = max(timed(RemoteBackend(server.url, model="m"), gap_request())[1] for _ in range(3))
    finally:
        server.close()
    return 0.5 + 20 * answered_s


def far(bound_s: float) -> float:
    """A deadline, in seconds from now, that a failure reaching it could not pass for coming back in time."""
    return max(5.0, 4 * bound_s)


# -- against the gateway over the real engine --------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_remote_over_gateway_returns_what_the_pipeline_shows(gateway, expected, tiny_engine, suffix):
    backend = RemoteBackend(gateway.url + suffix, token=TOKEN)
    try:
        result = backend.infill(gap_request(version=7), FillControl(deadline=deadline_in(30)))
        assert result.outcome in ("ok", "empty"), result.error
        assert result.middle == expected
        assert result.version == 7 and result.steps > 0 and result.prompt_tokens > 0
        assert result.timings.total_ms > 0 and result.versions["remote"]["model"] == tiny_engine.info.model
        info = backend.info
        assert info.kind == "remote" and info.model == tiny_engine.info.model and result.backend == info.name
    finally:
        backend.close()


def test_multi_line_gap_over_gateway_matches_the_pipeline(gateway, pipeline):
    prompt, suffix = "def add(a, b):\n", "\n\nprint(add(1, 2))\n"
    direct = pipeline.complete(
        CompletionRequest(text=prompt + suffix, start=len(prompt), end=len(prompt), mode="gap", language=LANGUAGE)
    )
    backend = RemoteBackend(gateway.url, token=TOKEN)
    result = backend.infill(
        InfillRequest(prefix=prompt, suffix=suffix, max_middle_tokens=direct.max_middle_tokens, language=LANGUAGE)
    )
    assert result.outcome in ("ok", "empty"), result.error
    assert result.middle == (direct.fills[0].text if direct.fills else "")


def test_open_backend_with_an_endpoint_gives_a_remote_backend(gateway, expected):
    backend = open_backend(BackendSpec(endpoint=gateway.url + "/v1", endpoint_token=TOKEN))
    try:
        assert isinstance(backend, RemoteBackend)
        assert backend.infill(gap_request()).middle == expected
    finally:
        backend.close()


def test_wrong_token_is_an_error_result(gateway, bound_s):
    backend = RemoteBackend(gateway.url, token="not-the-token")
    result, elapsed = timed(backend, gap_request(), FillControl(deadline=deadline_in(far(bound_s))))
    assert result.outcome == "error" and "HTTP 401" in result.error and "invalid bearer token" in result.error
    assert result.middles == () and elapsed < bound_s


def test_gateway_as_the_fallback_endpoint_of_another_pipeline(gateway, expected):
    """Primary: an endpoint that is down (a real failure); fallback: the gateway. The editor gets the gateway's
    text, labelled as coming from the fallback."""
    fallback = RemoteBackend(gateway.url, token=TOKEN)
    chained = Pipeline(RemoteBackend(dead_url()), fallback=fallback)
    outcome = chained.complete(
        CompletionRequest(text=PROMPT + SUFFIX, start=len(PROMPT), end=len(PROMPT), language=LANGUAGE),
        FillControl(deadline=deadline_in(30)),
    )
    assert outcome.route == "fallback", outcome
    assert [f.text for f in outcome.fills] == [expected]
    assert outcome.result.backend == fallback.info.name


def test_a_gateway_whose_own_engine_is_down_passes_the_failure_on(bound_s, gateway_running):
    """Gateway → pipeline → RemoteBackend to a dead port: the gateway answers 500 with the backend's message, and a
    RemoteBackend in front of it reports both."""
    with gateway_running(Pipeline(RemoteBackend(dead_url(), model="m"))) as server:
        result, elapsed = timed(
            RemoteBackend(server.url), gap_request(), FillControl(deadline=deadline_in(far(bound_s)))
        )
        assert result.outcome == "error" and "HTTP 500" in result.error and "cannot connect" in result.error
        assert elapsed < bound_s


# -- request shape (a recording server) --------------------------------------------------------------------------


def test_request_fields_model_discovery_and_gaps_left_to_right(scripted):
    def reply(server, method, path, body):
        if path == "/v1/models":
            return 200, models("team-model", "other")
        return 200, completion(f"<{len(server.requests)}>\nsecond line")

    server = scripted(reply)
    backend = RemoteBackend(server.url + "/v1", token=TOKEN)
    request = InfillRequest(
        prefix="A", between=("B",), suffix="C", single_line=True, max_middle_tokens=12, language="python"
    )
    drafts = []
    result = backend.infill(request, FillControl(deadline=deadline_in(5), on_draft=drafts.append))
    assert result.outcome == "ok" and result.middles == ("<2>", "<3>")  # cut at the line end despite the server
    assert [(m, p) for m, p, _, _ in server.requests] == [
        ("GET", "/v1/models"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/completions"),
    ]
    first, second = server.requests[1][3], server.requests[2][3]
    assert (first["prompt"], first["suffix"]) == ("A", "BC")
    assert (second["prompt"], second["suffix"]) == ("A<2>B", "C")  # the second gap sees the first middle
    assert first["model"] == "team-model" and first["max_tokens"] == 12 and first["temperature"] == 0
    assert first["stop"] == ["\n"] and first["n"] == 1 and first["stream"] is False
    assert first["language"] == "python" and 0 < first["infill_budget_ms"] <= 5000 and first["mode"] == "inline"
    assert server.requests[1][2]["Authorization"] == f"Bearer {TOKEN}"
    assert [d.middles for d in drafts] == [("<2>", ""), ("<2>", "<3>")]
    backend.infill(InfillRequest(prefix="x"))
    assert sum(1 for _, p, _, _ in server.requests if p == "/v1/models") == 1  # discovered once
    assert backend.info.model == "team-model" and backend.info.kind == "remote"


def test_the_document_travels_as_a_hash_so_the_gateway_can_supersede(scripted):
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    backend = RemoteBackend(server.url, model="m")
    for document in ("file:///home/me/secret/plan.py", "file:///home/me/secret/plan.py", None):
        backend.infill(InfillRequest(prefix="a", document_id=document))
    keys = [r[3].get("infill_document") for r in server.requests]
    assert keys[0] == keys[1] and len(keys[0]) == 24 and keys[2] is None
    assert "secret" not in json.dumps([r[3] for r in server.requests])


def test_no_models_route_and_no_token_sends_neither(scripted):
    server = scripted(
        lambda s, m, p, b: (404, b'{"error": "not found"}') if p == "/v1/models" else (200, completion("ok"))
    )
    result = RemoteBackend(server.url).infill(InfillRequest(prefix="x", suffix="y"))
    assert result.outcome == "ok" and result.middle == "ok"
    body, headers = server.requests[-1][3], server.requests[-1][2]
    assert "model" not in body and "stop" not in body and "Authorization" not in headers
    assert body["mode"] == "gap"  # not single-line: the gateway may fill several lines


def test_configured_model_skips_discovery(scripted):
    server = scripted(lambda s, m, p, b: (200, completion("")))
    result = RemoteBackend(server.url, model="given").infill(InfillRequest(prefix="x"))
    assert result.outcome == "empty" and result.middles == ("",)
    assert [p for _, p, _, _ in server.requests] == ["/v1/completions"]
    assert server.requests[0][3]["model"] == "given"


def test_fim_template_for_servers_that_refuse_suffix(scripted):
    """Stock vLLM answers 400 "suffix is not currently supported": the error says what to do, and a FIM template
    sends the model's own infill prompt instead."""

    def reply(server, method, path, body):
        if "suffix" in body:
            return 400, b'{"error": {"message": "suffix is not currently supported", "type": "BadRequestError"}}'
        return 200, completion("mid")

    server = scripted(reply)
    refused = RemoteBackend(server.url, model="m").infill(InfillRequest(prefix="f({x", suffix="})"))
    assert refused.outcome == "error" and "suffix is not currently supported" in refused.error
    assert "infill-ls serve" in refused.error and "fim_template" in refused.error
    templated = RemoteBackend(server.url, model="m", fim_template="<PRE>{prefix}<SUF>{suffix}<MID>")
    result = templated.infill(InfillRequest(prefix="f({x", suffix="}) # {prefix}"))
    assert result.outcome == "ok" and result.middle == "mid"
    assert server.requests[-1][3]["prompt"] == "<PRE>f({x<SUF>}) # {prefix}<MID>"
    with pytest.raises(InfillError, match="fim_template"):
        RemoteBackend(server.url, fim_template="{prefix} only")


def test_token_from_the_environment(scripted, monkeypatch):
    monkeypatch.setenv("INFILL_ENDPOINT_TOKEN", "from-env")
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    RemoteBackend(server.url, model="m").infill(InfillRequest(prefix="a"))
    RemoteBackend(server.url, model="m", token="explicit").infill(InfillRequest(prefix="a"))
    assert [r[2]["Authorization"] for r in server.requests] == ["Bearer from-env", "Bearer explicit"]


def test_a_proxy_in_the_environment_never_sees_a_local_endpoints_code(scripted, monkeypatch):
    proxy = scripted(lambda s, m, p, b: (502, b"{}"))
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = RemoteBackend(server.url, model="m", token=TOKEN).infill(InfillRequest(prefix="API_KEY = "))
    assert result.outcome == "ok" and result.middle == "x"
    assert proxy.requests == [] and server.requests[0][3]["prompt"] == "API_KEY = "


# -- failures, in bounded time -----------------------------------------------------------------------------------


def test_dead_endpoint_is_an_error_result(caplog, bound_s):
    backend = RemoteBackend(dead_url(), model="m")
    with caplog.at_level("WARNING", logger="infill.backends.remote"):
        result, elapsed = timed(backend, gap_request(version=3), FillControl(deadline=deadline_in(far(bound_s))))
    assert result.outcome == "error" and "cannot connect" in result.error and result.version == 3
    assert elapsed < bound_s
    assert any("cannot connect" in r.getMessage() for r in caplog.records)


def hang(server, method, path, body):
    server.release.wait(120)  # until the test ends (far past any bound: a client that waits is seen to)
    return 200, completion("too late")


def test_slow_endpoint_is_cut_at_the_deadline(scripted, bound_s):
    server = scripted(hang)
    result, elapsed = timed(RemoteBackend(server.url, model="m"), gap_request(), FillControl(deadline=deadline_in(0.3)))
    assert result.outcome == "error" and "no answer" in result.error
    assert 0.25 <= elapsed < 0.3 + bound_s


def test_slow_endpoint_without_deadline_is_cut_at_timeout(scripted, bound_s):
    server = scripted(hang)
    result, elapsed = timed(RemoteBackend(server.url, model="m", timeout_s=0.3), gap_request())
    assert result.outcome == "error" and elapsed < 0.3 + bound_s


def test_slow_model_discovery_is_bounded_too(scripted, bound_s):
    server = scripted(hang)
    result, elapsed = timed(RemoteBackend(server.url), gap_request(), FillControl(deadline=deadline_in(0.3)))
    assert result.outcome == "error" and "/v1/models" in result.error and elapsed < 0.3 + bound_s


def test_passed_deadline_sends_nothing(scripted):
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    result = RemoteBackend(server.url, model="m").infill(gap_request(), FillControl(deadline=time.monotonic() - 1))
    assert result.outcome == "error" and "deadline passed" in result.error and server.requests == []


@pytest.mark.parametrize(
    "status, payload, fragment",
    [
        (500, b'{"error": {"message": "CUDA out of memory", "type": "server_error"}}', "HTTP 500"),
        (200, b"<html>this is not json{", "invalid JSON"),
        (200, b'["a list"]', "expected an object"),
        (200, b'{"choices": []}', "no choices"),
        (200, b'{"choices": [{"text": 5}]}', "no text"),
        (503, b"model loading", "HTTP 503"),
    ],
)
def test_bad_answers_are_error_results(scripted, bound_s, status, payload, fragment):
    server = scripted(lambda s, m, p, b: (status, payload))
    result, elapsed = timed(
        RemoteBackend(server.url, model="m"), gap_request(), FillControl(deadline=deadline_in(far(bound_s)))
    )
    assert result.outcome == "error" and fragment in result.error and result.middles == ()
    assert elapsed < bound_s
    if status == 500:
        assert "CUDA out of memory" in result.error  # the server's own message is passed on


def test_cancel_while_waiting_returns_at_once(scripted, bound_s):
    arrived = threading.Event()
    server = scripted(lambda *args: arrived.set() or hang(*args))
    cancel, cancelled_at = CancelToken(), []

    def cancel_once_held() -> None:  # cancelled while the server holds the request, however long it took to come
        if arrived.wait(far(bound_s)):
            cancelled_at.append(time.monotonic())
            cancel.cancel("superseded")

    threading.Thread(target=cancel_once_held, daemon=True).start()
    result, _ = timed(
        RemoteBackend(server.url, model="m"),
        gap_request(),
        FillControl(cancel=cancel, deadline=deadline_in(2 * far(bound_s))),
    )
    returned_at = time.monotonic()
    assert result.outcome == "cancelled" and result.error == "superseded"
    assert returned_at - cancelled_at[0] < bound_s and len(server.requests) == 1


def test_cancelled_before_sending_sends_nothing(scripted):
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    cancel = CancelToken()
    cancel.cancel()
    result = RemoteBackend(server.url, model="m").infill(gap_request(), FillControl(cancel=cancel))
    assert result.outcome == "cancelled" and server.requests == []


def test_closed_backend_is_an_error_result(scripted):
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    backend = RemoteBackend(server.url, model="m")
    backend.close()
    result = backend.infill(gap_request())
    assert result.outcome == "error" and "closed" in result.error and server.requests == []


@pytest.mark.parametrize("endpoint", ["", "localhost:8000", "ftp://host/v1", "http://"])
def test_bad_endpoint_is_refused_up_front(endpoint):
    with pytest.raises(InfillError, match="endpoint"):
        RemoteBackend(endpoint)


def http_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("infill-remote-http")}


def test_exchanges_reuse_the_backends_http_threads(scripted):
    server = scripted(lambda s, m, p, b: (200, completion("x")))
    backend = RemoteBackend(server.url, model="m")
    before = http_threads()
    for _ in range(20):
        assert backend.infill(gap_request(), FillControl(deadline=deadline_in(5))).outcome == "ok"
    started = http_threads() - before
    # Alive after the calls and fewer than them: threads of the backend's pool, reused, not one per exchange.
    assert 1 <= len(started) <= HTTP_THREADS < 20
    backend.close()


def test_closing_frees_a_thread_blocked_on_an_abandoned_exchange(scripted, bound_s):
    arrived = threading.Event()
    server = scripted(lambda *args: arrived.set() or hang(*args))
    backend = RemoteBackend(server.url, model="m", timeout_s=10 * far(bound_s))
    cancel, before = CancelToken(), http_threads()
    threading.Thread(target=lambda: arrived.wait(far(bound_s)) and cancel.cancel("superseded"), daemon=True).start()
    assert backend.infill(gap_request(), FillControl(cancel=cancel)).outcome == "cancelled"
    blocked = http_threads() - before
    assert blocked and any(t.is_alive() for t in blocked)  # the abandoned exchange still waits on its socket
    backend.close()
    for thread in blocked:
        thread.join(far(bound_s))
    assert not any(t.is_alive() for t in blocked)  # woken by the hang-up, not left until the timeout


def test_a_server_that_ignores_stop_gets_the_one_line_rule(scripted):
    # `stop` asks for one line; a server that writes on anyway is cut by languages.one_line_fill (it cut at the
    # first newline, leaving a wrapped call open where every other route keeps it).
    def reply(server, method, path, body):
        if path == "/v1/models":
            return 200, models("m")
        return 200, completion("f(a,\n    b)\nx = 1")

    backend = RemoteBackend(scripted(reply).url + "/v1")
    code = backend.infill(InfillRequest(prefix="y = ", single_line=True, language="python"))
    prose = backend.infill(InfillRequest(prefix="See ", single_line=True, language="markdown"))
    assert code.middles == ("f(a,\n    b)",) and prose.middles == ("f(a,",)
