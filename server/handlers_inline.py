"""textDocument/inlineCompletion: read the request, ask (server/scheduling.py: debounce, supersession, joining,
budget; the model worker runs it), answer for the version it was computed for. The rest of a suggestion the
person is typing through is answered without the model (server/typed_through.py), and so is a new line whose
suggestion was computed ahead (server/next_line.py: a request waits for it while it runs)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lsprotocol import types

from infill import timing
from infill.pipeline import PipelineResult

from .gate import log_refusal, offset_logged, refusal
from .handlers_telemetry import offer
from .overhead import record_overhead
from .scheduling import InlineRun, run_inline
from .typed_through import SentSuggestion

if TYPE_CHECKING:
    from .documents import Document
    from .server import InfillServer


def register(server: InfillServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: InfillServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        return await complete_inline(ls, params)


async def complete_inline(ls: InfillServer, params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    uri = params.text_document.uri
    document = ls.documents.get(uri)
    if (why := refusal(ls, document, uri)) is not None or document is None:
        log_refusal(ls, uri, document.version if document else None, why or "")
        return None  # at once: no debounce, no model
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    offset = offset_logged(ls, document, params.position)
    version = document.version
    ahead = await ls.next_line.settle(uri, document.text, offset)  # a new line's suggestion still being computed
    if document.version != version or ls.documents.get(uri) is not document:
        return None  # edited meanwhile: a newer request asks for the new text
    if (typed := ls.typed_through.answer(uri, document.text, offset)) is not None:
        ls.next_line.answered += ahead
        ls.claims.close(ls.claims.open(uri, "inline"))  # a newer request: an older one in flight stops
        return _typed_through_reply(ls, params, document, typed)
    ran = await run_inline(ls, document, offset, invoked)
    if ran is None:
        return None
    with ran.phases.span("inline_reply"):
        reply = _reply(ls, params, document, ran)
    if timing.enabled():
        record_overhead(document, ran.phases, ran.completion.trace, "invoked" if invoked else "keystroke")
    return reply


def _typed_through_reply(
    ls: InfillServer, params: types.InlineCompletionParams, document: Document, typed: SentSuggestion
) -> types.InlineCompletionList:
    ls.telemetry.record_completion(
        kind="inline",
        uri=document.uri,
        version=document.version,
        position=[params.position.line, params.position.character],
        outcome="ok",
        result=None,
        server_ms=0.0,
        fills=[typed.insert],
    )
    item = types.InlineCompletionItem(insert_text=typed.insert, range=document.range_of(typed.cursor, typed.end))
    offer(ls, document, [item], [(typed.cursor, typed.end)])
    return types.InlineCompletionList(items=[item])


def _reply(
    ls: InfillServer, params: types.InlineCompletionParams, document: Document, ran: InlineRun
) -> types.InlineCompletionList | None:
    version, completion = ran.version, ran.completion
    server_ms = (time.perf_counter() - ran.started) * 1000
    uri = params.text_document.uri
    current = ls.documents.get(uri) is document and document.version == version
    fills = [f for f in completion.fills if f.text.strip()]
    outcome = "discarded" if ran.stopped or not current else ("ok" if fills else "empty")
    ls.telemetry.record_completion(
        kind="inline",
        uri=uri,
        version=version,
        position=[params.position.line, params.position.character],
        outcome=outcome,
        result=completion,
        server_ms=server_ms,
        fills=[f.text for f in fills],
    )
    if outcome == "discarded":  # the normal fate of a request while the user types: one line per 10 s
        held_back = ls.discard_log.admit(uri, time.monotonic())
        if held_back is not None:
            more = f" ({held_back} more since the last line like this)" if held_back else ""
            ls.log(
                f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, completion)}){more}",
                types.MessageType.Log,
            )
        return None  # nothing rather than a suggestion for another version
    if outcome != "ok":
        ls.log(f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, completion)})", types.MessageType.Log)
        return None  # nothing rather than a bad suggestion
    ls.telemetry.record_latency(server_ms)
    items = [types.InlineCompletionItem(insert_text=f.text, range=document.range_of(f.start, f.end)) for f in fills]
    offer(ls, document, items, [(f.start, f.end) for f in fills])  # the accept command; inferring what follows
    ls.typed_through.remember(uri, document.text, ran.cursor, fills[0].start, fills[0].end, fills[0].text)
    return types.InlineCompletionList(items=items)


def _why_empty(outcome: str, completion: PipelineResult) -> str:
    if outcome == "discarded":
        return "superseded or the document changed while computing"
    if completion.rejections:
        return "; ".join(f"{name}: {reason}" for name, reason in completion.rejections)
    backend = completion.result
    if backend is None:
        return "no backend result"
    return (
        f"backend outcome {backend.outcome}"
        + (f": {backend.error}" if backend.error else "")
        + (" (blank text)" if backend.outcome in ("ok", "cut_short") else "")
    )
