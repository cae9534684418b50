"""Telling a tree-sitter tree what changed, and handing it text: byte/str ranges, points, included ranges.

Kept apart from syntax.py (documents, grammars, error counting) because these are the mechanics of incremental
parsing: an edit must be described to the old tree exactly (start, old end, new end, as bytes and points) for the
next parse to reuse it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.context.edits import Edit

if TYPE_CHECKING:
    from tree_sitter import Parser, Range, Tree

_READ_CHUNK = 16384  # bytes handed to tree-sitter per read of an ASCII document


def _point(data: bytes, offset: int) -> tuple[int, int]:
    row = data.count(b"\n", 0, offset)
    line_start = data.rfind(b"\n", 0, offset) + 1
    return row, offset - line_start


def common_affixes(old: bytes, new: bytes) -> tuple[int, int]:
    """Lengths of the common prefix and (non-overlapping) common suffix of two byte strings.
    Binary search over slice equality keeps the comparisons in C (memcmp), fast on large files."""
    limit = min(len(old), len(new))
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    head = lo
    lo, hi = 0, limit - head
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid :] == new[len(new) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return head, lo


def diff_edit(old: bytes, new: bytes) -> Edit | None:
    """The single changed range (byte offsets) turning `old` into `new` (None when equal)."""
    if old == new:
        return None
    head, tail = common_affixes(old, new)
    return Edit(head, len(old) - tail, len(new) - tail)


def apply_edit(tree: Tree, old: bytes, new: bytes, edit: Edit) -> None:
    """Tell `tree` (parsed from `old`) about an edit in byte offsets, so the next parse with it as old tree is
    incremental."""
    tree.edit(
        start_byte=edit.start,
        old_end_byte=edit.old_end,
        new_end_byte=edit.new_end,
        start_point=_point(old, edit.start),
        old_end_point=_point(old, edit.old_end),
        new_end_point=_point(new, edit.new_end),
    )


def edit_tree(tree: Tree, old: str, new: str, region: Edit) -> None:
    """tree.edit for a region of str offsets (old[start:old_end] became new[start:new_end]); byte offsets are the
    str offsets for ASCII text, else only the text before the region's end is encoded."""
    ascii_old, ascii_new = old.isascii(), new.isascii()
    if ascii_old and ascii_new:
        start_byte, old_end_byte, new_end_byte = region.start, region.old_end, region.new_end
    else:
        start_byte = len(old[: region.start].encode("utf-8"))
        old_end_byte = start_byte + len(old[region.start : region.old_end].encode("utf-8"))
        new_end_byte = start_byte + len(new[region.start : region.new_end].encode("utf-8"))
    # Rows are counted from the document start once; the edit's other points count only across the edit.
    start_point = _point_at(old, region.start, ascii_old)
    tree.edit(
        start_byte=start_byte,
        old_end_byte=old_end_byte,
        new_end_byte=new_end_byte,
        start_point=start_point,
        old_end_point=_point_at(old, region.old_end, ascii_old, (region.start, start_point[0])),
        new_end_point=_point_at(new, region.new_end, ascii_new, (region.start, start_point[0])),
    )


def parse_text(parser: Parser, text: str, old_tree: Tree | None = None) -> Tree:
    # (the binding takes no None for an old tree: it is passed only when there is one)
    if text.isascii():
        # Read what the parser asks for: an incremental parse reads little beyond the edit, so the whole
        # document is never encoded.
        def read(offset: int, _point: tuple[int, int]) -> bytes:
            return text[offset : offset + _READ_CHUNK].encode("ascii")

        return parser.parse(read) if old_tree is None else parser.parse(read, old_tree)
    data = text.encode("utf-8")
    return parser.parse(data) if old_tree is None else parser.parse(data, old_tree)


def _point_at(text: str, index: int, ascii_text: bool, known: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """Tree-sitter point (row, UTF-8 byte column) of a str index; rows end at "\n" only. `known` is an earlier
    (index, row) pair to count rows from."""
    line_start = text.rfind("\n", 0, index) + 1
    column = index - line_start if ascii_text else len(text[line_start:index].encode("utf-8"))
    return known[1] + text.count("\n", known[0], index), column


def included_range(text: str, start: int, end: int) -> Range:
    """A tree-sitter Range over text[start:end] (ASCII text: str indices are byte offsets)."""
    import tree_sitter

    start_point = _point_at(text, start, True)
    return tree_sitter.Range(start_point, _point_at(text, end, True, (start, start_point[0])), start, end)
