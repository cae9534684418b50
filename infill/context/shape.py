"""What the text after a gap says the fill must look like (`GapShape`, infill/types.py), read once a request.

A model that only continues the prefix cannot see these; the backend's stop rules and the watchdog act on them:
- in a string that goes on below (a docstring line): the fill stays inside it;
- brackets the text after the gap closes that nothing before it opens (the lines below `return (` are its
  arguments and its `)`): the fill opens them and leaves them open;
- a line starting at the gap with code right below it (no blank line between): the fill is that one line; when the
  code below is deeper, the line opens it (a bracket, or in Python a block's header); when the line below is a
  definition at the gap's own depth, a decorator may be what finishes the line (the watchdog's stand-in).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from infill.context.syntax import DocumentSnapshot
from infill.context.windows import byte_offset
from infill.languages import HASH_COMMENT_LANGUAGES, INDENT_LANGUAGES, OPENER_OF, PAIRS, indent_width
from infill.types import GapShape

if TYPE_CHECKING:
    from tree_sitter import Node

SCAN_CHARS = 4000  # text after the gap read for the brackets it closes (a statement rarely runs longer)
_DEFINITION = re.compile(r"(async\s+def|def|class)\b|@")


def read_shape(
    doc: DocumentSnapshot,
    node: Node | None,
    window_start: int,
    start: int,
    end: int,
    line_before: str,
    line_after: str,
    in_comment: bool,
) -> GapShape:
    """The shape of the gap text[start:end] (`node`: the syntax node at `start`, None without a grammar;
    `window_start`: where the context's window starts, a statement boundary the bracket scan may start from)."""
    text = doc.text
    if doc.language == "python" and node is not None:
        string_end = _string_end(doc, node, start)
        if string_end:
            return GapShape(string_end=string_end)
    if in_comment or doc.language is None:
        return GapShape()
    hash_comments = doc.language in HASH_COMMENT_LANGUAGES  # else `//` and `/* */` comments and backtick strings
    indent = indent_width(line_before)
    closers = _unopened_closers(text, end, indent, hash_comments)
    # (the scan of the window for what is open at the gap, only where an answer depends on it)
    opened = _open_at(text, window_start, start, hash_comments) if closers else None
    matched = [PAIRS[o] for o in reversed(opened or [])][: len(closers)]
    must_open = (
        "".join(OPENER_OF[c] for c in closers[len(matched) :])[::-1] if list(closers[: len(matched)]) == matched else ""
    )
    if line_before.strip() or line_after.strip():
        return GapShape(must_open=must_open)
    line_end = text.find("\n", end)
    below_end = text.find("\n", line_end + 1) if line_end >= 0 else -1
    below = text[line_end + 1 : below_end if below_end >= 0 else len(text)] if line_end >= 0 else ""
    if not below.strip() or indent_width(below) < indent:
        return GapShape(must_open=must_open)  # a blank line or the block's end below: the fill may be a block
    deeper = indent_width(below) > indent
    header = (
        deeper
        and not must_open
        and doc.language in INDENT_LANGUAGES
        and not (opened if opened is not None else _open_at(text, window_start, start, hash_comments))
    )
    return GapShape(
        must_open=must_open,
        one_line=True,
        header=header,
        before_definition=not deeper and bool(_DEFINITION.match(below.lstrip())),
    )


def _string_end(doc: DocumentSnapshot, node: Node | None, start: int) -> str:
    """The closing delimiter of the Python string the gap is inside, when that string ends on a later line."""
    offset = byte_offset(doc, start)
    while node is not None and node.type != "string":
        node = node.parent
    if node is None or node.child_count < 2:
        return ""
    first, last = node.children[0], node.children[-1]
    if first.type != "string_start" or last.type != "string_end" or last.is_missing:
        return ""
    gap_row = doc.text.count("\n", 0, start)
    if not first.end_byte <= offset <= last.start_byte or last.start_point[0] <= gap_row:
        return ""
    return doc.byte_slice(last.start_byte, last.end_byte).decode("utf-8", "replace")


_HASH_TOKENS = re.compile(r"[()\[\]{}\n#]|\"\"\"|'''|[\"']")
_SLASH_TOKENS = re.compile(r"[()\[\]{}\n`]|//|/\*|[\"']")
_NEXT_CODE = re.compile(r"[ \t]*(?=\S)")  # the indentation of the next non-blank line


def _brackets(text: str, start: int, limit: int, hash_comments: bool) -> Iterator[tuple[int, str]]:
    """(position, token) of the brackets and line breaks in text[start:limit], strings and comments skipped."""
    tokens = _HASH_TOKENS if hash_comments else _SLASH_TOKENS
    position = start
    while (match := tokens.search(text, position, limit)) is not None:
        token, position = match.group(), match.end()
        if token in ("#", "//"):
            position = _line_end(text, position)
        elif token == "/*":
            position = _after(text, "*/", position, limit)
        elif len(token) == 3:  # a triple-quoted string
            position = _after(text, token, position, limit)
        elif token in "\"'`":
            position = _string_close(text, position, token, limit)
        else:
            yield match.start(), token


def _open_at(text: str, window_start: int, start: int, hash_comments: bool) -> list[str]:
    """The brackets open at the gap, innermost last, read from the window's start."""
    stack: list[str] = []
    for _, token in _brackets(text, window_start, start, hash_comments):
        if token in PAIRS:
            stack.append(token)
        elif token in OPENER_OF and stack and PAIRS[stack[-1]] == token:
            stack.pop()
    return stack


def _unopened_closers(text: str, start: int, indent: int, hash_comments: bool) -> str:
    """The closing brackets in the text after the gap that the same text does not open, up to the end of the
    statement the gap is in: a line break with nothing open that the text opened, followed by a line no deeper
    than the gap's that does not start with a closer. Strings and comments are skipped."""
    stack: list[str] = []
    unopened: list[str] = []
    for position, token in _brackets(text, start, min(len(text), start + SCAN_CHARS), hash_comments):
        if token == "\n":
            if not stack and _statement_ends(text, position + 1, indent):
                break
        elif token in PAIRS:
            stack.append(token)
        elif stack and PAIRS[stack[-1]] == token:
            stack.pop()
        elif stack:
            return ""  # mismatched brackets: nothing to go on
        else:
            unopened.append(token)
    return "".join(unopened)


def _statement_ends(text: str, position: int, indent: int) -> bool:
    """At a line start with nothing open: the next non-blank line is no deeper than the gap's and does not start
    with a closer (which would go on with the statement the gap is in)."""
    match = _NEXT_CODE.search(text, position)
    return match is None or (indent_width(match.group()) <= indent and text[match.end()] not in OPENER_OF)


def _line_end(text: str, position: int) -> int:
    end = text.find("\n", position)
    return len(text) if end < 0 else end


def _after(text: str, closing: str, position: int, limit: int) -> int:
    end = text.find(closing, position, limit)
    return limit if end < 0 else end + len(closing)


def _string_close(text: str, position: int, quote: str, limit: int) -> int:
    """After a one-line string opened just before `position` (a backslash escapes; a line break ends it)."""
    i = position
    while i < limit:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            return i + 1
        if ch == "\n":
            return i
        i += 1
    return limit
