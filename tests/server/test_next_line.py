"""The next line's suggestion computed ahead (server/next_line.py), through the real server over stdio with the real
offline default (Gemma 3 270M): an Enter starts it with no request, the request on the new line and the first keys
typed into its suggestion are answered from it without another model run, a suggestion accepted to its line's end
starts it for the line an Enter opens next, and any other edit cancels it."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_helpers import change_doc, log_text, open_doc, start, status, wait_ready
from lsprotocol import types

from server.next_line import Ahead

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

SOURCE = "import math\n\n\ndef mean(values):\n    total = math.fsum(values)\n"
END = (4, len("    total = math.fsum(values)"))  # the Enter goes at the end of the function's last line
IDLE_TIMEOUT_S = 120.0  # only how long to wait before failing, not a speed


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp():
    client, _ = await start([], init_options={"inlineBudgetMs": 60000, "invokedBudgetMs": 60000})
    client.feature("infill/statusChanged")(lambda params: None)
    ready = await wait_ready(client, timeout=240)
    assert ready["state"] == "ready", ready
    yield client
    await client.shutdown_session()
    await client.stop()


class Editor:
    """One open document and the edits and automatic requests an editor sends."""

    def __init__(self, client, uri: str, text: str) -> None:
        self.client, self.uri, self.text, self.version = client, uri, text, 1
        open_doc(client, uri, text)

    def insert(self, line: int, character: int, new: str) -> None:
        self.replace(line, character, line, character, new)

    def replace(self, line: int, start: int, end_line: int, end: int, new: str) -> None:
        lines = self.text.split("\n")
        a = sum(len(x) + 1 for x in lines[:line]) + start
        b = sum(len(x) + 1 for x in lines[:end_line]) + end
        self.text = self.text[:a] + new + self.text[b:]
        self.version += 1
        change_doc(self.client, self.uri, self.version, types.Position(line, start), types.Position(end_line, end), new)

    async def ask(self, line: int, character: int):
        return await self.client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=self.uri),
                position=types.Position(line, character),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            )
        )


async def idle(client) -> dict:
    end = time.monotonic() + IDLE_TIMEOUT_S
    while True:
        current = await status(client)
        if not current["modelBusy"] and not current["running"]:
            return current
        assert time.monotonic() < end, current
        await asyncio.sleep(0.05)


def runs(current: dict) -> int:
    return sum(current["pipeline"]["routes"].values())


async def test_an_enter_starts_the_next_lines_suggestion_and_its_first_keys_are_answered_from_it(lsp):
    editor = Editor(lsp, "file:///enter.py", SOURCE)
    before = await idle(lsp)
    editor.insert(*END, "\n    ")  # Enter: the new line 5, indented
    reply = await editor.ask(5, 4)
    after = await idle(lsp)
    assert after["cheapAnswers"]["nextLineStarted"] == before["cheapAnswers"]["nextLineStarted"] + 1
    assert runs(after) == runs(before) + 1  # the speculation's run, and no other
    assert reply is not None and reply.items and reply.items[0].insert_text.strip(), log_text(lsp)
    assert after["cheapAnswers"]["nextLine"] == before["cheapAnswers"]["nextLine"] + 1
    suggestion = reply.items[0].insert_text
    assert reply.items[0].range.start == types.Position(5, 4)
    editor.insert(5, 4, suggestion[0])  # the first key typed into it: the rest, at once
    typed = await editor.ask(5, 5)
    assert typed is not None and typed.items[0].insert_text == suggestion[1:]
    assert runs(await idle(lsp)) == runs(before) + 1


async def test_any_other_edit_cancels_it_and_the_new_line_is_computed_as_usual(lsp):
    editor = Editor(lsp, "file:///other.py", SOURCE)
    before = await idle(lsp)
    editor.insert(*END, "\n    ")
    editor.insert(0, 0, "# averages\n")  # another edit, elsewhere: the new line is now line 6
    reply = await editor.ask(6, 4)
    after = await idle(lsp)
    assert after["cheapAnswers"]["nextLineStarted"] == before["cheapAnswers"]["nextLineStarted"] + 1
    assert after["cheapAnswers"]["nextLine"] == before["cheapAnswers"]["nextLine"]
    assert reply is not None and reply.items, log_text(lsp)  # computed by the request itself


async def test_a_suggestion_accepted_to_its_lines_end_starts_the_line_an_enter_opens(lsp):
    text = "import math\n\n\ndef mean(values):\n    total = math."
    editor = Editor(lsp, "file:///accept.py", text)
    shown = await editor.ask(4, len("    total = math."))
    assert shown is not None and shown.items and "\n" not in shown.items[0].insert_text, log_text(lsp)
    suggestion = shown.items[0].insert_text
    before = await idle(lsp)
    editor.insert(4, len("    total = math."), suggestion)  # accepted: the line is complete
    started = (await status(lsp))["cheapAnswers"]["nextLineStarted"]
    assert started == before["cheapAnswers"]["nextLineStarted"] + 1
    editor.insert(4, len("    total = math.") + len(suggestion), "\n    ")  # the Enter it foresaw: it stands
    reply = await editor.ask(5, 4)
    after = await idle(lsp)
    assert after["cheapAnswers"]["nextLineStarted"] == started
    assert reply is not None and reply.items and reply.items[0].insert_text.strip(), log_text(lsp)
    assert after["cheapAnswers"]["nextLine"] == before["cheapAnswers"]["nextLine"] + 1
    assert runs(after) == runs(before) + 1  # computed before the Enter, and not again


def test_a_speculation_covers_its_text_with_characters_typed_at_its_cursor_only():
    ahead = Ahead("file:///x.py", "a\n    \nb", 6, budget_s=1.0)
    assert ahead.covers("a\n    \nb", 6) and ahead.covers("a\n    re\nb", 8)
    assert not ahead.covers("a\n    re\nb", 7)  # the cursor is not after what was typed
    assert not ahead.covers("x\n    re\nb", 8) and not ahead.covers("a\n    \n\nb", 7)
