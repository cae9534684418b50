"""Fuzz the real infill-ls over stdio (tiny random-weight DiffusionGemma) for --minutes and print one JSON line:
sessions, requests, crashes, hangs, stale_edits, bad_edits, protocol_errors (and the first problems found).

    .venv/bin/python benchmarks/fuzz.py --minutes 30 [--seed 14] [--session-seconds 60]

The generator and invariants are tests/fuzz/session.py (the suite runs the same for about two minutes)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--session-seconds", type=float, default=60.0)
    args = parser.parse_args()
    from fuzz.session import run_fuzz
    from infill.testing.tiny_checkpoint import write_tiny_checkpoint

    with tempfile.TemporaryDirectory(prefix="infill-fuzz-") as tmp:
        checkpoint = write_tiny_checkpoint(Path(tmp) / "tiny")
        started = time.monotonic()
        stats = run_fuzz(str(checkpoint), args.minutes * 60, seed=args.seed, session_seconds=args.session_seconds,
                         stderr_dir=tmp)
        summary = stats.summary()
        summary["minutes"] = round((time.monotonic() - started) / 60, 2)
    summary["seed"] = args.seed
    summary["cores"] = os.cpu_count()
    summary["cpu_flags"] = _cpu_flags()
    print(json.dumps(summary))
    return 0


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return " ".join(sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_tile", "fma", "f16c"}))
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    sys.exit(main())
