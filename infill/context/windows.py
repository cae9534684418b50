"""The prefix/suffix windows around a gap: within an approximate character budget, starting and ending at whole
syntactic units (or whole lines without a grammar). Where the prefix starts is cache/tokens.py's `choose_start`,
the one rule every prompt fit follows (kept while the user types, for prompt-cache reuse), here in characters."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from infill.cache.tokens import anchor_at, choose_start, split_chunks
from infill.context.syntax import DocumentSnapshot

if TYPE_CHECKING:
    from tree_sitter import Node

# Share of the prefix budget left free when a window start is chosen anew, so it stays put while the user types.
WINDOW_HEADROOM = 0.1


def fit_prefix(
    text: str, first: int, budget: int, previous: tuple[int, str] | None, unit_starts: Sequence[int]
) -> tuple[int, str]:
    """Where the window before `first` starts, at a line start within `budget` characters, preferring one where a
    whole unit starts (`unit_starts`: `syntactic_window`'s), and what identifies that start on the next keystroke
    (`previous`: the last start and its anchor). Work is proportional to the budget, or constant where the last
    start holds where it was (the unit starts are then not read)."""
    anchor = previous[1] if previous is not None else ""
    if previous is not None:  # the anchor where it was (what choose_start would find, without reading the window)
        index = previous[0]
        whole_line = index == 0 or text[index - 1 : index] == "\n"
        if 0 <= first - index <= budget and index + len(anchor) <= first and whole_line:
            if text.startswith(anchor, index):
                return previous
    scan = 0  # the farthest line start in budget
    if first > budget:
        newline = text.find("\n", first - budget, first)
        scan = first if newline < 0 else newline + 1  # (a line before the gap longer than the budget: none of it)
    texts = split_chunks(text[scan:first])
    refit = budget if not anchor else int(budget * (1 - WINDOW_HEADROOM))
    low = max(0, first - budget)  # only unit starts alone on their line (after indentation) are cuts
    cuts = {min(_snap_to_line_start(text, i), first) for i in unit_starts if _blank_before(text, i, low)}
    relative = [c - scan for c in cuts if scan <= c < first]
    k = choose_start(texts, [len(t) for t in texts], budget, refit, anchor=anchor, cuts=relative, truncated=scan > 0)
    return scan + sum(len(t) for t in texts[:k]), anchor_at(texts, k)


def line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def byte_offset(doc: DocumentSnapshot, index: int) -> int:
    return index if doc.is_ascii else len(doc.text[:index].encode("utf-8"))


def char_index(doc: DocumentSnapshot, offset: int) -> int:
    return offset if doc.is_ascii else len(doc.data[:offset].decode("utf-8", "ignore"))


def syntactic_window(
    doc: DocumentSnapshot, node: Node, first: int, last: int, prefix_budget: int, suffix_budget: int
) -> tuple[list[int], int, str]:
    """Where a whole unit (an enclosing node or one of its children) starts in budget before the gap, in order
    (str indices; where a window may start, as `fit_prefix` chooses), the farthest end of a whole unit in budget
    after it, and the enclosing unit's type. Work is proportional to the window, whatever the line endings
    or the characters (one line of megabytes, CR-only text and non-ASCII text once cost the whole document per
    candidate boundary)."""
    text = doc.text
    begin, finish = byte_offset(doc, first), byte_offset(doc, last)
    # Budgets are in characters; tree offsets are bytes (the same numbers for ASCII text).
    low_char, high_char = max(0, first - prefix_budget), min(len(text), last + suffix_budget)
    low, high = begin - _utf8_length(doc, low_char, first), finish + _utf8_length(doc, last, high_char)
    starts, ends, unit = [], [], "document"
    ancestor: Node | None = node
    while ancestor is not None:
        if ancestor.start_byte <= begin:
            starts.append(ancestor.start_byte)
        ends.append(ancestor.end_byte)
        if (
            ancestor.parent is not None
            and unit == "document"
            and ancestor.end_byte - ancestor.start_byte > 1
            and ancestor.is_named
            and ancestor.start_byte < begin
        ):
            unit = ancestor.type
        for child in _children_near(ancestor, low, high):
            if child.start_byte <= begin:
                starts.append(child.start_byte)
            if child.end_byte >= finish:
                ends.append(child.end_byte)
        ancestor = ancestor.parent
    starts = sorted({b for b in starts if low <= b <= begin})
    ends = sorted({b for b in ends if finish <= b <= high}, reverse=True)
    # Only boundaries at line starts / line ends count: a window never begins or ends mid-line (starts: fit_prefix
    # checks, where it must choose). Of the ends, the farthest that passes is taken, so they are tried from the
    # farthest on.
    start_chars = _char_indices(doc, starts, begin, first)
    end_chars = _char_indices(doc, ends, finish, last)
    farthest_end = next((i for i in end_chars if _blank_after(text, i, high_char)), None)
    if farthest_end is not None:
        suffix_end = _snap_to_line_end(text, farthest_end)
    else:
        suffix_end = line_window(text, first, last, prefix_budget, suffix_budget)[1]
    return start_chars, max(suffix_end, last), unit


# How far past the window a boundary's line is followed to its start or end (indentation, a trailing comment);
# a line reaching farther than that does not give a whole-line boundary.
LINE_SLACK = 4096


def _utf8_length(doc: DocumentSnapshot, start: int, end: int) -> int:
    return end - start if doc.is_ascii else len(doc.text[start:end].encode("utf-8"))


def _char_indices(doc: DocumentSnapshot, offsets: list[int], anchor_byte: int, anchor_char: int) -> list[int]:
    """The str indices of byte `offsets` (sorted, all on one side of the anchor), walking out from a known pair:
    each step decodes only the bytes between two boundaries, so the whole walk costs the window once."""
    if doc.is_ascii:
        return list(offsets)
    data, found = doc.data, {}
    at_byte, at_char = anchor_byte, anchor_char
    for offset in sorted(offsets, key=lambda b: abs(b - anchor_byte)):  # nearest first
        lo, hi = sorted((offset, at_byte))
        step = len(data[lo:hi].decode("utf-8", "ignore"))
        at_byte, at_char = offset, at_char + (step if offset > at_byte else -step)
        found[offset] = at_char
    return [found[b] for b in offsets]


def _blank_before(text: str, index: int, low: int) -> bool:
    """Only whitespace between the start of `index`'s line and `index` (looking back at most LINE_SLACK chars
    before the window's `low`)."""
    floor = max(0, low - LINE_SLACK)
    newline = text.rfind("\n", floor, index)
    if newline < 0 and floor > 0:
        return False
    return text[newline + 1 : index].strip() == ""


def _blank_after(text: str, index: int, high: int) -> bool:
    """Only whitespace between `index` and the end of its line (looking at most LINE_SLACK chars past `high`)."""
    ceiling = min(len(text), high + LINE_SLACK)
    newline = text.find("\n", index, ceiling)
    if newline < 0 and ceiling < len(text):
        return False
    return text[index : newline if newline >= 0 else ceiling].strip() == ""


def _children_near(node: Node, low: int, high: int) -> Iterator[Node]:
    """The children of `node` that can give a window boundary within budget: those ending after `low` and
    starting at or before `high` (siblings are ordered and do not overlap). A module of thousands of top-level
    definitions is not walked whole on every keystroke."""
    if node.child_count <= 16:
        yield from node.children
        return
    cursor = node.walk()
    found = cursor.goto_first_child() if low <= 0 else cursor.goto_first_child_for_byte(low - 1) is not None
    if not found:
        return
    while cursor.node is not None and cursor.node.start_byte <= high:
        yield cursor.node
        if not cursor.goto_next_sibling():
            return


def _snap_to_line_start(text: str, index: int) -> int:
    line_start = text.rfind("\n", max(0, index - LINE_SLACK), index) + 1
    return line_start if text[line_start:index].strip() == "" and (line_start > 0 or index <= LINE_SLACK) else index


def _snap_to_line_end(text: str, index: int) -> int:
    end = text.find("\n", index, index + LINE_SLACK)
    if end < 0 and len(text) - index > LINE_SLACK:
        return index  # the line runs on too far to end the window with it
    end = len(text) if end < 0 else end
    if text[index:end].strip() == "":
        return min(len(text), end + 1)
    return index


def line_window(text: str, first: int, last: int, prefix_budget: int, suffix_budget: int) -> tuple[int, int]:
    """Whole lines within budget on each side (the partial lines at the gap are always kept)."""
    lo = max(0, first - prefix_budget)
    if lo > 0:
        newline = text.find("\n", lo, first)
        lo = first if newline < 0 else newline + 1
    hi = min(len(text), last + suffix_budget)
    if hi < len(text):
        newline = text.rfind("\n", last, hi)
        hi = line_end(text, last) if newline < 0 else newline + 1
    return lo, hi
