"""The OpenAI-compatible gateway (`infill-ls serve`): a real HTTP server on 127.0.0.1, port 0, over the real
pipeline and the real tiny DiffusionGemma engine."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from recording import Recording

from infill.pipeline import CompletionRequest, Pipeline

PROMPT = "def add(a, b):\n    return"
SUFFIX = "\n\n\nprint(add(1, 2))\n"
# Named as plain text, the tiny random model's text comes back to compare (the gateway would detect Python here, and
# the watchdog rejects its text as broken Python: every comparison would be "" == ""). Detection itself is tested in
# test_gateway_language.py; test_language_reaches_the_pipeline names Python.
LANGUAGE = "plaintext"
TOKEN = "s3cret-team-token"


@pytest.fixture(scope="module")
def gateway(pipeline, gateway_running):
    with gateway_running(pipeline, max_body_bytes=64 * 1024) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway):
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def expected(pipeline) -> str:
    """What an editor would be shown for the same gap, straight from the pipeline: text, so that every comparison
    with it compares something (an empty fill would make them pass as "" == "")."""
    result = pipeline.complete(
        CompletionRequest(text=PROMPT + SUFFIX, start=len(PROMPT), end=len(PROMPT), language=LANGUAGE)
    )
    assert len(result.fills[0].text if result.fills else "") >= 2, f"the tiny model showed too little: {result}"
    return result.fills[0].text


def complete(client, **fields) -> httpx.Response:
    return client.post(
        "/v1/completions", json={"prompt": PROMPT, "suffix": SUFFIX, "max_tokens": 64, "language": LANGUAGE, **fields}
    )


def assert_error(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert fragment.lower() in error["message"].lower(), error
    assert error["code"] == status


def test_binds_loopback_and_reports_url(gateway):
    assert gateway.server_address[0] == "127.0.0.1"
    assert gateway.url == f"http://127.0.0.1:{gateway.server_port}"


def test_models_lists_the_served_model(client, tiny_engine):
    response = client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [tiny_engine.info.model]
    assert body["data"][0]["object"] == "model"


def test_completion_is_well_formed_and_matches_the_pipeline(client, expected, tiny_engine):
    response = complete(client)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    assert isinstance(body["created"], int) and abs(body["created"] - time.time()) < 60
    assert body["model"] == tiny_engine.info.model
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None and choice["finish_reason"] in ("stop", "length")
    assert choice["text"] == expected
    assert "\n" not in choice["text"]  # the cursor follows text on its line: the pipeline completes that line only
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    extension = body["infill"]
    assert extension["outcome"] in ("ok", "cut_short", "empty") and extension["route"] in ("primary", "none")
    assert extension["backend"] == tiny_engine.info.name and extension["steps"] > 0
    assert extension["latency_ms"] > 0 and extension["replace"][0] == len(PROMPT)


def test_stop_sequence_cuts_the_text(client, expected):
    full = complete(client).json()["choices"][0]["text"]
    assert full == expected  # (two characters at least: `expected` says so)
    stop = full[1]
    cut = complete(client, stop=[stop]).json()["choices"][0]
    assert cut["text"] == full[: full.index(stop)] and cut["finish_reason"] == "stop"


def test_prompt_as_a_one_element_list_and_explicit_defaults(client, expected):
    body = {
        "prompt": [PROMPT],
        "suffix": SUFFIX,
        "n": 1,
        "temperature": 0,
        "model": "anything",
        "stream": False,
        "language": LANGUAGE,
    }
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200 and response.json()["choices"][0]["text"] == expected


def test_language_reaches_the_pipeline(client, pipeline):
    """With a language the pipeline parses the code and checks the candidate: the gateway shows what it shows,
    including a rejection (the tiny model's random text is rarely valid Python)."""
    direct = pipeline.complete(
        CompletionRequest(text=PROMPT + SUFFIX, start=len(PROMPT), end=len(PROMPT), language="python")
    )
    body = complete(client, language="python").json()
    assert body["choices"][0]["text"] == (direct.fills[0].text if direct.fills else "")
    assert body["infill"]["route"] == direct.route
    assert body["infill"]["rejections"] == [list(r) for r in direct.rejections]


def test_stream_sends_sse_chunks_ending_with_done(client):
    expected = complete(client).json()["choices"][0]["text"]
    response = complete(client, stream=True)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: ") :] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) >= 2
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["object"] == "text_completion" for c in chunks)


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"{not json", "invalid JSON"),
        (b"\xff\xfe garbage", "invalid JSON"),
        (b"[1, 2]", "JSON object"),
        (json.dumps({"suffix": "x"}).encode(), "prompt must be a string"),
        (json.dumps({"prompt": 5}).encode(), "prompt must be a string"),
        (json.dumps({"prompt": ["a", "b"]}).encode(), "prompt must be a string"),
        (json.dumps({"prompt": "x", "suffix": 3}).encode(), "suffix must be"),
        (json.dumps({"prompt": "x", "max_tokens": 0}).encode(), "max_tokens must be between"),
        (json.dumps({"prompt": "x", "max_tokens": 10**9}).encode(), "max_tokens must be between"),
        (json.dumps({"prompt": "x", "max_tokens": "5"}).encode(), "max_tokens must be an integer"),
        (json.dumps({"prompt": "x", "max_tokens": True}).encode(), "max_tokens must be an integer"),
        (json.dumps({"prompt": "x", "n": 3}).encode(), "n must be 1"),
        (json.dumps({"prompt": "x", "temperature": -1}).encode(), "temperature must be between"),
        (json.dumps({"prompt": "x", "stop": [1]}).encode(), "stop must be"),
        (json.dumps({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}).encode(), "stop must be"),
        (json.dumps({"prompt": "x", "stream": "yes"}).encode(), "stream must be"),
        (json.dumps({"prompt": "x", "echo": True}).encode(), "echo is not supported"),
        (json.dumps({"prompt": "x", "logprobs": 5}).encode(), "logprobs are not supported"),
        (json.dumps({"prompt": "x", "mode": "gaps"}).encode(), "mode must be"),
    ],
)
def test_bad_completion_requests_get_400_and_the_server_keeps_working(client, expected, body, fragment):
    response = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert_error(response, 400, fragment)
    good = client.post("/v1/completions", json={"prompt": PROMPT, "suffix": SUFFIX, "language": LANGUAGE})
    assert good.status_code == 200 and good.json()["choices"][0]["text"] == expected


