"""Clean a raw middle before the watchdog sees it, whichever backend wrote it: cut what repeats the suffix, stop at the
end of the enclosing block, fit indentation to the surrounding code, strip whitespace artefacts, keep Markdown structure
intact.

Every function takes the middle and returns a (possibly shorter) middle; none invents content beyond
indentation, list markers and nothing else.
"""

from __future__ import annotations

import re

from infill import languages
from infill.context.builder import GapContext
from infill.languages import INDENT_LANGUAGES, TAB_WIDTH, indent_width, opens_block

_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])(\s+)")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")
# C0/C1 control characters (tab and newline aside), U+FFFD from undecodable model bytes, and lone surrogates (a
# remote endpoint's JSON can carry them): never part of a fill.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd\ud800-\udfff]")


def postprocess(middle: str, ctx: GapContext, prefix: str, suffix: str) -> str:
    """All cleaning steps in order. `prefix`/`suffix` are the document text before/after the gap (any length)."""
    middle = trim_line_echo(middle, ctx)
    middle = _UNPRINTABLE.sub("", middle.replace("\r\n", "\n"))
    if ctx.single_line:
        middle = middle.lstrip("\n")
        # the one rule every backend already applied (a bare or remote answer may not have)
        middle = languages.one_line_fill(middle, wraps=not ctx.is_prose and not ctx.in_comment)
    elif not ctx.line_before.strip():
        middle = middle.lstrip("\n")  # the cursor already sits on its own empty line
    middle = trim_suffix_overlap(middle, suffix)
    if not ctx.is_prose and not ctx.in_comment:
        if not ctx.single_line:
            middle = fit_indentation(middle, ctx)
            if ctx.language in INDENT_LANGUAGES:
                middle = trim_dedent(middle, ctx)
        middle = trim_unbalanced_closer(middle, suffix)
    if ctx.is_prose:
        middle = fit_markdown(middle, ctx, prefix)
    return strip_whitespace(middle, ctx, suffix)


def trim_line_echo(middle: str, ctx: GapContext) -> str:
    """Drop an end of the middle that repeats the rest of the gap's line (a model that only continues the prefix
    writes on past the gap), and the trailing whitespace: all of it, or only newlines on a one-line gap whose line
    goes on after it (the space before that text may belong to the fill). A short rest (`)`, `:`) counts as
    repeated only where the middle has it once too many, as in `trim_suffix_overlap`."""
    after_line = ctx.line_after.strip()
    one_line = languages.ends_on_its_line(ctx.single_line, after_line)
    middle = middle.rstrip("\n") if one_line else middle.rstrip()
    written = middle.rstrip()
    if after_line and written.endswith(after_line) and languages.overlap_repeats(written, after_line):
        middle = written[: -len(after_line)]
    return middle.rstrip() if one_line and not after_line else middle


def trim_suffix_overlap(middle: str, suffix: str) -> str:
    """Drop the end of the middle that repeats the start of the suffix: an exact character overlap, or a line of
    the middle equal to the suffix's first non-blank line (and everything after it)."""
    for k in range(min(len(middle), len(suffix)), 0, -1):
        piece = suffix[:k]
        if middle.endswith(piece):
            if languages.overlap_repeats(middle, piece):
                middle = middle[:-k]
            break
    first_line = next((line.strip() for line in suffix.split("\n") if line.strip()), "")
    if len(first_line) >= 4 and re.search(r"\w", first_line):
        lines = middle.split("\n")
        for i, line in enumerate(lines[1:], start=1):
            if line.strip() == first_line:
                return "\n".join(lines[:i]) + "\n"
    return middle


def trim_unbalanced_closer(middle: str, suffix: str) -> str:
    """Cut the middle where it closes a bracket it did not open, when the suffix already closes it."""
    i = languages.first_unopened(middle, languages.CLOSERS)
    if i is not None and suffix.lstrip().startswith(middle[i]):
        return _cut_line_tail(middle, i)
    return middle


def _cut_line_tail(middle: str, index: int) -> str:
    """Cut at `index`; if only indentation precedes it on its line, drop that line start too."""
    line_start = middle.rfind("\n", 0, index) + 1
    if middle[line_start:index].strip() == "":
        return middle[:line_start]
    return middle[:index]


