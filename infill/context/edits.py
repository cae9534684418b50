"""One edit of a text, and a run of edits folded into one.

An `Edit` says that old[start:old_end] became new[start:new_end]. The same shape serves every stage: a change the
editor reports (str offsets), the changed range found by comparing two texts (bytes), the range tree-sitter is told
about, and the span a region of a large document moves by. Offsets are str indices unless a caller says bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    start: int
    old_end: int
    new_end: int

    @classmethod
    def replacing(cls, start: int, old_end: int, new_text: str) -> Edit:
        """text[start:old_end] replaced by `new_text`."""
        return cls(start, old_end, start + len(new_text))

    @property
    def delta(self) -> int:
        """How much longer the text became."""
        return self.new_end - self.old_end


class ChangedSpan:
    """Folds a run of edits into one with O(1) work per edit: old text = A + X + B and new text = A + Y + B, with
    `start` = len(A), `old_end` = len(A + X), `new_end` = len(A + Y)."""

    def __init__(self, old_length: int) -> None:
        self.old_length = old_length
        self.length = old_length  # the text's length after the edits folded so far
        self.start = self.old_end = self.new_end = -1  # no change yet

    @property
    def changed(self) -> bool:
        return self.start >= 0

    @property
    def edit(self) -> Edit | None:
        """The folded change as one edit of the original text (None: nothing changed)."""
        return Edit(self.start, self.old_end, self.new_end) if self.changed else None

    def add(self, edit: Edit) -> None:
        """Fold in `edit`, given in offsets of the text after the edits folded so far."""
        start, old_end, delta = edit.start, edit.old_end, edit.delta
        if self.start < 0:
            first, end = start, edit.new_end
        else:
            mapped_end = (
                self.new_end + delta
                if self.new_end >= old_end
                else (self.new_end if self.new_end <= start else edit.new_end)
            )
            first, end = min(self.start, start), max(mapped_end, edit.new_end)
        self.length += delta
        self.start, self.new_end = first, end
        self.old_end = self.old_length - (self.length - end)  # the unchanged tail B is as long in both texts
