"""Pilot runs end to end: the real tiny DiffusionGemma in process, the project's gateway over HTTP (up, down,
and going down midway), the time cap and Ctrl-C keeping partial results, and the report files."""

from __future__ import annotations

import _thread
import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from infill.gateway.server import make_server
from infill.pilot.cli import main as pilot_main
from infill.pilot.files import discover
from infill.pilot.holes import CutSettings, cut_holes
from infill.pilot.report import PLOTS, write_plots, write_report
from infill.pilot.runner import Progress, RunSettings, run_pilot
from infill.pilot.summary import read_jsonl, summarise
from infill.pilot.targets import TargetPool, parse_target
from infill.pipeline import Pipeline, PipelineSettings
from infill.types import UNSTEERED

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

CODE = '''import os


def join_all(parts):
    """Join path parts."""
    result = parts[0]
    for part in parts[1:]:
        result = os.path.join(result, part)
    return result


def count_words(text):
    words = text.split()
    return len(words)


class Counter:
    def __init__(self):
        self.total = 0

    def add(self, amount):
        self.total += amount
        return self.total
'''

PROSE = """# Notes

The pilot cuts holes from real files and asks each backend to fill them. Results are written as JSON lines, one per
attempt, so that a run stopped early keeps what it measured.
"""


@pytest.fixture()
def tree(tmp_path) -> Path:
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/util.py").write_text(CODE)
    (root / "pkg/more.py").write_text(CODE.replace("Counter", "Tally").replace("words", "tokens"))
    (root / "NOTES.md").write_text(PROSE)
    (root / "settings.json").write_text('{"steps": 8, "name": "pilot", "tags": ["a", "b"]}\n')
    return root


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(pipeline: Pipeline):
    server = make_server(pipeline, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_port}/v1"


def _stop(server) -> None:
    server.shutdown()
    server.server_close()


def test_cli_run_with_the_tiny_engine_and_a_down_endpoint(tree, tmp_path, tiny_checkpoint):
    out = tmp_path / "out"
    diffusion = f"diffusion:{tiny_checkpoint}"
    down = f"http://127.0.0.1:{_closed_port()}/v1"
    rc = pilot_main(
        [
            str(tree),
            "--out",
            str(out),
            "--n",
            "5",
            "--seed",
            "3",
            "--backend",
            diffusion,
            "--backend",
            down,
            "--concurrency",
            "1,2",
            "--max-seconds",
            "120",
            "--gpu-hour-price",
            "2.5",
            "--diffusion-steps",
            "8",
            "--quiet",
        ]
    )
    assert rc == 0
    holes = read_jsonl(out / "holes.jsonl")
    assert len(holes) == 5
    attempts = read_jsonl(out / "attempts.jsonl")
    assert len(attempts) == 5 * 2 * 2  # holes × concurrency levels × backends
    assert {(a["backend"], a["concurrency"]) for a in attempts} == {(b, c) for b in (diffusion, down) for c in (1, 2)}
    engine_attempts = [a for a in attempts if a["backend"] == diffusion]
    assert all(a["error"] is None and a["latency_ms"] > 0 for a in engine_attempts)
    assert all(a["backend_name"].startswith("diffusiongemma") for a in engine_attempts)
    assert any(a["steps"] > 0 for a in engine_attempts)
    # The endpoint that is down fails every attempt, each recorded with its error; the run went on.
    assert all(a["error"] and not a["shown"] for a in attempts if a["backend"] == down)

    document = json.loads((out / "summary.json").read_text())
    engine = document["summary"][diffusion]
    assert engine["attempts"] == 10 and set(engine["by_concurrency"]) == {"1", "2"}
    assert engine["p50_ms"] > 0 and engine["p95_ms"] >= engine["p50_ms"]
    assert engine["tokens_per_forward"] is not None
    assert document["summary"][down]["error_rate"] == 1.0
    assert document["meta"]["hardware"]["cpus"] >= 1

    report = (out / "report.md").read_text()
    for heading in (
        "## Setup",
        "## Summary",
        "## Per kind, side by side",
        f"## Backend: `{diffusion}`",
        f"## Backend: `{down}`",
        "### Per kind",
        "### Latency, throughput and cost per concurrency",
        "### Errors",
        "## Plots",
        "## What was measured",
    ):
        assert heading in report
    assert "TINY RANDOM DIFFUSIONGEMMA" in report and "meaningless" in report
    assert "at 2.5/GPU-h" in report
    assert "max denoising steps (in-process diffusion) 8" in report
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == PNG_SIGNATURE
        assert f"]({name})" in report


