"""Per-keystroke server work outside the model, in the benchmark phases of infill/timing.py (off unless timing
is on; benchmarks/server.py reads them from infill.status).

Phases: the didChange that preceded the request; the handler's event-loop work before the model, on the
completion's path ("inline_request": the scheduling work from the run's start to the debounce, and after the
debounce up to the submit; for an invoked request also the request building) and during the debounce
("inline_ahead": the request building); the context (on the context thread during the debounce for automatic
triggers, else on the model thread); how long the model thread waited for a context built ahead; cleaning and
watchdog after the model ("checks"); reply building.
"""

from __future__ import annotations

from infill import timing

from .documents import Document


def record_overhead(document: Document, server: timing.Trace, pipeline: timing.Trace, trigger: str) -> None:
    """ "keystroke" is the latency the server adds to an automatic (typing) completion beyond its debounce and its
    model run: the work on its path, including what the model thread waits for; "invoked" the same for an
    explicit request (no debounce: its context is on the path). "server" is all event-loop work per request, and
    "<trigger>_cpu" every CPU millisecond of the request's work wherever it ran, on its path or not."""
    wall, cpu = server.wall | pipeline.wall, server.cpu | pipeline.cpu

    def ms(name: str) -> float:
        return wall.get(name, 0.0)

    context_on_path = ms("context_wait") if "context_wait" in wall else ms("context")
    event_loop = ms("inline_request") + ms("inline_ahead") + ms("inline_reply")
    for name in ("inline_request", "inline_ahead", "context", "checks", "inline_reply"):
        timing.record(name, ms(name))
    timing.record("context_wait", context_on_path)
    timing.record("server", document.last_change_ms + event_loop)
    timing.record(
        trigger, document.last_change_ms + ms("inline_request") + context_on_path + ms("checks") + ms("inline_reply")
    )
    server_cpu = document.last_change_cpu_ms + sum(
        cpu.get(n, 0.0) for n in ("inline_request", "inline_ahead", "inline_reply")
    )
    timing.record("server_cpu", server_cpu)
    timing.record("context_cpu", cpu.get("context", 0.0))
    timing.record(f"{trigger}_cpu", server_cpu + cpu.get("context", 0.0) + cpu.get("checks", 0.0))
