"""The model worker (infill/worker.py): one thread, newest request per document wins, queued jobs honour cancel
and deadline without running. Real threads; the engine jobs run the real tiny DiffusionGemma engine."""

from __future__ import annotations

import threading
import time

import pytest

from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.types import CancelToken, FillControl, InfillRequest
from infill.worker import ModelWorker, NotRun

PREFIX = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = "


@pytest.fixture
def worker():
    w = ModelWorker("test-model")
    yield w
    w.shutdown(wait=True)


class Blocker:
    """A job that holds the worker until released (or until its token is cancelled)."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, token: CancelToken | None = None) -> str:
        self.started.set()
        while not self.release.wait(0.005):
            if token is not None and token.cancelled:
                return "stopped"
        return "released"


def test_jobs_run_one_at_a_time_on_one_thread_in_order(worker):
    seen, inside = [], []

    def job(i):
        inside.append(i)
        assert len(inside) == 1, "two jobs ran at once"
        seen.append((i, threading.current_thread().name))
        time.sleep(0.002)
        inside.remove(i)
        return i

    callers = [threading.Thread(target=lambda i=i: worker.submit(lambda: job(i)).result(10)) for i in range(8)]
    for c in callers:
        c.start()
    for c in callers:
        c.join(10)
    assert sorted(i for i, _ in seen) == list(range(8))
    assert {name for _, name in seen} == {"test-model"}


def test_newest_request_per_document_wins_queued_or_running(worker):
    running_token = CancelToken()
    blocker = Blocker()
    running = worker.submit(lambda: blocker(running_token), key="doc", cancel=running_token, kind="inline")
    assert blocker.started.wait(5)
    holder = Blocker()  # queued behind the running job, on another document: keeps the next ones queued
    worker.submit(holder, key="other", kind="inline")
    ran = []
    queued_token = CancelToken()
    queued = worker.submit(lambda: ran.append("queued"), key="doc", cancel=queued_token, kind="inline")
    assert running_token.cancelled and "superseded" in running_token.reason  # the running one is told to stop
    assert running.result(5) == "stopped"
    assert holder.started.wait(5)
    newest = worker.submit(lambda: ran.append("newest") or "newest", key="doc", kind="inline")
    with pytest.raises(NotRun) as skipped:
        queued.result(5)
    assert skipped.value.outcome == "cancelled" and queued_token.cancelled
    holder.release.set()
    assert newest.result(5) == "newest"
    assert ran == ["newest"]  # the superseded queued job never ran
    assert worker.claims.running == 0


def test_a_superseded_queued_job_returns_at_once_while_the_worker_is_busy(worker):
    blocker = Blocker()
    worker.submit(blocker)
    assert blocker.started.wait(5)
    older = worker.submit(lambda: "older", key="doc", kind="inline")
    worker.submit(lambda: "newer", key="doc", kind="inline")
    with pytest.raises(NotRun):
        older.result(1)  # answered while the blocker still holds the thread
    assert not blocker.release.is_set()
    blocker.release.set()


def test_a_queued_job_cancelled_never_runs(worker):
    blocker = Blocker()
    worker.submit(blocker)
    assert blocker.started.wait(5)
    token, ran = CancelToken(), []
    future = worker.submit(lambda: ran.append(1), cancel=token)
    token.cancel("user typed")
    blocker.release.set()
    with pytest.raises(NotRun) as skipped:
        future.result(5)
    assert skipped.value.outcome == "cancelled" and skipped.value.reason == "user typed"
    assert ran == [] and worker.submit(lambda: "still serving").result(5) == "still serving"


def test_a_job_whose_deadline_passes_while_queued_is_cut_short_at_once_without_running(worker):
    blocker = Blocker()
    worker.submit(blocker)
    assert blocker.started.wait(5)
    ran = []
    submitted = time.monotonic()
    future = worker.submit(lambda: ran.append(1), deadline=submitted + 0.05)
    with pytest.raises(NotRun) as skipped:
        future.result(5)  # answered at its deadline, while the blocker still holds the thread
    assert time.monotonic() - submitted < 2 and not blocker.release.is_set()
    assert skipped.value.outcome == "cut_short"
    blocker.release.set()
    assert worker.submit(lambda: "after").result(5) == "after" and ran == []


def test_a_document_change_cancels_every_claim_on_it(worker):
    inline, action = worker.claims.open("a", "inline"), worker.claims.open("a", "action")
    other = worker.claims.open("b", "inline")
    assert worker.claims.running == 3
    assert worker.claims.document_changed("a") == 2
    assert inline.stopped and action.stopped and not other.stopped
    for ticket in (inline, action, other):
        worker.claims.close(ticket)
    assert worker.claims.running == 0


def test_an_action_claim_is_not_superseded_by_an_inline_one(worker):
    action = worker.claims.open("a", "action")
    worker.claims.open("a", "inline")
    assert not action.stopped


def test_a_failing_job_fails_its_future_and_the_worker_keeps_serving(worker):
    def boom():
        raise RuntimeError("simulated device failure")

    with pytest.raises(RuntimeError, match="simulated device failure"):
        worker.submit(boom).result(5)
    assert worker.submit(lambda: 42).result(5) == 42


def test_superseding_a_running_engine_job_stops_it_within_a_step(worker, tiny_engine):
    engine = DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=64, confidence_threshold=1e-9))
    first_step, drafts = threading.Event(), []

    def on_draft(draft):
        drafts.append(draft.step)
        first_step.set()
        time.sleep(0.02)  # a slow step, so the newer request lands while this one runs

    older_token = CancelToken()
    older = worker.submit(
        lambda: engine.infill(
            InfillRequest(prefix=PREFIX, document_id="doc"), FillControl(cancel=older_token, on_draft=on_draft)
        ),
        key="doc",
        cancel=older_token,
        kind="inline",
    )
    assert first_step.wait(30)
    newer_token = CancelToken()
    newer = worker.submit(
        lambda: engine.infill(InfillRequest(prefix=PREFIX + "z", document_id="doc"), FillControl(cancel=newer_token)),
        key="doc",
        cancel=newer_token,
        kind="inline",
    )
    steps_when_cancelled = len(drafts)
    old = older.result(30)
    assert old.outcome == "cancelled" and "superseded" in old.error
    assert len(drafts) <= steps_when_cancelled + 1 < 64  # stopped within one step
    assert newer.result(30).outcome == "ok"


@pytest.mark.slow
def test_newer_request_for_the_same_document_supersedes_the_older_gemma(worker, ar_backend):
    """The offline Gemma backend holds no lock: the worker serialises and supersedes for it."""
    started = threading.Event()
    older_token, newer_token = CancelToken(), CancelToken()
    older = worker.submit(
        lambda: ar_backend.infill(
            InfillRequest(prefix="def parse(text):\n", max_middle_tokens=48, document_id="doc://s"),
            FillControl(cancel=older_token, on_draft=lambda d: started.set()),
        ),
        key="doc://s",
        cancel=older_token,
        kind="inline",
    )
    assert started.wait(60)
    newer = worker.submit(
        lambda: ar_backend.infill(
            InfillRequest(
                prefix="def parse(text):\n    return ", single_line=True, max_middle_tokens=6, document_id="doc://s"
            ),
            FillControl(cancel=newer_token),
        ),
        key="doc://s",
        cancel=newer_token,
        kind="inline",
    )
    assert older.result(60).outcome == "cancelled" and "superseded" in older.result().error
    assert newer.result(60).outcome == "ok"


def test_an_identical_inline_request_takes_the_run_over_and_a_different_one_supersedes_it(worker):
    first = worker.claims.join_or_open("doc", (1, 10, True))
    again = worker.claims.join_or_open("doc", (1, 10, True))  # a client re-asking the same
    assert again.joined and again.ticket is first.ticket and not first.ticket.stopped
    assert first.taken_over.done() and not first.answered and again.answered
    other = worker.claims.join_or_open("doc", (1, 11, True))  # the cursor moved: a new request
    assert not other.joined and other.ticket is not first.ticket
    assert first.ticket.stopped and "superseded" in first.ticket.token.reason


def test_a_run_nobody_waits_for_is_released_unless_an_identical_request_joined(worker):
    claim = worker.claims.join_or_open("doc", "key")
    assert worker.claims.leave(claim)  # its client cancelled: no one waits
    rejoined = worker.claims.join_or_open("doc", "key")  # ... and re-asked within the grace
    assert rejoined.joined and not worker.claims.release(rejoined.ticket) and not claim.ticket.stopped
    assert worker.claims.leave(rejoined) and worker.claims.release(rejoined.ticket)
    assert claim.ticket.stopped
    assert not worker.claims.join_or_open("doc", "key").joined  # a stopped run is never joined


def test_complete_answers_a_job_dropped_unrun_with_an_empty_result(worker, ar_backend):
    from infill.pipeline import CompletionRequest, Pipeline

    pipeline = Pipeline(ar_backend)
    blocker = Blocker()
    worker.submit(blocker)
    assert blocker.started.wait(5)
    token = CancelToken()
    request = CompletionRequest(text="def area(r):\n    return ", start=24, document_id="doc", version=3)
    future = worker.complete(pipeline, request, FillControl(cancel=token), kind="inline")
    worker.claims.document_changed("doc")  # the document changed while the job was queued
    result = future.result(5)  # answered at once, while the blocker still holds the thread
    assert result.route == "not_run" and result.fills == [] and result.version == 3
    assert result.result.outcome == "cancelled" and "changed" in result.result.error
    blocker.release.set()
    ran = worker.complete(pipeline, request, FillControl(cancel=CancelToken())).result(60)
    assert ran.route != "not_run" and ran.result.outcome in ("ok", "empty")
