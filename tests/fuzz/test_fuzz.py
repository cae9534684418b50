"""Seeded fuzzing of the real server over stdio with the tiny random-weight DiffusionGemma (see session.py for the
invariants), and of the real gateway with slow connections beside normal traffic (gateway.py). Both run by a count
of requests, not by time, so a slow machine checks as much as a fast one: INFILL_FUZZ_REQUESTS (LSP) and
INFILL_GATEWAY_FUZZ_REQUESTS (gateway). INFILL_FUZZ_SECONDS / INFILL_GATEWAY_FUZZ_SECONDS run by time instead
(benchmarks/fuzz.py --minutes 30 does that too), INFILL_FUZZ_SEED picks another seed."""

from __future__ import annotations

import os

import pytest

from .session import run_fuzz

SEED = int(os.environ.get("INFILL_FUZZ_SEED", "14"))
SECONDS = float(os.environ["INFILL_FUZZ_SECONDS"]) if "INFILL_FUZZ_SECONDS" in os.environ else None
REQUESTS = int(os.environ.get("INFILL_FUZZ_REQUESTS", "700"))
SESSION_REQUESTS = 350  # two sessions: each a fresh server, ending one way (shutdown then exit, or exit at once)
GATEWAY_SECONDS = (
    float(os.environ["INFILL_GATEWAY_FUZZ_SECONDS"]) if "INFILL_GATEWAY_FUZZ_SECONDS" in os.environ else None
)
GATEWAY_REQUESTS = int(os.environ.get("INFILL_GATEWAY_FUZZ_REQUESTS", "120"))


@pytest.mark.timeout((SECONDS or 0) + 900)
def test_fuzz_sessions_keep_every_invariant(tiny_checkpoint, tmp_path):
    stats = run_fuzz(
        str(tiny_checkpoint),
        SECONDS or 0.0,
        seed=SEED,
        session_seconds=min((SECONDS or 120) / 2, 60.0),
        stderr_dir=str(tmp_path),
        requests=None if SECONDS else REQUESTS,
        session_requests=SESSION_REQUESTS,
    )
    summary = stats.summary()
    assert stats.sessions >= 2 and stats.requests >= 100, summary
    failures = {
        k: summary[k]
        for k in ("crashes", "hangs", "stale_edits", "bad_edits", "protocol_errors", "internal_errors", "tracebacks")
    }
    # the problems first: pytest's short report cuts a long message, and they are what a failure is chased by
    assert not any(failures.values()), "\n".join([*stats.problems, str(failures)])


@pytest.mark.timeout((GATEWAY_SECONDS or 0) + 600)
def test_gateway_fuzz_with_slow_connections_keeps_every_invariant(tiny_engine):
    from infill.pipeline import Pipeline

    from .gateway import run_gateway_fuzz

    stats = run_gateway_fuzz(
        Pipeline(tiny_engine),
        GATEWAY_SECONDS or 0.0,
        seed=SEED,
        slow=200,
        burst=200,
        burst_every_s=min(30.0, (GATEWAY_SECONDS or 60) / 2),
        requests=None if GATEWAY_SECONDS else GATEWAY_REQUESTS,
    )
    assert stats["bursts"] >= 1 and stats["completions_ok"] >= 1 and stats["health_count"] >= 10, stats
    assert stats["slow_open_median"] >= 150, stats  # the slow connections were open meanwhile
    failures = {k: stats[k] for k in ("resets", "hangs", "closed_without_answer", "server_errors", "auth_bypassed")}
    assert not any(failures.values()), stats
