"""How benchmarks/engine_gpu.py runs its sections so that one GPU run yields every figure it can: each section under
its own time limit, written to the results file the moment it ends, a section's failure recorded and the next one
run; which bucketed programs ran captured; the baseline engine's pipeline figures from a process of its own.

- `SectionTimeout` is a BaseException: the engine's own `except Exception` blocks (a graph capture falling back to
  eager, a failing request returning an error result) must not swallow a section's time running out and turn it
  into a silent fallback or a wrong figure.
- `SectionFailed`: a section that measured something but must not pass (a bucket that should be captured ran
  eagerly) keeps its figures and records why it failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path


class SectionTimeout(BaseException):  # noqa: N818 - named for what it is: a section ran out of time
    """A section ran past its limit (raised from SIGALRM wherever the section was)."""


class SectionFailed(Exception):  # noqa: N818
    def __init__(self, message: str, figures: dict) -> None:
        super().__init__(message)
        self.figures = figures


def run_sections(
    sections: dict[str, Callable[[], dict]],
    *,
    limit_s: Callable[[str], int],
    out: str | Path | None = None,
    skip: Callable[[str], str | None] = lambda name: None,
) -> dict[str, dict]:
    """Run `sections` in order, each under `limit_s(name)` seconds (SIGALRM), appending `{"section": name, ...}` to
    `out` as one JSON line the moment it ends. A failure or timeout is that section's figure; the next one runs.
    `skip(name)`: a reason to record instead of running it (None: run it)."""

    def cut_off(signum, frame):
        raise SectionTimeout

    previous = signal.signal(signal.SIGALRM, cut_off)
    figures: dict[str, dict] = {}
    try:
        for name, section in sections.items():
            reason = skip(name)
            started = time.perf_counter()
            if reason is not None:
                result = {"error": reason}
            else:
                print(f"== {name}", file=sys.stderr, flush=True)
                signal.alarm(limit_s(name))
                try:
                    result = section()
                except SectionTimeout:
                    result = {"error": f"timed out: the section ran past its {limit_s(name)} s"}
                except SectionFailed as exc:
                    result = {**exc.figures, "error": str(exc)}
                except Exception as exc:  # noqa: BLE001 - a section's failure is a figure too; the next section runs
                    result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
                finally:
                    signal.alarm(0)
            result["section_s"] = round(time.perf_counter() - started, 1)
            figures[name] = result
            print(json.dumps({name: result})[:2000], file=sys.stderr, flush=True)
            if out:
                with open(out, "a") as f:
                    f.write(json.dumps({"section": name, **result}) + "\n")
    finally:
        signal.signal(signal.SIGALRM, previous)
    return figures


def bucket_report(runner, expect_captured: bool) -> dict:
    """Each bucketed program the runner built: "captured" or "eager". With `expect_captured` (CUDA with graphs on),
    any eager one fails the section (SectionFailed), naming it."""
    programs = [p.program for p in runner._encoders.values()] + [p.program for p in runner._steps.values()]
    buckets = {p.name: "captured" if p.captured else "eager" for p in programs}
    eager = [name for name, how in buckets.items() if how == "eager"]
    if expect_captured and (eager or not buckets):
        raise SectionFailed(
            f"programs that should be captured ran eagerly: {eager or 'no programs built'}", {"buckets": buckets}
        )
    return buckets


def last_json_line(text: str | bytes | None) -> dict | None:
    """The last line of `text` that is a JSON object (a run cut off keeps what it printed before)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    for line in reversed((text or "").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def baseline_pipeline(tree: Path, options: list[str], limit_s: float, log: Path | None = None) -> dict:
    """benchmarks/engine_pipeline.py on the engine in `tree` (its `infill/`), in a process of its own (it needs the
    GPU's memory to itself), for at most `limit_s`: its figures, as far as it got when cut off."""
    if not (tree / "infill").is_dir():
        return {"error": f"no baseline tree at {tree}: run benchmarks/gpu-prepare.sh and carry .baseline"}
    script = Path(__file__).resolve().parent / "engine_pipeline.py"
    env = {**os.environ, "INFILL_TREE": str(tree)}
    command = [sys.executable, str(script), *options]
    try:
        done = subprocess.run(command, capture_output=True, timeout=limit_s, env=env, check=False)
        stdout, stderr, cut = done.stdout, done.stderr, None
    except subprocess.TimeoutExpired as exc:
        stdout, stderr, cut = exc.stdout, exc.stderr, f"cut off after {limit_s:.0f} s"
    if log is not None:
        log.write_bytes(stderr or b"")
    figures = last_json_line(stdout) or {"error": "the baseline printed no figures"}
    if cut:
        figures["error"] = figures.get("error") or cut
    return figures
