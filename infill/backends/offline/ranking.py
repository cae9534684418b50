"""Fills of the offline default ranked by how well they join the suffix, for requests that ask for candidates.

Gemma 3 270M continues the prefix and never sees the suffix, so its greedy fill can contradict the text after the
gap (`total = 0` before `return total / len(values)`). Where a person waits anyway (an invoked Fill gap, a gateway
client's `best_of`), for a one-line gap (`single_line`), the backend also writes the fills that take the model's second
choice at the positions of the greedy fill where it was least sure (each continued greedily), and keeps the one
with the highest log-probability of fill plus the suffix's first `SUFFIX_TOKENS` tokens after the prefix: the fill
that best explains the text on both sides. Multi-line gaps stay greedy (unmeasured: on one tried by hand the best
join was a worse block).

Chosen on development holes (benchmarks/fill_quality.py --set dev, single-line holes, the gateway path; 2-core
Xeon VM): seed 1, a prototype, 120 holes: greedy 23 exact, 2 / 3 / 4 / 5 candidates 27 / 28 / 28 / 28 (4: 6 won,
1 lost). Branching at the first token only gave nothing (no branch was exact where greedy was not), nor did
ranking by the suffix alone (16) or by per-token averages (21). Seed 2, this code, 4 candidates: 17 against 13
exact (5 won, 1 lost), valid of shown 0.963 against 0.962, p50 2.95 against 1.05 s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infill.backends.offline.runtime import LlamaRuntime

SUFFIX_TOKENS = 16  # suffix tokens a fill's join is scored on
SUFFIX_CHARS = 400  # text after the gap tokenized for them (16 tokens are rarely more than ~100 characters)


@dataclass(frozen=True)
class Candidate:
    text: str  # the fill as the stop rules cut it
    fill_logprob: float  # log P(fill tokens | prompt)
    suffix_logprob: float  # log P(first suffix tokens | prompt + fill)
    branch: int | None = None  # the greedy fill's token position it took the second choice at (None: greedy)

    @property
    def score(self) -> float:
        return self.fill_logprob + self.suffix_logprob


@dataclass(frozen=True)
class Followed:
    """What the model thought at each position of a token run: the log-probability of the token there, and its
    most likely other token with the log-probability margin over it."""

    logprobs: list[float]
    alternatives: list[tuple[int, float]]  # (token, margin of the actual token over it)


def log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float32, copy=False)
    top = row.max()
    result: np.ndarray = row - top - np.log(np.exp(row - top).sum())
    return result


def _position(logprobs: np.ndarray, actual: int) -> tuple[float, tuple[int, float]]:
    two = np.argpartition(-logprobs, 1)[:2]
    other = int(two[0]) if int(two[0]) != actual else int(two[1])
    return float(logprobs[actual]), (other, float(logprobs[actual] - logprobs[other]))


def follow(runtime: LlamaRuntime, seq: int, first: np.ndarray, ids: list[int]) -> Followed:
    """Feed `ids` after what `seq` holds (`first`: the log-probabilities for ids[0] there) and read the model's
    view at each position. The caller cuts the sequence back afterwards."""
    logprobs: list[float] = []
    alternatives: list[tuple[int, float]] = []
    if not ids:
        return Followed(logprobs, alternatives)
    lp, alt = _position(first, ids[0])
    logprobs.append(lp)
    alternatives.append(alt)
    width = runtime.shape.max_outputs
    fed = ids[:-1]
    for start in range(0, len(fed), width):
        part = fed[start : start + width]
        rows = runtime.decode(seq, part, outputs=len(part))
        assert rows is not None  # outputs > 0
        for offset in range(len(part)):
            lp, alt = _position(log_softmax(rows[offset]), ids[start + offset + 1])
            logprobs.append(lp)
            alternatives.append(alt)
    return Followed(logprobs, alternatives)


def branch_points(fill_ids: list[int], seen: Followed, count: int) -> list[tuple[int, int]]:
    """(position, token): the model's second choice at the `count` positions of the fill where the margin of its
    choice was smallest (a position whose second choice has no probability is skipped)."""
    margins = [
        (margin, position, token)
        for position, (token, margin) in enumerate(seen.alternatives[: len(fill_ids)])
        if np.isfinite(margin)
    ]
    return [(position, token) for _, position, token in sorted(margins)[:count]]
