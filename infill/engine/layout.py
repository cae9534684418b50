"""Where each slot of an infill canvas goes, and which middle lengths get a canvas: plain integers, no torch, so
the in-process engine (infill/engine/canvas.py builds its tensors from it) and the remote backend speaking vLLM's
DiffusionGemma protocol (infill/backends/remote/vllm_diffusion.py) lay out the same canvas.

One row per candidate middle length; every gap in a row gets that length:

    [gap 0: L free] [between[0] fixed] [gap 1: L free] ... [gap G-1: L free] [suffix anchor fixed]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infill.types import InfillError


@dataclass(frozen=True)
class RowLayout:
    """One row: the free slots of each gap and the fixed slots after each, as [start, end) ranges."""

    length: int  # free slots per gap
    gaps: tuple[tuple[int, int], ...]
    fixed: tuple[tuple[int, int], ...]  # the text after gap g: between[g], and the suffix anchor last

    @property
    def width(self) -> int:
        return self.fixed[-1][1] if self.fixed else 0

    @property
    def anchor(self) -> tuple[int, int]:
        """The suffix anchor's slots (scored for how well the middle joins them)."""
        return self.fixed[-1]


def lay_out(length: int, fixed_lengths: Sequence[int]) -> RowLayout:
    """The row for middle `length` before fixed texts of `fixed_lengths` tokens (the last is the suffix anchor)."""
    gaps, fixed, at = [], [], 0
    for size in fixed_lengths:
        gaps.append((at, at + length))
        at += length
        fixed.append((at, at + size))
        at += size
    return RowLayout(length, tuple(gaps), tuple(fixed))


def fit_lengths(candidates: Sequence[int], gaps: int, fixed_total: int, width: int) -> list[int]:
    """The candidate lengths whose row, `gaps` gaps of that length and `fixed_total` fixed slots, fits `width`."""
    return [n for n in candidates if gaps * n + fixed_total <= width]


def choose_lengths(
    candidates: Sequence[int], cap: int, between: Sequence[int], anchor: int, width: int
) -> tuple[list[int], int]:
    """The middle lengths that get a row, and how many suffix anchor tokens the rows keep, for gaps separated by
    fixed texts of `between` tokens and an `anchor` of that many tokens, in canvases `width` wide. Candidates are
    capped at `cap` (the request's middle budget); a long suffix keeps its head only; with nothing to join (one gap,
    no anchor) one row, the longest, its length bounded by the end token; when no candidate fits, the room left."""
    gaps, between_total = len(between) + 1, sum(between)
    if between_total + gaps > width:
        raise InfillError(
            f"the fixed text between {gaps} gaps needs {between_total} tokens plus one per gap; "
            f"the canvas holds {width}"
        )
    lengths = sorted({min(n, cap, width) for n in candidates})
    anchor = min(anchor, max(0, width - between_total - gaps * lengths[0]))
    if not anchor and gaps == 1:
        lengths = lengths[-1:]
    fitting = fit_lengths(lengths, gaps, between_total + anchor, width)
    return fitting or [max(1, (width - between_total - anchor) // gaps)], anchor
