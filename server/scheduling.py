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
- An invoked request is explicit (the person asked and waits): `fillCandidates` fills ranked by their join with
  the suffix within `explicitBudgetMs` (infill/pipeline.py), and its time stays out of the keystroke guard
  (server/budget.py), which it would otherwise stretch.
- Budget: the deadline bounds the backend, not the queue (docs/concurrency.md); how long it is, server/budget.py.
- After an edit (`after_edit`): a new line started (an Enter, a suggestion accepted to its line's end) gets its
  suggestion computed ahead (server/next_line.py); else a jump (an edit on another line than the document's last
  one) encodes the prompt at the edit, holding an inline ticket the next request supersedes; typing on one line
  starts nothing.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, cast

from infill import timing
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult, Prepared
from infill.types import CancelToken
from infill.worker import Claims, Ticket

from .backend_host import BackendHost
from .background_warm import BackgroundWarm
from .budget import BudgetPolicy
from .documents import Document, DocumentStore, document_name
from .gate import ClientLog, refusal
from .model_runs import run_on_model
from .next_line import NextLine
from .settings import Settings

# Other fills an automatic request's refused fill gives way to (PipelineSettings.alternatives: 4 elsewhere). Chosen
# on ghost_typing --new-lines, seed 91, 24 pauses (EPYC Zen 4, 2 cores): 0 / 2 / 4 showed 22 / 24 / 24, reply p95
# 471 / 1,610 / 3,150 ms, p50 122 ms all.
INLINE_ALTERNATIVES = 2
JOIN_GRACE_S = 0.05  # a client cancels and re-asks in one go; a run with no one waiting stops after this


@dataclass
class InlineRun:
    """What one inline model run computed, for the request(s) waiting on it."""

    completion: PipelineResult
    version: int | None
    text: str  # the document's text the run was computed for
    stopped: bool  # superseded or edited while computing
    started: float  # perf_counter when the model job was submitted (the completion's own latency counts from here)
    cursor: int
    phases: timing.Trace


class InlineScheduler:
    """Schedules inline requests and the warms after an edit (the rules of the module docstring) with the pieces it
    is given; `settings_of` reads the server's current settings (a configuration change replaces them). Event loop
    only."""

    def __init__(
        self,
        host: BackendHost,
        documents: DocumentStore,
        budget: BudgetPolicy,
        next_line: NextLine,
        warming: BackgroundWarm,
        settings_of: Callable[[], Settings],
        log: ClientLog,
        notify_status: Callable[[], None],
    ) -> None:
        self._host = host  # the model thread, the context thread and the per-document claims
        self._documents = documents  # the other open documents a request may read
        self._budget = budget  # an inline request's deadline; a finished run's time
        self._next_line = next_line  # a new line's suggestion computed ahead after an edit
        self._warming = warming  # the background warm any inline request cancels
        self._settings = settings_of
        self._log = log
        self._notify_status = notify_status  # the machine became (or stopped being) too slow for suggestions
        self.joined = 0  # inline requests that joined an identical run in flight (status)

    async def run(self, document: Document, cursor: int, invoked: bool) -> InlineRun | None:
        """The answer for an inline request at `cursor`, or None: superseded, the document changed, taken over by a
        newer identical request, or the backend failed (logged)."""
        self._warming.cancel()  # the model thread is this request's (a warm's work so far is kept)
        claims = self._host.claims
        claim = claims.join_or_open(document.uri, (document.version, cursor, invoked))
        ticket = claim.ticket
        if claim.joined:
            self.joined += 1  # the same request as the one in flight (a client re-asking): no second model run
        else:
            ticket.run = asyncio.ensure_future(self._debounce_and_run(document, ticket, cursor, invoked))
        run = cast("asyncio.Future[InlineRun | None]", ticket.run)
        taken_over = asyncio.wrap_future(claim.taken_over)
        either: set[asyncio.Future[Any]] = {run, taken_over}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)  # (never cancels the run)
        except asyncio.CancelledError:
            if claims.leave(claim):  # no one waits for the run now: stop it, unless an identical request joins
                asyncio.get_running_loop().call_later(JOIN_GRACE_S, _release, claims, ticket)
            raise
        finally:
            taken_over.cancel()
        if not claim.answered or not run.done():
            return None  # a newer identical request took the run over: the newest request gets the answer
        return run.result()

    async def _debounce_and_run(
        self, document: Document, ticket: Ticket, cursor: int, invoked: bool
    ) -> InlineRun | None:
        phases = timing.trace()  # benchmark phases only (a no-op unless timing is on)
        phases.start("inline_request")  # event-loop work the completion waits for
        claims = self._host.claims
        try:
            ready = await self._debounce(document, ticket, cursor, invoked, phases)
        except asyncio.CancelledError:
            ticket.token.cancel("request cancelled by the client")
            claims.close(ticket)
            raise
        if ready is None:  # superseded, or the backend started reloading, during the debounce
            claims.close(ticket)
            ticket.token.cancel("request ended")  # the context and warm queued for it
            return None
        pipeline, request, context = ready
        started = time.perf_counter()
        settings = self._settings()
        setting = settings.invoked_budget_ms if invoked else settings.inline_budget_ms
        phases.stop("inline_request")
        run = await run_on_model(
            self._host,
            self._log,
            ticket,
            pipeline,
            request,
            budget_s=self._budget.budget_ms(setting) / 1000,
            what=f"inline completion for {document.uri}",
            context=context,
        )
        if run.result is None:
            return None  # never ran (an edit, a newer request came first), or failed (logged)
        if not invoked:  # an invoked request ranks candidates within its own budget: not a keystroke's time
            self._time_fill(run.result, started)
        return InlineRun(run.result, request.version, request.text, run.stopped, started, cursor, phases)

    async def _debounce(
        self, document: Document, ticket: Ticket, cursor: int, invoked: bool, phases: timing.Trace
    ) -> tuple[Pipeline, CompletionRequest, Future[Prepared] | None] | None:
        """The debounce (automatic triggers): nothing in its first half; in the second the context is built and the
        prompt encoded ahead. What to run then, or None when superseded or the backend is reloading."""
        debounce = 0.0 if invoked else self._settings().debounce_ms / 1000
        debounce_end = asyncio.get_running_loop().time() + debounce  # one deadline: two sleeps overshoot once
        if debounce > 0:
            phases.stop("inline_request")
            await asyncio.sleep(debounce / 2)
            if ticket.stopped:
                return None
            phases.start("inline_ahead")  # event-loop work done while the debounce runs
        host = self._host
        pipeline = host.pipeline
        if pipeline is None:
            return None
        request = self.request(document, cursor, invoked)
        if debounce <= 0:
            return pipeline, request, None
        context = host.prepare(pipeline, request, ticket.token)
        warm_ahead(host, pipeline, context, ticket.token)
        phases.stop("inline_ahead")
        await asyncio.sleep(max(0.0, debounce_end - asyncio.get_running_loop().time()))
        if ticket.stopped or host.pipeline is not pipeline:
            return None
        phases.start("inline_request")
        return pipeline, request, context

    def _time_fill(self, completion: PipelineResult, started: float) -> None:
        """A run that reached its end (not cancelled) is one of this machine's fill times."""
        outcome = completion.result.outcome if completion.result is not None else None
        if outcome in ("ok", "empty", "cut_short") and self._budget.record_fill((time.perf_counter() - started) * 1000):
            self._notify_status()  # the machine just became (or stopped being) too slow for automatic suggestions

    def request(self, document: Document, cursor: int, invoked: bool) -> CompletionRequest:
        """What an inline request at `cursor` asks the pipeline (the same for its run and for a prompt warmed ahead,
        so that the warm's fit is the run's)."""
        settings = self._settings()
        return CompletionRequest(
            text=document.text,
            start=cursor,
            mode="inline",
            language=document.language_id,
            document_id=document.uri,
            version=document.version,
            alternatives=None if invoked else INLINE_ALTERNATIVES,
            keystroke=not invoked,
            candidates=settings.fill_candidates if invoked else 1,
            explicit=invoked,
            **related(self._documents, settings, document.uri),
        )

    def refusal(self, document: Document) -> str | None:
        """server/gate.py's checks for `document` under the current settings."""
        return refusal(document, document.uri, self._settings(), self._host)

    def warmable(self, document: Document) -> Pipeline | None:
        """The pipeline a background warm of `document` would run on: None while none is loaded or ready, or when
        the checks refuse the document."""
        pipeline = self._host.current_pipeline
        return None if pipeline is None or self.refusal(document) is not None else pipeline

    def after_edit(self, document: Document, offset: int) -> None:
        """After an edit that left the cursor at `offset`: a new line's suggestion computed ahead
        (server/next_line.py), or after a jump to another line than the document's last edit, the prompt there
        encoded now (on a slow CPU encoding a new prompt is most of a jump's wait); what it encoded stays for the
        next request."""
        line = document.position_at(offset).line
        jumped, document.last_edit_line = document.last_edit_line != line, line

        @functools.cache
        def allowed() -> bool:  # server/gate.py's checks, run once and only when something would start
            return self.refusal(document) is None

        if self._next_line.edited(document, offset, allowed, self._settings().inline_budget_ms):
            return  # the completion ahead encodes the prompt too
        pipeline = self._host.current_pipeline
        if not jumped or pipeline is None or not allowed():
            return
        self.warm_at(pipeline, document, offset, "inline")  # an inline ticket: the next request supersedes it

    def warm_at(self, pipeline: Pipeline, document: Document, offset: int, kind: str) -> Ticket:
        """The prompt of an automatic request at `offset` built and encoded now, in the background, under a ticket
        of `kind` on the document (closed when the encode ends): after a jump, and server/warming.py's warms."""
        host, claims = self._host, self._host.claims
        ticket = claims.open(document.uri, kind)
        request = self.request(document, offset, invoked=False)
        warmed = warm_ahead(host, pipeline, host.prepare(pipeline, request, ticket.token), ticket.token)
        warmed.add_done_callback(lambda _: claims.close(ticket))
        return ticket


def _release(claims: Claims, ticket: Ticket) -> None:
    run = cast("asyncio.Future[InlineRun | None]", ticket.run)
    if claims.release(ticket) and not run.done():
        run.cancel()


def warm_ahead(host: BackendHost, pipeline: Pipeline, context: Future[Prepared], cancel: CancelToken) -> Future[int]:
    """Once the context is built, let the backend encode the prompt on the model thread; a stopped encode keeps
    its work for the next request."""
    return host.submit(lambda: pipeline.warm(context.result(), cancel), cancel)


def related(documents: DocumentStore, settings: Settings, uri: str) -> dict[str, Any]:
    """A request's file name and the other open documents its fill may read (the `relatedFiles` setting)."""
    return {"name": document_name(uri), "related": documents.others(uri) if settings.related_files else ()}