def test_oversized_body_gets_413_and_the_server_keeps_working(client):
    response = client.post("/v1/completions", json={"prompt": "x" * 100_000})
    assert_error(response, 413, "limit is 65536")
    assert complete(client).status_code == 200


def test_body_without_length_gets_411(gateway, client):
    with socket.create_connection(("127.0.0.1", gateway.server_port), timeout=5) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")  # httpx always sends a length
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        assert reply.status == 411 and "Content-Length is required" in reply.read().decode()
    assert complete(client).status_code == 200


@pytest.mark.parametrize(
    "method, path, status, fragment",
    [
        ("GET", "/v2/models", 404, "no route /v2/models"),
        ("POST", "/v1/chat/completions", 404, "no route"),
        ("GET", "/v1/completions", 405, "use POST"),
        ("DELETE", "/v1/models", 405, "use GET"),
        ("PUT", "/v1/completions", 405, "use POST"),
    ],
)
def test_unknown_paths_and_wrong_methods(client, method, path, status, fragment):
    response = client.request(method, path, json={"prompt": "x"} if method != "GET" else None)
    assert_error(response, status, fragment)
    if status == 405:
        assert response.headers["allow"] in ("GET", "POST")
    assert client.get("/v1/models").status_code == 200


def test_token_is_required_when_configured(pipeline, expected, gateway_running):
    with gateway_running(pipeline, token=TOKEN) as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            missing = http.get("/v1/models")
            assert_error(missing, 401, "missing bearer token")
            assert missing.headers["www-authenticate"] == "Bearer"
            assert_error(
                http.post("/v1/completions", json={"prompt": PROMPT}, headers={"Authorization": "Bearer wrong"}),
                401,
                "invalid bearer token",
            )
            assert_error(http.get("/v1/models", headers={"Authorization": TOKEN}), 401, "missing bearer token")
            authorised = {"Authorization": f"Bearer {TOKEN}"}
            assert http.get("/v1/models", headers=authorised).status_code == 200
            good = http.post(
                "/v1/completions", json={"prompt": PROMPT, "suffix": SUFFIX, "language": LANGUAGE}, headers=authorised
            )
            assert good.status_code == 200 and good.json()["choices"][0]["text"] == expected
            assert http.get("/health").json()["status"] == "ready"  # health needs no token: it reveals no text


