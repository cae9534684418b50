"""Telemetry in the ecosystem's shape, over the real server (pytest-lsp) with the real tiny DiffusionGemma: the
Copilot-shaped notifications and accept command are counted in infill.status, accepts, partial accepts and
rejections a client does not report are inferred from the didChange that follows, and accepted characters are
measured again after the retain delay (shortened here through INFILL_RETAIN_SECONDS)."""

from __future__ import annotations

import os

import pytest
import pytest_asyncio
from lsp_helpers import (
    apply_edits,
    change_doc,
    log_records,
    log_text,
    open_doc,
    start,
    status,
    utf16_offset,
    wait_ready,
    wait_status,
)
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

RETAIN_SECONDS = 1.5
CONFIG = {"invokedBudgetMs": 30000, "enabledLanguages": ["plaintext"], "maxMiddleTokens": 16, "fallback": False}
ACCEPT = "infill.didAcceptCompletion"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tiny_checkpoint, tmp_path_factory):
    os.environ["INFILL_RETAIN_SECONDS"] = str(RETAIN_SECONDS)  # the server process inherits it
    try:
        client, _ = await start(["--model", str(tiny_checkpoint), "--denoising-steps", "4"], configuration=CONFIG)
    finally:
        del os.environ["INFILL_RETAIN_SECONDS"]
    client.log_path = tmp_path_factory.mktemp("telemetry") / "completions.jsonl"
    client.set_configuration({**CONFIG, "completionLog": str(client.log_path)}, section="infill")
    assert (await wait_ready(client))["state"] == "ready"
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    yield client
    await client.shutdown_session()
    await client.stop()


class Doc:
    """A plaintext document on the server, edited the way an editor would (incremental didChange)."""

    def __init__(self, lsp, name: str, text: str) -> None:
        self.lsp, self.uri, self.text, self.version = lsp, f"file:///{name}.txt", text, 1
        open_doc(lsp, self.uri, text, language="plaintext")

    def edit(self, range_: types.Range, new_text: str) -> None:
        self.text = apply_edits(self.text, [types.TextEdit(range=range_, new_text=new_text)])
        self.version += 1
        change_doc(self.lsp, self.uri, self.version, range_.start, range_.end, new_text)

    def insert(self, position: types.Position, new_text: str) -> None:
        self.edit(types.Range(start=position, end=position), new_text)

    async def suggestion(self, position: types.Position, min_chars: int = 1) -> types.InlineCompletionItem:
        """An item of at least `min_chars` characters (random weights write what they write: ask again)."""
        for _ in range(8):
            reply = await self.lsp.text_document_inline_completion_async(
                types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=self.uri),
                    position=position,
                    context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
                )
            )
            if reply and reply.items and len(reply.items[0].insert_text) >= min_chars:
                return reply.items[0]
        raise AssertionError(f"no suggestion of {min_chars}+ characters: {log_text(self.lsp)[-1500:]}")


def wire(item: types.InlineCompletionItem) -> dict:
    """The item as a client sends it back (JSON)."""
    return {
        "insertText": item.insert_text,
        "command": {"title": item.command.title, "command": item.command.command, "arguments": item.command.arguments},
        "range": {
            "start": {"line": item.range.start.line, "character": item.range.start.character},
            "end": {"line": item.range.end.line, "character": item.range.end.character},
        },
    }


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def plus(n: int, chars: int) -> types.Position:
    return types.Position(line=n, character=chars)


async def counts(lsp) -> dict:
    return (await status(lsp))["telemetry"]


def gained(before: dict, after: dict) -> dict:
    return {key: after[key] - before[key] for key in after if after[key] != before[key]}


async def test_copilot_notifications_and_accept_command_are_counted(lsp):
    doc = Doc(lsp, "notified", "Dear Ann,\nthanks for the\n")
    at = plus(1, 14)
    item = await doc.suggestion(at, min_chars=4)
    assert item.command is not None and item.command.command == ACCEPT and item.command.arguments
    before = await counts(lsp)
    lsp.protocol.notify("textDocument/didShowCompletion", {"item": wire(item)})
    lsp.protocol.notify("textDocument/didShowCompletion", {"item": wire(item)})  # shown again: one suggestion
    # Two characters accepted, said in UTF-16 units (an emoji would count 2 here and 1 character in the count).
    lsp.protocol.notify(
        "textDocument/didPartiallyAcceptCompletion",
        {"item": wire(item), "acceptedLength": utf16_length(item.insert_text[:2])},
    )
    doc.insert(at, item.insert_text[:2])  # the client's own edit for it: the same accept, not a second one
    after_partial = await counts(lsp)
    assert gained(before, after_partial) == {"shown": 1, "accepted": 1, "accepted_partial": 1, "accepted_chars": 2}
    # The rest through the item's command (what the client runs on accept), then the edit it made.
    await lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(command=ACCEPT, arguments=item.command.arguments)
    )
    doc.insert(plus(1, 16), item.insert_text[2:])
    after = await counts(lsp)
    assert gained(after_partial, after) == {
        "accepted": 1,
        "accepted_full": 1,
        "accepted_chars": len(item.insert_text) - 2,
    }


async def settle(lsp) -> None:
    """Counts are the server's, and the server is this module's: wait until every suggestion accepted so far got its
    retained measurement (the timer's record in the completion log), so earlier tests' timers count before."""

    def measured(records: list[dict]) -> bool:
        accepted = {r["itemId"] for r in records if r.get("event") == "accepted" and r.get("itemId")}
        timed = {r["itemId"] for r in records if r.get("event") in ("retained", "retained_unmeasured")}
        return accepted <= timed

    await log_records(lsp.log_path, measured, timeout=20 * RETAIN_SECONDS)