class BreaksAfter:
    """The real tiny engine that starts raising after `healthy` calls: a GPU backend falling over mid-run (a
    fault that cannot be produced for real on this machine)."""

    def __init__(self, engine, healthy: int) -> None:
        self.engine, self.healthy, self.calls = engine, healthy, 0
        self._lock = threading.Lock()

    @property
    def info(self):
        return self.engine.info

    def infill(self, request, control=UNSTEERED):
        with self._lock:
            self.calls += 1
            broken = self.calls > self.healthy
        if broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.engine.infill(request, control)

    def close(self) -> None:
        pass


def test_a_backend_failing_midway_is_recorded_per_attempt(tree, tmp_path, tiny_engine):
    holes = cut_holes(discover(tree), CutSettings(n=8, seed=5))
    out = tmp_path / "out"
    out.mkdir()
    flaky = BreaksAfter(tiny_engine, healthy=3)
    run = run_pilot(
        holes,
        [parse_target("diffusion:flaky")],
        RunSettings(concurrency=(1,), warmup=False),
        out,
        Progress(enabled=False),
        pool=_pool_over(flaky),
    )
    assert run.stopped_by == "done"
    attempts = read_jsonl(out / "attempts.jsonl")
    assert len(attempts) == 8
    assert all(a["error"] is None for a in attempts[:3])
    assert all("illegal memory access" in a["error"] for a in attempts[3:])
    summary = summarise(out, run.targets, None)["diffusion:flaky"]
    assert summary["error_rate"] == pytest.approx(5 / 8, abs=1e-4)
    assert summary["rejections"].get("backend_error") == 5  # the pipeline's own count of failed backend calls


def test_gateway_endpoint_at_two_concurrency_levels(tree, tmp_path, tiny_engine):
    server, url = _serve(Pipeline(tiny_engine))
    try:
        holes = cut_holes(discover(tree), CutSettings(n=4, seed=2))
        out = tmp_path / "out"
        out.mkdir()
        run = run_pilot(
            holes, [parse_target(url)], RunSettings(concurrency=(1, 2), max_seconds=120), out, Progress(enabled=False)
        )
    finally:
        _stop(server)
    assert run.stopped_by == "done" and [c["concurrency"] for c in run.cells] == [1, 2]
    attempts = read_jsonl(out / "attempts.jsonl")
    assert len(attempts) == 8 and all(a["error"] is None for a in attempts)
    summary = summarise(out, run.targets, None)
    assert summary[url]["by_concurrency"]["2"]["throughput_per_hour"] > 0


def _pool_over(engine) -> TargetPool:
    """A pool that hands out the session's already loaded tiny engine instead of loading it again."""
    return TargetPool(PipelineSettings(), open_fn=lambda spec: engine)


def test_time_cap_keeps_partial_results_and_reports_them(tree, tmp_path, tiny_engine):
    holes = cut_holes(discover(tree), CutSettings(n=30, seed=1))
    spec = parse_target("diffusion:tiny")
    # The cap comes from a run measured here, now: what a run costs besides its attempts, plus about 8 attempts'
    # time, so that some of the 30 holes are attempted and not all, on a fast machine or a loaded one alike.
    measured = tmp_path / "measured"
    measured.mkdir()
    started = time.monotonic()
    run_pilot(
        holes[:3],
        [spec],
        RunSettings(concurrency=(1,), warmup=False),
        measured,
        Progress(enabled=False),
        pool=_pool_over(tiny_engine),
    )
    elapsed = time.monotonic() - started
    attempt_s = sum(a["latency_ms"] for a in read_jsonl(measured / "attempts.jsonl")) / 3 / 1000
    cap = max(0.01, elapsed - 3 * attempt_s) + 8 * attempt_s
    out = tmp_path / "out"
    out.mkdir()
    run = run_pilot(
        holes,
        [spec],
        RunSettings(concurrency=(1,), max_seconds=cap, warmup=False),
        out,
        Progress(enabled=False),
        pool=_pool_over(tiny_engine),
    )
    assert run.stopped_by == "time cap"
    attempts = read_jsonl(out / "attempts.jsonl")
    assert 0 < len(attempts) < len(holes)
    assert read_jsonl(out / "cells.jsonl")[0]["stopped_by"] == "time cap"
    summary = summarise(out, run.targets, None)
    report = write_report(out, summary, run.targets, {"stopped_by": run.stopped_by, "src": str(tree)}).read_text()
    assert "**Partial run** — ended by time cap" in report
    assert all(p.read_bytes()[:8] == PNG_SIGNATURE for p in write_plots(out, summary))


