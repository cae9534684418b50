"""textDocument/inlineCompletion: read the request, ask (server/scheduling.py: debounce, supersession, joining,
budget; the model worker runs it), answer for the version it was computed for. The rest of a suggestion the
person is typing through is answered without the model (server/typed_through.py), and so is a new line whose
suggestion was computed ahead (server/next_line.py: a request waits for it while it runs)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types

from infill import timing
from infill.pipeline import PipelineResult

from .documents import Document, DocumentStore
from .gate import ClientLog, log_refusal, offset_logged, refusal
from .handlers_telemetry import offer
from .overhead import record_overhead
from .scheduling import InlineRun
from .telemetry import LogThrottle, Telemetry
from .typed_through import SentSuggestion, TypedThrough
from .verdict import reply_verdict, still_current

if TYPE_CHECKING:
    from .server import InfillServer


def register(server: InfillServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: InfillServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        return await complete_inline(ls, params)


async def complete_inline(ls: InfillServer, params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    """The handler: takes from the server what this request uses, once, here."""
    documents, host, log, next_line, typed_through = ls.documents, ls.host, ls.log, ls.next_line, ls.typed_through
    uri = params.text_document.uri
    document = documents.get(uri)
    if (why := refusal(document, uri, ls.settings, host)) is not None or document is None:
        log_refusal(ls.refusals, host, log, uri, document.version if document else None, why or "")
        return None  # at once: no debounce, no model
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    offset = offset_logged(document, params.position, log)
    version = document.version
    ahead = await next_line.settle(uri, document.text, offset)  # a new line's suggestion still being computed
    if document.version != version or documents.get(uri) is not document:
        return None  # edited meanwhile: a newer request asks for the new text
    replies = InlineReplies(documents, ls.telemetry, typed_through, ls.discard_log, log)
    if (typed := typed_through.answer(uri, document.text, offset)) is not None:
        next_line.answered += ahead
        host.claims.close(host.claims.open(uri, "inline"))  # a newer request: an older one in flight stops
        return replies.typed_through_reply(document, typed)
    ran = await ls.inline.run(document, offset, invoked)
    if ran is None:
        return None
    with ran.phases.span("inline_reply"):
        reply = replies.computed(document, ran)
    if timing.enabled():
        record_overhead(document, ran.phases, ran.completion.trace, "invoked" if invoked else "keystroke")
    return reply


@dataclass(frozen=True)
class InlineReplies:
    """What answering an inline request uses: the open documents (is the text still the one computed for), the
    completion log and the acceptance tracking (`telemetry`), the document's last suggestion (`typed_through`), and
    the throttled log line of a discarded reply."""

    documents: DocumentStore
    telemetry: Telemetry
    typed_through: TypedThrough
    discard_log: LogThrottle
    log: ClientLog

    def typed_through_reply(self, document: Document, typed: SentSuggestion) -> types.InlineCompletionList:
        """The rest of the suggestion the person is typing through, without the model."""
        self.telemetry.record_completion(
            kind="inline",
            uri=document.uri,
            version=document.version,
            span=(typed.cursor, typed.cursor),
            outcome="ok",
            result=None,
            server_ms=0.0,
            fills=[typed.insert],
        )
        item = types.InlineCompletionItem(insert_text=typed.insert, range=document.range_of(typed.cursor, typed.end))
        offer(self.telemetry, document, [item], [(typed.cursor, typed.end)])
        return types.InlineCompletionList(items=[item])

    def computed(self, document: Document, ran: InlineRun) -> types.InlineCompletionList | None:
        """The reply to a run: its fills with text, for the text it was computed for (server/verdict.py)."""
        version, completion, uri = ran.version, ran.completion, document.uri
        server_ms = (time.perf_counter() - ran.started) * 1000
        current = still_current(self.documents, document, version, ran.text)
        outcome, fills = reply_verdict(ran.stopped, current, completion.fills)
        self.telemetry.record_completion(
            kind="inline",
            uri=uri,
            version=version,
            span=(ran.cursor, ran.cursor),
            outcome=outcome,
            result=completion,
            server_ms=server_ms,
            fills=[f.text for f in fills],
        )
        if outcome == "discarded":  # the normal fate of a request while the user types: one line per 10 s
            held_back = self.discard_log.admit(uri, time.monotonic())
            if held_back is not None:
                more = f" ({held_back} more since the last line like this)" if held_back else ""
                self.log(
                    f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, completion)}){more}",
                    types.MessageType.Log,
                )
            return None  # nothing rather than a suggestion for another version
        if outcome != "ok":
            self.log(
                f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, completion)})", types.MessageType.Log
            )
            return None  # nothing rather than a bad suggestion
        self.telemetry.record_latency(server_ms)
        items = [types.InlineCompletionItem(insert_text=f.text, range=document.range_of(f.start, f.end)) for f in fills]
        offer(self.telemetry, document, items, [(f.start, f.end) for f in fills])  # the accept command; what follows
        self.typed_through.remember(uri, document.text, ran.cursor, fills[0].start, fills[0].end, fills[0].text)
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
