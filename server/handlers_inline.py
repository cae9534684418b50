"""textDocument/inlineCompletion: debounced (automatic triggers), superseded per document, cancelled by edits and
$/cancelRequest, computed on the model thread under a runaway guard (server/budget.py), and never returned for an
older version. Two cheap answers skip the model: the rest of a suggestion the person is typing through
(server/typed_through.py), and an identical request joining the model run already in flight for it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from lsprotocol import types

from infill import timing
from infill.pipeline import CompletionRequest, PipelineResult
from infill.types import Cancelled, deadline_in
from infill.worker import Ticket

from .gate import log_refusal, offset_logged, refusal
from .handlers_telemetry import offer


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
    offset = offset_logged(ls, document, params.position)
    if (typed := ls.typed_through.answer(uri, document.text, offset)) is not None:
        ls.scheduler.close(ls.scheduler.open(uri, "inline"))  # a newer request: an older one in flight stops
        return _typed_through_reply(ls, params, document, typed)
    key = (uri, document.version, offset, invoked)
    job = ls.inline_jobs.get(uri)
    if job is None or job.key != key or job.ticket.stopped:
        job = _Job(key, ls.scheduler.open(uri, "inline"))  # supersedes the older inline request for this document
        job.task = asyncio.ensure_future(_run(ls, params, document, job, invoked))
        ls.inline_jobs[uri] = job
    else:
        ls.joined += 1  # the same request as the one in flight (a client re-asking): take over its model run
    mine = job.take_over()
    try:
        await asyncio.wait({job.task, mine}, return_when=asyncio.FIRST_COMPLETED)  # (wait never cancels the run)
    except asyncio.CancelledError:
        if job.leave(mine):  # no one waits for the run now: stop it, unless an identical request joins first
            asyncio.get_running_loop().call_later(JOIN_GRACE_S, job.release)
        raise
    finally:
        if ls.inline_jobs.get(uri) is job and job.task.done():
            del ls.inline_jobs[uri]
    if not job.task.done() or mine.done():
        job.leave(mine)
        return None  # a newer identical request took the run over: the newest request gets the answer, as ever
    ran: _Ran | None = job.task.result()
    if ran is None:
        return None
    with ran.phases.span("inline_reply"):
        reply = _reply(ls, params, document, ran)
    if timing.enabled():
        _record_overhead(document, ran.phases, ran.result.trace, "invoked" if invoked else "keystroke")
    return reply


def warm_after_jump(ls, document, offset: int) -> None:
    """An edit on another line than the document's last one (a jump) starts encoding the prompt at the edit now,
    not at the first completion request after it: on a slow CPU encoding a new prompt is most of a jump's wait.
    The warming holds an inline ticket, so the first request for the document supersedes it; what it encoded by
    then stays for that request (the backend keeps its work when stopped). Typing on one line starts nothing."""
    line = document.position_at(offset).line
    jumped, document.last_edit_line = document.last_edit_line != line, line
    pipeline = ls.host.current_pipeline
    if not jumped or pipeline is None or refusal(ls, document, document.uri) is not None:
        return
    ticket = ls.scheduler.open(document.uri, "inline")
    request = CompletionRequest(text=document.text, start=offset, mode="inline", language=document.language_id,
                                document_id=document.uri, version=document.version)
    warmed = ls.host.warm_ahead(pipeline, ls.host.prepare_ahead(pipeline, request, ticket.token), ticket.token)
    warmed.add_done_callback(lambda _: ls.scheduler.close(ticket))


JOIN_GRACE_S = 0.05  # a client cancels and re-asks in one go; a model run with no one waiting stops after this


@dataclass(eq=False)
class _Job:
    """One model run for (document, version, cursor, trigger). A newer identical request takes it over instead of
    starting it again; the request it replaces gets nothing, as a superseded one does."""

    key: tuple
    ticket: Ticket
    task: asyncio.Future | None = None
    waiter: asyncio.Future | None = None  # set when a newer request takes the run over from this one

    def take_over(self) -> asyncio.Future:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter

    def leave(self, waiter: asyncio.Future) -> bool:
        """`waiter` stops waiting; whether the run is now awaited by no one."""
        if self.waiter is waiter:
            self.waiter = None
        return self.waiter is None

    def release(self) -> None:
        if self.waiter is None and self.task is not None and not self.task.done():
            self.ticket.token.cancel("request cancelled by the client")  # the engine stops within one step
            self.task.cancel()


@dataclass
class _Ran:
    result: PipelineResult
    version: int
    stopped: bool  # superseded or edited while computing
    started: float
    cursor: int
    phases: timing.Trace


async def _run(ls, params, document, job: _Job, invoked: bool) -> _Ran | None:
    """Debounce, context, model: the existing path of one inline request, run once per _Job."""
    phases = timing.trace()  # benchmark phases only (a no-op unless timing is on)
    phases.start("inline_request")  # event-loop work the completion waits for
    ticket, uri = job.ticket, document.uri
    debounce = 0.0 if invoked else ls.settings.debounce_ms / 1000
    debounce_end = asyncio.get_running_loop().time() + debounce  # one deadline: two sleeps overshoot once
    try:
        if debounce > 0:
            # No work in the first half: a fast typist's next key supersedes this request before anything is built.
            phases.stop("inline_request")
            await asyncio.sleep(debounce / 2)
            if ticket.stopped:
                return None  # a newer request or an edit came during the debounce: it wins
            phases.start("inline_ahead")  # event-loop work done while the debounce runs
        pipeline = ls.host.pipeline
        if pipeline is None:
            return None  # the backend started reloading during the debounce
        version = document.version
        request = CompletionRequest(text=document.text, start=job.key[2], mode="inline",
                                    language=document.language_id, document_id=uri, version=version)
        prepared = None
        if debounce > 0:
            # During the second half the context is built on its own thread and the model thread encodes the
            # prompt, so when the debounce ends the model only denoises.
            prepared = ls.host.prepare_ahead(pipeline, request, ticket.token)
            ls.host.warm_ahead(pipeline, prepared, ticket.token)
            phases.stop("inline_ahead")
            await asyncio.sleep(max(0.0, debounce_end - asyncio.get_running_loop().time()))
            if ticket.stopped or ls.host.pipeline is not pipeline:
                return None
            phases.start("inline_request")
        started = time.perf_counter()  # the completion's own latency counts from here
        setting = ls.settings.invoked_budget_ms if invoked else ls.settings.inline_budget_ms
        future = ls.host.submit(pipeline, request, ticket.token, deadline_in(ls.budget.budget_ms(setting) / 1000),
                                prepared)
        phases.stop("inline_request")
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
        stopped = ticket.stopped  # superseded or edited while computing
        ticket.token.cancel("request ended")  # nothing queued for it (context, warm) may run on after it
    _time_fill(ls, result, started)
    return _Ran(result, version, stopped, started, job.key[2], phases)


def _time_fill(ls, result: PipelineResult, started: float) -> None:
    """A run that reached its end (not cancelled) is one of this machine's fill times (server/budget.py)."""
    outcome = result.result.outcome if result.result is not None else None
    if outcome in ("ok", "empty", "cut_short") and ls.budget.record_fill((time.perf_counter() - started) * 1000):
        ls.notify_status()  # the machine just became (or stopped being) too slow for automatic suggestions