def test_requests_before_the_model_is_ready_get_503(pipeline, tiny_engine, gateway_running):
    with gateway_running(None) as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert_error(http.get("/v1/models"), 503, "still loading")
            loading = http.post("/v1/completions", json={"prompt": PROMPT})
            assert_error(loading, 503, "still loading")
            assert loading.headers["retry-after"] == "5"
            assert http.get("/health").json() == {"status": "loading", "error": None}
            server.set_error("OSError: no such checkpoint")
            assert_error(http.get("/v1/models"), 503, "failed to load: OSError: no such checkpoint")
            assert http.get("/health").json()["status"] == "error"
            server.set_pipeline(pipeline)
            assert http.get("/v1/models").json()["data"][0]["id"] == tiny_engine.info.model
            assert http.post("/v1/completions", json={"prompt": PROMPT}).status_code == 200


def test_concurrent_requests_are_all_answered(client, expected):
    texts: list = []

    def ask() -> None:
        texts.append(complete(client).json()["choices"][0]["text"])

    workers = [threading.Thread(target=ask) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert texts == [expected] * 3


def test_cli_serve_loads_the_model_in_the_background(tiny_checkpoint):
    """`infill-ls serve --port 0 --model DIR` as a user runs it: logs its URL, answers once loaded."""
    env = dict(os.environ, INFILL_GATEWAY_TOKEN=TOKEN)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--port",
            "0",
            "--model",
            str(tiny_checkpoint),
            "--device",
            "cpu",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in process.stderr:
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if match:
                url = match.group(1)
                break
        assert url, "the gateway never logged its URL"
        threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe drained
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, timeout=60) as http:
            deadline = time.monotonic() + 120  # generous: the machine is shared; normally ready in ~3 s
            while http.get("/health").status_code != 200:
                assert time.monotonic() < deadline, "model never became ready"
                time.sleep(0.1)
            assert http.get("/v1/models").status_code == 401
            assert http.get("/v1/models", headers=headers).json()["data"][0]["id"] == str(tiny_checkpoint)
            response = http.post("/v1/completions", json={"prompt": PROMPT, "suffix": SUFFIX}, headers=headers)
            assert response.status_code == 200 and response.json()["infill"]["steps"] > 0
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--port", "99999"], "port must be 0-65535"),
        (["--max-body-bytes", "5"], "max_body_bytes must be"),
        (["--request-timeout-s", "0"], "request_timeout_s must be"),
    ],
)
def test_cli_refuses_bad_settings_with_a_message(argv, fragment, capsys):
    from infill.gateway.server import main

    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_cli_reports_a_port_in_use(gateway, capsys):
    from infill.gateway.server import main

    assert main(["--port", str(gateway.server_port)]) == 2
    assert "in use" in capsys.readouterr().err.lower()


