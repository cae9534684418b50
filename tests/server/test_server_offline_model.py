"""The real server over stdio with a GGUF the user has (issue 49): `--model PATH.gguf` serves it, labelled by its
own name; an `offlineModel` that cannot serve leaves Gemma 3 270M serving, with the reason in the status."""

from __future__ import annotations

import pytest
from lsp_helpers import log_text, open_doc, start, wait_ready
from lsprotocol import types
from tiny_gguf import QWEN_FIM, write_tiny_gguf

pytestmark = [pytest.mark.asyncio(loop_scope="function")]


async def _invoke(client, uri: str, position: types.Position):
    return await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )


async def test_a_gguf_model_path_serves_under_its_own_name(tmp_path):
    model = write_tiny_gguf(tmp_path / "coder.gguf", fim_texts=QWEN_FIM, favourite="x", name="Tiny FIM Coder")
    client, _ = await start(
        ["--model", str(model.path)], init_options={"invokedBudgetMs": 30000, "offlineModelKeystrokes": "yes"}
    )
    try:
        ready = await wait_ready(client, timeout=120)
        assert ready["state"] == "ready" and ready["error"] is None, ready
        assert ready["label"] == "Tiny FIM Coder (fill-in-the-middle)" and ready["backend"] == "gguf:Tiny FIM Coder"
        assert ready["isFallback"] is False and ready["kind"] == "autoregressive"
        uri = "file:///notes.txt"
        open_doc(client, uri, "value: \nend\n", language="plaintext")
        reply = await _invoke(client, uri, types.Position(line=0, character=7))
        assert reply is not None and reply.items and reply.items[0].insert_text.startswith("x"), log_text(client)
    finally:
        await client.shutdown_session()
        await client.stop()


@pytest.mark.slow
async def test_an_offline_model_that_cannot_serve_leaves_gemma_serving(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model\n")
    client, _ = await start([], init_options={"offlineModel": str(bad)})
    try:
        ready = await wait_ready(client, timeout=240)
        assert ready["state"] == "ready", ready
        assert ready["backend"].startswith("gemma3-270m") and ready["isFallback"] is True
        assert str(bad) in ready["error"] and "is not a GGUF file" in ready["error"], ready
    finally:
        await client.shutdown_session()
        await client.stop()
