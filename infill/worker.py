"""The model worker: the one thread on which model work runs, and the one owner of per-document supersession.

Backends are single-threaded and hold no locks; whoever calls them from several threads (the LSP server, the
gateway's HTTP threads, the pilot's worker threads) submits the call here instead. A job carries a document key,
a `CancelToken` and a deadline (`time.monotonic()`):

- newest wins: a claim of kind "inline" on a document cancels the older inline claim's token, whether its job is
  queued or running (a running backend stops within one step; a queued job is dropped at once);
- a queued job never starts once its token is cancelled or its deadline has passed: its future fails with
  `NotRun` (a `Cancelled`) whose `outcome` says "cancelled" or "cut_short", at once (a cancel through the claims,
  a deadline reached while another job holds the thread: a small watcher thread answers those; it never runs
  model work) or when the thread reaches it (a token cancelled directly);
- a document change (`Claims.document_changed`) cancels every claim on that document, of any kind;
- joining: an inline request that asks exactly what the document's live inline request asks (the same `key`: a
  client cancelling and re-asking in one go) takes its run over instead of starting another: the older request
  is answered "nothing" at once, as a superseded one is, and the run answers the newest; a run that no request
  waits for any more is stopped (`Claims.leave`, `release`).

`Claims` is the registry of live requests per document (a `Ticket` each, from the moment a request arrives, so a
newer keystroke supersedes an older request still in its debounce); `ModelWorker.submit` claims for the job's own
lifetime when the caller has not claimed already. `ModelWorker.complete` is the one way to run a pipeline's
completion here: its future always holds a `PipelineResult`, a job dropped unrun reading as an empty one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from infill.pipeline import CompletionRequest, PipelineResult, Prepared
from infill.types import Cancelled, CancelToken, DraftCallback, InfillBackend, InfillResult, wait_polling

log = logging.getLogger(__name__)

T = TypeVar("T")
NEWEST_WINS = "inline"  # the claim kind for which a newer claim on the same document supersedes the older


class Completes(Protocol):
    """What the worker runs a completion on: a Pipeline, or the pilot's RawPipeline (a backend, no checks)."""

    @property
    def backend(self) -> InfillBackend: ...

    def complete(
        self,
        req: CompletionRequest,
        *,
        cancel: CancelToken | None = None,
        deadline: float | None = None,
        on_draft: DraftCallback | None = None,
        prepared: Prepared | None = None,
    ) -> PipelineResult: ...


class NotRun(Cancelled):
    """A job the worker dropped without running it: cancelled, superseded or out of time while queued."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome  # "cancelled" or "cut_short"
        self.reason = reason


@dataclass(eq=False)
class Ticket:
    """One request's claim on its document, from its arrival to its reply."""

    uri: str
    kind: str  # NEWEST_WINS ("inline") or anything else ("action": runs unless the document changes)
    token: CancelToken = field(default_factory=CancelToken)
    key: Hashable | None = None  # what an inline request asks (version, cursor, trigger); an identical one joins
    run: object = None  # the caller's handle on the work done for the ticket, shared by the requests that joined
    answering: Claim | None = None  # the request the run answers; None: no request waits for it

    @property
    def stopped(self) -> bool:
        return self.token.cancelled


@dataclass(eq=False)
class Claim:
    """One request's hold on a ticket: the ticket it opened, or the one it joined (taking the run over)."""

    ticket: Ticket
    joined: bool = False
    taken_over: Future = field(default_factory=Future)  # done when a newer identical request takes the run over

    @property
    def answered(self) -> bool:
        """This request gets the run's answer: no identical request took it over."""
        return self.ticket.answering is self


