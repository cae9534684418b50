"""How an inline request is scheduled: who runs, when, and for how long. The rules:

- Supersession, joining and take-over are the model worker's claims (infill/worker.py, `Claims.join_or_open`): a
  request opens its document's inline ticket, superseding the older one wherever it is (debounce, queue, model),
  or takes its run over when it asks exactly the same (version, cursor, trigger: a client re-asking), the older
  request then answered "nothing" at once; a run nobody waits for stops after JOIN_GRACE_S.
- Debounce (automatic triggers; `debounceMs`; none for an invoked request): nothing is done in its first half,
  so a fast typist's next key supersedes the request for free; in the second half the context is built on the
  context thread and the prompt encoded on the model thread, so when it ends the model only decodes.
- A refused fill of an automatic request gives way to `INLINE_ALTERNATIVES` other fills (the pipeline's; fewer
  than an invoked one's: the person types on meanwhile).
- Budget: the deadline bounds the backend, not the queue (docs/concurrency.md). It is a runaway guard measured
  on this machine, not a latency target (`BudgetPolicy`, docs/server.md "Budget"): an automatic request is
  stopped by the client long before it while the person types, so it must sit well above the model's honest time
  here (issue 12: 600 ms on a 2-core laptop cut every Gemma 3 270M fill):
  - the guard is `GUARD_FACTOR` x the p95 of the last `WINDOW` fills' times (submit to result), at least
    `GUARD_FLOOR_MS`, at most `GUARD_CAP_MS`; before `MIN_SAMPLES` fills it is the cap;
  - a fill cut short by the guard counts at its cut time, so a guard that is too tight grows by itself;
  - an explicit `inlineBudgetMs` / `invokedBudgetMs` wins over the guard;
  - the status says the machine is too slow for automatic suggestions when the fills' p50 is above
    `TOO_SLOW_P50_MS` (the peers' order of magnitude: Cody's single-line P75 is 690 ms, llama.vim caps at 1.5 s).
- After an edit (`after_edit`): a new line started (an Enter, a suggestion accepted to its line's end) gets its
  suggestion computed ahead (server/next_line.py); else a jump (an edit on another line than the document's last
  one) encodes the prompt at the edit, holding an inline ticket the next request supersedes; typing on one line
  starts nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from lsprotocol import types

from infill import timing
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult, Prepared
from infill.stats import percentile
from infill.types import CancelToken, deadline_in
from infill.worker import Claims, Ticket

from .documents import document_name
from .gate import refusal

GUARD_FACTOR = 4.0
GUARD_FLOOR_MS = 1500.0
GUARD_CAP_MS = 15000.0
WINDOW = 50
MIN_SAMPLES = 3
TOO_SLOW_P50_MS = 1000.0
# Other fills an automatic request's refused fill gives way to (PipelineSettings.alternatives: 4 elsewhere). Chosen
# on ghost_typing --new-lines, seed 91, 24 pauses (EPYC Zen 4, 2 cores): 0 / 2 / 4 showed 22 / 24 / 24, reply p95
# 471 / 1,610 / 3,150 ms, p50 122 ms all.
INLINE_ALTERNATIVES = 2
JOIN_GRACE_S = 0.05  # a client cancels and re-asks in one go; a run with no one waiting stops after this


@dataclass
class InlineRun:
    """What one inline model run computed, for the request(s) waiting on it."""

    completion: PipelineResult
    version: int
    stopped: bool  # superseded or edited while computing
    started: float  # perf_counter when the model job was submitted (the completion's own latency counts from here)
    cursor: int
    phases: timing.Trace


async def run_inline(ls, document, cursor: int, invoked: bool) -> InlineRun | None:
    """The answer for an inline request at `cursor`, or None: superseded, the document changed, taken over by a
    newer identical request, or the backend failed (logged)."""
    claim = ls.claims.join_or_open(document.uri, (document.version, cursor, invoked))
    ticket = claim.ticket
    if claim.joined:
        ls.joined += 1  # the same request as the one in flight (a client re-asking): no second model run
    else:
        ticket.run = asyncio.ensure_future(_debounce_and_run(ls, document, ticket, cursor, invoked))
    taken_over = asyncio.wrap_future(claim.taken_over)
    try:
        await asyncio.wait({ticket.run, taken_over}, return_when=asyncio.FIRST_COMPLETED)  # (never cancels the run)
    except asyncio.CancelledError:
        if ls.claims.leave(claim):  # no one waits for the run now: stop it, unless an identical request joins
            asyncio.get_running_loop().call_later(JOIN_GRACE_S, _release, ls.claims, ticket)
        raise
    finally:
        taken_over.cancel()
    if not claim.answered or not ticket.run.done():
        return None  # a newer identical request took the run over: the newest request gets the answer
    return ticket.run.result()


def _release(claims: Claims, ticket: Ticket) -> None:
    if claims.release(ticket) and not ticket.run.done():
        ticket.run.cancel()


async def _debounce_and_run(ls, document, ticket: Ticket, cursor: int, invoked: bool) -> InlineRun | None:
    phases = timing.trace()  # benchmark phases only (a no-op unless timing is on)
    phases.start("inline_request")  # event-loop work the completion waits for
    uri = document.uri
    debounce = 0.0 if invoked else ls.settings.debounce_ms / 1000
    debounce_end = asyncio.get_running_loop().time() + debounce  # one deadline: two sleeps overshoot once
    try:
        if debounce > 0:
            phases.stop("inline_request")
            await asyncio.sleep(debounce / 2)
            if ticket.stopped:
                return None
            phases.start("inline_ahead")  # event-loop work done while the debounce runs
        pipeline = ls.host.pipeline
        if pipeline is None:
            return None  # the backend started reloading during the debounce
        version = document.version
        request = CompletionRequest(
            text=document.text,
            start=cursor,
            mode="inline",
            language=document.language_id,
            document_id=uri,
            version=version,
            alternatives=None if invoked else INLINE_ALTERNATIVES,
            **related(ls, uri),
        )
        context: Future | None = None
        if debounce > 0:
            context = _prepare_ahead(ls, pipeline, request, ticket.token)
            _warm_ahead(ls, pipeline, context, ticket.token)
            phases.stop("inline_ahead")
            await asyncio.sleep(max(0.0, debounce_end - asyncio.get_running_loop().time()))
            if ticket.stopped or ls.host.pipeline is not pipeline:
                return None
            phases.start("inline_request")
        started = time.perf_counter()
        setting = ls.settings.invoked_budget_ms if invoked else ls.settings.inline_budget_ms
        future = ls.host.worker.complete(
            pipeline,
            request,
            cancel=ticket.token,
            context=context,
            deadline=deadline_in(ls.budget.budget_ms(setting) / 1000),
            queue_deadline=False,
        )
        phases.stop("inline_request")
        completion: PipelineResult = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        ticket.token.cancel("request cancelled by the client")  # the backend stops within one step
        raise
    except Exception as exc:  # noqa: BLE001 - a failing backend (OOM, bug) costs this request only
        ls.log(f"inline completion for {uri} failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        return None
    finally:
        ls.claims.close(ticket)
        stopped = ticket.stopped  # superseded or edited while computing
        ticket.token.cancel("request ended")  # nothing queued for it (context, warm) may run on after it
    if completion.route == "not_run":
        return None  # cancelled (an edit, a newer request) before the model thread got to it
    _time_fill(ls, completion, started)
    return InlineRun(completion, version, stopped, started, cursor, phases)


def _prepare_ahead(ls, pipeline: Pipeline, request: CompletionRequest, cancel: CancelToken) -> Future[Prepared]:
    """Build `request`'s context on the context thread (no model work there, so parsing never waits behind a
    cancelled run still finishing its step), for the model worker's `complete(..., context=)`."""

    def build() -> Prepared:
        cancel.raise_if_cancelled()
        return pipeline.prepare(request)

    return ls.host.context_worker.submit(build)