def test_a_newer_request_for_the_same_document_stops_the_older_one(tiny_engine, gateway_running):
    """`infill_document`: a newer request for the same document stops the one still running, also for a client
    that keeps the older connection open (otherwise stale requests would hold the model until their own deadline)."""
    from infill.engine.config import EngineConfig
    from infill.engine.denoise import denoise
    from infill.engine.diffusion import DiffusionEngine

    denoising = threading.Event()

    def signalling_denoise(*args, **kwargs):
        denoising.set()
        return denoise(*args, **kwargs)

    slow = DiffusionEngine(
        tiny_engine.loaded,
        EngineConfig(max_denoising_steps=256, confidence_threshold=1e-9),
        denoiser=signalling_denoise,
    )
    # No deadline to cut a run short on a slow machine: only the newer request may stop the older one.
    with gateway_running(Pipeline(slow), request_timeout_s=3600) as server:
        with httpx.Client(base_url=server.url, timeout=None) as http:
            body = {"prompt": "Dear team,\nthe plan", "suffix": "", "max_tokens": 8, "infill_document": "doc-1"}
            started = time.monotonic()  # what the older request's run takes alone on this machine, now
            alone = http.post("/v1/completions", json={**body, "infill_document": "doc-alone"})
            alone_s = time.monotonic() - started
            assert alone.json()["infill"]["outcome"] not in ("cancelled", "cut_short")

            denoising.clear()
            older = {}

            def send_older():
                older["r"] = http.post("/v1/completions", json=body)
                older["at"] = time.monotonic()

            first = threading.Thread(target=send_older, daemon=True)
            first.start()
            assert denoising.wait(alone_s * 20 + 60), "the older request never started denoising"
            started = time.monotonic()
            newer = http.post("/v1/completions", json={**body, "prompt": "Dear team,\nthe plans"})
            first.join(alone_s * 20 + 60)
            assert not first.is_alive(), "the older request never answered"
            assert older["r"].json()["infill"]["outcome"] == "cancelled"
            # Stopped within a step or so, not after its remaining run (about the whole run alone).
            stopped_s = older["at"] - started
            assert stopped_s < alone_s / 2, f"the older run went on {stopped_s:.2f} s (alone {alone_s:.2f} s)"
            # The newer one waited for the model only as long: latency_ms counts its queueing, pipeline_ms not.
            assert newer.status_code == 200 and newer.json()["infill"]["outcome"] != "cancelled"
            queued_s = (newer.json()["infill"]["latency_ms"] - newer.json()["infill"]["pipeline_ms"]) / 1000
            assert queued_s < alone_s / 2, f"the newer request queued {queued_s:.2f} s (alone {alone_s:.2f} s)"


def test_a_request_whose_client_hung_up_stops_and_frees_the_model(tiny_engine, gateway_running):
    """A generic FIM client (no `infill_document`) aborts the request of an older keystroke by closing its
    connection: the gateway stops that run within a step instead of computing an answer nobody reads, so the
    next request does not queue behind it. Judged by the abandoned run's own outcome (a wall-clock comparison
    with a whole run flaked on two busy cores)."""
    from infill.engine.config import EngineConfig
    from infill.engine.diffusion import DiffusionEngine

    slow = Recording(
        DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=256, confidence_threshold=1e-9))
    )
    with gateway_running(Pipeline(slow)) as server:
        body = json.dumps({"prompt": "Dear team,\nthe plan", "suffix": "", "max_tokens": 8}).encode()
        newer = {"prompt": "Dear team,\nthe plans", "suffix": "", "max_tokens": 8}
        with httpx.Client(base_url=server.url, timeout=120) as http:
            started = time.monotonic()
            assert http.post("/v1/completions", json=newer).status_code == 200
            alone_s = time.monotonic() - started  # what one slow run takes here
            assert slow.results[-1].outcome == "ok"
            slow.started.clear()
            with socket.create_connection((server.server_name, server.server_port)) as sock:
                sock.sendall(
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                assert slow.started.wait(alone_s * 10 + 30) is True  # the run is on the model
            # the client hung up; a newer request comes, and the abandoned run was cancelled, not finished
            assert http.post("/v1/completions", json=newer).status_code == 200
            assert [r.outcome for r in slow.results[1:]] == ["cancelled", "ok"], slow.results[1:]
