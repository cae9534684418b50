"""Lifecycle and JSON-RPC over the real server (raw stdio, tiny DiffusionGemma): `exit` ends the process promptly
with LSP's code and writes nothing after; requests after `shutdown` get InvalidRequest; requests with invalid
params get -32602; an internal error carries a message, never a traceback or a machine path."""

from __future__ import annotations

import io
import json
import sys
import time

import pytest
from fuzz.rpc import RawServer

TEXT = "The area of a circle is\n    given by pi * r * r\n\nwhich grows with the radius.\n"
WHOLE = {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 19}}


def _server(checkpoint, tmp_path, *args: str) -> RawServer:
    # The fallback is off: these are the protocol's rules, met by the tiny engine's requests alone (the offline
    # default behind it would only add its load to each start).
    server = RawServer(
        ["--model", str(checkpoint), *args],
        configuration={"codeActionBudgetMs": 60000, "invokedBudgetMs": 60000, "fallback": False},
        stderr_path=str(tmp_path / "stderr.log"),
    )
    assert "result" in server.initialize()
    assert server.wait_ready(240)["state"] == "ready"
    return server


def _open(server: RawServer, uri: str, text: str = TEXT, version: int = 1) -> None:
    server.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": uri, "languageId": "plaintext", "version": version, "text": text}},
    )


def test_exit_without_shutdown_while_working_ends_at_once_with_code_1(tiny_checkpoint, tmp_path):
    server = _server(tiny_checkpoint, tmp_path, "--denoising-steps", "1024")  # fills that run for a while
    try:
        pending = []
        for n in range(4):
            _open(server, f"file:///work{n}.txt")
            pending.append(
                server.request(
                    "workspace/executeCommand",
                    {"command": "infill.fillGap", "arguments": [f"file:///work{n}.txt", WHOLE]},
                )
            )
            pending.append(
                server.request(
                    "textDocument/inlineCompletion",
                    {
                        "textDocument": {"uri": f"file:///work{n}.txt"},
                        "position": {"line": 3, "character": 5},
                        "context": {"triggerKind": 1},
                    },
                )
            )
        time.sleep(1.0)
        assert server.status()["modelBusy"] or server.status()["running"], "no work was running"
        started = time.monotonic()
        server.notify("exit")
        code = server.exit_code(timeout=10)
        took = time.monotonic() - started
    finally:
        server.kill()
    stderr = (tmp_path / "stderr.log").read_text()
    assert code == 1, (code, stderr[-3000:])  # LSP: exit without shutdown is code 1
    assert took < 10
    assert stderr.count("Traceback") == 0, stderr[-3000:]  # no failed writes to the closed stream, reported again
    assert server.unparsable == 0


def test_shutdown_then_requests_get_invalid_request_then_exit_0(tiny_checkpoint, tmp_path):
    server = _server(tiny_checkpoint, tmp_path)
    try:
        reply = server.call("shutdown", None, 30)
        assert reply is not None and reply.get("result") is None and "error" not in reply
        after = server.call("workspace/executeCommand", {"command": "infill.status"}, 10)
        assert after is not None, "a request after shutdown got no answer"
        assert after["error"]["code"] == -32600
        server.notify("exit")
        code = server.exit_code(timeout=10)
    finally:
        server.kill()
    assert code == 0


INVALID = [
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": -1, "character": 0},
            "context": {"triggerKind": 1},
        },
    ),
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": 2**31, "character": 0},
            "context": {"triggerKind": 1},
        },
    ),
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": "three", "character": 0},
            "context": {"triggerKind": 1},
        },
    ),
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": 0, "character": 0},
            "context": {"triggerKind": 7},
        },
    ),
    # numbers pygls 2.1.1 alone reads as integers: int(1.5) == 1, int("3") == 3
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": 1.5, "character": 0},
            "context": {"triggerKind": 1},
        },
    ),
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": "3", "character": 0},
            "context": {"triggerKind": 1},
        },
    ),
    (
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": "file:///a.txt"},
            "position": {"line": True, "character": 0},
            "context": {"triggerKind": 1},
        },
    ),
    ("codeAction/resolve", {"kind": "refactor.rewrite", "data": {}}),  # no title
    ("textDocument/hover", {}),
    ("textDocument/codeAction", {"textDocument": {"uri": "file:///a.txt"}}),
]