def _warm_ahead(ls, pipeline: Pipeline, context: Future[Prepared], cancel: CancelToken) -> Future[int]:
    """Once the context is built, let the backend encode the prompt on the model thread; a stopped encode keeps
    its work for the next request."""
    return ls.host.worker.submit(lambda: pipeline.warm(context.result(), cancel), cancel=cancel)


def _time_fill(ls, completion: PipelineResult, started: float) -> None:
    """A run that reached its end (not cancelled) is one of this machine's fill times."""
    outcome = completion.result.outcome if completion.result is not None else None
    if outcome in ("ok", "empty", "cut_short") and ls.budget.record_fill((time.perf_counter() - started) * 1000):
        ls.notify_status()  # the machine just became (or stopped being) too slow for automatic suggestions


def related(ls, uri: str) -> dict:
    """A request's file name and the other open documents its fill may read (the `relatedFiles` setting)."""
    return {"name": document_name(uri), "related": ls.documents.others(uri) if ls.settings.related_files else ()}


def after_edit(ls, document, offset: int) -> None:
    """After an edit that left the cursor at `offset`: a new line's suggestion computed ahead (server/next_line.py),
    or after a jump to another line than the document's last edit, the prompt there encoded now (on a slow CPU
    encoding a new prompt is most of a jump's wait); what it encoded stays for the next request."""
    line = document.position_at(offset).line
    jumped, document.last_edit_line = document.last_edit_line != line, line
    if ls.next_line.edited(ls, document, offset):
        return  # the completion ahead encodes the prompt too
    pipeline = ls.host.current_pipeline
    if not jumped or pipeline is None or refusal(ls, document, document.uri) is not None:
        return
    ticket = ls.claims.open(document.uri, "inline")
    request = CompletionRequest(
        text=document.text,
        start=offset,
        mode="inline",
        language=document.language_id,
        document_id=document.uri,
        version=document.version,
        **related(ls, document.uri),
    )
    warmed = _warm_ahead(ls, pipeline, _prepare_ahead(ls, pipeline, request, ticket.token), ticket.token)
    warmed.add_done_callback(lambda _: ls.claims.close(ticket))


