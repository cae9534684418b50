"""`infill-ls` with no model configured serves the real offline default (Gemma 3 270M), labelled as fallback,
and its inline suggestions land at the cursor in UTF-16 terms."""

from __future__ import annotations

import pytest
import pytest_asyncio
from lsprotocol import types

from lsp_helpers import apply_edits, log_text, open_doc, start, utf16_offset, wait_ready

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def default(tmp_path_factory):
    client, _ = await start([], init_options={"invokedBudgetMs": 30000})
    client.feature("infill/statusChanged")(lambda params: None)
    yield client
    await client.shutdown_session()
    await client.stop()


async def test_offline_default_is_loaded_and_labelled_as_fallback(default):
    ready = await wait_ready(default, timeout=240)
    assert ready["state"] == "ready", ready
    assert ready["kind"] == "autoregressive" and ready["isFallback"] is True and ready["label"]
    kinds = [type(v).__name__ for values in default.progress_reports.values() for v in values]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd"


async def test_inline_suggestion_from_the_default_model(default):
    await wait_ready(default, timeout=240)
    uri = "file:///add.py"
    text = "# somme des entrées 😀\ndef add(a, b):\n    return \n"
    open_doc(default, uri, text)
    position = types.Position(line=2, character=11)
    reply = await default.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=position,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
    assert reply is not None and reply.items, log_text(default)
    item = reply.items[0]
    assert item.range.start == position and item.insert_text.strip()
    applied = apply_edits(text, [types.TextEdit(range=item.range, new_text=item.insert_text)])
    cursor = utf16_offset(text, position)
    assert applied == text[:cursor] + item.insert_text + text[cursor:]
    compile(applied, "add.py", "exec")  # the suggestion leaves valid Python (the watchdog's promise, end to end)