def test_invalid_params_get_32602_and_the_server_keeps_serving(edge_server):
    server = edge_server
    _open(server, "file:///lifecycle/a.txt")
    ids = [server.request(method, params) for method, params in INVALID]
    replies = [server.wait(msg_id, 15) for msg_id in ids]
    status = server.status()
    for (method, params), reply in zip(INVALID, replies):
        assert reply is not None, f"no answer to {method} {params}"
        assert reply["error"]["code"] == -32602, reply
        assert "data" not in reply["error"] and "Traceback" not in reply["error"]["message"]
    assert status["state"] == "ready"


def test_an_unknown_method_is_method_not_found_with_or_without_params(edge_server):
    """Without params, an unknown method was answered -32602 (pygls could not structure the generic request)."""
    server = edge_server
    bare, with_params = server.new_id(), server.new_id()
    server.send(f'{{"jsonrpc": "2.0", "id": {bare}, "method": "no/such/method"}}')
    server.send(f'{{"jsonrpc": "2.0", "id": {with_params}, "method": "no/such/method", "params": {{"a": 1}}}}')
    replies = [server.wait(bare, 15), server.wait(with_params, 15)]
    assert [r["error"]["code"] for r in replies] == [-32601, -32601], replies


@pytest.mark.parametrize("version", ["1.5", '"2"', "true"])
def test_a_did_change_whose_version_is_not_an_integer_is_ignored(edge_server, version):
    """Before, pygls applied a didChange with version 1.5 as version 1 and "2" as 2: the server's text changed
    under a version the client never had."""
    server = edge_server
    uri = f"file:///version-{json.loads(version)}.txt"  # a document of this case's own on the shared server

    def fill_gap_data() -> dict:
        listing = server.call(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": WHOLE, "context": {"diagnostics": []}},
            30,
        )
        assert listing is not None and "result" in listing, listing
        (data,) = [a["data"] for a in listing["result"] if a["data"]["infill"] == "gap"]
        return data

    _open(server, uri)
    before = fill_gap_data()
    server.notify(
        "textDocument/didChange",
        raw_params='{"textDocument": {"uri": "'
        + uri
        + '", "version": '
        + version
        + '}, "contentChanges": [{"range": {"start": {"line": 0, "character": 0}, '
        '"end": {"line": 0, "character": 3}}, "text": "Its"}]}',
    )
    after = fill_gap_data()
    assert server.status()["state"] == "ready"
    assert (after["version"], after["text"]) == (before["version"], before["text"]) == (1, before["text"])


def test_internal_error_replies_carry_a_message_only():
    """pygls 2 puts the traceback in error.data; the server sends the message alone, with no machine path."""
    from pygls.exceptions import JsonRpcInternalError

    from server.main import create_server
    from server.settings import Settings

    server = create_server(Settings())
    written = io.BytesIO()

    class Writer:
        def write(self, data: bytes) -> None:
            written.write(data)

    server.protocol.set_writer(Writer())
    try:
        open("/nonexistent/dir/secret-file.txt")
    except OSError:
        error = JsonRpcInternalError.of(sys.exc_info()).to_response_error()
    server.protocol.owed.add(7)  # as if the client's request 7 were dispatched (server/replies.py answers owed ids)
    server.protocol._send_response(7, error=error)
    body = json.loads(written.getvalue().split(b"\r\n\r\n", 1)[1])
    assert body["id"] == 7 and body["error"]["code"] == -32603
    assert "data" not in body["error"]
    assert "FileNotFoundError" in body["error"]["message"] and "/nonexistent" not in body["error"]["message"]
