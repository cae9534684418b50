"""Issue 24: what a client sends that the server did not produce is refused at the edge, never -32603, never
unanswered, never a traceback on stderr. The real infill-ls over stdio (raw JSON-RPC, tests/fuzz/rpc.py: pytest-lsp
would refuse to send these) with the tiny random-weight DiffusionGemma; every method the server registers is
taken from the server object itself."""

from __future__ import annotations

import time

import pytest
from fuzz.rpc import RawServer

NON_OBJECTS = ['"a string"', "[1, 2]", "[]", "42", "1.5", "true", "false"]
ANSWER_S = 30


def registered_methods() -> list[str]:
    """Every method the real server handles (pygls' built-ins and infill's features), except exit."""
    from server.main import create_server
    from server.settings import Settings

    protocol = create_server(Settings()).protocol
    return sorted((set(protocol.fm.builtin_features) | set(protocol.fm.features)) - {"exit"})


def ask(server: RawServer, method: str, raw: str) -> dict:
    reply = server.wait(server.request(method, raw_params=raw), ANSWER_S)
    assert reply is not None, f"{method} with params {raw} got no answer"
    return reply


def assert_alive(server: RawServer) -> None:
    status = server.status()
    assert status is not None and status["state"] == "ready", status


def test_registered_methods_cover_what_the_issue_names():
    methods = registered_methods()
    assert {
        "textDocument/inlineCompletion",
        "codeAction/resolve",
        "workspace/executeCommand",
        "shutdown",
        "infill/telemetry",
        "initialize",
    } <= set(methods)


@pytest.mark.parametrize("method", registered_methods())
def test_non_object_params_are_refused_on_every_method(edge_server, method):
    for raw in NON_OBJECTS:
        edge_server.notify(method, raw_params=raw)  # a notification can only be ignored
        error = ask(edge_server, method, raw).get("error")
        assert error is not None and error["code"] == -32602, (method, raw, error)
        assert "params must be a JSON object" in error["message"] and "data" not in error
    assert_alive(edge_server)  # shutdown with non-object params did not shut it down


@pytest.mark.parametrize(
    "method", ["initialized", "textDocument/didOpen", "$/cancelRequest", "workspace/didChangeConfiguration"]
)
def test_a_notification_sent_as_a_request_is_answered(edge_server, method):
    error = ask(edge_server, method, "{}").get("error")
    assert error is not None and error["code"] == -32600 and "notification" in error["message"], error
    assert_alive(edge_server)


def test_a_second_initialize_is_refused_and_nothing_reloads(edge_server):
    before = edge_server.status()
    error = ask(edge_server, "initialize", '{"processId": null, "rootUri": null, "capabilities": {}}').get("error")
    assert error is not None and error["code"] == -32600 and "already" in error["message"], error
    edge_server.notify("initialized", {})  # a second one too: ignored, so no reload
    assert wait_for_log(edge_server, "ignored notification 'initialized'"), "the second initialized was not refused"
    after = edge_server.status()
    assert after["state"] == "ready" and after["backend"] == before["backend"]


