"""Seeded fuzzing of the real server over stdio with the tiny random-weight DiffusionGemma (see session.py for the
invariants). About two minutes by default; INFILL_FUZZ_SECONDS=1800 (or benchmarks/fuzz.py --minutes 30) runs
longer, INFILL_FUZZ_SEED picks another seed."""

from __future__ import annotations

import os

import pytest

from .session import run_fuzz

SECONDS = float(os.environ.get("INFILL_FUZZ_SECONDS", "120"))
SEED = int(os.environ.get("INFILL_FUZZ_SEED", "14"))


@pytest.mark.timeout(SECONDS + 600)
def test_fuzz_sessions_keep_every_invariant(tiny_checkpoint, tmp_path):
    stats = run_fuzz(str(tiny_checkpoint), SECONDS, seed=SEED, session_seconds=min(SECONDS / 2, 60.0),
                     stderr_dir=str(tmp_path))
    summary = stats.summary()
    assert stats.sessions >= 2 and stats.requests >= 100, summary
    failures = {k: summary[k] for k in ("crashes", "hangs", "stale_edits", "bad_edits", "protocol_errors")}
    assert not any(failures.values()), summary
