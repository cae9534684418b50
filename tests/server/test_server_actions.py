"""Code actions and commands (server/handlers_actions.py): Fill gap, Fill all gaps, infill.fillGap through
workspace/applyEdit, kind filters, infill.toggle, unknown commands.

The real infill-ls server over stdio (pytest-lsp) with the real tiny DiffusionGemma engine (random weights: what it
writes is noise, so tests check positions, versions, ranges and protocol behaviour, not wording). One server for
all the test_server_*.py modules (the `lsp` fixture in conftest.py); each test uses its own document URIs."""

from __future__ import annotations

import pytest
import pytest_asyncio
from lsp_helpers import (
    CONFIG,
    INIT_OPTIONS,
    SERVER_ARGS,
    apply_edits,
    code_actions,
    log_text,
    open_doc,
    start,
    status,
    wait_ready,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException

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
        actions = await lsp.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=rng,
                context=types.CodeActionContext(diagnostics=[], only=only),
            )
        )
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
    ranges = [
        (e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character) for e in change.edits
    ]
    assert ranges == [(2, 5, 2, 13), (4, 11, 4, 19), (4, 23, 4, 26)]
    applied = apply_edits(text, change.edits)
    assert applied.startswith("# Letter\n\nDear ") and applied.endswith(" sharp.\n")
    assert "[[name]]" not in applied and "{{date}}" not in applied


async def test_fill_gap_command_applies_via_workspace_edit(lsp):
    uri = "file:///command.txt"
    text = "one two\nthree four\nfive six\n"
    open_doc(lsp, uri, text, language="plaintext", version=4)
    before = len(lsp.applied_edits)
    reply = await lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="infill.fillGap",
            arguments=[uri, {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 5}}],
        )
    )
    assert reply["applied"] is True, reply
    (edit,) = lsp.applied_edits[before:]
    assert edit.document_changes[0].text_document.version == 4


async def test_toggle_disables_and_enables(lsp):
    uri = "file:///toggle.txt"
    open_doc(lsp, uri, "Some text here\n", language="plaintext")
    off = await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.toggle"))
    assert off["enabled"] is False
    assert (
        await lsp.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(0, 9),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            )
        )
        is None
    )
    assert "completions are disabled" in log_text(lsp)  # refused, and the log says why
    assert any(getattr(c, "enabled", None) is False for c in lsp.status_changes)
    on = await lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(command="infill.toggle", arguments=[True])
    )
    assert on["enabled"] is True


async def test_unknown_command_is_an_error(lsp):
    with pytest.raises(JsonRpcException) as caught:
        await lsp.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.nope"))
    assert "unknown command 'infill.nope'" in str(caught.value)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def unresolving(tiny_checkpoint):
    """A second real server, for a client without codeAction resolveSupport (the shared `lsp` client has it)."""
    client, _ = await start(
        ["--model", str(tiny_checkpoint), *SERVER_ARGS],
        init_options=INIT_OPTIONS,
        configuration=CONFIG,
        resolve_edit=False,
    )
    client.applied_edits = []
    client.feature(types.WORKSPACE_APPLY_EDIT)(
        lambda params: client.applied_edits.append(params.edit) or types.ApplyWorkspaceEditResult(applied=True)
    )
    client.feature("infill/statusChanged")(lambda params: None)
    assert (await wait_ready(client))["state"] == "ready"
    yield client
    await client.shutdown_session()
    await client.stop()


async def test_listing_never_runs_the_model_for_a_client_that_cannot_resolve(unresolving):
    """Issue 26: listing used to resolve every action eagerly (two model runs per listing in Markdown). Now each
    action carries the command that fills it when executed, with the text identity the listing saw."""
    uri = "file:///no-resolve.md"
    text = "# Note\n\nDear [[name]], we meet at ___.\n"
    open_doc(unresolving, uri, text, language="markdown", version=9)
    selection = types.Range(start=types.Position(2, 0), end=types.Position(2, 30))  # the line with both blanks
    before = (await status(unresolving))["pipeline"]
    commands = await code_actions(unresolving, uri, selection)  # no codeActionLiteralSupport: plain Commands
    assert [c.title for c in commands] == ["Fill gap", "Fill all gaps (2)"]
    assert all(isinstance(c, types.Command) for c in commands)
    assert [c.command for c in commands] == ["infill.fillGap", "infill.fillAllGaps"]
    assert (await status(unresolving))["pipeline"] == before  # no fill ran

    fill = commands[0]
    reply = await unresolving.workspace_execute_command_async(
        types.ExecuteCommandParams(command=fill.command, arguments=fill.arguments)
    )
    assert reply["applied"] is True, (reply, log_text(unresolving)[-2000:])
    (edit,) = unresolving.applied_edits
    (change,) = edit.document_changes
    assert change.text_document.version == 9 and [e.range for e in change.edits] == [selection]
    assert (await status(unresolving))["pipeline"] != before  # the counters do see a fill

    unresolving.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=10),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text + "More.\n")],
        )
    )
    fill_all = commands[1]  # listed for version 9: executing it now must not edit version 10
    stale = await unresolving.workspace_execute_command_async(
        types.ExecuteCommandParams(command=fill_all.command, arguments=fill_all.arguments)
    )
    assert stale["applied"] is False and stale["reason"], stale
    assert len(unresolving.applied_edits) == 1
