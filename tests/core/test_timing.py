"""The benchmark phase timer (infill/timing.py): off by default and then keeping nothing; on, the pipeline's
phases of a real request (tiny DiffusionGemma engine) are traced."""

from __future__ import annotations

import time

import pytest

from infill import timing
from infill.pipeline import CompletionRequest, Pipeline

TEXT = "def add(a, b):\n    return"


@pytest.fixture
def timing_on():
    was = timing.enabled()
    timing.enable(True)
    yield
    timing.enable(was)


def test_a_trace_accumulates_wall_and_cpu_per_phase(timing_on):
    trace = timing.trace()
    for _ in range(2):
        with trace.span("busy"):
            end = time.thread_time() + 0.005
            while time.thread_time() < end:
                pass
    trace.stop("never started")  # an early return's path: ignored
    assert trace.wall["busy"] >= 10 and trace.cpu["busy"] >= 9


def test_off_by_default_keeps_nothing():
    import subprocess
    import sys

    probe = "from infill import timing; print(timing.enabled(), timing.trace() is timing.OFF)"
    env = {k: v for k, v in __import__("os").environ.items() if k != timing.ENV}
    assert subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.split() == ["False", "True"]
    timing.enable(False)
    trace = timing.trace()
    assert trace is timing.OFF
    with trace.span("x"):
        pass
    timing.record("off-phase", 1.0)
    assert trace.wall == {} and "off-phase" not in timing.summary()


def test_the_pipeline_traces_context_and_checks_when_on(tiny_engine, timing_on):
    pipeline = Pipeline(tiny_engine)
    result = pipeline.complete(CompletionRequest(TEXT + "\n", len(TEXT)))
    assert set(result.trace.wall) >= {"context", "checks"}
    backend_ms = sum(result.costs.values())
    # the phases exclude the backend: context + checks + backend fit in the request's total
    assert result.trace.wall["context"] + result.trace.wall["checks"] + backend_ms <= result.total_ms + 1
    timing.record("probe", 3.0)
    assert timing.summary()["probe"]["count"] >= 1


def test_the_pipeline_traces_nothing_when_off(tiny_engine):
    timing.enable(False)
    result = Pipeline(tiny_engine).complete(CompletionRequest(TEXT + "\n", len(TEXT)))
    assert result.trace is timing.OFF and result.trace.wall == {}
    assert result.context_ms > 0 and result.total_ms > 0  # what users see is measured regardless