class Claims:
    """Live requests per document. Thread-safe: the server's event loop, HTTP threads and the worker use it."""

    def __init__(self, on_cancel: Callable[[], None] = lambda: None) -> None:
        self._lock = threading.Lock()
        self._newest: dict[str, Ticket] = {}
        self._all: dict[str, set[Ticket]] = {}
        self._on_cancel = on_cancel  # the worker drops cancelled queued jobs at once

    def open(self, uri: str, kind: str, token: CancelToken | None = None, key: Hashable | None = None) -> Ticket:
        ticket = Ticket(uri, kind, token or CancelToken(), key)
        older = None
        with self._lock:
            if kind == NEWEST_WINS:
                older = self._newest.get(uri)
                self._newest[uri] = ticket
            self._all.setdefault(uri, set()).add(ticket)
        if older is not None and older.token is not ticket.token and not older.token.cancelled:
            older.token.cancel("superseded by a newer inline request")
            self._on_cancel()
        return ticket

    def join_or_open(self, uri: str, key: Hashable) -> Claim:
        """An inline request for `uri` asking `key`: it joins the document's live inline ticket when that one asks
        the same and still runs, else it opens a new ticket, which supersedes the older one."""
        with self._lock:
            live = self._newest.get(uri)
            if live is not None and live.key == key and not live.token.cancelled:
                claim, older = Claim(live, joined=True), live.answering
                live.answering = claim
            else:
                live = None
        if live is None:
            ticket = self.open(uri, NEWEST_WINS, key=key)
            ticket.answering = claim = Claim(ticket)
        elif older is not None and not older.taken_over.done():  # (done: that request stopped waiting already)
            older.taken_over.set_result(None)
        return claim

    def leave(self, claim: Claim) -> bool:
        """`claim`'s request stops waiting (its client cancelled it). Whether no request waits for the run now: the
        caller then `release`s it, after a grace in which an identical request may still join."""
        with self._lock:
            if claim.ticket.answering is claim:
                claim.ticket.answering = None
            return claim.ticket.answering is None

    def release(self, ticket: Ticket, reason: str = "request cancelled by the client") -> bool:
        """Stop `ticket`'s run if no request waits for it; whether it was stopped."""
        with self._lock:
            unwaited = ticket.answering is None
        if unwaited and not ticket.token.cancelled:
            ticket.token.cancel(reason)
            self._on_cancel()
        return unwaited

    def close(self, ticket: Ticket) -> None:
        with self._lock:
            if self._newest.get(ticket.uri) is ticket:
                del self._newest[ticket.uri]
            tickets = self._all.get(ticket.uri)
            if tickets is not None:
                tickets.discard(ticket)
                if not tickets:
                    del self._all[ticket.uri]

    def document_changed(self, uri: str) -> int:
        """Cancel every request claiming `uri` (what they compute is for an older version); returns how many."""
        with self._lock:
            tokens = {t.token for t in self._all.get(uri, ())}
        for token in tokens:
            token.cancel("the document changed")
        if tokens:
            self._on_cancel()
        return len(tokens)

    def cancel_all(self, reason: str) -> None:
        with self._lock:
            tokens = {t.token for tickets in self._all.values() for t in tickets}
        for token in tokens:
            token.cancel(reason)
        self._on_cancel()

    @property
    def running(self) -> int:
        """Requests alive (in their debounce, queued or running); a request and its job count once."""
        with self._lock:
            return len({t.token for tickets in self._all.values() for t in tickets})


@dataclass(eq=False)
class _QueuedJob:
    run: Callable[[], object]
    future: Future
    token: CancelToken
    deadline: float | None
    ticket: Ticket | None
    unrun: Callable[[NotRun], object] | None = None  # the answer of a job dropped unrun (else it raises NotRun)