def _typed_through_reply(ls, params, document, typed) -> types.InlineCompletionList:
    ls.telemetry.record_completion(kind="inline", uri=document.uri, version=document.version,
                                   position=[params.position.line, params.position.character], outcome="ok",
                                   result=None, server_ms=0.0, fills=[typed.insert])
    item = types.InlineCompletionItem(insert_text=typed.insert, range=document.range_of(typed.cursor, typed.end))
    offer(ls, document, [item], [(typed.cursor, typed.end)])
    return types.InlineCompletionList(items=[item])


def _record_overhead(document, server: timing.Trace, pipeline: timing.Trace, trigger: str) -> None:
    """Per-keystroke server work outside the model (benchmarks/server.py reads these from infill.status).

    Phases: the didChange that preceded this request; this handler's event-loop work before the model, on the
    completion's path ("inline_request": checks, ticket, and after the debounce the submit; for an invoked
    request also the request building) and during the debounce ("inline_ahead": the request building); the
    context (on the context thread during the debounce for automatic triggers, else on the model thread); how long
    the model thread waited for a context built ahead; cleaning and watchdog after the model ("checks"); reply
    building. "keystroke" is the latency the server adds to an automatic (typing) completion beyond its debounce
    and its model run: the work on its path, including what the model thread waits for; "invoked" the same for an
    explicit request (no debounce: its context is on the path). "server" is all event-loop work per request, and
    "<trigger>_cpu" every CPU millisecond of the request's work wherever it ran, on its path or not."""
    wall, cpu = server.wall | pipeline.wall, server.cpu | pipeline.cpu
    ms = lambda name: wall.get(name, 0.0)  # noqa: E731
    context_on_path = ms("context_wait") if "context_wait" in wall else ms("context")
    event_loop = ms("inline_request") + ms("inline_ahead") + ms("inline_reply")
    for name in ("inline_request", "inline_ahead", "context", "checks", "inline_reply"):
        timing.record(name, ms(name))
    timing.record("context_wait", context_on_path)
    timing.record("server", document.last_change_ms + event_loop)
    timing.record(trigger, document.last_change_ms + ms("inline_request") + context_on_path + ms("checks")
                  + ms("inline_reply"))
    server_cpu = document.last_change_cpu_ms + sum(cpu.get(n, 0.0) for n in ("inline_request", "inline_ahead",
                                                                              "inline_reply"))
    timing.record("server_cpu", server_cpu)
    timing.record("context_cpu", cpu.get("context", 0.0))
    timing.record(f"{trigger}_cpu", server_cpu + cpu.get("context", 0.0) + cpu.get("checks", 0.0))