def wait_for_log(server: RawServer, fragment: str, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if fragment in server.stderr_path.read_text():
            return True
        time.sleep(0.05)
    return False


RESOLVE_DATA = [
    '{"infill": ["gap"], "uri": "file:///edge.txt", "range": [0, 0, 0, 1]}',  # the issue's unhashable list
    '{"infill": {"a": 1}, "uri": "file:///edge.txt", "range": [0, 0, 0, 1]}',
    '{"infill": "gap", "uri": ["file:///edge.txt"], "range": [0, 0, 0, 1]}',
    '{"infill": "gap", "uri": "file:///edge.txt", "range": {"start": 0}}',
    '{"infill": "gap", "uri": "file:///edge.txt", "range": [0, 0, 0]}',
    '{"infill": "gap", "uri": "file:///edge.txt", "range": [[0], 0, 0, 1]}',
    '{"infill": "gap", "uri": "file:///edge.txt", "range": [0, 0, 0, 1], "version": [1]}',
    '{"infill": "gap", "uri": "file:///edge.txt", "range": [0, 0, 0, 1], "generation": {"a": 1}}',
    '{"infill": "gap", "uri": "file:///edge.txt", "range": [0, 0, 0, 1], "text": 7}',
    '{"infill": "nope", "uri": "file:///edge.txt", "range": [0, 0, 0, 1]}',
    "[1, 2]",
    '"gap"',
    "42",
    "true",
    "null",
    "{}",
]


@pytest.mark.parametrize("data", RESOLVE_DATA)
def test_resolve_data_the_server_did_not_produce_comes_back_without_an_edit(edge_server, data):
    edge_server.notify(
        "textDocument/didOpen",
        {
            "textDocument": {
                "uri": "file:///edge.txt",
                "languageId": "plaintext",
                "version": 1,
                "text": "one two three\n",
            }
        },
    )
    reply = ask(
        edge_server, "codeAction/resolve", f'{{"title": "Fill gap", "kind": "refactor.rewrite", "data": {data}}}'
    )
    assert "error" not in reply, reply
    assert reply["result"].get("edit") is None and reply["result"]["title"] == "Fill gap"


COMMAND_ARGUMENTS = [
    '[{"a": 1}]',
    "[[1]]",
    "[null, null]",
    "[1.5]",
    '[{"uri": {"a": 1}}]',
    '[{"uri": "file:///edge.txt", "range": [1]}]',
    '["file:///edge.txt", "x"]',
    "[]",
    "null",
]


@pytest.mark.parametrize(
    "command", ["infill.fillGap", "infill.fillAllGaps", "infill.toggle", "infill.status", "infill.didAcceptCompletion"]
)
def test_command_arguments_of_every_shape_are_answered(edge_server, command):
    for arguments in COMMAND_ARGUMENTS:
        reply = ask(edge_server, "workspace/executeCommand", f'{{"command": "{command}", "arguments": {arguments}}}')
        assert (reply.get("error") or {}).get("code") != -32603, (arguments, reply)
    ask(edge_server, "workspace/executeCommand", '{"command": "infill.toggle", "arguments": [true]}')
    assert_alive(edge_server)


@pytest.mark.parametrize(
    "params, fragment",
    [
        ('{"command": {"a": 1}}', "$.params.command"),
        ('{"command": "infill.status", "arguments": {"a": 1}}', "$.params.arguments"),
        ('{"command": "infill.status", "arguments": "ab"}', "$.params.arguments"),
        ('{"command": "infill.nope", "arguments": [{"a": 1}]}', "unknown command"),
    ],
)
def test_malformed_execute_command_params_get_32602(edge_server, params, fragment):
    error = ask(edge_server, "workspace/executeCommand", params).get("error")
    assert error is not None and error["code"] == -32602 and fragment in error["message"], error


def test_cancel_and_progress_ids_that_are_not_ids_are_ignored(edge_server):
    for bad in ('{"a": 1}', "[1]", "1.5", "true"):
        edge_server.notify("$/cancelRequest", raw_params=f'{{"id": {bad}}}')
        edge_server.notify("window/workDoneProgress/cancel", raw_params=f'{{"token": {bad}}}')
    assert_alive(edge_server)


def test_a_client_with_literals_but_no_resolve_gets_actions_that_fill_by_command(tiny_checkpoint):
    """Issue 26: listing runs no model for such a client either; the action's command fills when executed."""
    server = RawServer(
        ["--model", str(tiny_checkpoint), "--denoising-steps", "2"],
        configuration={"enabledLanguages": ["plaintext"], "codeActionBudgetMs": 30000, "fallback": False},
    )
    try:
        literals = {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["refactor"]}}, "dataSupport": True}
        server.initialize(
            capabilities={
                "workspace": {"applyEdit": True, "workspaceEdit": {"documentChanges": True}},
                "textDocument": {"codeAction": literals},
            }
        )
        assert server.wait_ready(240)["state"] == "ready"
        uri = "file:///literal.txt"
        selection = {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 7}}
        server.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "plaintext", "version": 3, "text": "one two three\n"}},
        )
        listed = server.call(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": selection, "context": {"diagnostics": []}},
            ANSWER_S,
        )
        (action,) = listed["result"]
        assert action["kind"] == "refactor.rewrite" and "edit" not in action
        assert action["command"]["command"] == "infill.fillGap"
        reply = server.call(
            "workspace/executeCommand",
            {"command": action["command"]["command"], "arguments": action["command"]["arguments"]},
            ANSWER_S,
        )
        assert reply["result"]["applied"] is True, reply
        (edit,) = server.applied_edits
        (change,) = edit["documentChanges"]
        assert change["textDocument"]["version"] == 3 and [e["range"] for e in change["edits"]] == [selection]
    finally:
        server.kill()


def test_stderr_holds_no_traceback(edge_server):
    """Runs last in this module: everything above was refused without one."""
    assert_alive(edge_server)
    log = edge_server.stderr_path.read_text()
    assert "Traceback" not in log and "unhashable" not in log, log[-3000:]
    assert "refused request" in log  # the refusals were logged (one line each)