def test_ctrl_c_keeps_partial_results(tree, tmp_path, tiny_engine):
    holes = cut_holes(discover(tree), CutSettings(n=30, seed=4))
    out = tmp_path / "out"
    out.mkdir()
    finished = threading.Event()

    def press_ctrl_c_after_the_first_attempt() -> None:
        # on the first recorded attempt, not at a fixed time: a fast machine finished all 30 holes within 0.8 s
        while not finished.wait(0.002):
            path = out / "attempts.jsonl"
            if path.exists() and path.read_text().strip():
                _thread.interrupt_main()  # what Ctrl-C does to the main thread
                return

    # Python's own SIGINT handler, as `infill-ls pilot` runs under: an asyncio runner earlier in the test session
    # may have left its handler, which spends a first Ctrl-C on cancelling its task
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    presser = threading.Thread(target=press_ctrl_c_after_the_first_attempt, daemon=True)
    presser.start()
    try:
        run = run_pilot(
            holes,
            [parse_target("diffusion:tiny")],
            RunSettings(concurrency=(2,), max_seconds=120, warmup=False),
            out,
            Progress(enabled=False),
            pool=_pool_over(tiny_engine),
        )
    finally:
        finished.set()
        presser.join()
        signal.signal(signal.SIGINT, previous)
    assert run.stopped_by == "interrupted", (previous, len(read_jsonl(out / "attempts.jsonl")))
    attempts = read_jsonl(out / "attempts.jsonl")
    assert 0 < len(attempts) < len(holes)
    assert read_jsonl(out / "cells.jsonl")[-1]["stopped_by"] == "interrupted"
    # Every worker has stopped: nothing more arrives after the run returned.
    time.sleep(0.5)
    assert len(read_jsonl(out / "attempts.jsonl")) == len(attempts)
    assert not [t for t in threading.enumerate() if t.name.startswith("pilot-") and t.is_alive()]


def test_raw_variant_shows_what_the_watchdog_would_have_held_back(tree, tmp_path, tiny_engine):
    holes = cut_holes(discover(tree), CutSettings(n=6, seed=6))
    out = tmp_path / "out"
    out.mkdir()
    specs = [parse_target("diffusion:tiny"), parse_target("diffusion:tiny+raw")]
    run = run_pilot(
        holes,
        specs,
        RunSettings(concurrency=(1,), warmup=False),
        out,
        Progress(enabled=False),
        pool=_pool_over(tiny_engine),
    )
    attempts = read_jsonl(out / "attempts.jsonl")
    piped = {a["hole_id"]: a for a in attempts if a["backend"] == "diffusion:tiny"}
    raw = {a["hole_id"]: a for a in attempts if a["backend"] == "diffusion:tiny+raw"}
    assert len(piped) == len(raw) == 6 and run.stopped_by == "done"
    assert all(not a["rejections"] for a in raw.values())  # no watchdog in the raw variant
    # The engine is seeded, so both saw the same middles: the pipeline shows a subset of what raw shows.
    assert {h for h, a in piped.items() if a["shown"]} <= {h for h, a in raw.items() if a["shown"]}
    assert sum(a["shown"] for a in raw.values()) > sum(a["shown"] for a in piped.values()) or all(
        not a["rejections"] for a in piped.values()
    )


@pytest.mark.slow
def test_diffusion_and_the_offline_default_side_by_side(tree, tmp_path, tiny_engine, ar_backend):
    holes = cut_holes(discover(tree), CutSettings(n=2, seed=0, kinds=("single-line",)))
    out = tmp_path / "out"
    out.mkdir()
    pool = TargetPool(PipelineSettings(), open_fn=lambda spec: ar_backend if spec.model is None else tiny_engine)
    run = run_pilot(
        holes,
        [parse_target("diffusion:tiny"), parse_target("ar")],
        RunSettings(concurrency=(1,), warmup=False),
        out,
        Progress(enabled=False),
        pool=pool,
    )
    attempts = read_jsonl(out / "attempts.jsonl")
    assert [a["backend"] for a in attempts] == ["diffusion:tiny"] * 2 + ["ar"] * 2
    assert [t["kind"] for t in run.targets] == ["diffusion", "autoregressive"]
    assert run.targets[1]["name"] == ar_backend.info.name
    assert all(a["error"] is None for a in attempts)
    # Same holes, same request: the report puts the two next to each other per kind.
    summary = summarise(out, run.targets, None)
    report = write_report(out, summary, run.targets, {"stopped_by": "done", "src": str(tree)}).read_text()
    side_by_side = report.split("## Per kind, side by side")[1].split("## Backend")[0]
    assert "| single-line | `diffusion:tiny` | 2 |" in side_by_side and "| single-line | `ar` | 2 |" in side_by_side
