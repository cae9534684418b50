"""The server serves as soon as its primary is up (issue 51): the fallback behind a DiffusionGemma checkpoint loads
afterwards on the loading thread, and is swapped in once it is up. Beside a CPU-heavy process the offline default
took over 240 s to load while the checkpoint was ready in 66 s, and clients gave up on a server that said "not
ready" all that time.

The primary is the tiny checkpoint made to stutter (every fill it writes is rejected for repetition); the fallback
is a real HTTP endpoint written here, and the server is the real one over stdio, launched by
tests/server/gated_fallback_server.py, which holds that fallback's opening at a gate until the test opens it."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest
import pytest_asyncio
from lsp_helpers import open_doc, start, status, wait_status
from lsprotocol import types

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.slow]

TEXT = "def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return \n"
POSITION = types.Position(line=5, character=11)
ENDPOINT_FILL = "a * b"  # what the fallback endpoint writes for any gap
LAUNCHER = [sys.executable, str(Path(__file__).with_name("gated_fallback_server.py"))]


class FallbackEndpoint:
    """An OpenAI-compatible endpoint on 127.0.0.1 that writes ENDPOINT_FILL for every completion it is asked."""

    def __init__(self) -> None:
        self.completions = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._send({"object": "list", "data": [{"id": "coder", "object": "model"}]})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.completions += 1
                choice = {"text": ENDPOINT_FILL, "index": 0, "finish_reason": "stop", "logprobs": None}
                self._send({"id": "cmpl", "object": "text_completion", "model": "coder", "choices": [choice]})

            def _send(self, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def endpoint() -> Iterator[FallbackEndpoint]:
    served = FallbackEndpoint()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest_asyncio.fixture
async def server(stutter_checkpoint, endpoint, tmp_path):
    """The real server on the stutter checkpoint with `endpoint` as its fallback, held at the gate in `tmp_path`."""
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {"INFILL_TEST_GATE_DIR": str(gate), "INFILL_TEST_GATED_ENDPOINT": endpoint.url}
    client, _ = await start(
        ["--model", str(stutter_checkpoint)],
        init_options={"fallbackEndpoint": endpoint.url, "fallbackModel": "coder"},
        launcher=LAUNCHER,
        env=env,
    )
    client.gate = gate
    client.feature("infill/statusChanged")(lambda params: None)
    yield client
    (gate / "open").touch()  # (a server still waiting there must be able to end)
    await client.shutdown_session()
    await client.stop()


async def _until_file(path: Path, timeout: float = 240.0) -> bool:
    """Whether `path` appeared (a wait, not a timed check: the server writes it when it gets there)."""
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        await asyncio.sleep(0.05)
    return path.exists()


async def _fill(client, uri: str) -> str | None:
    reply = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=POSITION,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    return reply.items[0].insert_text if reply is not None and reply.items else None


async def _ready_while_the_fallback_loads(client) -> dict:
    """The status once the fallback's opening waits at the gate: the primary serves already."""
    assert await _until_file(client.gate / "waiting"), "the fallback's opening never began"
    current = await status(client)
    assert current["state"] == "ready" and current["ready"] is True, current  # not waiting for the fallback
    assert current["kind"] == "diffusion" and current["fallbackState"] == "loading", current
    assert current["fallback"] is None and current["fallbackError"] is None, current
    return current


async def test_the_primary_serves_before_its_fallback_is_up_then_the_fallback_answers(server, endpoint):
    await _ready_while_the_fallback_loads(server)
    uri = "file:///loading/multiply.py"
    open_doc(server, uri, TEXT)
    assert await _fill(server, uri) is None  # answered now: the stutter, rejected, and nothing behind it yet
    assert endpoint.completions == 0
    alone = (await status(server))["pipeline"]

    (server.gate / "open").touch()
    both = await wait_status(server, lambda s: s["fallbackState"] != "loading", timeout=240)
    assert both["fallbackState"] == "ready" and both["state"] == "ready", both
    assert both["fallback"]["kind"] == "remote" and both["kind"] == "diffusion", both

    filled = await _fill(server, uri)  # the same fill the watchdog rejects: the fallback answers it now
    assert filled == ENDPOINT_FILL and endpoint.completions >= 1
    compile(TEXT.replace("return \n", f"return {filled}\n"), "multiply.py", "exec")
    routes = (await status(server))["pipeline"]["routes"]  # the first pipeline's counts continued
    assert routes.get("none", 0) == alone["routes"].get("none", 0) >= 1
    assert routes.get("fallback", 0) >= 1


async def test_a_reload_while_the_fallback_loads_closes_it_and_never_swaps_it_in(server, endpoint):
    await _ready_while_the_fallback_loads(server)
    server.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {"fallback": False}})
    )
    reloaded = await wait_status(server, lambda s: s["state"] == "ready" and s["fallbackState"] is None, timeout=240)
    assert reloaded["fallbackState"] is None and reloaded["kind"] == "diffusion", reloaded

    (server.gate / "open").touch()  # the old load's fallback now opens: superseded, it must be closed
    assert await _until_file(server.gate / "closed"), "the superseded fallback was never closed"
    after = await status(server)
    assert after["state"] == "ready" and after["fallback"] is None and after["fallbackState"] is None, after
    uri = "file:///loading/reloaded.py"
    open_doc(server, uri, TEXT)
    assert await _fill(server, uri) is None  # the primary alone, rejected: no late swap put the fallback back
    assert endpoint.completions == 0