def _reply(ls, params, document, ran: _Ran):
    version, stopped, result = ran.version, ran.stopped, ran.result
    server_ms = (time.perf_counter() - ran.started) * 1000
    uri = params.text_document.uri
    current = ls.documents.get(uri) is document and document.version == version
    fills = [f for f in result.fills if f.text.strip()]
    outcome = "discarded" if stopped or not current else ("ok" if fills else "empty")
    ls.telemetry.record_completion(kind="inline", uri=uri, version=version,
                                   position=[params.position.line, params.position.character], outcome=outcome,
                                   result=result, server_ms=server_ms, fills=[f.text for f in fills])
    if outcome == "discarded":  # the normal fate of a request while the user types: one line per 10 s
        held_back = ls.discard_log.admit(uri, time.monotonic())
        if held_back is not None:
            more = f" ({held_back} more since the last line like this)" if held_back else ""
            ls.log(f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, result)}){more}",
                   types.MessageType.Log)
        return None  # nothing rather than a suggestion for another version
    if outcome != "ok":
        ls.log(f"inline {uri}@{version}: no suggestion ({_why_empty(outcome, result)})", types.MessageType.Log)
        return None  # nothing rather than a bad suggestion
    ls.telemetry.record_latency(server_ms)
    return _items(ls, document, ran, fills)


def _items(ls, document, ran: _Ran, fills) -> types.InlineCompletionList:
    items = [types.InlineCompletionItem(insert_text=f.text, range=document.range_of(f.start, f.end)) for f in fills]
    offer(ls, document, items, [(f.start, f.end) for f in fills])  # the accept command; inferring what follows
    ls.typed_through.remember(document.uri, document.text, ran.cursor, fills[0].start, fills[0].end, fills[0].text)
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
