"""Every request with an id gets exactly one reply carrying that id, from every state of the real server (over stdio,
raw JSON-RPC, the tiny random-weight DiffusionGemma), and a Fill command says "applied" only for an edit the client
confirmed (server/replies.py, server/jsonrpc.py, server/fills.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fuzz.rpc import RawServer

TEXT = "def total(values):\n    result = 0\n    for value in values:\n        result += value\n    return result\n"
REPLY_S = 60.0  # far above the server's own bound on a client's silence (replies.CLIENT_REPLY_S, 10 s)


def open_document(server: RawServer, uri: str, text: str = TEXT, version: int = 1) -> None:
    server.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": uri, "languageId": "plaintext", "version": version, "text": text}},
    )


def fill_gap(server: RawServer, uri: str, selection: dict, msg_id: str | None = None) -> int | str:
    params = {"command": "infill.fillGap", "arguments": [uri, selection]}
    if msg_id is None:
        return server.request("workspace/executeCommand", params)
    server.send({"jsonrpc": "2.0", "id": msg_id, "method": "workspace/executeCommand", "params": params})
    return msg_id


def replies_to(server: RawServer, msg_id: int | str) -> list[dict]:
    return [reply for reply in server.replies if reply.get("id") == msg_id]


SELECTION = {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 14}}  # the "0"


@contextmanager
def client_silent_to(server: RawServer, method: str) -> Iterator[None]:
    """The client leaves the server's `method` requests unanswered (held) for the block, then answers again."""
    server.held.clear()
    server.silent_to.add(method)
    try:
        yield
    finally:
        server.silent_to.discard(method)
        server.held.clear()


def test_each_request_of_a_batch_is_refused_on_its_own(edge_server) -> None:
    """pygls dropped a JSON array of messages whole: none of its requests was ever answered."""
    server = edge_server
    inline_id, never_sent = server.new_id(), server.new_id()  # the shared server's ids: no other request has them
    batch = [
        {
            "jsonrpc": "2.0",
            "id": "batch-status",
            "method": "workspace/executeCommand",
            "params": {"command": "infill.status"},
        },
        {"jsonrpc": "2.0", "id": inline_id, "method": "textDocument/inlineCompletion", "params": "file:///b.txt"},
        {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": never_sent}},
    ]
    server.send(json.dumps(batch))
    for msg_id in ("batch-status", inline_id):
        reply = server.wait(msg_id, REPLY_S)
        assert reply is not None, f"request {msg_id!r} of a batch was never answered"
        assert reply["error"]["code"] == -32600, reply
    assert (server.status() or {}).get("state") == "ready"  # still serving


def test_a_reused_id_of_a_request_in_progress_is_refused_and_the_first_keeps_its_one_reply(
    edge_server,
) -> None:
    server, uri = edge_server, "file:///every/reused-id.txt"
    open_document(server, uri)
    with client_silent_to(server, "workspace/applyEdit"):  # the fill stays in progress until this client answers
        fill_gap(server, uri, SELECTION, msg_id="twice")
        held = server.wait_held("workspace/applyEdit", REPLY_S)
        assert held is not None, "the fill sent no workspace/applyEdit"
        server.send(
            {
                "jsonrpc": "2.0",
                "id": "twice",
                "method": "workspace/executeCommand",
                "params": {"command": "infill.status"},
            }
        )
        first = server.wait("twice", REPLY_S)
        assert first is not None and first.get("error", {}).get("code") == -32600, first
        server.answer(held, {"applied": True})
    deadline = time.monotonic() + REPLY_S
    while len(replies_to(server, "twice")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    refusal, fill = replies_to(server, "twice")
    assert refusal["error"]["code"] == -32600
    assert fill.get("result") == {"applied": True, "reason": ""}, fill


def test_a_fill_command_is_answered_when_the_client_never_answers_its_apply_edit(
    edge_server,
) -> None:
    """The handler awaited workspace/applyEdit forever, so infill.fillGap was never answered."""
    server, uri = edge_server, "file:///every/never-applied.txt"
    open_document(server, uri)
    with client_silent_to(server, "workspace/applyEdit"):
        msg_id = fill_gap(server, uri, SELECTION)
        reply = server.wait(msg_id, REPLY_S)
        assert server.held, "the fill sent no workspace/applyEdit"
    assert reply is not None, "infill.fillGap was never answered while the client kept silent"
    assert reply["result"]["applied"] is False and "did not answer" in reply["result"]["reason"], reply
    assert len(replies_to(server, msg_id)) == 1


def test_fill_gap_refuses_a_selection_outside_the_text(edge_server) -> None:
    """A start past its line's end was clamped: the edit replaced another span than the one selected, and the
    command answered applied: true for it."""
    server, uri = edge_server, "file:///every/outside.txt"
    open_document(server, uri)
    sent = len(server.applied_edits)
    outside = {"start": {"line": 0, "character": 1116}, "end": {"line": 2, "character": 5}}
    reply = server.wait(fill_gap(server, uri, outside), REPLY_S)
    assert reply is not None and reply["result"]["applied"] is False, reply
    assert "not inside" in reply["result"]["reason"], reply
    assert len(server.applied_edits) == sent  # nothing was sent to apply
    past_end = {"start": {"line": 1, "character": 4}, "end": {"line": 40, "character": 0}}
    reply = server.wait(fill_gap(server, uri, past_end), REPLY_S)
    assert reply is not None and reply["result"]["applied"] is False, reply
    listing = server.call(
        "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": outside, "context": {"diagnostics": []}}
    )
    assert listing is not None and not [a for a in listing.get("result") or [] if a["title"] == "Fill gap"], listing
    inside = server.call(
        "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": SELECTION, "context": {"diagnostics": []}}
    )
    assert inside is not None and [a["title"] for a in inside["result"]] == ["Fill gap"], inside  # the control


