"""How long an inline request may run: a runaway guard measured on this machine, not a latency target
(docs/server.md "Budget"). An automatic request is stopped by the client long before it while the person types, so
it must sit well above the model's honest time here (issue 12: 600 ms on a 2-core laptop cut every Gemma 3 270M
fill):

- the guard is `GUARD_FACTOR` x the p95 of the last `WINDOW` fills' times (submit to result), at least
  `GUARD_FLOOR_MS`, at most `GUARD_CAP_MS`; before `MIN_SAMPLES` fills it is the cap;
- a fill cut short by the guard counts at its cut time, so a guard that is too tight grows by itself;
- an explicit `inlineBudgetMs` / `invokedBudgetMs` wins over the guard;
- the status says the machine is too slow for automatic suggestions when the fills' p50 is above
  `TOO_SLOW_P50_MS` (the peers' order of magnitude: Cody's single-line P75 is 690 ms, llama.vim caps at 1.5 s).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from infill.stats import percentile

GUARD_FACTOR = 4.0
GUARD_FLOOR_MS = 1500.0
GUARD_CAP_MS = 15000.0
WINDOW = 50
MIN_SAMPLES = 3
TOO_SLOW_P50_MS = 1000.0


class BudgetPolicy:
    """Times of this machine's fills and the guard derived from them. Thread-safe (fills end on the event loop,
    status is read anywhere)."""

    def __init__(self) -> None:
        self._fills_ms: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()

    def record_fill(self, ms: float) -> bool:
        """One fill that ran to its end (answered, empty, rejected or cut short; not cancelled). Returns whether
        the too-slow verdict changed (the server then notifies the client)."""
        before = self.too_slow
        with self._lock:
            self._fills_ms.append(ms)
        return self.too_slow != before

    def reset(self) -> None:
        """A new backend: its times are not the old one's."""
        with self._lock:
            self._fills_ms.clear()

    def _stats(self) -> tuple[int, float | None, float | None]:
        with self._lock:
            values = list(self._fills_ms)
        return len(values), percentile(values, 50), percentile(values, 95)

    @property
    def guard_ms(self) -> float:
        count, _, p95 = self._stats()
        if count < MIN_SAMPLES or p95 is None:
            return GUARD_CAP_MS
        return min(GUARD_CAP_MS, max(GUARD_FLOOR_MS, GUARD_FACTOR * p95))

    @property
    def too_slow(self) -> bool:
        count, p50, _ = self._stats()
        return count >= MIN_SAMPLES and p50 is not None and p50 > TOO_SLOW_P50_MS

    def budget_ms(self, explicit: int | None) -> float:
        """The deadline of one inline request: the setting when the person set one, else the guard."""
        return float(explicit) if explicit is not None else self.guard_ms

    def status(self, inline_setting: int | None, invoked_setting: int | None) -> dict[str, Any]:
        count, p50, p95 = self._stats()
        slow = self.too_slow
        note = None
        if slow:
            note = (
                f"automatic suggestions take {p50:.0f} ms here (p50 of the last {count} fills, more than "
                f"{TOO_SLOW_P50_MS:.0f} ms): they will often appear after you moved on; a faster machine or a "
                "remote endpoint (remoteEndpoint) helps"
            )
        return {
            "inlineMs": round(self.budget_ms(inline_setting)),
            "invokedMs": round(self.budget_ms(invoked_setting)),
            "source": {
                "inline": "setting" if inline_setting is not None else ("measured" if count >= MIN_SAMPLES else "cap"),
                "invoked": "setting"
                if invoked_setting is not None
                else ("measured" if count >= MIN_SAMPLES else "cap"),
            },
            "fillP50Ms": None if p50 is None else round(p50),
            "fillP95Ms": None if p95 is None else round(p95),
            "samples": count,
            "tooSlowForTyping": slow,
            "note": note,
        }
