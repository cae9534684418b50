"""`infill-ls` with no model configured serves the real offline default (Gemma 3 270M), labelled as fallback,
and its inline suggestions land at the cursor in UTF-16 terms."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import pytest_asyncio
from lsp_helpers import (
    apply_edits,
    change_doc,
    code_actions,
    log_text,
    open_doc,
    start,
    status,
    utf16_offset,
    wait_ready,
    wait_status,
)
from lsprotocol import types

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def default(tmp_path_factory):
    completion_log = tmp_path_factory.mktemp("default-log") / "completions.jsonl"
    client, _ = await start([], init_options={"invokedBudgetMs": 30000, "completionLog": str(completion_log)})
    client.completion_log = completion_log
    client.feature("infill/statusChanged")(lambda params: None)
    yield client
    await client.shutdown_session()
    await client.stop()


async def test_offline_default_is_loaded_and_labelled_as_fallback(default):
    ready = await wait_ready(default, timeout=240)
    assert ready["state"] == "ready", ready
    assert ready["kind"] == "autoregressive" and ready["isFallback"] is True and ready["label"]
    # infill.status turns ready on the loading thread; the progress's end follows from the event loop: wait for it
    end = time.monotonic() + 30

    def kinds() -> list[str]:
        return [type(v).__name__ for values in default.progress_reports.values() for v in values]

    while kinds()[-1:] != ["WorkDoneProgressEnd"] and time.monotonic() < end:
        await asyncio.sleep(0.05)
    assert kinds()[0] == "WorkDoneProgressBegin" and kinds()[-1] == "WorkDoneProgressEnd", kinds()


async def test_inline_suggestion_from_the_default_model(default):
    await wait_ready(default, timeout=240)
    uri = "file:///add.py"
    text = "# somme des entrées 😀\ndef add(a, b):\n    return \n"
    open_doc(default, uri, text)
    position = types.Position(line=2, character=11)
    reply = await default.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    assert reply is not None and reply.items, log_text(default)
    item = reply.items[0]
    assert item.range.start == position and item.insert_text.strip()
    applied = apply_edits(text, [types.TextEdit(range=item.range, new_text=item.insert_text)])
    cursor = utf16_offset(text, position)
    assert applied == text[:cursor] + item.insert_text + text[cursor:]
    compile(applied, "add.py", "exec")  # the suggestion leaves valid Python (the watchdog's promise, end to end)


async def _invoke(client, uri: str, position: types.Position):
    return await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )


async def _completion_of(client, version: int, patience_s: float, uri: str | None = None) -> dict:
    """The completion log's record for `version` (of `uri`, if given; written as the reply goes out: poll)."""
    deadline = time.monotonic() + patience_s
    while True:
        lines = client.completion_log.read_text().splitlines() if client.completion_log.exists() else []
        found = [json.loads(line) for line in lines if '"completion"' in line]
        found = [r["pipeline"] for r in found if uri in (None, r.get("uri"))]
        found = [record for record in found if record and record.get("version") == version]
        if found or time.monotonic() > deadline:
            assert found, f"no completion logged for version {version}"
            return found[-1]
        await asyncio.sleep(0.05)


async def test_a_jump_to_another_line_encodes_its_prompt_before_the_first_request(default):
    """A didChange on another line starts encoding the prompt there: the request that follows finds it encoded.
    (Without that, the prompt of a line far from the document's end, where its open warmed, shares nothing but BOS
    with what the document's sequence holds.)"""
    await wait_ready(default, timeout=240)
    uri = "file:///jump.py"
    open_doc(default, uri, (Path(__file__).resolve().parents[2] / "infill" / "types.py").read_text())
    await _until_idle(default)  # the open's warm at the document's end
    far = 40
    change_doc(default, uri, 2, types.Position(line=far, character=0), types.Position(line=far, character=0), "x")
    await _until_idle(default)  # no request meanwhile: only the jump itself can have encoded anything
    await _invoke(default, uri, types.Position(line=far, character=1))
    record = await _completion_of(default, 2, patience_s=120, uri=uri)
    assert record["prompt_tokens"] > 100, record
    assert record["reused_tokens"] >= record["prompt_tokens"] - 2, record


async def _until_idle(client, warms_started: int = 0) -> None:
    """Once `warms_started` background warms have started and nothing runs: no request, no warm, the model thread
    free. (A notification is handled before the status request sent after it, so a warm it starts is counted.)"""

    def idle(current: dict) -> bool:
        started = current["cheapAnswers"]["warmsStarted"] >= warms_started
        return started and current["running"] == 0 and not current["modelBusy"]

    assert idle(await wait_status(client, idle, timeout=120))


def _move_cursor(client, uri: str, line: int) -> None:
    client.protocol.notify(
        "infill/didMoveCursor", {"textDocument": {"uri": uri}, "position": {"line": line, "character": 0}}
    )


async def test_a_cursor_moved_to_another_line_encodes_its_prompt_before_anyone_types(default):
    """infill/didMoveCursor warms the prompt at the cursor in the background: a request there, with no edit in
    between, finds it encoded. (Without it, the prompt at a line far from the document's end, where its open warmed,
    shares nothing but BOS with what the document's sequence holds.)"""
    await wait_ready(default, timeout=240)
    uri = "file:///moved.py"
    warms = (await status(default))["cheapAnswers"]["warmsStarted"]
    open_doc(default, uri, (Path(__file__).resolve().parents[2] / "infill" / "types.py").read_text())
    await _until_idle(default, warms + 1)  # the open's warm at the end of the document
    far = 40
    _move_cursor(default, uri, far)
    await _until_idle(default, warms + 2)  # no request meanwhile: only the cursor's warm can have encoded line 40
    await _invoke(default, uri, types.Position(line=far, character=0))
    record = await _completion_of(default, 1, patience_s=120, uri=uri)
    assert record["prompt_tokens"] > 100, record
    assert record["reused_tokens"] >= record["prompt_tokens"] - 2, record


