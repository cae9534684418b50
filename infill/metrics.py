"""Quality, latency and cost figures, written out so each one can be checked by hand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infill.types import InfillError


def normalise(text: str) -> str:
    """Differences an editor user would not call an edit: line-ending style, trailing spaces on a line, and blank
    lines or spaces at either end of the middle."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n").rstrip()


def levenshtein(a: str, b: str) -> int:
    """Character edit distance (insert, delete, substitute: cost 1 each), two rows of the classic table."""
    if a == b:
        return 0
    # The common prefix and suffix cost nothing; dropping them keeps the table small.
    lead = 0
    while lead < min(len(a), len(b)) and a[lead] == b[lead]:
        lead += 1
    a, b = a[lead:], b[lead:]
    trail = 0
    while trail < min(len(a), len(b)) and a[-1 - trail] == b[-1 - trail]:
        trail += 1
    if trail:
        a, b = a[:-trail], b[:-trail]
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def edit_similarity(predicted: str, expected: str) -> float:
    """1 - Levenshtein / max length, on normalised texts; two empty texts are identical (1.0)."""
    a, b = normalise(predicted), normalise(expected)
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - levenshtein(a, b) / longest


def exact_match(predicted: str, expected: str) -> bool:
    return normalise(predicted) == normalise(expected)


@dataclass(frozen=True)
class AcceptRule:
    """ "Accepted without material edit": something was shown, it is close enough to what the author wrote, and the
    file still parses (a file whose syntax cannot be judged does not count against it)."""

    threshold: float = 0.7
    require_syntax: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.threshold <= 1:
            raise InfillError(f"accept threshold must be within 0..1, got {self.threshold}")

    def accepts(self, shown: bool, similarity: float, syntax_ok: bool | None) -> bool:
        if not shown or similarity < self.threshold:
            return False
        return not (self.require_syntax and syntax_ok is False)


def throughput_per_hour(completed: int, wall_seconds: float) -> float | None:
    return None if wall_seconds <= 0 else completed * 3600.0 / wall_seconds


def cost_per_accepted(gpu_hour_price: float | None, wall_seconds: float, accepted: int) -> float | None:
    """What the accepted results of a run cost: the GPU time of the whole run (every attempt, accepted or not)
    divided by the number accepted. None without a price or without any accepted result."""
    if gpu_hour_price is None or accepted <= 0:
        return None
    return gpu_hour_price * (wall_seconds / 3600.0) / accepted


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def share(flags: Sequence[bool]) -> float | None:
    return sum(1 for f in flags if f) / len(flags) if flags else None


RETAINED_MIN_RUN = 4  # shorter common runs are chance matches (spaces, single letters), not kept text


def retained_chars(accepted: str, found_in: str) -> int:
    """Characters of an accepted suggestion still present in `found_in` (the text around where it was inserted,
    some time later; in the pilot, the text the author wrote): the characters of `accepted` matched in order, in
    runs of at least RETAINED_MIN_RUN characters (difflib's matching blocks). A suggestion shorter than a run
    counts whole when it is found verbatim. The server's telemetry and the pilot both use this definition."""
    if not accepted:
        return 0
    if len(accepted) < RETAINED_MIN_RUN:
        return len(accepted) if accepted in found_in else 0
    from difflib import SequenceMatcher

    blocks = SequenceMatcher(None, accepted, found_in, autojunk=False).get_matching_blocks()
    return sum(block.size for block in blocks if block.size >= RETAINED_MIN_RUN)
