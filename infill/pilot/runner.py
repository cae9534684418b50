"""Runs every hole through every backend at every concurrency level (worker threads), under one time cap.

Each attempt is appended to attempts.jsonl (flushed) the moment it completes, and each (backend, concurrency) cell
to cells.jsonl when it ends, so a run stopped by its time cap or by Ctrl-C keeps everything it measured.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from infill.backends.choose import BackendSpec
from infill.completion import Completer
from infill.metrics import AcceptRule
from infill.pilot.attempt import run_attempt
from infill.pilot.holes import Hole
from infill.pilot.targets import OpenedTarget, TargetPool, TargetSpec
from infill.pipeline import PipelineSettings
from infill.types import CancelToken, InfillError
from infill.worker import ModelWorker, OnWorker

JOIN_POLL_S = 0.1
CANCEL_GRACE_S = 30.0  # after a stop, how long in-flight attempts get to return before their threads are abandoned


def failed_attempt(error: str) -> dict[str, Any]:
    """The record of an attempt that produced nothing: a scoring bug, or a target whose backend did not open."""
    return {
        "latency_ms": None,
        "shown": False,
        "predicted": "",
        "exact_match": False,
        "edit_similarity": 0.0,
        "syntax_valid": None,
        "accepted": False,
        "route": "none",
        "rejections": [],
        "outcome": "exception",
        "error": error,
    }


@dataclass(frozen=True)
class RunSettings:
    concurrency: tuple[int, ...] = (1, 4, 16)
    max_seconds: float = 600.0  # the whole run: loading, warm-up and every cell
    deadline_ms: float | None = None  # per attempt, passed to the backend (None: no deadline)
    accept: AcceptRule = field(default_factory=AcceptRule)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    warmup: bool = True  # one unrecorded attempt per backend first, so lazy initialisation is not in p95
    # Model options for every engine opened (device, dtype, threads, DiffusionGemma's engine config); which model
    # each backend runs comes from its TargetSpec.
    backend: BackendSpec = field(default_factory=BackendSpec)

    def __post_init__(self) -> None:
        if not self.concurrency or any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            raise InfillError(f"concurrency levels must be positive integers, got {self.concurrency!r}")
        if not self.max_seconds > 0:
            raise InfillError(f"--max-seconds must be > 0, got {self.max_seconds}")
        if self.deadline_ms is not None and not self.deadline_ms > 0:
            raise InfillError(f"per-attempt deadline must be > 0 ms, got {self.deadline_ms}")


class JsonlWriter:
    """Thread-safe, line-at-a-time, flushed."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            if self._file.closed:  # a worker left behind after its grace time: the run is over
                return
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Progress:
    """One status line on stderr: redrawn in place on a terminal, a line per 10% otherwise."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_decile = -1
        self._width = 0  # of the line drawn last: a shorter one must cover it

    def update(self, label: str, done: int, total: int, errors: int, elapsed: float, final: bool = False) -> None:
        if not self.enabled:
            return
        width = 24
        filled = int(width * done / total) if total else width
        line = f"{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} errors {errors} {elapsed:5.0f}s"
        decile = int(10 * done / total) if total else 10
        if self.tty:
            self.stream.write("\r" + line.ljust(self._width) + ("\n" if final else ""))
            self._width = 0 if final else len(line)
        elif decile > self._last_decile or (final and self._last_decile < 10):
            self.stream.write(line + "\n")
        self._last_decile = -1 if final else max(decile, self._last_decile)
        self.stream.flush()


@dataclass
class PilotRun:
    stopped_by: str = "done"  # "done", "time cap" or "interrupted"
    targets: list[dict[str, Any]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)


class _Cell:
    """One (backend, concurrency) pass over the holes."""

    def __init__(
        self,
        target: OpenedTarget,
        concurrency: int,
        index: int,
        holes: list[Hole],
        settings: RunSettings,
        attempts: JsonlWriter,
        worker: ModelWorker | None = None,
    ) -> None:
        self.target, self.concurrency, self.index = target, concurrency, index
        self.front = _front(target, worker)
        self.holes, self.settings, self.attempts = holes, settings, attempts
        self._queue: Iterator[Hole] = iter(holes)
        self._queue_lock = threading.Lock()
        self._in_flight: set[CancelToken] = set()
        self.stop_reason: str | None = None
        self.done = self.errors = 0
        self._live_workers = 0
        self._finished = threading.Event()  # set by the last worker to leave

    def _next(self) -> Hole | None:
        with self._queue_lock:
            if self.stop_reason is not None:
                return None
            return next(self._queue, None)

    def stop(self, reason: str) -> None:
        with self._queue_lock:
            self.stop_reason = self.stop_reason or reason
            tokens = list(self._in_flight)
        for token in tokens:
            token.cancel(f"pilot stopped: {reason}")

    def _worker(self) -> None:
        try:
            self._work()
        finally:
            with self._queue_lock:
                self._live_workers -= 1
                if self._live_workers <= 0:
                    self._finished.set()

    def _work(self) -> None:
        assert self.target.pipeline is not None
        while (hole := self._next()) is not None:
            token = CancelToken()
            with self._queue_lock:
                self._in_flight.add(token)
            deadline_s = None if self.settings.deadline_ms is None else self.settings.deadline_ms / 1000
            document_id = f"pilot/{self.index}/{hole.id}"  # unique: no KV reuse or supersession across attempts
            started = time.time()
            try:
                assert self.front is not None  # (a cell whose target did not open runs no attempt)
                record = run_attempt(self.front, hole, document_id, self.settings.accept, token, deadline_s)
            except Exception as exc:  # a scoring bug must not silently lose the hole: it is recorded as an error
                record = failed_attempt(f"pilot: {type(exc).__name__}: {exc}")
            try:  # each document is seen once: its cached syntax tree is dead weight
                getattr(self.target.pipeline, "forget", lambda _id: None)(document_id)
            except Exception:
                pass
            with self._queue_lock:
                self._in_flight.discard(token)
                self.done += 1
                self.errors += record.get("error") is not None
            self.attempts.write(
                {**self._identity(hole), "started_at": round(started, 3), **record, "stopped": token.cancelled}
            )

    def _identity(self, hole: Hole) -> dict[str, Any]:
        return {
            "hole_id": hole.id,
            "kind": hole.kind,
            "language": hole.language,
            "path": hole.path,
            "line": hole.line,
            "backend": self.target.spec.label,
            "concurrency": self.concurrency,
            "cell": self.index,
            "expected": hole.middle,
        }

    def run_failed_open(self) -> dict[str, Any]:
        for hole in self.holes:
            self.attempts.write(
                {
                    **self._identity(hole),
                    **failed_attempt(f"backend failed to open: {self.target.open_error}"),
                    "stopped": False,
                }
            )
        self.done = self.errors = len(self.holes)
        return self._record(0.0, "open failed")

    def run(self, cell_seconds: float, progress: Progress) -> dict[str, Any]:
        label = f"{self.target.spec.label} c={self.concurrency}"
        workers = [
            threading.Thread(target=self._worker, daemon=True, name=f"pilot-{self.index}-{i}")
            for i in range(self.concurrency)
        ]
        started = time.monotonic()
        self._live_workers = len(workers)
        interrupted = False
        stopped_at: float | None = None
        # Waiting on an Event, not Thread.join: on Python 3.11 a Ctrl-C landing inside join() can mark a thread
        # that is still running as stopped, and it would then write after the files are closed.
        try:
            for worker in workers:
                worker.start()
            while not self._finished.wait(JOIN_POLL_S):
                now = time.monotonic()
                if now - started > cell_seconds and stopped_at is None:
                    self.stop("time cap")
                    stopped_at = now
                if stopped_at is not None and now - stopped_at > CANCEL_GRACE_S:
                    break  # a backend that ignores cancellation: its threads are daemons, left behind
                progress.update(label, self.done, len(self.holes), self.errors, now - started)
        except KeyboardInterrupt:
            interrupted = True
            self.stop("interrupted")
            self._finished.wait(CANCEL_GRACE_S)
        wall = time.monotonic() - started
        progress.update(label, self.done, len(self.holes), self.errors, wall, final=True)
        record = self._record(wall, "interrupted" if interrupted else (self.stop_reason or "done"))
        if interrupted:
            raise _Interrupted(record)
        return record

    def _record(self, wall: float, stopped_by: str) -> dict[str, Any]:
        return {
            "cell": self.index,
            "backend": self.target.spec.label,
            "concurrency": self.concurrency,
            "wall_seconds": round(wall, 3),
            "attempts": self.done,
            "holes": len(self.holes),
            "stopped_by": stopped_by,
        }


class _Interrupted(Exception):
    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.record = record


def _front(target: OpenedTarget, worker: ModelWorker | None) -> Completer | None:
    """What attempts call: a pipeline with an in-process backend through the one model worker (backends are
    single-threaded; concurrent attempts queue for it as an editor's requests would); one that only talks to
    remote endpoints directly, so that the concurrency reaches the server it measures."""
    pipeline = target.pipeline
    backends = [b for b in (pipeline.backend, pipeline.fallback) if b is not None] if pipeline is not None else []
    if pipeline is None or worker is None or all(b.info.kind == "remote" for b in backends):
        return pipeline
    return OnWorker(pipeline, worker, kind=None)  # (attempts are separate documents: nothing to supersede)


def _warm_up(target: OpenedTarget, hole: Hole, settings: RunSettings, worker: ModelWorker) -> None:
    front = _front(target, worker)
    if front is None:
        return
    run_attempt(
        front,
        hole,
        "pilot/warmup",
        settings.accept,
        CancelToken(),
        None if settings.deadline_ms is None else settings.deadline_ms / 1000,
    )


def run_pilot(
    holes: list[Hole],
    specs: list[TargetSpec],
    settings: RunSettings,
    out_dir: Path,
    progress: Progress | None = None,
    pool: TargetPool | None = None,
) -> PilotRun:
    """Every spec × every concurrency level over `holes`. Writes attempts.jsonl and cells.jsonl into `out_dir`."""
    if not holes:
        raise InfillError("no holes to run")
    progress = progress or Progress()
    own_pool = pool is None
    pool = pool or TargetPool(settings.pipeline, base=settings.backend)
    run = PilotRun()
    run_started = time.monotonic()
    attempts, cells = JsonlWriter(out_dir / "attempts.jsonl"), JsonlWriter(out_dir / "cells.jsonl")
    total_cells = len(specs) * len(settings.concurrency)
    index = 0
    worker = ModelWorker("pilot-model")
    try:
        for spec in specs:
            target = pool.open(spec)
            run.targets.append(target.describe())
            if target.pipeline is None:
                print(f"pilot: {spec.label} failed to open: {target.open_error}", file=sys.stderr)
                record = _Cell(target, settings.concurrency[0], index, holes, settings, attempts).run_failed_open()
                cells.write(record)
                run.cells.append(record)
                index += len(settings.concurrency)
                continue
            if settings.warmup:
                _warm_up(target, holes[0], settings, worker)
            for concurrency in settings.concurrency:
                remaining = settings.max_seconds - (time.monotonic() - run_started)
                if remaining <= 0:
                    run.stopped_by = "time cap"
                    break
                # Each cell gets an equal share of what is left, so a slow backend cannot starve the others.
                cell_seconds = remaining / (total_cells - index)
                try:
                    cell = _Cell(target, concurrency, index, holes, settings, attempts, worker)
                    record = cell.run(cell_seconds, progress)
                except _Interrupted as stop:
                    cells.write(stop.record)
                    run.cells.append(stop.record)
                    run.stopped_by = "interrupted"
                    return run
                cells.write(record)
                run.cells.append(record)
                if record["stopped_by"] == "time cap":
                    run.stopped_by = "time cap"
                index += 1
    except KeyboardInterrupt:  # while loading or warming up
        run.stopped_by = "interrupted"
    finally:
        # its queue is empty (every attempt waits for its own job), so this returns at once; joined because a daemon
        # thread still dropping tensors while Python exits aborts the process
        worker.shutdown(wait=True)
        attempts.close()
        cells.close()
        if own_pool:
            pool.close()
    return run
