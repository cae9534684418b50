"""Fallback by default (issue 39, item 4): with a DiffusionGemma checkpoint and default settings, a fill the watchdog
rejects is answered by the conventional model, the offline default Gemma 3 270M loaded beside it, and labelled as
such in `infill.status` and the completion log; with `fallback: false` the same request shows nothing.

The checkpoint is tiny and made to stutter (infill/testing/tiny_checkpoint.py `make_stutter`): every canvas slot
writes " return", whatever the prompt, so every fill it writes is rejected for repetition."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_helpers import (
    apply_edits,
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

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

TEXT = "def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return \n"
POSITION = types.Position(line=5, character=11)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(stutter_checkpoint, tmp_path_factory):
    """The real server on the stutter checkpoint, with default settings but for where the completion log goes."""
    completion_log = tmp_path_factory.mktemp("fallback-log") / "completions.jsonl"
    client, _ = await start(["--model", str(stutter_checkpoint)], init_options={"completionLog": str(completion_log)})
    client.completion_log = completion_log
    client.feature("infill/statusChanged")(lambda params: None)
    yield client
    await client.shutdown_session()
    await client.stop()


async def _invoke(client, uri: str):
    return await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=POSITION,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )


async def _record(client, uri: str) -> dict:
    records = await log_records(
        client.completion_log, lambda found: any(r.get("uri") == uri for r in found), timeout=30
    )
    found = [r for r in records if r.get("uri") == uri and r.get("pipeline")]
    assert found, f"no completion logged for {uri}"
    return found[-1]


async def test_a_rejected_fill_is_answered_by_the_offline_default_behind_the_checkpoint(server, stutter_checkpoint):
    await wait_ready(server, timeout=240)  # the checkpoint serves first; the offline default loads behind it
    ready = await wait_status(server, lambda s: s["fallbackState"] != "loading", timeout=240)
    assert ready["state"] == "ready" and ready["fallbackState"] == "ready", ready
    assert ready["kind"] == "diffusion" and ready["isFallback"] is False  # the checkpoint serves first ...
    fallback = ready["fallback"]  # ... and the offline default stands behind it, loaded without any setting
    assert fallback is not None and fallback["kind"] == "autoregressive", ready
    assert fallback["backend"] != ready["backend"] and ready["fallbackError"] is None

    uri = "file:///fallback/multiply.py"
    open_doc(server, uri, TEXT)
    reply = await _invoke(server, uri)
    assert reply is not None and reply.items, log_text(server)
    item = reply.items[0]
    assert item.range.start == POSITION and item.insert_text.strip()
    assert "return return" not in item.insert_text  # not the checkpoint's stutter
    filled = apply_edits(TEXT, [types.TextEdit(range=item.range, new_text=item.insert_text)])
    cursor = utf16_offset(TEXT, POSITION)
    assert filled == TEXT[:cursor] + item.insert_text + TEXT[cursor:]
    compile(filled, "multiply.py", "exec")  # what the fallback shows passed the watchdog too

    pipeline = (await _record(server, uri))["pipeline"]
    assert pipeline["route"] == "fallback"
    assert pipeline["backend"] == fallback["backend"]  # which backend answered ...
    assert {"backend": ready["backend"], "reason": "repetition"} in pipeline["rejections"]  # ... and why
    assert set(pipeline["costs_ms"]) == {ready["backend"], fallback["backend"]}  # both ran, in that order
    routes = (await status(server))["pipeline"]["routes"]
    assert routes.get("fallback", 0) >= 1


async def test_with_the_fallback_turned_off_the_same_request_shows_nothing(server):
    await wait_ready(server, timeout=240)
    server.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {"fallback": False}})
    )
    before = await status(server)
    turned_off = await _until(server, lambda s: s["state"] == "ready" and s["fallback"] is None)
    assert turned_off["fallback"] is None and turned_off["fallbackError"] is None, turned_off
    assert turned_off["kind"] == "diffusion"

    uri = "file:///fallback/off.py"
    open_doc(server, uri, TEXT)
    reply = await _invoke(server, uri)
    assert reply is None or not reply.items
    pipeline = (await _record(server, uri))["pipeline"]
    assert pipeline["route"] == "none"
    assert [r["reason"] for r in pipeline["rejections"]] == ["repetition"]  # the primary alone, rejected
    routes = (await status(server))["pipeline"]["routes"]  # (counted across the reload)
    assert routes.get("none", 0) == before["pipeline"]["routes"].get("none", 0) + 1
    assert routes.get("fallback", 0) == before["pipeline"]["routes"].get("fallback", 0)


async def _until(client, predicate, timeout: float = 120.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        current = await status(client)
        if predicate(current) or time.monotonic() > end:
            return current
        await asyncio.sleep(0.1)
