"""Phase timings for the benchmarks: off by default, next to nothing when off.

Turned on by INFILL_PHASE_TIMES=1 in the environment (benchmarks/server.py starts the server so) or `enable()`.
A request carries a `Trace` (wall and CPU milliseconds of named phases, accumulated across start/stop pairs on the
thread that runs each phase); `record` feeds process-wide windows whose p50/p95 `summary()` reports (the LSP
server shows them as `infill.status` "overhead"). When off, `trace()` hands out one shared trace that keeps
nothing and `record` returns at once. What users see (latency p50/p95, the completion log) is measured elsewhere
and does not depend on this.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager

from infill.stats import percentile

ENV = "INFILL_PHASE_TIMES"
WINDOW = 2000  # values kept per phase
_on = os.environ.get(ENV, "") not in ("", "0")
_windows: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=WINDOW))


def enabled() -> bool:
    return _on


def enable(on: bool = True) -> None:
    global _on
    _on = on


class Trace:
    """One request's phases: wall and CPU ms per name (a phase may start and stop several times)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._open: dict[str, tuple[float, float]] = {}

    def start(self, name: str) -> None:
        self._open[name] = (time.perf_counter(), time.thread_time())

    def stop(self, name: str) -> None:
        opened = self._open.pop(name, None)
        if opened is None:  # never started (an early return took another way): nothing to add
            return
        wall, cpu = opened
        self.add(name, (time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000)

    def add(self, name: str, wall_ms: float, cpu_ms: float = 0.0) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall_ms
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu_ms

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.stop(name)


class _Off(Trace):
    """The trace handed out while timing is off: keeps nothing."""

    def start(self, name: str) -> None:
        pass

    def stop(self, name: str) -> None:
        pass

    def add(self, name: str, wall_ms: float, cpu_ms: float = 0.0) -> None:
        pass


OFF = _Off()


def trace() -> Trace:
    """A new trace for one request (the shared no-op one while timing is off)."""
    return Trace() if _on else OFF


def record(phase: str, ms: float) -> None:
    if _on:
        _windows[phase].append(ms)


def summary() -> dict[str, dict[str, float]]:
    out = {}
    for phase, values in list(_windows.items()):
        data = list(values)
        out[phase] = {
            "p50_ms": round(percentile(data, 50) or 0.0, 4),
            "p95_ms": round(percentile(data, 95) or 0.0, 4),
            "count": len(data),
        }
    return out
