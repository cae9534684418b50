"""Cheap inline answers, through the real server over stdio (tiny DiffusionGemma; plaintext, whose noise the
watchdog lets through): typing the first characters of a suggestion gets the rest at once without the model, and
a request identical to the one in flight joins it instead of starting the model again."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_helpers import change_doc, log_text, open_doc, start, status, wait_ready
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from server.typed_through import TypedThrough

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tiny_checkpoint):
    client, _ = await start(
        ["--model", str(tiny_checkpoint), "--denoising-steps", "8"],
        init_options={
            "enabledLanguages": ["plaintext"],
            "debounceMs": 40,
            "invokedBudgetMs": 60000,
            "inlineBudgetMs": 60000,
            "fallback": False,  # the tiny engine's own runs
        },
    )
    client.feature("infill/statusChanged")(lambda params: None)
    ready = await wait_ready(client)
    assert ready["state"] == "ready", ready
    yield client
    await client.shutdown_session()
    await client.stop()


def _params(uri: str, position: types.Position, invoked: bool) -> types.InlineCompletionParams:
    kind = types.InlineCompletionTriggerKind.Invoked if invoked else types.InlineCompletionTriggerKind.Automatic
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=position,
        context=types.InlineCompletionContext(trigger_kind=kind),
    )


def _ask(client, uri: str, position: types.Position, invoked: bool = False):
    return client.text_document_inline_completion_async(_params(uri, position, invoked))


def _type(client, uri: str, version: int, position: types.Position, char: str) -> None:
    change_doc(client, uri, version, position, position, char)


IDLE_TIMEOUT_S = 120.0  # only how long to wait before failing: a run here ends far sooner, even on a loaded CPU


async def _idle(client) -> dict:
    """The status once nothing runs (no request in flight, the model thread idle)."""
    end = time.monotonic() + IDLE_TIMEOUT_S
    while True:
        current = await status(client)
        if not current["modelBusy"] and not current["running"]:
            return current
        assert time.monotonic() < end, f"still running after {IDLE_TIMEOUT_S:.0f} s: {current}"
        await asyncio.sleep(0.05)


async def _model_runs(client) -> int:
    """Pipeline runs so far, once the model thread is idle (a stopped run is counted when it ends)."""
    return sum((await _idle(client))["pipeline"]["routes"].values())


# Openings to ask on: random weights write what they write, and a suggestion of under 3 characters cannot be typed
# through twice; the first opening (of these, in order) whose suggestion is long enough is the one used.
OPENINGS = ["", "Note: ", "In short, ", "Then ", "Yes and ", "So "]


async def _suggestion(client, uri: str, text: str) -> tuple[str, str, str]:
    """(uri, text, suggestion) of the first opening + `text` the model suggests 3 or more characters after."""
    seen = []
    for n, opening in enumerate(OPENINGS):
        asked_uri, asked = uri.replace(".txt", f"-{n}.txt"), opening + text
        open_doc(client, asked_uri, asked, language="plaintext")
        reply = await _ask(client, asked_uri, types.Position(0, len(asked)), invoked=True)
        assert reply is not None and reply.items, log_text(client)
        assert reply.items[0].range.start == reply.items[0].range.end == types.Position(0, len(asked))
        seen.append(reply.items[0].insert_text)
        if len(seen[-1]) >= 3:
            return asked_uri, asked, seen[-1]
    raise AssertionError(f"every suggestion was under 3 characters: {seen!r}")


async def test_typing_through_a_suggestion_is_answered_without_the_model(lsp):
    uri, text, suggestion = await _suggestion(lsp, "file:///through.txt", "The quick brown fox ")
    runs = await _model_runs(lsp)
    column = len(text)
    for version, char in enumerate(suggestion[:2], start=2):
        _type(lsp, uri, version, types.Position(0, column), char)
        column += 1
        reply = await _ask(lsp, uri, types.Position(0, column))
        assert reply is not None and reply.items, log_text(lsp)
        item = reply.items[0]
        assert item.insert_text == suggestion[column - len(text) :]
        assert item.range.start == item.range.end == types.Position(0, column)
    current = await status(lsp)
    assert sum(current["pipeline"]["routes"].values()) == runs  # no model run for either keystroke
    assert current["cheapAnswers"]["typedThrough"] >= 2


async def test_a_character_that_differs_from_the_suggestion_goes_to_the_model(lsp):
    uri, text, suggestion = await _suggestion(lsp, "file:///differs.txt", "Our plan for the week ")
    runs = await _model_runs(lsp)
    other = "Q" if suggestion[0] != "Q" else "Z"
    _type(lsp, uri, 2, types.Position(0, len(text)), other)
    await _ask(lsp, uri, types.Position(0, len(text) + 1))
    assert await _model_runs(lsp) == runs + 1


async def test_an_identical_request_after_a_cancel_joins_the_run_in_flight(lsp):
    """VS Code cancels its request and asks again for the same text and position (e.g. on a re-trigger): the
    model run in flight answers the second request; before, a second run started from scratch."""
    uri, text = "file:///join.txt", "Remember to water the plants and "
    open_doc(lsp, uri, text, language="plaintext")
    runs = await _model_runs(lsp)
    position = types.Position(0, len(text))
    first = asyncio.wrap_future(
        lsp.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, _params(uri, position, True), msg_id="join-first"
        )
    )
    first.add_done_callback(lambda f: f.exception())  # answered "cancelled": expected
    await status(lsp)  # answered after the first request was taken up (messages are handled in order)
    lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="join-first"))
    second = await _ask(lsp, uri, position, invoked=True)
    assert second is not None and second.items, log_text(lsp)
    current = await status(lsp)
    assert sum(current["pipeline"]["routes"].values()) == runs + 1 and current["cheapAnswers"]["joined"] >= 1


async def test_a_cancelled_request_nobody_rejoins_stops_the_model(lsp):
    uri, text = "file:///abandon.txt", "Please send the invoice to "
    open_doc(lsp, uri, text, language="plaintext")
    future = asyncio.wrap_future(
        lsp.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, _params(uri, types.Position(0, len(text)), True), msg_id="abandon"
        )
    )
    future.add_done_callback(lambda f: f.exception())
    lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="abandon"))
    with pytest.raises(JsonRpcException) as caught:
        await future
    assert caught.value.code == types.LSPErrorCodes.RequestCancelled.value
    await _idle(lsp)


def test_typed_through_unit_rules():
    """The remembered suggestion answers only the exact text it was computed for plus a typed prefix of it."""
    memory = TypedThrough()
    text = "x = compute(\n"
    memory.remember("u", text, 12, 12, 12, "a, b)")
    assert memory.answer("u", text, 12).insert == "a, b)"  # asked again, nothing typed
    hit = memory.answer("u", "x = compute(a\n", 13)
    assert (hit.insert, hit.cursor, hit.end) == (", b)", 13, 13)
    assert memory.answer("u", "x = compute(a,\n", 14).insert == " b)"  # from the new last suggestion
    assert memory.answer("u", "x = compute(a,X\n", 15) is None  # a different character
    assert memory.answer("u", "y = compute(a, \n", 15) is None  # an edit elsewhere
    assert memory.answer("u", "x = compute(a, b)\n", 17) is None  # all typed: nothing left
    memory.remember("u", text, 12, 11, 12, "(a)")  # a fill that rewrites text before the cursor
    assert memory.answer("u", text, 12) is None


async def test_an_identical_request_without_a_cancel_takes_the_run_over(lsp):
    """A client that re-asks without cancelling: the newest request gets the run's answer, the older one nothing
    (as a superseded request), and the model ran once."""
    uri, text = "file:///takeover.txt", "The train leaves at noon, so "
    open_doc(lsp, uri, text, language="plaintext")
    runs = await _model_runs(lsp)
    position = types.Position(0, len(text))
    older = asyncio.wrap_future(
        lsp.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, _params(uri, position, True))
    )  # sent now
    await status(lsp)  # answered after the older request was taken up (messages are handled in order)
    newer = await _ask(lsp, uri, position, invoked=True)
    assert await older is None
    assert newer is not None and newer.items, log_text(lsp)
    assert await _model_runs(lsp) == runs + 1