SMALL_MODULE = """import os
import sys


def read_settings(path):
    with open(path) as source:
        lines = source.read().splitlines()
    settings = {}
    for line in lines:
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def main(argv):
    return read_settings(argv[1] if len(argv) > 1 else os.path.expanduser("~/.settings"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
"""


async def test_a_document_just_opened_has_its_prompt_encoded_before_the_first_request(default):
    """didOpen warms the prompt at the document's end; a document within the prompt window shares it, up to the
    cursor's line, with the prompt at any cursor: the first request pays only its last tokens."""
    await wait_ready(default, timeout=240)
    uri = "file:///opened.py"
    warms = (await status(default))["cheapAnswers"]["warmsStarted"]
    open_doc(default, uri, SMALL_MODULE)  # (~150 tokens: within the window a slow CPU encodes from scratch, 192)
    await _until_idle(default, warms + 1)  # no request, no edit: only the open can have encoded anything
    await _invoke(default, uri, types.Position(line=10, character=4))
    record = await _completion_of(default, 1, patience_s=120, uri=uri)
    assert record["prompt_tokens"] > 50, record
    assert record["reused_tokens"] >= record["prompt_tokens"] - 2, record


async def test_an_invoked_request_does_not_feed_the_keystroke_guard(default):
    """An invoked request ranks candidates within the explicit budget: its time is not a keystroke's, so the
    runaway guard of automatic requests (server/budget.py) does not count it."""
    await wait_ready(default, timeout=240)
    uri = "file:///guard.py"
    text = "def add(a, b):\n    return \n"
    open_doc(default, uri, text)
    before = (await status(default))["budget"]["samples"]
    reply = await _invoke(default, uri, types.Position(line=1, character=11))
    assert reply is not None and reply.items, log_text(default)
    assert (await status(default))["budget"]["samples"] == before


STATE_PY = """class ConnectionState:
    def __init__(self, role):
        self.role = role

    def process_event(self, role, event_type, server_switch_event=None):
        return role
"""
CONNECTION_PY = """from ._state import ConnectionState


class Connection:
    def __init__(self, role):
        self._cstate = ConnectionState(role)

    def send(self, event):
        self._cstate."""


async def test_other_open_files_reach_the_prompt_only_when_asked_and_a_closed_one_leaves_it(default):
    """By default other open files stay out of the prompt. With relatedFiles on, an open file that defines what the
    current one imports puts its outline ahead of the prompt (the completion log counts its characters); once it
    is closed, the next fill has none of it."""
    await wait_ready(default, timeout=240)
    state, connection = "file:///pkg/_state.py", "file:///pkg/_connection.py"
    open_doc(default, state, STATE_PY)
    open_doc(default, connection, CONNECTION_PY)
    end = types.Position(line=CONNECTION_PY.count("\n"), character=len(CONNECTION_PY.rsplit("\n", 1)[-1]))
    await _invoke(default, connection, end)
    by_default = await _completion_of(default, 1, patience_s=60, uri=connection)
    assert by_default["related_chars"] == 0, by_default
    _configure(default, {"relatedFiles": True})
    with_state = await _fill_after_edit(default, connection, end, 2, "return ")
    assert with_state["related_chars"] > len("# pkg/_state.py\n"), with_state
    default.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=state))
    )
    without = await _fill_after_edit(default, connection, end, 3, "value = ")
    _configure(default, {})
    assert without["related_chars"] < with_state["related_chars"], (with_state, without)


async def _fill_after_edit(client, uri: str, end: types.Position, version: int, written: str) -> dict:
    """The logged fill after `written` goes before the cursor's `self._cstate.` (a new text: not typed through)."""
    edited = CONNECTION_PY.replace("        self._cstate.", "        " + written + "self._cstate.")
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=edited)],
        )
    )
    await _invoke(client, uri, types.Position(line=end.line, character=end.character + len(written)))
    return await _completion_of(client, version, patience_s=60, uri=uri)


def _configure(client, settings: dict) -> None:
    """The workspace configuration the client pushes (over the initializationOptions)."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"infill": settings}))


async def test_fill_gap_keeps_the_fill_that_joins_the_text_after_it(default):
    """Fill gap on a one-line gap writes fillCandidates fills and keeps the one that best joins the suffix: the
    prefix alone says `total = 0`; the line after it says the values are summed."""
    await wait_ready(default, timeout=240)
    uri = "file:///mean.py"
    text = "def mean(values):\n    total = ...\n    return total / len(values)\n"
    open_doc(default, uri, text, language="python")
    gap = types.Range(start=types.Position(1, 12), end=types.Position(1, 15))  # the "..."
    fills = {}
    for candidates in (4, 1):
        # a generous budget: this is about which fill is kept, not how fast (a loaded 2-core machine timed out 10 s)
        _configure(default, {"fillCandidates": candidates, "codeActionBudgetMs": 120000})
        actions = await code_actions(default, uri, gap)
        resolved = await default.code_action_resolve_async(next(a for a in actions if a.title == "Fill gap"))
        assert resolved.edit is not None, log_text(default)[-2000:]
        fills[candidates] = resolved.edit.document_changes[0].edits[0].new_text
    _configure(default, {})
    # Properties, not one CPU's exact output: each kept fill is code that compiles in place, and the one kept from
    # four candidates joins the line after it (it reads the values that line divides by their count).
    for fill in fills.values():
        compile(text.replace("...", fill), "mean.py", "exec")
    assert "values" in fills[4], fills
