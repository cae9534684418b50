"""Where an autoregressive fill ends, and which fills are not worth showing.

A base model without FIM tokens only continues the prefix, so the gap's end is decided here from the text:
single-line gaps end at the newline; multi-line gaps end when a generated line dedents out of the enclosing block,
when a line repeats the first line after the gap, at a blank line in prose, or at the token bound / EOS.
"""

from __future__ import annotations

from dataclasses import dataclass

_OPENERS = (":", "{", "(", "[")
_PROSE = {"markdown", "plaintext", "text", "restructuredtext", "latex", "tex"}
_HASH = ("#",)
_SLASH = ("//", "/*", "*")
_COMMENT_MARKERS: dict[str, tuple[str, ...]] = {
    **{lang: _HASH for lang in ("python", "shellscript", "shell", "bash", "sh", "ruby", "yaml", "toml", "r",
                                "perl", "dockerfile", "makefile", "cmake", "elixir", "nix")},
    **{lang: _SLASH for lang in ("javascript", "typescript", "javascriptreact", "typescriptreact", "go", "rust",
                                 "java", "c", "cpp", "csharp", "kotlin", "swift", "php", "scala", "dart", "zig")},
    **{lang: ("--",) for lang in ("lua", "sql", "haskell")},
}


_CLOSERS_AND_SEPARATORS = set(",;:.!?)]}")
_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _opens_quote(text: str, i: int) -> bool:
    """A string starts here; an apostrophe after a letter (`don't`, `It's`) does not start one."""
    ch = text[i]
    return ch in "\"`" or (ch == "'" and (i == 0 or not text[i - 1].isalnum()))


def _unbalanced_index(text: str, closer: str) -> int | None:
    """Index of the first `closer` outside brackets and strings opened within `text`, if any."""
    stack: list[str] = []
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and (i == 0 or text[i - 1] != "\\"):
                quote = ""
        elif _opens_quote(text, i):
            quote = ch
        elif ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif not stack and ch == closer:
            return i
    return None


def _scan_balance(text: str):
    """Walk `text` tracking the brackets and one-line strings the fill itself opens. Yields, after each character,
    (index, char, balanced, in_string); `balanced` means no bracket opened within `text` is still open (closing
    brackets of the prefix is fine)."""
    depth, floor, quote = 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif _opens_quote(text, i):
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            floor = min(floor, depth)
        yield i, ch, depth <= floor, bool(quote)


def _first_line_end(text: str) -> tuple[str, bool]:
    """Up to the first newline outside brackets the fill opened: `f(a,` ends its line only once the call closes."""
    for i, ch, balanced, in_string in _scan_balance(text):
        if ch == "\n" and (balanced or in_string):  # a one-line string cannot go on to the next line either
            return text[:i], True
    return text, False


def trim_unfinished(text: str, shape: GapShape) -> str:
    """A fill cut off by the token bound (or EOS) inside brackets or a string it opened would break the line:
    keep it up to the last point where everything it opened is closed again (whole lines for multi-line gaps),
    without a dangling operator or comma."""
    last = 0
    for i, ch, balanced, in_string in _scan_balance(text):
        if balanced and not in_string and (shape.single_line or ch == "\n"):
            last = i + 1
    if last == len(text):
        return text
    return text[:last].rstrip(" \t=,+-*/%|&^<>:.\\") if shape.single_line else text[:last]


def _stutters(lines: list[str], j: int) -> bool:
    """A small greedy model loops by repeating its last line; a repeated substantial line ends the fill."""
    line = lines[j].strip()
    previous = next((lines[k].strip() for k in range(j - 1, -1, -1) if lines[k].strip()), "")
    return len(line) >= 4 and line == previous and any(c.isalnum() for c in line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


@dataclass(frozen=True)
class GapShape:
    """What the text around one gap says about where its fill ends."""

    single_line: bool
    block_indent: int  # indentation of the line that sets the enclosing block
    opener: bool  # that line opens a block (a body line must be deeper than it)
    cursor_line: str  # text of the gap's line before the gap
    after_line: str  # rest of the gap's line after the gap, stripped (an echo of it is trimmed)
    after_next: str  # first non-blank line after the gap, stripped (a multi-line fill stops before repeating it)
    prose: bool
    comment_markers: tuple[str, ...]


def gap_shape(before: str, after: str, single_line: bool, language: str | None) -> GapShape:
    cursor_line = before.rsplit("\n", 1)[-1]
    reference = cursor_line
    if not cursor_line.strip():
        earlier = [line for line in before.split("\n")[:-1] if line.strip()]
        reference = earlier[-1] if earlier else ""
    after_line, _, after_rest = after.partition("\n")
    after_next = next((line.strip() for line in after_rest.split("\n") if line.strip()), "")
    lang = (language or "").lower()
    markers = _COMMENT_MARKERS.get(lang, () if lang in _PROSE or lang else ("#", "//"))
    return GapShape(single_line=single_line or bool(after_line.strip()), block_indent=_indent(reference),
                    opener=reference.rstrip().endswith(_OPENERS), cursor_line=cursor_line,
                    after_line=after_line.strip(), after_next=after_next, prose=lang in _PROSE,
                    comment_markers=markers)


def cut_fill(text: str, shape: GapShape) -> tuple[str, bool]:
    """The fill so far and whether generation should stop here."""
    if shape.single_line:
        head, newline, _ = text.partition("\n")
        if len(shape.after_line) >= 3 and shape.after_line in head:  # the model wrote on into the fixed text
            return head[:head.index(shape.after_line)], True
        if shape.after_line[:1] in _CLOSERS_AND_SEPARATORS:
            end = _unbalanced_index(head, shape.after_line[0])
            if end is not None:  # `f(|)`, `{"a": |, ...}`, `... is |.`: the model wrote on past the gap
                return head[:end], True
        if shape.after_line:
            return head, bool(newline)
        return _first_line_end(text)
    if shape.prose and "\n\n" in text.lstrip("\n"):
        start = len(text) - len(text.lstrip("\n"))
        return text[:text.index("\n\n", start)], True
    lines = text.split("\n")
    for j in range(1, len(lines)):
        line = lines[j]
        if not line.strip():
            continue
        indent = _indent(line)
        dedented = indent <= shape.block_indent if shape.opener else indent < shape.block_indent
        complete = j < len(lines) - 1
        repeats_after = complete and shape.after_next and line.strip() == shape.after_next
        if dedented or repeats_after or (complete and _stutters(lines, j)):
            return "\n".join(lines[:j]), True
    return text, False


def finish_fill(text: str, shape: GapShape) -> str:
    """Trim trailing whitespace and an echo of the text that follows the gap on its line."""
    fill = text.rstrip() if not shape.single_line else text.rstrip("\n")
    if shape.after_line and fill.rstrip().endswith(shape.after_line):
        fill = fill.rstrip()[: -len(shape.after_line)]
    if shape.single_line and not shape.after_line:
        fill = fill.rstrip()
    return fill


def comment_only(fill: str, shape: GapShape) -> bool:
    """True when every non-blank line the fill writes is a comment (and the cursor was not already in one)."""
    markers = shape.comment_markers
    if not markers or not fill.strip() or shape.cursor_line.lstrip().startswith(markers):
        return False
    lines = fill.split("\n")
    lines[0] = shape.cursor_line + lines[0]
    written = [line.strip() for line in lines if line.strip()]
    return all(line.startswith(markers) for line in written)
