"""textDocument/inlineCompletion: debounced (automatic triggers), superseded per document, cancelled by edits and
$/cancelRequest, computed on the model thread under a latency budget, and never returned for an older version."""

from __future__ import annotations

import asyncio
import time

from lsprotocol import types

from infill.pipeline import CompletionRequest, PipelineResult
from infill.types import Cancelled, deadline_in

from .gate import log_refusal, offset_logged, refusal


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls, params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
        return await complete_inline(ls, params)


async def complete_inline(ls, params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    uri = params.text_document.uri
    document = ls.documents.get(uri)
    if (why := refusal(ls, document, uri)) is not None:
        log_refusal(ls, uri, document.version if document else None, why)
        return None  # at once: no debounce, no model
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    ticket = ls.scheduler.open(uri, "inline")  # supersedes the older inline request for this document
    try:
        if not invoked and ls.settings.debounce_ms > 0:
            await asyncio.sleep(ls.settings.debounce_ms / 1000)
        if ticket.stopped:
            return None  # a newer request or an edit came during the debounce: it wins
        pipeline = ls.host.pipeline
        if pipeline is None:
            return None  # the backend started reloading during the debounce
        started, cpu_started = time.perf_counter(), time.thread_time()
        version = document.version
        offset = offset_logged(ls, document, params.position)
        request = CompletionRequest(text=document.text, start=offset, mode="inline", language=document.language_id,
                                    document_id=uri, version=version)
        budget_ms = ls.settings.invoked_budget_ms if invoked else ls.settings.inline_budget_ms
        future = ls.host.submit(pipeline, request, ticket.token, deadline_in(budget_ms / 1000))
        pre_ms = (time.perf_counter() - started) * 1000
        pre_cpu_ms = (time.thread_time() - cpu_started) * 1000
        result: PipelineResult = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        ticket.token.cancel("request cancelled by the client")  # the engine stops within one step
        raise
    except Cancelled:
        return None  # cancelled (edit, newer request) before the model thread got to it
    except Exception as exc:  # noqa: BLE001 - a failing backend (OOM, bug) costs this request only
        ls.log(f"inline completion for {uri} failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        return None
    finally:
        ls.scheduler.close(ticket)
    replied, cpu_replied = time.perf_counter(), time.thread_time()
    reply = _reply(ls, params, document, version, ticket.stopped, result, started)
    post_ms, post_cpu_ms = (time.perf_counter() - replied) * 1000, (time.thread_time() - cpu_replied) * 1000
    _record_overhead(ls, document, pre_ms, result, post_ms)
    server_cpu_ms = document.last_change_cpu_ms + pre_cpu_ms + post_cpu_ms
    ls.phases.add("server_cpu", server_cpu_ms)
    ls.phases.add("context_cpu", result.context_cpu_ms)
    ls.phases.add("keystroke_cpu", server_cpu_ms + result.context_cpu_ms)
    return reply


def _record_overhead(ls, document, pre_ms: float, result: PipelineResult, post_ms: float) -> None:
    """Per-keystroke server work outside the model: the didChange that preceded this request, request building
    here, context building in the pipeline (before the backend is called) and reply building. Wall times;
    "server_cpu" is the event-loop thread's CPU time for the same work, which descheduling does not inflate,
    "context_cpu" the model thread's CPU time for the context, "keystroke_cpu" their sum."""
    ls.phases.add("inline_request", pre_ms)
    ls.phases.add("context", result.context_ms)
    ls.phases.add("inline_reply", post_ms)
    ls.phases.add("server", document.last_change_ms + pre_ms + post_ms)  # this package's share
    ls.phases.add("keystroke", document.last_change_ms + pre_ms + result.context_ms + post_ms)


def _reply(ls, params, document, version, stopped: bool, result: PipelineResult, started: float):
    server_ms = (time.perf_counter() - started) * 1000
    uri = params.text_document.uri
    current = ls.documents.get(uri) is document and document.version == version
    fills = [f for f in result.fills if f.text.strip()]
    outcome = "discarded" if stopped or not current else ("ok" if fills else "empty")
    ls.telemetry.record_completion(kind="inline", uri=uri, version=version,
                                   position=[params.position.line, params.position.character], outcome=outcome,
                                   result=result, server_ms=server_ms, fills=[f.text for f in fills])
    if outcome != "ok":
        ls.log(f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, result)})", types.MessageType.Log)
        return None  # nothing rather than a suggestion for another version or a bad one
    ls.telemetry.record_latency(server_ms)
    items = [types.InlineCompletionItem(insert_text=f.text,
                                        range=document.range_of(f.start, f.end)) for f in fills]
    return types.InlineCompletionList(items=items)


def _why_empty(outcome: str, result: PipelineResult) -> str:
    if outcome == "discarded":
        return "superseded or the document changed while computing"
    if result.rejections:
        return "; ".join(f"{name}: {reason}" for name, reason in result.rejections)
    backend = result.result
    if backend is None:
        return "no backend result"
    return f"backend outcome {backend.outcome}" + (f": {backend.error}" if backend.error else "") + \
        (" (blank text)" if backend.outcome in ("ok", "cut_short") else "")
