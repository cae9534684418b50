"""The real infill-ls server over stdio (pytest-lsp) with the real tiny DiffusionGemma engine (random weights:
what it writes is noise, so tests check positions, versions, ranges and protocol behaviour, not wording).
One server for the whole module; each test uses its own document URIs."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_helpers import (apply_edits, code_actions, log_records, log_text, open_doc, start, status, utf16_offset,
                         wait_ready)

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Budgets are generous: the tiny engine runs on a shared 2-core CPU, and a fill cut short by its deadline is
# (rightly) not shown. Python text from random weights never parses, so the watchdog rejects it: fills that must
# produce text use plaintext/Markdown documents.
INIT_OPTIONS = {"inlineBudgetMs": 400, "debounceMs": 40, "enabled": "yes", "bogusKey": 1}
CONFIG = {"invokedBudgetMs": 30000, "codeActionBudgetMs": 30000,
          "enabledLanguages": ["python", "markdown", "plaintext"]}
SERVER_ARGS = ["--denoising-steps", "8"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tiny_checkpoint):
    client, result = await start(["--model", str(tiny_checkpoint), *SERVER_ARGS], init_options=INIT_OPTIONS,
                                 configuration=CONFIG)
    client.init_result = result
    client.status_changes = []
    client.feature("infill/statusChanged")(lambda params: client.status_changes.append(params))
    client.applied_edits = []
    client.feature(types.WORKSPACE_APPLY_EDIT)(
        lambda params: client.applied_edits.append(params.edit) or types.ApplyWorkspaceEditResult(applied=True))
    ready = await wait_ready(client)
    assert ready["state"] == "ready", ready
    yield client
    await client.shutdown_session()
    await client.stop()


async def test_capabilities(lsp):
    caps = lsp.init_result.capabilities
    assert caps.inline_completion_provider is not None and caps.inline_completion_provider is not False
    sync = caps.text_document_sync
    assert getattr(sync, "change", sync) == types.TextDocumentSyncKind.Incremental
    assert caps.code_action_provider.resolve_provider is True
    assert list(caps.code_action_provider.code_action_kinds) == [types.CodeActionKind.RefactorRewrite]
    assert set(caps.execute_command_provider.commands) == {"infill.status", "infill.fillGap", "infill.fillAllGaps",
                                                           "infill.toggle"}


async def test_startup_progress_and_status(lsp):
    reports = [values for values in lsp.progress_reports.values() if values]
    assert reports, "no $/progress at start-up"
    kinds = [type(v).__name__ for v in reports[0]]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd", kinds
    current = await status(lsp)
    assert current["ready"] is True and current["kind"] == "diffusion" and current["isFallback"] is False
    assert current["error"] is None and current["enabled"] is True
    assert {"p50_ms", "p95_ms", "count"} <= set(current["latencies"])
    states = [getattr(change, "state", None) for change in lsp.status_changes]
    assert "ready" in states, states


async def test_unknown_and_ill_typed_settings_are_logged(lsp):
    text = log_text(lsp)
    assert "unknown setting infill.bogusKey" in text
    assert "infill.enabled must be true or false" in text
    # Pushed settings (Neovim style: settings.infill) are applied as they are, ill-typed keys logged.
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"infill": {**CONFIG, "debounceMs": "slow"}}))
    await status(lsp)  # a round trip: the notification before it has been handled
    assert "infill.debounceMs must be an integer, got 'slow'; kept 40 (from didChangeConfiguration)" in \
        log_text(lsp)


async def test_inline_item_range_on_line_with_surrogate_pairs_and_crlf(lsp):
    uri = "file:///inline_utf16.txt"
    text = "Notes café 🎉🎉\r\ns = \"😀😀\" + x\r\nThe plan is\r\nsimple.\r\n"
    open_doc(lsp, uri, text, language="plaintext")
    # Line 1, after the two emoji and the closing quote: UTF-16 column 10 (each emoji is 2 units).
    position = types.Position(line=1, character=10)
    assert text[utf16_offset(text, position) - 1] == '"'
    reply = await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=position,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
    assert reply is not None and reply.items, log_text(lsp)[-2000:]
    item = reply.items[0]
    assert item.range.start == position and item.range.end == position
    assert item.insert_text.strip()
    # The server's UTF-16 range round-trips: inserting at it keeps the surrounding text intact.
    applied = apply_edits(text, [types.TextEdit(range=item.range, new_text=item.insert_text)])
    assert applied.startswith(text[:utf16_offset(text, position)]) and applied.endswith(text[utf16_offset(text,
                                                                                                        position):])


async def test_fill_gap_action_carries_version_and_applies(lsp):
    uri = "file:///gap.txt"
    text = "The area is\n    given by 3.14159 * r * r\n\nfor a circle.\n"
    open_doc(lsp, uri, text, language="plaintext", version=7)
    gap = types.Range(start=types.Position(1, 13), end=types.Position(1, 20))  # "3.14159"
    actions = await code_actions(lsp, uri, gap)
    fill = next(a for a in actions if a.title == "Fill gap")
    assert fill.kind == types.CodeActionKind.RefactorRewrite and fill.edit is None  # listing does no model work
    resolved = await lsp.code_action_resolve_async(fill)
    assert resolved.edit is not None, log_text(lsp)[-2000:]
    (change,) = resolved.edit.document_changes
    assert change.text_document.uri == uri and change.text_document.version == 7
    (edit,) = change.edits
    assert edit.range == gap
    applied = apply_edits(text, change.edits)
    assert applied.startswith("The area is\n    given by") and applied.endswith(" * r * r\n\nfor a circle.\n")


async def test_code_action_kinds_filter(lsp):
    uri = "file:///kinds.txt"
    open_doc(lsp, uri, "one two three\n", language="plaintext")
    rng = types.Range(start=types.Position(0, 4), end=types.Position(0, 7))

    async def titles(only):
        actions = await lsp.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=rng,
            context=types.CodeActionContext(diagnostics=[], only=only)))
        return [a.title for a in actions or []]

    assert await titles([types.CodeActionKind.Refactor]) == ["Fill gap"]
    assert await titles([types.CodeActionKind.QuickFix]) == []


async def test_newer_automatic_request_supersedes_older(lsp):
    uri = "file:///burst.py"
    open_doc(lsp, uri, "total = 0\nfor i in range(10):\n    total += \n")

    def ask():
        return lsp.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(2, 13),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))

    before = (await status(lsp))["telemetry"]["completions"]
    first = asyncio.ensure_future(ask())
    await asyncio.sleep(0.01)  # inside the 40 ms debounce of the first
    second = await ask()
    assert await first is None  # superseded during its debounce: no model run, empty
    assert second is None or second.items[0].range.start == types.Position(2, 13)
    assert (await status(lsp))["telemetry"]["completions"] == before + 1  # one engine run for two requests


async def test_markdown_fill_all_gaps(lsp):
    uri = "file:///letter.md"
    text = "# Letter\n\nDear [[name]],\n\nWe meet on {{date}} at ___ sharp.\n"
    open_doc(lsp, uri, text, language="markdown", version=3)
    whole = types.Range(start=types.Position(0, 0), end=types.Position(0, 0))
    actions = await code_actions(lsp, uri, whole)
    fill_all = next(a for a in actions if a.title.startswith("Fill all gaps"))
    assert fill_all.title == "Fill all gaps (3)"
    resolved = await lsp.code_action_resolve_async(fill_all)
    assert resolved.edit is not None, log_text(lsp)[-2000:]
    (change,) = resolved.edit.document_changes
    assert change.text_document.version == 3
    ranges = [(e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character)
              for e in change.edits]
    assert ranges == [(2, 5, 2, 13), (4, 11, 4, 19), (4, 23, 4, 26)]
    applied = apply_edits(text, change.edits)
    assert applied.startswith("# Letter\n\nDear ") and applied.endswith(" sharp.\n")
    assert "[[name]]" not in applied and "{{date}}" not in applied


async def test_fill_gap_command_applies_via_workspace_edit(lsp):
    uri = "file:///command.txt"
    text = "one two\nthree four\nfive six\n"
    open_doc(lsp, uri, text, language="plaintext", version=4)
    before = len(lsp.applied_edits)
    reply = await lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="infill.fillGap", arguments=[uri, {"start": {"line": 1, "character": 4},
                                                   "end": {"line": 1, "character": 5}}]))
    assert reply["applied"] is True, reply
    (edit,) = lsp.applied_edits[before:]
    assert edit.document_changes[0].text_document.version == 4


async def test_toggle_disables_and_enables(lsp):
    uri = "file:///toggle.txt"
    open_doc(lsp, uri, "Some text here\n", language="plaintext")
    off = await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.toggle"))
    assert off["enabled"] is False
    started = time.monotonic()
    assert await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 9),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))) is None
    assert time.monotonic() - started < 1.0 and "completions are disabled" in log_text(lsp)
    assert any(getattr(c, "enabled", None) is False for c in lsp.status_changes)
    on = await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.toggle",
                                                                              arguments=[True]))
    assert on["enabled"] is True


async def test_unknown_command_is_an_error(lsp):
    with pytest.raises(JsonRpcException) as caught:
        await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.nope"))
    assert "unknown command 'infill.nope'" in str(caught.value)


async def test_bad_input_does_not_kill_the_server(lsp):
    uri = "file:///bad.py"
    open_doc(lsp, uri, "a = 1\n")
    invoked = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)
    # A position far beyond the document: clamped (logged), never an exception.
    await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(999, 999), context=invoked))
    assert "clamped" in log_text(lsp)
    # A document that was never opened.
    assert await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///never.py"), position=types.Position(0, 0),
        context=invoked)) is None
    # Binary content and a 10 MB document: refused politely.
    open_doc(lsp, "file:///binary.py", "abc\x00def\n")
    open_doc(lsp, "file:///huge.py", "x = 1\n" * (10 * 2**20 // 6))
    for big in ("file:///binary.py", "file:///huge.py"):
        assert await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=big), position=types.Position(0, 1),
            context=invoked)) is None
    text = log_text(lsp)
    assert "NUL bytes" in text and "maxDocumentChars" in text
    # A selection spanning the whole file: no "Fill gap" (nothing around it), and the server answers.
    actions = await lsp.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(0, 0), end=types.Position(1, 0)),
        context=types.CodeActionContext(diagnostics=[])))
    assert not actions
    # A malformed command argument gets a clear answer.
    reply = await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.fillGap",
                                                                                 arguments=[42]))
    assert reply["applied"] is False and "arguments" in reply["reason"]
    # Still serving.
    assert (await status(lsp))["ready"] is True


async def test_telemetry_counted_and_logged(lsp, tmp_path):
    log_path = tmp_path / "completions.jsonl"
    lsp.set_configuration({**CONFIG, "completionLog": str(log_path)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    before = (await status(lsp))["telemetry"]
    for event in ({"event": "shown", "uri": "file:///t.py", "version": 1},
                  {"event": "accepted", "uri": "file:///t.py", "version": 1, "acceptedChars": 3, "totalChars": 9,
                   "partial": True},
                  {"event": "rejected", "uri": "file:///t.py", "version": 1}):
        lsp.protocol.notify("infill/telemetry", event)
    uri = "file:///logged.txt"
    open_doc(lsp, uri, "Dear h,\n    thanks for 4\n", language="plaintext")
    await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(1, 12),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
    after = (await status(lsp))["telemetry"]
    assert after["shown"] == before["shown"] + 1 and after["rejected"] == before["rejected"] + 1
    assert after["accepted_partial"] == before["accepted_partial"] + 1
    records = await log_records(log_path, lambda rs: any(r["type"] == "completion" for r in rs))
    assert [r["event"] for r in records if r["type"] == "telemetry"] == ["shown", "accepted", "rejected"]
    (completion,) = [r for r in records if r["type"] == "completion"]
    assert completion["uri"] == uri and completion["version"] == 1 and "denoise" in completion["latency_ms"]
    assert completion["versions"].get("model")
    pipeline = completion["pipeline"]  # PipelineResult.to_log(): how the pipeline got there
    assert pipeline["route"] == completion["route"] and pipeline["language"] == "plaintext"
    assert pipeline["context_ms"] >= 0 and pipeline["max_middle_tokens"] > 0 and "costs_ms" in pipeline
    counters = (await status(lsp))["pipeline"]  # routes and watchdog verdicts
    assert sum(counters["routes"].values()) >= 1 and counters["checked"] >= 0
    assert all(isinstance(n, int) for n in counters["rejected"].values())


async def test_bad_model_puts_server_in_error_state_and_it_recovers(lsp, tiny_checkpoint):
    counters = (await status(lsp))["pipeline"]
    lsp.set_configuration({**CONFIG, "model": "/nonexistent/checkpoint"}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    failed = await wait_ready(lsp, timeout=60, state="error")
    assert failed["state"] == "error" and "nonexistent" in failed["error"]
    uri = "file:///while_broken.py"
    open_doc(lsp, uri, "a = 1\n")
    started = time.monotonic()
    assert await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 5),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))) is None
    assert time.monotonic() - started < 1.0  # empty at once, no model
    lsp.set_configuration({**CONFIG, "model": str(tiny_checkpoint)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    recovered = await wait_ready(lsp, timeout=60)
    assert recovered["state"] == "ready"
    assert recovered["pipeline"] == counters  # the reloaded pipeline continues the old one's counters


async def test_automatic_request_builds_its_context_and_encodes_its_prompt_during_the_debounce(lsp, tmp_path):
    log_path = tmp_path / "ahead.jsonl"
    lsp.set_configuration({**CONFIG, "completionLog": str(log_path)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    for uri, kind in (("file:///ahead.txt", types.InlineCompletionTriggerKind.Automatic),
                      ("file:///invoked.txt", types.InlineCompletionTriggerKind.Invoked)):
        open_doc(lsp, uri, "Dear team,\n    thanks for the notes on the plan; we will\n", language="plaintext")
        await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(1, 47),
            context=types.InlineCompletionContext(trigger_kind=kind)))
    logged = await log_records(log_path, lambda rs: sum(r["type"] == "completion" for r in rs) >= 2)
    records = {r["uri"]: r["pipeline"] for r in logged if r["type"] == "completion"}
    ahead, invoked = records["file:///ahead.txt"], records["file:///invoked.txt"]
    # Both documents are new to the engine: only the automatic one had its prompt encoded before its model run.
    assert ahead["context_ahead"] and ahead["prompt_tokens"] > 0 and ahead["reused_tokens"] == ahead["prompt_tokens"]
    assert not invoked["context_ahead"] and invoked["prompt_tokens"] > 0 and invoked["reused_tokens"] == 0


async def test_typing_in_a_large_file_parses_a_region_and_answers_every_request(lsp, tmp_path):
    """5,000 lines (past the region-parsing threshold): keys typed with automatic requests are each computed for
    their own version (none discarded), from a region of the file after its first whole parse, with the context
    built and the prompt encoded during the debounce, and nothing fails."""
    log_path = tmp_path / "big.jsonl"
    lsp.set_configuration({**CONFIG, "completionLog": str(log_path)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    uri = "file:///big_module.py"
    lines = [line for i in range(1250) for line in (f"def f{i}(a, b):", f"    total = a + b * {i}", "    return total",
                                                    "")]
    open_doc(lsp, uri, "\n".join(lines) + "\n")
    row, column = 2501, len(lines[2501])
    automatic = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)
    for version in range(2, 8):
        lsp.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(row, column), end=types.Position(row, column)), text="x")]))
        column += 1
        await lsp.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(row, column),
            context=automatic))
    records = [r for r in await log_records(log_path, lambda rs: sum(r.get("uri") == uri for r in rs) >= 6)
               if r["type"] == "completion" and r["uri"] == uri]
    assert [r["version"] for r in records] == list(range(2, 8))
    assert all(r["outcome"] != "discarded" for r in records)
    size = len("\n".join(lines)) + 1
    assert records[0]["pipeline"]["syntax_region"] is None  # the first parse is whole (it finds the cuts)
    assert all(0 < b - a < size / 2 for a, b in (r["pipeline"]["syntax_region"] for r in records[1:]))
    assert all(r["pipeline"]["context_ahead"] for r in records)
    assert all(r["pipeline"]["prompt_tokens"] == r["pipeline"]["reused_tokens"] > 1000 for r in records)
    assert "failed" not in log_text(lsp)
