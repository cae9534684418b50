"""Races against the real server: edits, $/cancelRequest and newer requests arriving while the engine runs.

The server runs the tiny DiffusionGemma checkpoint with 1024 denoising steps (random weights never converge, so
every request runs all of them: seconds even on a quiet machine), so each race reliably finds the engine busy;
the assertions are that it stops within about one step, not after the full run.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_helpers import code_actions, log_text, open_doc, start, status, wait_ready

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tiny_checkpoint):
    client, _ = await start(["--model", str(tiny_checkpoint), "--denoising-steps", "1024"],
                            init_options={"invokedBudgetMs": 120000, "codeActionBudgetMs": 120000,
                                          "inlineBudgetMs": 120000, "debounceMs": 40})
    client.feature("infill/statusChanged")(lambda params: None)
    client.applied_edits = []
    client.feature(types.WORKSPACE_APPLY_EDIT)(
        lambda params: client.applied_edits.append(params.edit) or types.ApplyWorkspaceEditResult(applied=True))
    assert (await wait_ready(client))["state"] == "ready"
    yield client
    await client.shutdown_session()
    await client.stop()


async def engine_busy(client, timeout: float = 20.0) -> None:
    """Wait until the model thread is running the request just sent."""
    end = time.monotonic() + timeout
    while not (await status(client))["modelBusy"]:
        assert time.monotonic() < end, "the request never reached the engine"
        await asyncio.sleep(0.02)


async def test_edit_while_resolving_yields_no_edit(lsp):
    uri = "file:///race.txt"
    text = "Shopping list\n\nvalue = compute(1, 2)\nprint(value)\n"
    open_doc(lsp, uri, text, language="plaintext", version=1)
    gap = types.Range(start=types.Position(2, 8), end=types.Position(2, 21))
    actions = await code_actions(lsp, uri, gap)
    fill = next(a for a in actions if a.title == "Fill gap")
    pending = asyncio.ensure_future(lsp.code_action_resolve_async(fill))
    await engine_busy(lsp)
    lsp.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(0, 0), end=types.Position(0, 0)), text="# edited\n")]))
    changed_at = time.monotonic()
    resolved = await asyncio.wait_for(pending, 30)
    assert resolved.edit is None
    assert time.monotonic() - changed_at < 5.0  # the engine stopped at its next step, not after the full budget
    assert "race.txt changed while the fill was computed (was version 1)" in log_text(lsp)


async def test_cancel_request_is_answered_promptly(lsp):
    uri = "file:///cancel.py"
    open_doc(lsp, uri, "def g(a, b):\n    return a\n")
    msg_id = "cancel-me"
    future = lsp.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(1, 12),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)),
        msg_id=msg_id)
    await engine_busy(lsp)
    cancelled_at = time.monotonic()
    lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcException) as caught:
        await asyncio.wait_for(asyncio.wrap_future(future), 10)
    assert caught.value.code == types.LSPErrorCodes.RequestCancelled.value  # -32800
    assert time.monotonic() - cancelled_at < 1.0
    # ... and the engine itself stops at its next step (1024 steps would take seconds).
    while (await status(lsp))["modelBusy"] and time.monotonic() - cancelled_at < 10:
        await asyncio.sleep(0.02)
    assert time.monotonic() - cancelled_at < 1.5


async def test_newer_request_stops_a_running_one_within_a_step(lsp):
    uri = "file:///running.txt"
    open_doc(lsp, uri, "Meeting notes\nWe agreed to ship on Friday and\n", language="plaintext")
    invoked = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)

    def ask():
        return asyncio.ensure_future(lsp.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(1, 30), context=invoked)))

    older = ask()
    await engine_busy(lsp)
    newer_sent = time.monotonic()
    newer = ask()
    assert await older is None  # superseded: nothing computed for it is shown
    assert time.monotonic() - newer_sent < 2.0  # the engine stopped at its next step, not after 1024 steps
    # An edit stops the newer one too (its result would be for version 1).
    lsp.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(1, 30), end=types.Position(1, 30)), text=" we")]))
    edited = time.monotonic()
    assert await asyncio.wait_for(newer, 10) is None
    assert time.monotonic() - edited < 2.0
    assert "superseded or the document changed" in log_text(lsp)


async def test_cancelled_fill_command_applies_nothing(lsp):
    uri = "file:///cancel_command.txt"
    open_doc(lsp, uri, "alpha beta gamma\ndelta\n", language="plaintext")
    before = len(lsp.applied_edits)
    future = lsp.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(
        command="infill.fillGap", arguments=[{"uri": uri, "range": {"start": {"line": 0, "character": 6},
                                                                    "end": {"line": 0, "character": 10}}}]),
        msg_id="cancel-command")
    await engine_busy(lsp)
    lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="cancel-command"))
    with pytest.raises(JsonRpcException) as caught:
        await asyncio.wait_for(asyncio.wrap_future(future), 10)
    assert caught.value.code == types.LSPErrorCodes.RequestCancelled.value
    cancelled_at = time.monotonic()
    while (await status(lsp))["modelBusy"] and time.monotonic() - cancelled_at < 10:
        await asyncio.sleep(0.02)
    assert time.monotonic() - cancelled_at < 1.5  # the fill stopped (uncancelled it would run for seconds)
    await status(lsp)
    assert lsp.applied_edits[before:] == []
