"""Inline completions (server/handlers_inline.py): UTF-16 ranges, supersession during the debounce, context
and prompt prepared ahead, region parsing while typing in a large file, a backend out of GPU memory.

The real infill-ls server over stdio (pytest-lsp) with the real tiny DiffusionGemma engine (random weights: what it
writes is noise, so tests check positions, versions, ranges and protocol behaviour, not wording). One server for
all the test_server_*.py modules (the `lsp` fixture in conftest.py); each test uses its own document URIs."""

from __future__ import annotations

import asyncio

import pytest
from lsp_helpers import CONFIG, apply_edits, change_doc, log_records, log_text, open_doc, status, utf16_offset
from lsprotocol import types

from infill.types import UNSTEERED
from server.settings import Settings

P = types.Position

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_inline_item_range_on_line_with_surrogate_pairs_and_crlf(lsp):
    uri = "file:///inline_utf16.txt"
    text = 'Notes café 🎉🎉\r\ns = "😀😀" + x\r\nThe plan is\r\nsimple.\r\n'
    open_doc(lsp, uri, text, language="plaintext")
    # Line 1, after the two emoji and the closing quote: UTF-16 column 10 (each emoji is 2 units).
    position = types.Position(line=1, character=10)
    assert text[utf16_offset(text, position) - 1] == '"'
    reply = await lsp.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    assert reply is not None and reply.items, log_text(lsp)[-2000:]
    item = reply.items[0]
    assert item.range.start == position and item.range.end == position
    assert item.insert_text.strip()
    # The server's UTF-16 range round-trips: inserting at it keeps the surrounding text intact.
    applied = apply_edits(text, [types.TextEdit(range=item.range, new_text=item.insert_text)])
    assert applied.startswith(text[: utf16_offset(text, position)]) and applied.endswith(
        text[utf16_offset(text, position) :]
    )


async def test_newer_automatic_request_supersedes_older(lsp):
    uri = "file:///burst.py"
    open_doc(lsp, uri, "total = 0\nfor i in range(10):\n    total += \n")
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(2, 13),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
    )

    # A debounce no stall of a loaded machine outlasts, so the second request always comes within the first's
    # (pushed settings apply before the messages after them are handled).
    lsp.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {**CONFIG, "debounceMs": 2000}})
    )
    try:
        before = (await status(lsp))["telemetry"]["completions"]
        first = asyncio.wrap_future(lsp.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params))
        second = await lsp.text_document_inline_completion_async(params)  # sent after the first
        assert await first is None  # superseded during its debounce: no model run, empty
        assert second is None or second.items[0].range.start == types.Position(2, 13)
        assert (await status(lsp))["telemetry"]["completions"] == before + 1  # one engine run for two requests
    finally:
        lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"infill": CONFIG}))


async def test_automatic_request_builds_its_context_and_encodes_its_prompt_during_the_debounce(lsp, tmp_path):
    log_path = tmp_path / "ahead.jsonl"
    lsp.set_configuration({**CONFIG, "completionLog": str(log_path)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    for uri, kind in (
        ("file:///ahead.txt", types.InlineCompletionTriggerKind.Automatic),
        ("file:///invoked.txt", types.InlineCompletionTriggerKind.Invoked),
    ):
        open_doc(lsp, uri, "Dear team,\n    thanks for the notes on the plan; we will", language="plaintext")
        # a word typed after the prompt warmed at didOpen (server/warming.py), on the line it warmed (a keystroke on
        # another line would be a jump, which warms the prompt there at once): its tail is new to the engine
        change_doc(lsp, uri, 2, types.Position(1, 47), types.Position(1, 47), " send")
        await lsp.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(1, 52),
                context=types.InlineCompletionContext(trigger_kind=kind),
            )
        )
    logged = await log_records(log_path, lambda rs: sum(r["type"] == "completion" for r in rs) >= 2)
    records = {r["uri"]: r["pipeline"] for r in logged if r["type"] == "completion"}
    ahead, invoked = records["file:///ahead.txt"], records["file:///invoked.txt"]
    # Only the automatic request had its context built and its whole prompt encoded before its model run; the
    # invoked one encodes at least its new tail in its run.
    assert ahead["context_ahead"] and ahead["prompt_tokens"] > 0 and ahead["reused_tokens"] == ahead["prompt_tokens"]
    assert not invoked["context_ahead"] and 0 <= invoked["reused_tokens"] < invoked["prompt_tokens"]