class BudgetPolicy:
    """Times of this machine's fills and the guard derived from them. Thread-safe (fills end on the event loop,
    status is read anywhere)."""

    def __init__(self) -> None:
        self._fills_ms: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()

    def record_fill(self, ms: float) -> bool:
        """One fill that ran to its end (answered, empty, rejected or cut short; not cancelled). Returns whether
        the too-slow verdict changed (the server then notifies the client)."""
        before = self.too_slow
        with self._lock:
            self._fills_ms.append(ms)
        return self.too_slow != before

    def reset(self) -> None:
        """A new backend: its times are not the old one's."""
        with self._lock:
            self._fills_ms.clear()

    def _stats(self) -> tuple[int, float | None, float | None]:
        with self._lock:
            values = list(self._fills_ms)
        return len(values), percentile(values, 50), percentile(values, 95)

    @property
    def guard_ms(self) -> float:
        count, _, p95 = self._stats()
        if count < MIN_SAMPLES or p95 is None:
            return GUARD_CAP_MS
        return min(GUARD_CAP_MS, max(GUARD_FLOOR_MS, GUARD_FACTOR * p95))

    @property
    def too_slow(self) -> bool:
        count, p50, _ = self._stats()
        return count >= MIN_SAMPLES and p50 is not None and p50 > TOO_SLOW_P50_MS

    def budget_ms(self, explicit: int | None) -> float:
        """The deadline of one inline request: the setting when the person set one, else the guard."""
        return float(explicit) if explicit is not None else self.guard_ms

    def status(self, inline_setting: int | None, invoked_setting: int | None) -> dict:
        count, p50, p95 = self._stats()
        slow = self.too_slow
        note = None
        if slow:
            note = (
                f"automatic suggestions take {p50:.0f} ms here (p50 of the last {count} fills, more than "
                f"{TOO_SLOW_P50_MS:.0f} ms): they will often appear after you moved on; a faster machine or a "
                "remote endpoint (remoteEndpoint) helps"
            )
        return {
            "inlineMs": round(self.budget_ms(inline_setting)),
            "invokedMs": round(self.budget_ms(invoked_setting)),
            "source": {
                "inline": "setting" if inline_setting is not None else ("measured" if count >= MIN_SAMPLES else "cap"),
                "invoked": "setting"
                if invoked_setting is not None
                else ("measured" if count >= MIN_SAMPLES else "cap"),
            },
            "fillP50Ms": None if p50 is None else round(p50),
            "fillP95Ms": None if p95 is None else round(p95),
            "samples": count,
            "tooSlowForTyping": slow,
            "note": note,
        }
