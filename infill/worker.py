"""The model worker: the one thread on which model work runs, and the one owner of per-document supersession.

In-process backends are single-threaded and hold no locks; whoever calls them from several threads (the LSP
server, the gateway's HTTP threads, the pilot's threads for in-process backends) submits the call here instead. The
remote backend is safe to call from several threads: the pilot calls a remote-only pipeline directly. A job
carries a document key, a `CancelToken` and a deadline (`time.monotonic()`):

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

`Claims` (infill/claims.py) is the registry of live requests per document; `ModelWorker.submit` claims for the
job's own lifetime when the caller has not claimed already. `ModelWorker.complete` is the one way to run a pipeline's
completion here: its future always holds a `PipelineResult`, a job dropped unrun reading as an empty one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, Protocol, TypeVar

from infill.claims import NEWEST_WINS, Claim, Claims, Ticket
from infill.pipeline import CompletionRequest, PipelineResult, Prepared
from infill.types import (
    UNSTEERED,
    Cancelled,
    CancelToken,
    FillControl,
    InfillBackend,
    InfillResult,
    wait_polling,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
__all__ = ["NEWEST_WINS", "Claim", "Claims", "Completes", "ModelWorker", "NotRun", "OnWorker", "Ticket"]


class Completes(Protocol):
    """What the worker runs a completion on: a Pipeline, or the pilot's RawPipeline (a backend, no checks)."""

    @property
    def backend(self) -> InfillBackend: ...

    def complete(
        self, req: CompletionRequest, control: FillControl = UNSTEERED, prepared: Prepared | None = None
    ) -> PipelineResult: ...


class NotRun(Cancelled):
    """A job the worker dropped without running it: cancelled, superseded or out of time while queued."""

    def __init__(self, outcome: Literal["cancelled", "cut_short"], reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome  # "cancelled" or "cut_short"
        self.reason = reason


@dataclass(eq=False)
class _QueuedJob(Generic[T]):
    run: Callable[[], T]
    future: Future[T]
    token: CancelToken
    deadline: float | None
    ticket: Ticket | None
    unrun: Callable[[NotRun], T] | None = None  # the answer of a job dropped unrun (else it raises NotRun)


class ModelWorker:
    """One daemon thread running submitted jobs in order (see the module docstring for the rules)."""

    def __init__(self, name: str = "infill-model") -> None:
        self.claims = Claims(on_cancel=self.drop_unrunnable)
        self._cond = threading.Condition()
        self._queue: deque[_QueuedJob[Any]] = deque()
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
        control: FillControl,
        *,
        queue_deadline: bool = True,
        context: Future[Prepared] | None = None,
        kind: str | None = None,
    ) -> Future[PipelineResult]:
        """Run `pipeline.complete(req)` here: the one way a caller runs a completion on the model thread. The
        future holds a PipelineResult, also for a job dropped unrun (route "not_run", outcome "cancelled" or
        "cut_short"). `context` is the request's context being built on another thread (`Pipeline.prepare`),
        waited for here. With `queue_deadline=False` the deadline bounds the backend only, not the wait in the
        queue (the LSP server's choice: see docs/concurrency.md)."""
        if control.cancel is None:  # the claim and the queue cancel through a token
            control = replace(control, cancel=CancelToken())

        def run() -> PipelineResult:
            if context is None:
                return pipeline.complete(req, control)
            started = time.perf_counter()
            prepared = context.result()  # built during the debounce: normally done already
            prepared.trace.add("context_wait", (time.perf_counter() - started) * 1000)
            return pipeline.complete(req, control, prepared)

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
            cancel=control.cancel,
            deadline=control.deadline if queue_deadline else None,
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

    def _run(self, job: _QueuedJob[Any]) -> None:
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


def _answer_unrun(job: _QueuedJob[Any], why: NotRun) -> None:
    if job.unrun is None:
        job.future.set_exception(why)
        return
    try:
        job.future.set_result(job.unrun(why))
    except BaseException as exc:  # noqa: BLE001 - the caller gets it
        job.future.set_exception(exc)


def _why_not_run(job: _QueuedJob[Any]) -> NotRun | None:
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

    def complete(self, req: CompletionRequest, control: FillControl = UNSTEERED) -> PipelineResult:
        token = control.cancel or CancelToken()  # the wait cancels an abandoned job through it
        future = self.worker.complete(self.pipeline, req, replace(control, cancel=token), kind=self.kind)
        return self.worker.wait(future, token, self.abandoned)
