"""The prefix/suffix windows around a gap: within an approximate character budget, snapped to whole syntactic
units (or whole lines without a grammar), with a start kept while the user types (prompt-cache reuse)."""

from __future__ import annotations

from infill.context.syntax import DocumentSnapshot

# Share of the prefix budget left free when a window start is chosen anew, so it stays put while the user types.
WINDOW_HEADROOM = 0.1


def sticky_start(text: str, first: int, budget: int, previous: tuple[int, str] | None) -> int | None:
    """The previous window start, if its line is unchanged, still starts a line, and is still within budget."""
    if previous is None:
        return None
    index, line = previous
    if not 0 <= first - index <= budget or (index > 0 and text[index - 1] != "\n"):
        return None
    return index if text.startswith(line, index) and line_end(text, index) == index + len(line) else None


def line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def byte_offset(doc: DocumentSnapshot, index: int) -> int:
    return index if doc.is_ascii else len(doc.text[:index].encode("utf-8"))


def char_index(doc: DocumentSnapshot, offset: int) -> int:
    return offset if doc.is_ascii else len(doc.data[:offset].decode("utf-8", "ignore"))


def syntactic_window(doc: DocumentSnapshot, node, first: int, last: int, prefix_budget: int,
                     suffix_budget: int) -> tuple[int, int, str]:
    """Prefer the farthest start / end of a whole unit (an enclosing node or one of its children) in budget."""
    begin, finish = byte_offset(doc, first), byte_offset(doc, last)
    # Budgets are in characters; tree offsets are bytes (the same numbers for ASCII text).
    low = byte_offset(doc, max(0, first - prefix_budget)) if not doc.is_ascii else begin - prefix_budget
    high = byte_offset(doc, min(len(doc.text), last + suffix_budget)) if not doc.is_ascii else finish + suffix_budget
    starts, ends, unit = [], [], "document"
    ancestor = node
    while ancestor is not None:
        if ancestor.start_byte <= begin:
            starts.append(ancestor.start_byte)
        ends.append(ancestor.end_byte)
        if ancestor.parent is not None and unit == "document" and ancestor.end_byte - ancestor.start_byte > 1 \
                and ancestor.is_named and ancestor.start_byte < begin:
            unit = ancestor.type
        for child in _children_near(ancestor, low, high):
            if child.start_byte <= begin:
                starts.append(child.start_byte)
            if child.end_byte >= finish:
                ends.append(child.end_byte)
        ancestor = ancestor.parent
    text = doc.text
    # Only boundaries at line starts / line ends count: a window never begins or ends mid-line.
    # The farthest candidate that passes is taken, so candidates are tried from the farthest on (byte offsets and
    # str indices are in the same order).
    start_ok = (i for i in (char_index(doc, b) for b in sorted(set(starts)) if b >= low)
                if text[text.rfind("\n", 0, i) + 1:i].strip() == "")
    end_ok = (i for i in (char_index(doc, b) for b in sorted(set(ends), reverse=True) if b <= high)
              if text[i:line_end(text, i)].strip() == "")
    farthest_start, farthest_end = next(start_ok, None), next(end_ok, None)
    fallback = line_window(text, first, last, prefix_budget, suffix_budget)
    prefix_start = _snap_to_line_start(text, farthest_start) if farthest_start is not None else fallback[0]
    suffix_end = _snap_to_line_end(text, farthest_end) if farthest_end is not None else fallback[1]
    return min(prefix_start, first), max(suffix_end, last), unit


def _children_near(node, low: int, high: int):
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
    while cursor.node.start_byte <= high:
        yield cursor.node
        if not cursor.goto_next_sibling():
            return


def _snap_to_line_start(text: str, index: int) -> int:
    line_start = text.rfind("\n", 0, index) + 1
    return line_start if text[line_start:index].strip() == "" else index


def _snap_to_line_end(text: str, index: int) -> int:
    end = line_end(text, index)
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
