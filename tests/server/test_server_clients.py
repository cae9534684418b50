"""A client without codeAction resolveSupport and without work-done progress, against the real server with the
tiny DiffusionGemma checkpoint: no $/progress is sent, requests during loading are empty at once, and code
actions carry their edit directly."""

from __future__ import annotations

import pytest
import pytest_asyncio
from lsp_helpers import code_actions, open_doc, start, status, wait_ready
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def plain(tiny_checkpoint):
    client, _ = await start(
        ["--model", str(tiny_checkpoint), "--denoising-steps", "8"],
        resolve_edit=False,
        progress=False,
        init_options={"codeActionBudgetMs": 30000, "fallback": False},  # the tiny engine alone
    )
    client.feature("infill/statusChanged")(lambda params: None)
    yield client
    await client.shutdown_session()
    await client.stop()


async def test_requests_while_loading_return_empty_at_once(plain):
    uri = "file:///early.txt"
    open_doc(plain, uri, "Early words here\n", language="plaintext")
    assert (await status(plain))["state"] == "loading"  # torch import + load take seconds; we ask right away
    reply = await plain.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(0, 11),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    assert reply is None
    assert (await status(plain))["state"] == "loading"  # answered without waiting for the load
    assert (await wait_ready(plain))["state"] == "ready"
    assert not plain.progress_reports  # the client did not advertise window.workDoneProgress


async def test_action_is_a_fill_command_without_resolve_support(plain):
    """Listing never runs the model (issue 26): a client that cannot resolve gets the command that fills."""
    await wait_ready(plain)
    uri = "file:///direct.txt"
    text = "Alpha beta gamma\ndelta epsilon\n"
    open_doc(plain, uri, text, language="plaintext", version=5)
    gap = types.Range(start=types.Position(0, 6), end=types.Position(0, 10))  # "beta"
    actions = await code_actions(plain, uri, gap)
    (fill,) = [a for a in actions if a.title == "Fill gap"]
    assert isinstance(fill, types.Command) and fill.command == "infill.fillGap", fill
    (target,) = fill.arguments
    assert target["uri"] == uri and target["version"] == 5
    assert target["range"] == {"start": {"line": 0, "character": 6}, "end": {"line": 0, "character": 10}}
