"""Indentation around a gap: one level as the document writes it, and the level of the block the cursor is in."""

from __future__ import annotations

import re
from collections import Counter

from infill.languages import indent_width, opens_block

# Tabs, and every character str.splitlines() splits at or str.strip() strips besides " " and "\n".
_UNUSUAL_SPACE = re.compile("[\t\r\x0b\x0c\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_LEADING_SPACES = re.compile(r"^ *(?=[^ \n])", re.M)  # the indentation of each non-blank line
INDENT_SAMPLE_CHARS = 2000  # text before a gap read for the indentation step (half that after it)


def unit_near(text: str, first: int, last: int, start: int, end: int, language: str | None) -> str:
    """One indentation level as written near the gap text[first:last], reading within text[start:end] only enough
    lines to find it (the whole window costs 3x more)."""
    sample_start = (
        start
        if first - INDENT_SAMPLE_CHARS <= start
        else text.find("\n", first - INDENT_SAMPLE_CHARS, first) + 1 or start
    )
    return indent_unit(text, sample_start, min(end, last + INDENT_SAMPLE_CHARS // 2), language)


def indent_unit(text: str, start: int, end: int, language: str | None) -> str:
    """One indentation level as this part of the document writes it: a tab, or the commonest step in spaces."""
    window = text[start:end]
    if not _UNUSUAL_SPACE.search(window):
        # Lines split at "\n" only and indented with spaces only: the same steps, counted at C speed.
        widths = [len(spaces) for spaces in _LEADING_SPACES.findall(window)]
        widths_up = Counter(b - a for a, b in zip([0, *widths], widths) if b > a)
        if widths_up:
            return " " * widths_up.most_common(1)[0][0]
        return _default_indent(language)
    steps: Counter[str] = Counter()
    previous = 0
    for line in window.splitlines():
        if not line.strip():
            continue
        ws = line[: len(line) - len(line.lstrip())]
        if "\t" in ws:
            steps["\t"] += 1
        elif len(ws) > previous:
            steps[" " * (len(ws) - previous)] += 1
        previous = indent_width(ws)
    if steps:
        return steps.most_common(1)[0][0]
    return _default_indent(language)


def _default_indent(language: str | None) -> str:
    return (
        "  "
        if language in ("javascript", "typescript", "typescriptreact", "json")
        else "    "
        if language != "go"
        else "\t"
    )


def block_indent(text: str, line_start: int, line_before: str, unit: str, language: str | None) -> str:
    """The indentation the fill's later lines should have: the block the cursor is in, one level deeper after an
    opener (`:` in Python, `{`/`(`/`[`)."""
    if line_before.strip():
        base_line = line_before
    elif line_before:
        return line_before
    else:
        above = _previous_nonblank_line(text, line_start)
        if above is None:
            return ""
        base_line = above
    ws = base_line[: len(base_line) - len(base_line.lstrip())]
    return ws + unit if opens_block(base_line, language) else ws


def _previous_nonblank_line(text: str, line_start: int) -> str | None:
    end = line_start - 1
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end]
        if line.strip():
            return line
        end = start - 1
    return None
