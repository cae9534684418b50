"""Issue 41, item 6: every request is answered with its id, string or integer, whatever the shape of its params, on
every method the server registers; a command reports `applied` only when an edit was sent and the client accepted
it; "Fill all gaps (n)" counts the placeholders of the text of the version it names. The real infill-ls over raw
JSON-RPC (tests/fuzz/rpc.py) with the tiny random-weight DiffusionGemma."""

from __future__ import annotations

import json

import pytest
from fuzz.edge_cases import registered_methods
from fuzz.rpc import RawServer

ANSWER_S = 30
TEXT = "The area of a circle is\n    given by pi * r * r\n\nwhich grows with the radius.\n"
WHOLE = {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 19}}
PARAM_SHAPES = ['"x"', '"{\\"textDocument\\": {}}"', "[]", '["file:///a.txt", 1]', "null", "7", "-1.5", "true", "{}"]


def send(server: RawServer, msg_id: object, method: str, raw_params: str | None) -> dict:
    params = "" if raw_params is None else f', "params": {raw_params}'
    server.send(f'{{"jsonrpc": "2.0", "id": {json.dumps(msg_id)}, "method": {json.dumps(method)}{params}}}')
    reply = server.wait(msg_id, ANSWER_S)
    assert reply is not None, f"{method} id {msg_id!r} params {raw_params} got no answer with its id"
    return reply


def open_text(server: RawServer, uri: str, text: str, language: str = "plaintext", version: int = 1) -> None:
    server.notify(
        "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": version, "text": text}}
    )


@pytest.mark.parametrize("method", [m for m in registered_methods() if m != "shutdown"])
def test_every_method_answers_string_and_integer_ids_whatever_the_params(edge_server, method):
    """The fuzz of issue 41 saw a string id answered without it, and a bare-string inlineCompletion never answered;
    here each (method, params shape, id kind) is owed a reply that carries the id it was sent with."""
    for n, raw in enumerate(PARAM_SHAPES):
        for msg_id in (f"{method}#{n}", 10_000_000 + n * 1000 + len(method)):
            reply = send(edge_server, msg_id, method, raw)
            assert reply["id"] == msg_id and type(reply["id"]) is type(msg_id), reply
            error = reply.get("error")
            if error is not None:
                assert error["code"] != -32603 and "data" not in error, (method, raw, error)
            if raw not in ("null", "{}"):  # neither an object nor absent: no method takes it
                assert error is not None and error["code"] == -32602, (method, raw, reply)
    status = edge_server.status()
    assert status is not None and status["state"] == "ready", status


@pytest.mark.parametrize(
    "command,arguments",
    [
        ("infill.status", None),
        ("infill.toggle", [True]),
        ("infill.didAcceptCompletion", ["not-offered"]),
        ("infill.fillAllGaps", ["file:///ids.txt"]),
        ("infill.fillGap", ["file:///ids.txt"]),  # no range: refused in the result
        ("infill.nope", []),
    ],
)
def test_execute_command_echoes_a_string_id_for_every_command(edge_server, command, arguments):
    open_text(edge_server, "file:///ids.txt", TEXT)
    params = {"command": command, **({"arguments": arguments} if arguments is not None else {})}
    reply = send(edge_server, f"cmd-{command}", "workspace/executeCommand", json.dumps(params))
    assert reply["id"] == f"cmd-{command}"
    if command == "infill.nope":
        assert reply["error"]["code"] == -32602 and "unknown command" in reply["error"]["message"], reply
    else:
        assert "error" not in reply, reply


def test_ids_that_are_not_integers_or_strings_are_refused_and_echoed_where_json_rpc_can(edge_server):
    """LSP ids are integers or strings. A fractional number is still a JSON-RPC id: its refusal carries it back (the
    client waits for it); an id of another kind, null included, gets a reply whose id is null, as JSON-RPC says
    (pygls left the id member out, and a request with a null id and bare-string params went unanswered)."""
    reply = send(edge_server, 2.5, "workspace/executeCommand", '{"command": "infill.status"}')
    assert reply["id"] == 2.5 and reply["error"]["code"] == -32600, reply
    assert "integer or a string" in reply["error"]["message"]
    for raw_id, params in [
        ('{"a": 1}', "{}"),
        ("null", '"x"'),
        ("true", '{"command": "infill.status"}'),
        ("[1]", "[]"),
    ]:
        edge_server.responses.pop(None, None)
        edge_server.send(
            f'{{"jsonrpc": "2.0", "id": {raw_id}, "method": "textDocument/inlineCompletion", "params": {params}}}'
        )
        reply = edge_server.wait(None, ANSWER_S)
        assert reply is not None, f"id {raw_id} with params {params} got no reply with id null"
        assert reply["error"]["code"] == -32600 and "integer or a string" in reply["error"]["message"], reply


def fill_gap(server: RawServer, uri: str) -> dict:
    reply = server.call(
        "workspace/executeCommand", {"command": "infill.fillGap", "arguments": [uri, WHOLE]}, 120, string_id=True
    )
    assert reply is not None and "result" in reply, reply
    return reply["result"]