async def test_typing_in_a_large_file_parses_a_region_and_answers_every_request(lsp, tmp_path):
    """5,000 lines (past the region-parsing threshold): keys typed with automatic requests are each computed for
    their own version (none discarded), from a region of the file after its first whole parse, with the context
    built and the prompt encoded during the debounce, and nothing fails."""
    log_path = tmp_path / "big.jsonl"
    lsp.set_configuration({**CONFIG, "completionLog": str(log_path)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    uri = "file:///big_module.py"
    lines = [
        line for i in range(1250) for line in (f"def f{i}(a, b):", f"    total = a + b * {i}", "    return total", "")
    ]
    open_doc(lsp, uri, "\n".join(lines) + "\n")
    row, column = 2501, len(lines[2501])
    automatic = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)
    for version in range(2, 8):
        change_doc(lsp, uri, version, types.Position(row, column), types.Position(row, column), "x")
        column += 1
        await lsp.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(row, column),
                context=automatic,
            )
        )
    records = [
        r
        for r in await log_records(log_path, lambda rs: sum(r.get("uri") == uri for r in rs) >= 6)
        if r["type"] == "completion" and r["uri"] == uri
    ]
    assert [r["version"] for r in records] == list(range(2, 8))
    assert all(r["outcome"] != "discarded" for r in records)
    size = len("\n".join(lines)) + 1
    # the first parse is whole (it finds the cuts): for the warm of the prompt when the document opened
    # (server/warming.py), or for the first key where that warm was cancelled first; then each key parses a region
    regions = [r["pipeline"]["syntax_region"] for r in records]
    assert regions[0] is None or 0 < regions[0][1] - regions[0][0] < size / 2
    assert all(0 < b - a < size / 2 for a, b in regions[1:])
    assert all(r["pipeline"]["context_ahead"] for r in records)
    assert all(r["pipeline"]["prompt_tokens"] == r["pipeline"]["reused_tokens"] > 1000 for r in records)
    assert "failed" not in log_text(lsp)


class _OutOfMemoryBackend:
    """A GPU running out of memory cannot happen on this CPU-only machine: this backend raises the error torch
    raises then, so the server's handling of it is exercised in-process (the only double in the server tests)."""

    def __init__(self) -> None:
        from infill.types import BackendInfo

        self.info = BackendInfo(name="oom-double", kind="diffusion", model="none")
        self.calls = 0

    def infill(self, request, control=UNSTEERED):
        import torch

        self.calls += 1
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def close(self) -> None:
        pass


async def test_backend_out_of_memory_is_caught_and_the_server_keeps_serving():
    from infill.loader import Opened
    from infill.pipeline import Pipeline
    from server.handlers_inline import complete_inline
    from server.main import create_server

    server = create_server(Settings(debounce_ms=0))
    backend = _OutOfMemoryBackend()
    server.host._loaded = Opened(Pipeline(backend), (backend,))
    server.host.state = "ready"
    server.documents.open(
        types.TextDocumentItem(uri="file:///m.txt", language_id="plaintext", version=1, text="Some words to go on\n")
    )
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///m.txt"),
        position=P(0, 19),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
    )
    for _ in range(2):  # and again: still serving
        assert await complete_inline(server, params) is None
    assert backend.calls == 2 and server.status()["ready"] is True
    assert server.telemetry.counts["empty"] == 2
    server.host.close()
