"""Server-side phase timings (didChange handling, request building, context, reply building) so the per-keystroke
overhead can be read from `infill.status` ("overhead") and checked by benchmarks/server.py."""

from __future__ import annotations

from collections import defaultdict, deque

from infill.stats import percentile


class PhaseTimes:
    def __init__(self, window: int = 2000) -> None:
        self._values: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))

    def add(self, phase: str, ms: float) -> None:
        self._values[phase].append(ms)

    def summary(self) -> dict[str, dict]:
        out = {}
        for phase, values in self._values.items():
            data = list(values)
            out[phase] = {"p50_ms": round(percentile(data, 50) or 0.0, 4),
                          "p95_ms": round(percentile(data, 95) or 0.0, 4), "count": len(data)}
        return out