def test_notification_handlers_leave_nothing_pending(edge_server) -> None:
    """pygls filed every notification's handler future under a fresh id and never removed it (every didChange)."""
    server, uri = edge_server, "file:///every/notified.txt"
    open_document(server, uri)
    for version in range(2, 62):
        server.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [
                    {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "#"}
                ],
            },
        )
    server.notify("workspace/didChangeConfiguration", {"settings": {"infill": {"debounceMs": 30}}})
    # A handler that just finished leaves its future until the loop runs its done callback; a leaked one stays.
    deadline = time.monotonic() + 10
    while (replies := (server.status() or {}).get("replies")) != {"owed": 1, "pendingFutures": 1}:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert replies == {"owed": 1, "pendingFutures": 1}, replies  # the status request itself, nothing else


def test_shutdown_answers_while_a_configuration_pull_is_pending(raw_server) -> None:
    """Shutdown cancels what is pending; a cancelled notification future removes itself from pygls' table, which
    shutdown iterated (RuntimeError: the shutdown request failed)."""
    server = raw_server()
    server.silent_to.add("workspace/configuration")
    server.notify("workspace/didChangeConfiguration", {"settings": {}})  # nothing for us: the server pulls
    assert server.wait_held("workspace/configuration", REPLY_S) is not None
    reply = server.call("shutdown", None, REPLY_S)
    assert reply is not None and "error" not in reply, reply
    server.notify("exit")
    assert server.exit_code(30) == 0


def test_the_server_gets_ready_beside_a_busy_cpu_when_the_client_never_answers_configuration(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Start-up waited for workspace/configuration before loading: a client that never answered it left the server
    loading forever. A process spinning on a core beside it is the loaded machine of the issue."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    server = RawServer(
        ["--model", str(tiny_checkpoint), "--denoising-steps", "2"], stderr_path=str(tmp_path / "server.log")
    )
    server.silent_to.add("workspace/configuration")
    try:
        assert "result" in (server.initialize(init_options={"fallback": False}) or {})  # the tiny engine alone
        assert server.wait_held("workspace/configuration", REPLY_S) is not None
        ready = server.wait_ready(240)
        assert (ready or {}).get("state") == "ready", ready
    finally:
        spinner.kill()
        spinner.wait(10)
        server.kill()


@pytest.mark.parametrize("round_", range(3))
def test_bad_params_are_refused_at_once_amid_cancelled_resolves_and_a_change_storm(edge_server, round_: int) -> None:
    """The issue's interleaving: a Fill gap resolve cancelled with $/cancelRequest and a didChange storm in flight
    around an inlineCompletion whose params are a bare string (owed -32602)."""
    server, uri = edge_server, f"file:///every/storm-{round_}.txt"
    open_document(server, uri)
    listing = server.call(
        "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": SELECTION, "context": {"diagnostics": []}}
    )
    action = (listing or {}).get("result", [None])[0]
    assert action is not None, listing
    resolves = [server.request("codeAction/resolve", action, string_id=bool(i % 2)) for i in range(3)]
    bad_ids = []
    for version in range(2, 42):
        if version % 10 == 0:
            server.notify("$/cancelRequest", {"id": resolves[min(version // 10 - 1, 2)]})
            bad_ids.append(server.request("textDocument/inlineCompletion", raw_params=json.dumps(uri)))
        server.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [
                    {"range": {"start": {"line": 4, "character": 0}, "end": {"line": 4, "character": 0}}, "text": " "}
                ],
            },
        )
    for msg_id in bad_ids:
        reply = server.wait(msg_id, REPLY_S)
        assert reply is not None and reply["error"]["code"] == -32602, (msg_id, reply)
    for msg_id in resolves:
        assert server.wait(msg_id, REPLY_S) is not None, f"resolve {msg_id!r} was never answered"
    assert (server.status() or {}).get("state") == "ready"  # every reply to them has arrived before this one's
    assert all(len(replies_to(server, msg_id)) == 1 for msg_id in [*resolves, *bad_ids])
