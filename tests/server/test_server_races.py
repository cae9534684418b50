"""Races against the real server: edits, $/cancelRequest and newer requests arriving while the engine runs.

The server runs the tiny DiffusionGemma checkpoint with 256 denoising steps (random weights never converge, so
every request runs all of them: seconds even on a quiet machine), so each race reliably finds the engine busy;
the assertions are that it stops within about one step, not after the full run. The bounds are fractions of a
full run timed in this module (`full_run_s`), so they hold on a slow or loaded CPU as on a fast one.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_helpers import change_doc, code_actions, log_text, open_doc, start, status, wait_ready
from lsprotocol import types
from pygls.exceptions import JsonRpcException

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tiny_checkpoint):
    client, _ = await start(
        ["--model", str(tiny_checkpoint), "--denoising-steps", "256"],
        init_options={
            "invokedBudgetMs": 120000,
            "codeActionBudgetMs": 120000,
            "inlineBudgetMs": 120000,
            "debounceMs": 40,
            "fallback": False,  # the races are the tiny engine's own runs
        },
    )
    client.feature("infill/statusChanged")(lambda params: None)
    client.applied_edits = []
    client.feature(types.WORKSPACE_APPLY_EDIT)(
        lambda params: client.applied_edits.append(params.edit) or types.ApplyWorkspaceEditResult(applied=True)
    )
    assert (await wait_ready(client))["state"] == "ready"
    yield client
    await client.shutdown_session()
    await client.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def full_run_s(lsp):
    """How long one inline completion runs to its end here, now: the yardstick of the bounds below (each race's
    own request costs about as much run to its end)."""
    uri = "file:///yardstick.txt"
    open_doc(lsp, uri, "Weekly notes\nThe team", language="plaintext")
    await engine_idle(lsp)
    started = time.monotonic()
    await lsp.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(1, 8),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    return time.monotonic() - started


def stopped_bound(full_run_s: float) -> float:
    """Stopping "within a step" takes a step or so (1/256 of a run) plus a few messages; not stopping takes
    about a whole run."""
    return full_run_s / 4


def patience(full_run_s: float) -> float:
    """How long to wait for something that should come at once before failing (instead of hanging)."""
    return full_run_s * 3 + 30


async def engine_idle(client, timeout: float = 120.0) -> None:
    """Wait until the model thread has no job (an earlier test's stopped run, a warm-up after an edit), so that
    `engine_busy` sees the request just sent, not one left over."""
    end = time.monotonic() + timeout
    while (await status(client))["modelBusy"]:
        assert time.monotonic() < end, "the model thread stayed busy"
        await asyncio.sleep(0.02)


async def engine_busy(client, timeout: float = 120.0) -> None:
    """Wait until the model thread is running the request just sent (call `engine_idle` before sending it)."""
    end = time.monotonic() + timeout
    while not (await status(client))["modelBusy"]:
        assert time.monotonic() < end, "the request never reached the engine"
        await asyncio.sleep(0.02)


async def until_idle(client, since: float, timeout: float) -> float:
    """Seconds from `since` until the model thread has no job (polled; gives up after `timeout`)."""
    while (await status(client))["modelBusy"] and time.monotonic() - since < timeout:
        await asyncio.sleep(0.02)
    return time.monotonic() - since


async def test_edit_while_resolving_yields_no_edit(lsp, full_run_s):
    uri = "file:///race.txt"
    text = "Shopping list\n\nvalue = compute(1, 2)\nprint(value)\n"
    open_doc(lsp, uri, text, language="plaintext", version=1)
    gap = types.Range(start=types.Position(2, 8), end=types.Position(2, 21))
    actions = await code_actions(lsp, uri, gap)
    fill = next(a for a in actions if a.title == "Fill gap")
    await engine_idle(lsp)
    pending = asyncio.ensure_future(lsp.code_action_resolve_async(fill))
    await engine_busy(lsp)
    change_doc(lsp, uri, 2, types.Position(0, 0), types.Position(0, 0), "# edited\n")
    changed_at = time.monotonic()
    resolved = await asyncio.wait_for(pending, patience(full_run_s))
    assert resolved.edit is None
    waited_s = time.monotonic() - changed_at  # the engine stopped at its next step, not after the full run
    assert waited_s < stopped_bound(full_run_s), f"answered {waited_s:.2f} s after the edit (a run: {full_run_s:.2f})"
    assert "race.txt changed while the fill was computed (was version 1)" in log_text(lsp)


async def test_cancel_request_is_answered_promptly(lsp, full_run_s):
    uri = "file:///cancel.py"
    open_doc(lsp, uri, "def g(a, b):\n    return a\n")
    await engine_idle(lsp)
    msg_id = "cancel-me"
    future = lsp.protocol.send_request(
        types.TEXT_DOCUMENT_INLINE_COMPLETION,
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(1, 12),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        ),
        msg_id=msg_id,
    )
    await engine_busy(lsp)
    cancelled_at = time.monotonic()
    lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcException) as caught:
        await asyncio.wait_for(asyncio.wrap_future(future), patience(full_run_s))
    assert caught.value.code == types.LSPErrorCodes.RequestCancelled.value  # -32800
    answered_s = time.monotonic() - cancelled_at
    assert answered_s < stopped_bound(full_run_s), f"answered after {answered_s:.2f} s (a run: {full_run_s:.2f})"
    # ... and the engine itself stops at its next step, not after the run's 256.
    stopped_s = await until_idle(lsp, cancelled_at, patience(full_run_s))
    assert stopped_s < stopped_bound(full_run_s), f"the engine ran {stopped_s:.2f} s on (a run: {full_run_s:.2f})"


async def test_newer_request_stops_a_running_one_within_a_step(lsp, full_run_s):
    uri = "file:///running.txt"
    open_doc(lsp, uri, "Meeting notes\nWe agreed to ship on Friday and\n", language="plaintext")
    invoked = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)

    def ask():
        return asyncio.ensure_future(
            lsp.text_document_inline_completion_async(
                types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(1, 30), context=invoked
                )
            )
        )

    await engine_idle(lsp)
    older = ask()
    await engine_busy(lsp)
    newer_sent = time.monotonic()
    newer = ask()
    assert await asyncio.wait_for(older, patience(full_run_s)) is None  # superseded: nothing computed is shown
    waited_s = time.monotonic() - newer_sent  # the engine stopped at its next step, not after 256 steps
    assert waited_s < stopped_bound(full_run_s), f"superseded after {waited_s:.2f} s (a run: {full_run_s:.2f})"
    # An edit stops the newer one too (its result would be for version 1).
    change_doc(lsp, uri, 2, types.Position(1, 30), types.Position(1, 30), " we")
    edited = time.monotonic()
    assert await asyncio.wait_for(newer, patience(full_run_s)) is None
    waited_s = time.monotonic() - edited
    assert waited_s < stopped_bound(full_run_s), f"stopped {waited_s:.2f} s after the edit (a run: {full_run_s:.2f})"
    assert "superseded or the document changed" in log_text(lsp)


async def test_cancelled_fill_command_applies_nothing(lsp, full_run_s):
    uri = "file:///cancel_command.txt"
    open_doc(lsp, uri, "alpha beta gamma\ndelta\n", language="plaintext")
    await engine_idle(lsp)
    before = len(lsp.applied_edits)
    future = lsp.protocol.send_request(
        types.WORKSPACE_EXECUTE_COMMAND,
        types.ExecuteCommandParams(
            command="infill.fillGap",
            arguments=[
                {"uri": uri, "range": {"start": {"line": 0, "character": 6}, "end": {"line": 0, "character": 10}}}
            ],
        ),
        msg_id="cancel-command",
    )
    await engine_busy(lsp)
    cancelled_at = time.monotonic()
    lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="cancel-command"))
    with pytest.raises(JsonRpcException) as caught:
        await asyncio.wait_for(asyncio.wrap_future(future), patience(full_run_s))
    assert caught.value.code == types.LSPErrorCodes.RequestCancelled.value
    stopped_s = await until_idle(lsp, cancelled_at, patience(full_run_s))
    # The fill stopped (uncancelled it would run about a whole run on).
    assert stopped_s < stopped_bound(full_run_s), f"the fill ran {stopped_s:.2f} s on (a run: {full_run_s:.2f})"
    await status(lsp)
    assert lsp.applied_edits[before:] == []
