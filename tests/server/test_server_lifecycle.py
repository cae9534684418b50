"""Lifecycle handlers (server/handlers_lifecycle.py): initialize and its capabilities, start-up progress and
status, configuration changes (unknown settings, a bad model and the recovery), telemetry, and input that must
not take the server down.

The real infill-ls server over stdio (pytest-lsp) with the real tiny DiffusionGemma engine (random weights: what it
writes is noise, so tests check positions, versions, ranges and protocol behaviour, not wording). One server for
all the test_server_*.py modules (the `lsp` fixture in conftest.py); each test uses its own document URIs."""

from __future__ import annotations

import pytest
from lsp_helpers import CONFIG, log_records, log_text, open_doc, status, wait_ready, wait_status
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_capabilities(lsp):
    caps = lsp.init_result.capabilities
    assert caps.inline_completion_provider is not None and caps.inline_completion_provider is not False
    sync = caps.text_document_sync
    assert getattr(sync, "change", sync) == types.TextDocumentSyncKind.Incremental
    assert caps.code_action_provider.resolve_provider is True
    assert list(caps.code_action_provider.code_action_kinds) == [types.CodeActionKind.RefactorRewrite]
    assert set(caps.execute_command_provider.commands) == {
        "infill.status",
        "infill.fillGap",
        "infill.fillAllGaps",
        "infill.toggle",
        "infill.didAcceptCompletion",
    }


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
    lsp.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {**CONFIG, "debounceMs": "slow"}})
    )
    await status(lsp)  # a round trip: the notification before it has been handled
    assert "infill.debounceMs must be an integer, got 'slow'; kept 40 (from didChangeConfiguration)" in log_text(lsp)


async def test_bad_input_does_not_kill_the_server(lsp):
    uri = "file:///bad.py"
    open_doc(lsp, uri, "a = 1\n")
    invoked = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)
    # A position far beyond the document: clamped (logged), never an exception.
    await lsp.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(999, 999), context=invoked
        )
    )
    assert "clamped" in log_text(lsp)
    # A document that was never opened.
    assert (
        await lsp.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri="file:///never.py"),
                position=types.Position(0, 0),
                context=invoked,
            )
        )
        is None
    )
    # Binary content and a 10 MB document: refused politely.
    open_doc(lsp, "file:///binary.py", "abc\x00def\n")
    open_doc(lsp, "file:///huge.py", "x = 1\n" * (10 * 2**20 // 6))
    for big in ("file:///binary.py", "file:///huge.py"):
        assert (
            await lsp.text_document_inline_completion_async(
                types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=big), position=types.Position(0, 1), context=invoked
                )
            )
            is None
        )
    text = log_text(lsp)
    assert "NUL bytes" in text and "maxDocumentChars" in text
    # A selection spanning the whole file: no "Fill gap" (nothing around it), and the server answers.
    actions = await lsp.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(0, 0), end=types.Position(1, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert not actions
    # A malformed command argument gets a clear answer.
    reply = await lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(command="infill.fillGap", arguments=[42])
    )
    assert reply["applied"] is False and "arguments" in reply["reason"]
    # Still serving.
    assert (await status(lsp))["ready"] is True


async def test_telemetry_counted_and_logged(lsp, tmp_path):
    log_path = tmp_path / "completions.jsonl"
    # invokedBudgetMs one above CONFIG's marks this configuration: the server pulled and applied it when its
    # status shows it (waited for, not slept past)
    marked = CONFIG["invokedBudgetMs"] + 1
    lsp.set_configuration({**CONFIG, "completionLog": str(log_path), "invokedBudgetMs": marked}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    applied = await wait_status(lsp, lambda s: s["budget"]["invokedMs"] == marked)
    assert applied["budget"]["invokedMs"] == marked, applied["budget"]
    before = applied["telemetry"]
    for event in (
        {"event": "shown", "uri": "file:///t.py", "version": 1},
        {
            "event": "accepted",
            "uri": "file:///t.py",
            "version": 1,
            "acceptedChars": 3,
            "totalChars": 9,
            "partial": True,
        },
        {"event": "rejected", "uri": "file:///t.py", "version": 1},
    ):
        lsp.protocol.notify("infill/telemetry", event)
    uri = "file:///logged.txt"
    open_doc(lsp, uri, "Dear h,\n    thanks for 4\n", language="plaintext")
    await lsp.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(1, 12),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    after = (await status(lsp))["telemetry"]
    assert after["shown"] == before["shown"] + 1 and after["rejected"] == before["rejected"] + 1
    assert after["accepted_partial"] == before["accepted_partial"] + 1
    records = await log_records(log_path, lambda rs: any(r["type"] == "completion" for r in rs), timeout=120)
    # this test's events only: a retain check an earlier test's accept scheduled (RETAIN_DELAY_S later) may land
    # in this log too when the machine is slow
    sent = [r["event"] for r in records if r["type"] == "telemetry" and r.get("uri") == "file:///t.py"]
    assert sent == ["shown", "accepted", "rejected"], records
    (completion,) = [r for r in records if r["type"] == "completion"]
    assert completion["uri"] == uri and completion["version"] == 1 and "denoise" in completion["latency_ms"]
    assert completion["versions"].get("model")
    pipeline = completion["pipeline"]  # PipelineResult.to_log(): how the pipeline got there
    assert pipeline["route"] == completion["route"] and pipeline["language"] == "plaintext"
    assert pipeline["context_ms"] >= 0 and pipeline["max_middle_tokens"] > 0 and "costs_ms" in pipeline
    counters = (await status(lsp))["pipeline"]  # routes and watchdog verdicts
    assert sum(counters["routes"].values()) >= 1
    # every candidate the watchdog rejected was checked first, and a fill that came back was checked too
    assert counters["checked"] >= sum(counters["rejected"].values()) + (1 if completion["fills"] else 0)
    assert all(type(n) is int and n >= 1 for n in counters["rejected"].values()), counters


async def test_bad_model_puts_server_in_error_state_and_it_recovers(lsp, tiny_checkpoint):
    counters = (await status(lsp))["pipeline"]
    lsp.set_configuration({**CONFIG, "model": "/nonexistent/checkpoint"}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    failed = await wait_ready(lsp, timeout=60, state="error")
    assert failed["state"] == "error" and "nonexistent" in failed["error"]
    uri = "file:///while_broken.py"
    open_doc(lsp, uri, "a = 1\n")
    busy_before = (await status(lsp))["modelBusy"]
    assert (
        await lsp.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(0, 5),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            )
        )
        is None
    )
    # empty at once, no model: the refusal says why, and no model work started (no absolute time bound)
    assert "the backend is not ready (state error" in log_text(lsp), log_text(lsp)[-2000:]
    assert busy_before is False and (await status(lsp))["modelBusy"] is False
    lsp.set_configuration({**CONFIG, "model": str(tiny_checkpoint)}, section="infill")
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    recovered = await wait_ready(lsp, timeout=60)
    assert recovered["state"] == "ready"
    assert recovered["pipeline"] == counters  # the reloaded pipeline continues the old one's counters