class ModelWorker:
    """One daemon thread running submitted jobs in order (see the module docstring for the rules)."""

    def __init__(self, name: str = "infill-model") -> None:
        self.claims = Claims(on_cancel=self.drop_unrunnable)
        self._cond = threading.Condition()
        self._queue: deque[_QueuedJob] = deque()
        self._closed = False
        self.busy = False  # a job is running (status "modelBusy")
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self._watcher = threading.Thread(target=self._watch_deadlines, name=f"{name}-deadlines", daemon=True)
        self._watcher.start()

    def submit(
        self,
        run: Callable[[], T],
        *,
        key: str | None = None,
        cancel: CancelToken | None = None,
        deadline: float | None = None,
        kind: str | None = None,
        unrun: Callable[[NotRun], T] | None = None,
    ) -> Future[T]:
        """Queue `run` (which should honour `cancel` and `deadline` itself once started). With `kind`, the job
        claims `key` for its lifetime; kind "inline" supersedes the document's older inline request. A job dropped
        unrun fails with `NotRun`, or answers `unrun(why)` when given."""
        if self._closed:
            raise RuntimeError("the model worker is shut down")
        token = cancel or CancelToken()
        ticket = self.claims.open(key, kind, token) if key is not None and kind is not None else None
        job = _QueuedJob(run, Future(), token, deadline, ticket, unrun)
        with self._cond:
            if self._closed:  # (shut down meanwhile)
                if ticket is not None:
                    self.claims.close(ticket)
                raise RuntimeError("the model worker is shut down")
            self._queue.append(job)
            self._cond.notify_all()  # the thread, and the deadline watcher (a new earliest deadline)
        return job.future

    def complete(
        self,
        pipeline: Completes,
        req: CompletionRequest,
        *,
        cancel: CancelToken,
        deadline: float | None = None,
        queue_deadline: bool = True,
        on_draft: DraftCallback | None = None,
        context: Future[Prepared] | None = None,
        kind: str | None = None,
    ) -> Future[PipelineResult]:
        """Run `pipeline.complete(req)` here: the one way a caller runs a completion on the model thread. The
        future holds a PipelineResult, also for a job dropped unrun (route "not_run", outcome "cancelled" or
        "cut_short"). `context` is the request's context being built on another thread (`Pipeline.prepare`),
        waited for here. With `queue_deadline=False` the deadline bounds the backend only, not the wait in the
        queue (the LSP server's choice: see docs/concurrency.md)."""

        def run() -> PipelineResult:
            if context is None:
                return pipeline.complete(req, cancel=cancel, deadline=deadline, on_draft=on_draft)
            started = time.perf_counter()
            prepared = context.result()  # built during the debounce: normally done already
            prepared.trace.add("context_wait", (time.perf_counter() - started) * 1000)
            return pipeline.complete(req, cancel=cancel, deadline=deadline, on_draft=on_draft, prepared=prepared)

        def unrun(why: NotRun) -> PipelineResult:
            result = InfillResult(
                middles=(),
                outcome=why.outcome,
                backend=pipeline.backend.info.name,
                version=req.version,
                error=why.reason,
            )
            return PipelineResult(fills=[], result=result, route="not_run", version=req.version)

        return self.submit(
            run,
            key=req.document_id,
            cancel=cancel,
            deadline=deadline if queue_deadline else None,
            kind=kind,
            unrun=unrun,
        )

    ABANDON_POLL_S = 0.02  # how often a waiting caller asks whether its client is still there

    def wait(self, future: Future[T], token: CancelToken, abandoned: Callable[[], bool] | None = None) -> T:
        """The result of a job submitted with `token`. `abandoned`, when given, is asked every ABANDON_POLL_S while
        the caller waits (the gateway's: has the client closed its connection?); once it says yes the job is
        cancelled, so a request nobody waits for stops within one model step (a queued one is answered at once)
        and keeps the prompt it encoded for the next one."""
        if abandoned is None:
            return future.result()
        gone = abandoned

        def check() -> None:
            if not token.cancelled and gone():
                token.cancel("the client closed the connection")
                self.drop_unrunnable()

        return wait_polling(future, self.ABANDON_POLL_S, check)

    def shutdown(self, wait: bool = False) -> None:
        """Run what is queued (cancelled jobs return at once), then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            self._thread.join()

    # -- the thread ---------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                job = self._queue.popleft()
            self._run(job)

    def _run(self, job: _QueuedJob) -> None:
        try:
            if not job.future.set_running_or_notify_cancel():
                return
            skip = _why_not_run(job)
            if skip is not None:
                _answer_unrun(job, skip)
                return
            self.busy = True
            try:
                job.future.set_result(job.run())
            except BaseException as exc:  # noqa: BLE001 - the caller gets it; the worker keeps serving
                job.future.set_exception(exc)
            finally:
                self.busy = False
        finally:
            if job.ticket is not None:
                self.claims.close(job.ticket)

    def _watch_deadlines(self) -> None:
        """Answer queued jobs at their deadline, not when the thread gets to them."""
        while True:
            with self._cond:
                if self._closed and not self._queue:
                    return
                deadlines = [job.deadline for job in self._queue if job.deadline is not None]
                wait = min(deadlines) - time.monotonic() if deadlines else None
                if wait is None or wait > 0:
                    self._cond.wait(wait)
                    continue
            self.drop_unrunnable()

    def drop_unrunnable(self) -> None:
        """Fail queued jobs that can no longer run (cancelled, out of time) now."""
        with self._cond:
            verdicts = [(job, _why_not_run(job)) for job in self._queue]
            dropped = [(job, why) for job, why in verdicts if why is not None]
            if not dropped:
                return
            self._queue = deque(job for job, why in verdicts if why is None)
        for job, why in dropped:
            if job.future.set_running_or_notify_cancel():
                _answer_unrun(job, why)
            if job.ticket is not None:
                self.claims.close(job.ticket)


def _answer_unrun(job: _QueuedJob, why: NotRun) -> None:
    if job.unrun is None:
        job.future.set_exception(why)
        return
    try:
        job.future.set_result(job.unrun(why))
    except BaseException as exc:  # noqa: BLE001 - the caller gets it
        job.future.set_exception(exc)


def _why_not_run(job: _QueuedJob) -> NotRun | None:
    if job.token.cancelled:
        return NotRun("cancelled", job.token.reason or "cancelled while queued")
    if job.deadline is not None and time.monotonic() >= job.deadline:
        return NotRun("cut_short", "the deadline passed while queued for the model")
    return None


class OnWorker:
    """A pipeline's `complete` run on a model worker (`ModelWorker.complete`), for callers on many threads that
    block on it (the gateway's HTTP threads, the pilot's attempt threads). `abandoned`: see `ModelWorker.wait`."""

    def __init__(
        self,
        pipeline: Completes,
        worker: ModelWorker,
        kind: str | None = NEWEST_WINS,
        abandoned: Callable[[], bool] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.worker = worker
        self.kind = kind
        self.abandoned = abandoned

    def complete(
        self,
        req: CompletionRequest,
        *,
        cancel: CancelToken | None = None,
        deadline: float | None = None,
        on_draft: DraftCallback | None = None,
    ) -> PipelineResult:
        token = cancel or CancelToken()
        future = self.worker.complete(
            self.pipeline, req, cancel=token, deadline=deadline, on_draft=on_draft, kind=self.kind
        )
        return self.worker.wait(future, token, self.abandoned)
