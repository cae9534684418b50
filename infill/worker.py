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
- a document change (`Claims.document_changed`) cancels every claim on that document, of any kind.

`Claims` is the registry of live requests per document (a `Ticket` each, from the moment a request arrives, so a
newer keystroke supersedes an older request still in its debounce); `ModelWorker.submit` claims for the job's own
lifetime when the caller has not claimed already.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from infill.pipeline import CompletionRequest, PipelineResult
from infill.types import CancelToken, Cancelled, DraftCallback, InfillResult

log = logging.getLogger(__name__)

T = TypeVar("T")
NEWEST_WINS = "inline"  # the claim kind for which a newer claim on the same document supersedes the older


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

    @property
    def stopped(self) -> bool:
        return self.token.cancelled


class Claims:
    """Live requests per document. Thread-safe: the server's event loop, HTTP threads and the worker use it."""

    def __init__(self, on_cancel: Callable[[], None] = lambda: None) -> None:
        self._lock = threading.Lock()
        self._newest: dict[str, Ticket] = {}
        self._all: dict[str, set[Ticket]] = {}
        self._on_cancel = on_cancel  # the worker drops cancelled queued jobs at once

    def open(self, uri: str, kind: str, token: CancelToken | None = None) -> Ticket:
        ticket = Ticket(uri, kind, token or CancelToken())
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
class _Job:
    run: Callable[[], object]
    future: Future
    token: CancelToken
    deadline: float | None
    ticket: Ticket | None


class ModelWorker:
    """One daemon thread running submitted jobs in order (see the module docstring for the rules)."""

    def __init__(self, name: str = "infill-model") -> None:
        self.claims = Claims(on_cancel=self.drop_unrunnable)
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._closed = False
        self.busy = False  # a job is running (status "modelBusy")
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self._watcher = threading.Thread(target=self._watch_deadlines, name=f"{name}-deadlines", daemon=True)
        self._watcher.start()

    def submit(self, run: Callable[[], T], *, key: str | None = None, cancel: CancelToken | None = None,
               deadline: float | None = None, kind: str | None = None) -> "Future[T]":
        """Queue `run` (which should honour `cancel` and `deadline` itself once started). With `kind`, the job
        claims `key` for its lifetime; kind "inline" supersedes the document's older inline request."""
        if self._closed:
            raise RuntimeError("the model worker is shut down")
        token = cancel or CancelToken()
        ticket = self.claims.open(key, kind, token) if key is not None and kind is not None else None
        job = _Job(run, Future(), token, deadline, ticket)
        with self._cond:
            if self._closed:  # (shut down meanwhile)
                if ticket is not None:
                    self.claims.close(ticket)
                raise RuntimeError("the model worker is shut down")
            self._queue.append(job)
            self._cond.notify_all()  # the thread, and the deadline watcher (a new earliest deadline)
        return job.future

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

    def _run(self, job: _Job) -> None:
        try:
            if not job.future.set_running_or_notify_cancel():
                return
            skip = _why_not_run(job)
            if skip is not None:
                job.future.set_exception(skip)
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
                job.future.set_exception(why)
            if job.ticket is not None:
                self.claims.close(job.ticket)


def _why_not_run(job: _Job) -> NotRun | None:
    if job.token.cancelled:
        return NotRun("cancelled", job.token.reason or "cancelled while queued")
    if job.deadline is not None and time.monotonic() >= job.deadline:
        return NotRun("cut_short", "the deadline passed while queued for the model")
    return None


class OnWorker:
    """A pipeline's `complete` run on a model worker, for callers on many threads (the gateway's HTTP threads, the
    pilot's attempt threads): they block on the job, and a job that never ran reads as an empty result.

    `abandoned`, when given, is asked every ABANDON_POLL_S while the caller waits (the gateway's: has the client
    closed its connection?); once it says yes the job is cancelled, so a request nobody waits for stops within one
    model step and keeps the prompt it encoded for the next one."""

    ABANDON_POLL_S = 0.02

    def __init__(self, pipeline, worker: ModelWorker, kind: str | None = NEWEST_WINS,
                 abandoned: Callable[[], bool] | None = None) -> None:
        self.pipeline = pipeline  # infill.pipeline.Pipeline (or the pilot's RawPipeline)
        self.worker = worker
        self.kind = kind
        self.abandoned = abandoned

    def complete(self, req: CompletionRequest, *, cancel: CancelToken | None = None, deadline: float | None = None,
                 on_draft: DraftCallback | None = None) -> PipelineResult:
        token = cancel or CancelToken()
        future = self.worker.submit(
            lambda: self.pipeline.complete(req, cancel=token, deadline=deadline, on_draft=on_draft),
            key=req.document_id, cancel=token, deadline=deadline, kind=self.kind)
        try:
            return self._wait(future, token)
        except NotRun as skipped:
            result = InfillResult(middles=(), outcome=skipped.outcome, backend=self.pipeline.backend.info.name,
                                  version=req.version, error=skipped.reason)
            return PipelineResult(fills=[], result=result, route="none", version=req.version)

    def _wait(self, future: Future, token: CancelToken) -> PipelineResult:
        if self.abandoned is None:
            return future.result()
        while True:
            try:
                return future.result(timeout=self.ABANDON_POLL_S)
            except FutureTimeout:
                if not token.cancelled and self.abandoned():
                    token.cancel("the client closed the connection")
                    self.worker.drop_unrunnable()  # queued: answered at once
