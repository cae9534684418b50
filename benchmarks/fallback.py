"""What the default fallback (issue 39, item 4) costs and gives, behind a DiffusionGemma checkpoint whose fills the
watchdog rejects: the same holes through the same primary alone (before: `fallback: false`) and with the offline
default behind it (after: the default), paired and alternating per hole in one process.

- Loading, each in a fresh process (alternating, `--loads` each): seconds until `open_pipeline` returns and the
  process's resident memory then, without and with the fallback.
- Holes: the held-out set of benchmarks/fill_quality.py (its packages and seed; nothing is chosen on them here),
  each asked as the LSP server asks (`ask_lsp`: the language given, the inline guard's cap as the deadline), once
  through each pipeline, the order rotating per hole: the primary alone, the primary with the fallback, and the
  offline default alone as the primary (what the fallback's answers are compared with: the same model, the same
  request). Per side: shown, exact, valid of shown, with 95% intervals, p50/p95 latency over every hole (not only
  those that showed something), routes taken, and why nothing was shown (the first rejection's reason).

The primary is a tiny random-weight checkpoint (written here, or `--checkpoint DIR`; `--stutter` makes one whose
every fill is rejected): its fills are noise, so what "after" shows is the fallback's, and its latencies are the
primary's rejected attempt plus the fallback's fill. No GPU figure: a real checkpoint's rejection rate is unknown
here (no download).

    python benchmarks/fallback.py [--n 60] [--loads 3 (0: none)] [--stutter] [--checkpoint DIR]   # last line: JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fill_quality import HELD_OUT_PACKAGES, HELD_OUT_SEED, ask_lsp, judge, package_files, summarise  # noqa: E402

from infill.backends.choose import BackendSpec  # noqa: E402
from infill.loader import FallbackChoice, open_pipeline  # noqa: E402
from infill.pilot.holes import CutSettings, cut_holes  # noqa: E402
from infill.pipeline import Pipeline, PipelineSettings  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import kernel_flags  # noqa: E402
from server.budget import GUARD_CAP_MS  # noqa: E402
from server.settings import Settings  # noqa: E402

LOAD_ONE = """
import json, sys, time
sys.path.insert(0, {root!r})
from infill.backends.choose import BackendSpec
from infill.loader import NO_FALLBACK, FallbackChoice, open_pipeline
t0 = time.perf_counter()
opened = open_pipeline(BackendSpec(model={model!r}), fallback=FallbackChoice() if {fallback} else NO_FALLBACK)
seconds = time.perf_counter() - t0
rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
print(json.dumps({{"seconds": seconds, "rss_mib": rss / 1024, "backends": len(opened.backends)}}))
"""


def load_once(model: str, fallback: bool) -> dict:
    code = LOAD_ONE.format(root=str(ROOT), model=model, fallback=fallback)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--loads", type=int, default=3, help="fresh-process loads of each side")
    parser.add_argument("--checkpoint", default=None, help="a DiffusionGemma checkpoint (default: a tiny random one)")
    parser.add_argument("--stutter", action="store_true", help="a tiny checkpoint whose every fill is rejected")
    args = parser.parse_args(argv)
    started = time.monotonic()
    model = args.checkpoint
    if model is None:
        from infill.testing.tiny_checkpoint import tiny_tokenizer, write_tiny_checkpoint

        word = tiny_tokenizer().encode(" return", add_special_tokens=False)[0] if args.stutter else None
        model = str(write_tiny_checkpoint(tempfile.mkdtemp(prefix="fallback-bench-"), stutter=word))

    loads: dict[str, list[dict]] = {"alone": [], "with_fallback": []}
    for i in range(args.loads * 2):
        side = ("alone", "with_fallback")[(i + i // 2) % 2]  # alone, with, with, alone, alone, with, ...
        loads[side].append(load_once(model, side == "with_fallback"))
        print(f"load {side}: {loads[side][-1]}", flush=True)

    settings = PipelineSettings(max_middle_tokens=Settings().max_middle_tokens)
    opened = open_pipeline(BackendSpec(model=model), fallback=FallbackChoice(), settings=settings)
    pipelines = {
        "alone": Pipeline(opened.pipeline.backend, settings=settings),
        "with_fallback": opened.pipeline,
        "offline_default": Pipeline(opened.pipeline.fallback, settings=settings),
    }
    assert opened.pipeline.fallback is not None, opened.fallback_error
    holes = cut_holes(
        package_files(HELD_OUT_PACKAGES), CutSettings(n=args.n, seed=HELD_OUT_SEED, kinds=("single-line",))
    )
    records: dict[str, list[dict]] = {side: [] for side in pipelines}
    for index, hole in enumerate(holes):
        order = list(pipelines)[index % 3 :] + list(pipelines)[: index % 3]
        for side in order:
            before = Counter(pipelines[side].routes)
            record = judge(hole, ask_lsp(pipelines[side], hole, GUARD_CAP_MS))
            record["route"] = next(iter(Counter(pipelines[side].routes) - before), "none")
            records[side].append(record)
            print(
                f"{side:13s} {hole.path}:{hole.line:<5d} {record['ms']:7.0f} ms {record['route']:8s} "
                f"want {hole.middle!r:.30s} got {record['fill']!r:.30s}",
                flush=True,
            )
    for backend in opened.backends:
        backend.close()

    def load_figures(rows: list[dict]) -> dict:
        return {
            "seconds_p50": round(percentile([r["seconds"] for r in rows], 50), 2),
            "seconds": [round(r["seconds"], 2) for r in rows],
            "rss_mib_p50": round(percentile([r["rss_mib"] for r in rows], 50)),
            "backends": rows[0]["backends"],
        }

    report = {
        "benchmark": "fallback",
        "commit": commit(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cpu_flags": kernel_flags(),
        "primary": "tiny stutter checkpoint"
        if args.stutter and not args.checkpoint
        else "tiny random checkpoint"
        if not args.checkpoint
        else args.checkpoint,
        "holes": {
            "set": "heldout",
            "packages": list(HELD_OUT_PACKAGES),
            "seed": HELD_OUT_SEED,
            "n": len(holes),
            "kinds": "single-line",
            "asked": "as the LSP server asks (fill_quality.ask_lsp)",
        },
        "load": {side: load_figures(rows) for side, rows in loads.items() if rows},
        **{
            side: {**summarise(rows), "routes": dict(Counter(r["route"] for r in rows))}
            for side, rows in records.items()
        },
        "shown_only_with_fallback": sum(
            b["shown"] and not a["shown"] for a, b in zip(records["alone"], records["with_fallback"])
        ),
        "shown_only_alone": sum(
            a["shown"] and not b["shown"] for a, b in zip(records["alone"], records["with_fallback"])
        ),
        "fallback_same_as_offline_default": sum(
            a["fill"] == b["fill"] for a, b in zip(records["with_fallback"], records["offline_default"])
        ),
        "seconds": round(time.monotonic() - started),
    }
    if args.loads:
        report["load"]["added_seconds_p50"] = round(
            report["load"]["with_fallback"]["seconds_p50"] - report["load"]["alone"]["seconds_p50"], 2
        )
        report["load"]["added_rss_mib_p50"] = (
            report["load"]["with_fallback"]["rss_mib_p50"] - report["load"]["alone"]["rss_mib_p50"]
        )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
