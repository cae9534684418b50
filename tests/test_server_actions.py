"""Code actions and commands (server/handlers_actions.py): Fill gap, Fill all gaps, infill.fillGap through
workspace/applyEdit, kind filters, infill.toggle, unknown commands.

The real infill-ls server over stdio (pytest-lsp) with the real tiny DiffusionGemma engine (random weights: what it
writes is noise, so tests check positions, versions, ranges and protocol behaviour, not wording). One server for
all the test_server_*.py modules (the `lsp` fixture in conftest.py); each test uses its own document URIs."""

from __future__ import annotations

import time

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_helpers import apply_edits, code_actions, log_text, open_doc

pytestmark = pytest.mark.asyncio(loop_scope="session")


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