def test_positional_fill_gap_reports_applied_only_when_the_client_applied_the_edit(edge_server):
    server = edge_server
    open_text(server, "file:///pos.txt", TEXT)
    before, accepted_before = len(server.applied_edits), server.accepted_edits  # (other tests' edits on it)
    try:
        accepted = fill_gap(server, "file:///pos.txt")
        assert accepted == {"applied": True, "reason": ""}
        assert len(server.applied_edits) == before + 1  # the edit went out ...
        assert server.accepted_edits == accepted_before + 1  # ... and was accepted
        server.apply_reply = {"applied": False, "failureReason": "the buffer is read-only"}
        assert fill_gap(server, "file:///pos.txt") == {"applied": False, "reason": "the buffer is read-only"}
        for unreadable in ({"applied": "false"}, {"applied": 1}, "yes", None):
            server.apply_reply = unreadable  # a reply that does not say applied: true is not an application
            result = fill_gap(server, "file:///pos.txt")
            assert result["applied"] is False and result["reason"], (unreadable, result)
    finally:
        server.apply_reply = {"applied": True}  # the shared server's client accepts edits again
    assert len(server.applied_edits) == before + 6 and server.accepted_edits == accepted_before + 1


def test_a_client_without_apply_edit_is_sent_no_edit_and_told_why(raw_server):
    server = raw_server(capabilities={"textDocument": {"codeAction": {}}})  # no workspace.applyEdit
    open_text(server, "file:///pos.txt", TEXT)
    result = fill_gap(server, "file:///pos.txt")
    assert result["applied"] is False and "applyEdit" in result["reason"], result
    assert server.applied_edits == []


MARKDOWN = "Intro [[one]] and {{two}}.\n\nThen ___ here.\n"


def fill_all_title(server: RawServer, uri: str, rng: dict) -> tuple[str, int]:
    reply = server.call(
        "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": rng, "context": {"diagnostics": []}}, 30
    )
    assert reply is not None and "result" in reply, reply
    (action,) = [a for a in reply["result"] or [] if a["data"]["infill"] == "gaps"]
    return action["title"], action["data"]["version"]


def test_fill_all_gaps_counts_the_placeholders_of_the_version_it_names(edge_server):
    """The fuzz of issue 41 twice saw a listing count one placeholder fewer than it counted in the client's text.
    The server's side is right: with a selection, "Fill all gaps (n)" counts the placeholders wholly inside it (the
    ones the fill fills; one the selection cuts is not counted), else those of the whole text; always of the text
    of the version the action names, edited or not."""
    uri = "file:///count.md"
    open_text(edge_server, uri, MARKDOWN, language="markdown", version=4)
    nothing = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}
    assert fill_all_title(edge_server, uri, nothing) == ("Fill all gaps (3)", 4)
    cut_first = {"start": {"line": 0, "character": 8}, "end": {"line": 2, "character": 14}}  # inside "[[one]]"
    assert fill_all_title(edge_server, uri, cut_first) == ("Fill all gaps (2)", 4)
    edge_server.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": uri, "version": 5},
            "contentChanges": [
                {"range": {"start": {"line": 3, "character": 0}, "end": {"line": 3, "character": 0}}, "text": "[[x]]\n"}
            ],
        },
    )
    assert fill_all_title(edge_server, uri, nothing) == ("Fill all gaps (4)", 5)
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 4, "character": 0}}
    assert fill_all_title(edge_server, uri, whole) == ("Fill all gaps (4)", 5)


def test_a_fill_gap_selection_is_converted_to_offsets_once_at_listing(edge_server):
    """Issue 41: a Fill gap's range went LSP -> offset -> LSP -> offset -> LSP. The listing now names the selection
    in offsets of the exact text it saw ("span", beside that text's fingerprint); resolve fills that span without
    converting the range again (here the range is even replaced: the span alone decides), and only the edit's
    range is converted back. A span that does not fit the text falls back to the range."""
    uri = "file:///span.txt"
    open_text(edge_server, uri, TEXT)
    listing = edge_server.call(
        "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": WHOLE, "context": {"diagnostics": []}}, 30
    )
    assert listing is not None and "result" in listing, listing
    (action,) = [a for a in listing["result"] if a["data"]["infill"] == "gap"]
    line = TEXT.splitlines(keepends=True)
    start = len(line[0]) + WHOLE["start"]["character"]
    assert action["data"]["span"] == [start, start + 6]
    moved = {**action, "data": {**action["data"], "range": [0, 0, 0, 0]}}
    resolved = edge_server.call("codeAction/resolve", moved, 120)
    assert resolved is not None and resolved["result"].get("edit"), resolved  # (the tiny model fills plain text)
    (change,) = resolved["result"]["edit"]["documentChanges"]
    assert [e["range"] for e in change["edits"]] == [WHOLE]
    unfit = {**action, "data": {**action["data"], "span": [0, len(TEXT) + 1]}}
    resolved = edge_server.call("codeAction/resolve", unfit, 120)
    (change,) = resolved["result"]["edit"]["documentChanges"]
    assert [e["range"] for e in change["edits"]] == [WHOLE]