def _leading(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def fit_indentation(middle: str, ctx: GapContext) -> str:
    """Match the document's indentation: its unit (tabs/spaces), the cursor line's level for the first line, and
    the block's level for the rest when the model wrote them from column 0."""
    lines = middle.split("\n")
    lines = [_convert_unit(line, ctx.indent_unit) for line in lines]
    if not ctx.line_before.strip() and lines[0].strip():
        # The first line starts at the cursor: it needs only the indentation the cursor column lacks.
        missing = indent_width(ctx.indent) - indent_width(ctx.line_before)
        lines[0] = _indent_text(ctx, max(0, missing)) + lines[0].lstrip(" \t")
    rest = [i for i, line in enumerate(lines) if i > 0 and line.strip()]
    if rest and _written_from_column_zero(lines, rest[0], ctx):
        first_rest = indent_width(lines[rest[0]])
        opens = opens_block(ctx.line_before + lines[0], ctx.language)
        expected = indent_width(ctx.indent) + (
            indent_width(ctx.indent_unit) if opens and not ctx.line_before.strip() else 0
        )
        shift = _indent_text(ctx, expected - first_rest)
        lines = [shift + line if i in rest else line for i, line in enumerate(lines)]
    return "\n".join(lines)


def _written_from_column_zero(lines: list[str], first_rest: int, ctx: GapContext) -> bool:
    """The second line sits left of the block without closing it (no closer, no blank line before it, which
    would mark leaving the block): the model indented relative to column 0, not to the document."""
    line = lines[first_rest]
    if indent_width(line) >= indent_width(ctx.indent) or line.lstrip().startswith(tuple(languages.CLOSERS)):
        return False
    return all(lines[i].strip() for i in range(1, first_rest))


def _indent_text(ctx: GapContext, width: int) -> str:
    if width <= 0:
        return ""
    if ctx.indent_unit == "\t":
        return "\t" * (width // TAB_WIDTH) + " " * (width % TAB_WIDTH)
    return " " * width


def _convert_unit(line: str, unit: str) -> str:
    ws = _leading(line)
    if not ws:
        return line
    if unit == "\t" and "\t" not in ws and len(ws) >= TAB_WIDTH:
        return "\t" * (len(ws) // TAB_WIDTH) + " " * (len(ws) % TAB_WIDTH) + line[len(ws) :]
    if unit != "\t" and "\t" in ws:
        return ws.replace("\t", unit) + line[len(ws) :]
    return line


def trim_dedent(middle: str, ctx: GapContext) -> str:
    """Indentation-delimited languages: stop where a later line leaves the block the cursor is in."""
    base = indent_width(ctx.indent)
    if base == 0:
        return middle
    lines = middle.split("\n")
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() and indent_width(line) < base:
            return "\n".join(lines[:i])
    return middle


def fit_markdown(middle: str, ctx: GapContext, prefix: str) -> str:
    if ctx.line_before.lstrip().startswith("|"):
        return fit_table_row(middle, ctx, prefix)
    middle = fit_list_markers(middle, ctx, prefix)
    middle = stop_at_heading(middle)
    return end_sentence(middle, ctx)


def stop_at_heading(middle: str) -> str:
    """A fill stays in its section: it ends before a heading it would start (a first-line heading is kept)."""
    lines = middle.split("\n")
    for i, line in enumerate(lines[1:], start=1):
        if re.match(r"#{1,6}\s", line):
            return "\n".join(lines[:i])
    return middle


def fit_table_row(middle: str, ctx: GapContext, prefix: str) -> str:
    """A table cell fill may add exactly the pipes the row still lacks, never more."""
    previous = _previous_line(prefix, len(prefix) - len(ctx.line_before))
    if previous is None or not previous.lstrip().startswith("|"):
        return middle
    allowed = previous.count("|") - ctx.line_before.count("|") - ctx.line_after.count("|")
    if allowed < 0 or middle.count("|") <= allowed:
        return middle
    if allowed == 0:
        return middle[: middle.index("|")].rstrip()
    seen = 0
    for i, ch in enumerate(middle):
        if ch == "|":
            seen += 1
            if seen == allowed:
                return middle[: i + 1]
    return middle


def _previous_line(text: str, line_start: int) -> str | None:
    if line_start <= 0:
        return None
    start = text.rfind("\n", 0, line_start - 1) + 1
    return text[start : line_start - 1]


def fit_list_markers(middle: str, ctx: GapContext, prefix: str) -> str:
    """New list items use the marker of the list they continue (same bullet, or the next number)."""
    previous = _last_list_item(prefix, len(prefix) - len(ctx.line_before))
    if previous is None:
        return middle
    indent, marker = previous.group(1), previous.group(2)
    number = int(marker[:-1]) if marker[0].isdigit() else None
    lines = middle.split("\n")
    for i, line in enumerate(lines):
        if i == 0 and ctx.line_before.strip():
            continue  # the first line continues the current line's text
        item = _LIST_ITEM.match(line)
        if item is None or item.group(1) != indent:
            continue
        if number is None:
            new_marker = marker
        else:
            number += 1
            new_marker = f"{number}{marker[-1]}"
        lines[i] = item.group(1) + new_marker + item.group(3) + line[item.end() :]
    return "\n".join(lines)


def _last_list_item(prefix: str, line_start: int) -> re.Match[str] | None:
    """The list item the cursor's list continues: the closest item line above, within the same block."""
    lines = prefix[:line_start].split("\n")[-30:]
    for line in reversed(lines):
        item = _LIST_ITEM.match(line)
        if item:
            return item
        if line.strip() and not line.startswith((" ", "\t")):
            return None  # a paragraph or heading ended the list
    return None


def end_sentence(middle: str, ctx: GapContext) -> str:
    """A fill that ends a line of prose ends at a sentence boundary when it has one (no dangling half sentence)."""
    if ctx.line_after.strip():
        return middle
    last_line = middle.rstrip().rsplit("\n", 1)[-1]
    if not last_line.strip() or _LIST_ITEM.match(last_line) or last_line.lstrip().startswith(("#", "|")):
        return middle
    stripped = middle.rstrip()
    if re.search(r"[.!?:][\"')\]]*$", stripped):
        return middle
    ends = list(_SENTENCE_END.finditer(stripped))
    if not ends or not re.search(r"[^\W\d_]{2}", stripped[ends[-1].end() :]):
        return middle  # no sentence end, or only markup after it (a closing `-->`, `**`): nothing dangles
    return stripped[: ends[-1].end()]


def strip_whitespace(middle: str, ctx: GapContext, suffix: str) -> str:
    """Trailing spaces on lines, trailing blank lines; a multi-line fill never ends in a newline (the line
    after the cursor keeps its own)."""
    lines = middle.split("\n")
    lines = [line.rstrip() for line in lines[:-1]] + lines[-1:]
    if not suffix[:1].strip() or ctx.single_line and not ctx.line_after.strip():
        lines[-1] = lines[-1].rstrip()
    middle = "\n".join(lines)
    if not ctx.single_line:
        middle = middle.rstrip()
    return middle
