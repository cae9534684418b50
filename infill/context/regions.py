"""Region parsing for large documents: only the top-level statements around the gap are kept parsed.

An incremental re-parse of a whole document costs time in proportion to its number of top-level statements,
wherever the edit was (~0.45 ms for 1,250 functions on a warm cache, ten times that on a cold one). A large ASCII
document is therefore parsed in a *region*: the top-level statements around the requested gap, given to
tree-sitter as its included range, so node offsets stay document offsets and nothing downstream changes.

Region edges sit at top-level statement starts ("cuts") taken from the last whole-document parse and carried
through later edits: edits are folded into one changed span in O(1) each, and the cuts are mapped only when a new
region is chosen (cuts inside the changed span are dropped, so a region can only grow past text nobody has
re-parsed whole). When the cuts would give a region over half the document, the whole document is parsed again.
"""

from __future__ import annotations

import bisect

from infill.context.edits import ChangedSpan, Edit

# Documents shorter than this are parsed whole (a whole incremental re-parse of them is cheap).
REGION_MIN_CHARS = 32_768
# Text parsed beyond what a request needs on each side, so requests nearby (typing on) reuse the region.
REGION_MARGIN_CHARS = 2_048
# A region larger than this share of the document is not worth it: parse the whole document (and renew the cuts).
REGION_MAX_SHARE = 0.5


class Cuts:
    """Top-level statement starts of a document (str indices into the text they were found in), carried through
    the edits made since."""

    def __init__(self, starts: list[int], length: int) -> None:
        self._starts = starts
        self._changes = ChangedSpan(length)

    def note(self, edit: Edit) -> None:
        self._changes.add(edit)

    def current(self) -> list[int]:
        """The starts in the current text: unchanged before the changed span, shifted after it, dropped inside
        it (or at its end, where the line break before a start may have gone)."""
        c = self._changes
        if not c.changed:
            return self._starts
        delta = c.new_end - c.old_end
        lo = bisect.bisect_left(self._starts, c.start)
        hi = bisect.bisect_right(self._starts, c.old_end)
        return self._starts[:lo] + [s + delta for s in self._starts[hi:]]

    def bounds(self, low: int, high: int, length: int) -> tuple[int, int]:
        """The nearest cuts at or before `low` and at or after `high` (the document's ends are cuts too)."""
        starts = self.current()
        i = bisect.bisect_right(starts, low)
        j = bisect.bisect_left(starts, high)
        return (starts[i - 1] if i > 0 else 0), (starts[j] if j < len(starts) else length)


def region_for(cuts: Cuts, length: int, focus: tuple[int, int], reach: tuple[int, int]) -> tuple[int, int] | None:
    """The region to parse for a gap at `focus` whose context reaches `reach` chars before and after it, or None
    when the whole document should be parsed."""
    low = max(0, focus[0] - reach[0] - REGION_MARGIN_CHARS)
    high = min(length, focus[1] + reach[1] + REGION_MARGIN_CHARS)
    start, end = cuts.bounds(low, high, length)
    if end - start > REGION_MAX_SHARE * length:
        return None
    return start, end


def covers(region: tuple[int, int], focus: tuple[int, int], reach: tuple[int, int], length: int) -> bool:
    """The region holds all the context a gap at `focus` can use."""
    return region[0] <= max(0, focus[0] - reach[0]) and min(length, focus[1] + reach[1]) <= region[1]


def shift_region(region: tuple[int, int], span: Edit | None) -> tuple[int, int] | None:
    """The region after the (folded) edit `span` (None: nothing changed): it grows or shrinks with edits inside it
    and moves with edits before it; None when an edit crossed one of its edges (the region must be chosen again)."""
    if span is None:
        return region
    start, end = region
    delta = span.delta
    if span.old_end < start:
        return start + delta, end + delta
    if span.start > end:
        return region
    if start <= span.start and span.old_end <= end:
        return start, end + delta
    return None