async def test_accept_by_plain_edit_is_inferred_and_retained_is_reported(lsp):
    await settle(lsp)
    doc = Doc(lsp, "typed", "Meeting notes\nThe plan is\n")
    at = plus(1, 11)
    item = await doc.suggestion(at)
    before = await counts(lsp)
    doc.edit(item.range, item.insert_text)  # Tab in a client that reports nothing
    after = await counts(lsp)
    assert gained(before, after) == {"accepted": 1, "accepted_full": 1, "accepted_chars": len(item.insert_text)}
    # Still there after the retain delay: every accepted character retained (waited for, not slept past).
    retained = (await wait_status(lsp, lambda s: s["telemetry"]["retained_measured"] > after["retained_measured"]))[
        "telemetry"
    ]
    assert gained(after, retained) == {
        "retained_measured": 1,
        "retained_of_chars": len(item.insert_text),
        "retained_chars": len(item.insert_text),
    }
    records = await log_records(lsp.log_path, lambda rs: any(r.get("event") == "retained" for r in rs))
    mine = [r for r in records if r["type"] == "telemetry" and r.get("uri") == doc.uri]
    assert [(r["event"], r["source"]) for r in mine] == [("accepted", "edit"), ("retained", "timer")]
    assert mine[1]["retainedChars"] == len(item.insert_text) and mine[1]["delaySeconds"] == RETAIN_SECONDS


async def test_accept_undone_before_the_delay_is_not_retained(lsp):
    await settle(lsp)
    doc = Doc(lsp, "undone", "Shopping list\nWe need\n")
    at = plus(1, 7)
    item = await doc.suggestion(at, min_chars=8)
    before = await counts(lsp)
    doc.edit(item.range, item.insert_text)
    end = utf16_offset(doc.text, at) + len(item.insert_text)
    assert doc.text[utf16_offset(doc.text, at) : end] == item.insert_text
    doc.edit(types.Range(start=at, end=plus(1, 7 + utf16_length(item.insert_text))), "")  # undone at once
    after = (await wait_status(lsp, lambda s: s["telemetry"]["retained_measured"] > before["retained_measured"]))[
        "telemetry"
    ]
    assert gained(before, after) == {
        "accepted": 1,
        "accepted_full": 1,
        "accepted_chars": len(item.insert_text),
        "retained_measured": 1,
        "retained_of_chars": len(item.insert_text),
    }


async def test_partial_accept_and_rejection_are_inferred(lsp):
    doc = Doc(lsp, "partial", "Travel plans\nWe leave on\n")
    at = plus(1, 11)
    item = await doc.suggestion(at, min_chars=4)
    before = await counts(lsp)
    doc.insert(at, item.insert_text[:2])  # a word accepted: two characters in one change
    after = await counts(lsp)
    assert gained(before, after) == {"accepted": 1, "accepted_partial": 1, "accepted_chars": 2}
    # Typing one matching character is typing through, not an accept; then the rest as typed: the whole.
    doc.insert(plus(1, 11 + utf16_length(item.insert_text[:2])), item.insert_text[2])
    assert gained(after, await counts(lsp)) == {}

    # A client that reports what it shows: a suggestion it did not show is not rejected, one it showed is.
    shown = Doc(lsp, "shown", "Travel plans\nWe leave on\n")
    item = await shown.suggestion(at)
    lsp.protocol.notify("textDocument/didShowCompletion", {"item": wire(item) | {"command": None}})  # (by text)
    shown.insert(at, "\u2603" if item.insert_text[0] != "\u2603" else "\u2604")
    other = Doc(lsp, "rejected", "Travel plans\nWe leave on\n")
    item = await other.suggestion(at)
    before = await counts(lsp)
    other.insert(at, "\u2603" if item.insert_text[0] != "\u2603" else "\u2604")  # not what the suggestion starts with
    assert gained(before, await counts(lsp)) == {}
    item = await other.suggestion(plus(1, 12))
    lsp.protocol.notify("textDocument/didShowCompletion", {"item": wire(item)})
    before = await counts(lsp)
    other.insert(plus(1, 12), "\u2603" if item.insert_text[0] != "\u2603" else "\u2604")
    assert gained(before, await counts(lsp)) == {"rejected": 1}
    # Later edits concern no suggestion any more: nothing more is counted.
    other.insert(plus(1, 14), "x")
    assert gained(before, await counts(lsp)) == {"rejected": 1}


async def test_superseded_reply_is_not_rejected_and_bad_params_are_logged(lsp):
    doc = Doc(lsp, "superseded", "Recipe\nMix the\n")
    at = plus(1, 7)
    await doc.suggestion(at)
    before = await counts(lsp)
    await doc.suggestion(at)  # a newer reply while the older one still matched
    assert gained(before, await counts(lsp)) == {"offered": 1, "completions": 1}
    lsp.protocol.notify(
        "textDocument/didPartiallyAcceptCompletion", {"item": {"insertText": "x"}, "acceptedLength": -1}
    )
    lsp.protocol.notify("textDocument/didShowCompletion", {"nothing": 1})
    await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command=ACCEPT, arguments=["no-such"]))
    text = log_text(lsp)
    assert "acceptedLength must be a non-negative integer, got -1" in text
    assert "textDocument/didShowCompletion: params must be {item: InlineCompletionItem" in text
    assert "unknown suggestion ['no-such']" in text
    assert (await status(lsp))["ready"] is True
