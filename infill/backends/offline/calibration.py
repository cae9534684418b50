"""What this CPU costs, measured once at load on the loaded model: how many prompt tokens a prompt encoded from
scratch may hold, and whether drafted tokens pay. Both are choices a fixed number gets wrong on some CPU class:
a fixed 384-token window encoded in ~540 ms on one 2-core Xeon VM and in ~1.1 s on another."""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

# A prompt encoded from scratch (a jump, a file switch, a generic client's first key) holds as many tokens as
# encode in about FRESH_ENCODE_S here, from FRESH_LEAST to FRESH_MOST: on two Xeon cores (~2.8 ms a token) 192, on
# a CPU twice as fast 384. Chosen on ar_quality's development holes (seed 1234, 60: 18, 21, 19 and 17 exact at 384,
# 256, 192 and 128 fresh tokens); held out (seed 2028) 192 against 384 gave 22 against 23 of 60 exact, cold p50
# 788 against 1,437 ms, and typing (ghost_typing seeds 41, 42) 47 against 53 of 144 exact at p50 0.45-0.71x.
FRESH_ENCODE_S = 0.6
FRESH_LEAST = 192
FRESH_MOST = 384
# Drafts pay where a forward of 1 + DEFAULT_DRAFTS rows costs under ~1.85 one-row forwards (the tokens a forward
# confirms on ar_speed's holes), less a margin for the fills they change by rounding (4 of 24 keystroke fills in
# benchmarks/ar_speed.py).
DEFAULT_DRAFTS = 3
DRAFTS_PAY_BELOW = 1.6


class Decoder(Protocol):
    def decode(self, seq: int, tokens: list[int], outputs: int = 1) -> np.ndarray | None: ...

    def cut(self, seq: int, keep: int) -> None: ...


def fresh_tokens(seconds_per_token: float, max_prompt_tokens: int) -> int:
    """The most tokens a prompt encoded from scratch holds on a CPU that encodes at `seconds_per_token` (0: not
    measured, FRESH_MOST)."""
    if seconds_per_token <= 0:
        return min(max_prompt_tokens, FRESH_MOST)
    tokens = int(FRESH_ENCODE_S / seconds_per_token) // 32 * 32
    return min(max_prompt_tokens, FRESH_MOST, max(FRESH_LEAST, tokens))


def encode_cost(runtime: Decoder, seq: int, rows: list[int], keep: int) -> float:
    """Seconds per prompt token of a prefill chunk of `rows` appended after `keep` held tokens: the faster of two
    (the first graph of that size was built by then). The sequence is cut back to `keep` after each."""
    times = []
    for _ in range(2):
        started = time.perf_counter()
        runtime.decode(seq, rows, outputs=0)
        times.append(time.perf_counter() - started)
        runtime.cut(seq, keep)
    return min(times) / len(rows)


def token_cost(runtime: Decoder, seq: int, token: list[int], keep: int) -> float:
    """Seconds a one-token forward takes after `keep` held tokens: the fastest of three (after one not counted: on
    a CPU other work shares, the fastest is the nearest to what this model costs). The sequence is cut back to
    `keep` after each."""
    times = []
    for _ in range(4):
        started = time.perf_counter()
        runtime.decode(seq, token[:1], outputs=1)
        times.append(time.perf_counter() - started)
        runtime.cut(seq, keep)
    return min(times[1:])


def drafts_pay(runtime: Decoder, seq: int, rows: list[int], keep: int) -> bool:
    """Whether a forward of len(rows) rows costs less than DRAFTS_PAY_BELOW one-row forwards here (medians of
    three; the first of each is not counted)."""
    times: dict[int, list[float]] = {1: [], len(rows): []}
    for _ in range(4):
        for n in times:
            started = time.perf_counter()
            runtime.decode(seq, rows[:n], outputs=n)
            times[n].append(time.perf_counter() - started)
            runtime.cut(seq, keep)
    one, wide = (sorted(times[n][1:])[1] for n in (1, len(rows)))
    log.info("a forward of %d rows costs %.2f of one row's (%.1f ms)", len(rows), wide / one, one * 1000)
    return wide < DRAFTS_PAY_BELOW * one
