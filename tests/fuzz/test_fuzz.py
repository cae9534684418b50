"""Seeded fuzzing of the real server over stdio with the tiny random-weight DiffusionGemma (see session.py for the
invariants), and of the real gateway with slow connections beside normal traffic (gateway.py). About two minutes
and 30 s by default; INFILL_FUZZ_SECONDS=1800 and INFILL_GATEWAY_FUZZ_SECONDS=600 (or benchmarks/fuzz.py --minutes
30, --gateway --minutes 10) run longer, INFILL_FUZZ_SEED picks another seed."""

from __future__ import annotations

import os

import pytest

from .session import run_fuzz

SECONDS = float(os.environ.get("INFILL_FUZZ_SECONDS", "120"))
SEED = int(os.environ.get("INFILL_FUZZ_SEED", "14"))
GATEWAY_SECONDS = float(os.environ.get("INFILL_GATEWAY_FUZZ_SECONDS", "30"))


@pytest.mark.timeout(SECONDS + 600)
def test_fuzz_sessions_keep_every_invariant(tiny_checkpoint, tmp_path):
    stats = run_fuzz(
        str(tiny_checkpoint), SECONDS, seed=SEED, session_seconds=min(SECONDS / 2, 60.0), stderr_dir=str(tmp_path)
    )
    summary = stats.summary()
    assert stats.sessions >= 2 and stats.requests >= 100, summary
    failures = {
        k: summary[k]
        for k in ("crashes", "hangs", "stale_edits", "bad_edits", "protocol_errors", "internal_errors", "tracebacks")
    }
    # the problems first: pytest's short report cuts a long message, and they are what a failure is chased by
    assert not any(failures.values()), "\n".join([*stats.problems, str(failures)])


@pytest.mark.timeout(GATEWAY_SECONDS + 300)
def test_gateway_fuzz_with_slow_connections_keeps_every_invariant(tiny_engine):
    from infill.pipeline import Pipeline

    from .gateway import run_gateway_fuzz

    stats = run_gateway_fuzz(
        Pipeline(tiny_engine),
        GATEWAY_SECONDS,
        seed=SEED,
        slow=200,
        burst=200,
        burst_every_s=min(30.0, GATEWAY_SECONDS / 2),
    )
    assert stats["bursts"] >= 1 and stats["completions_ok"] >= 1 and stats["health_count"] >= 10, stats
    assert stats["slow_open_median"] >= 150, stats  # the slow connections were open meanwhile
    failures = {k: stats[k] for k in ("resets", "hangs", "closed_without_answer", "server_errors", "auth_bypassed")}
    assert not any(failures.values()), stats
