"""Where an autoregressive fill ends (cleaning and judging what it wrote is the pipeline's: infill/checks/).

A base model without FIM tokens only continues the prefix, so the gap's end is decided here from the text:
single-line gaps end at the newline; multi-line gaps end when a generated line dedents out of the enclosing block,
when a line repeats the first line after the gap, at a blank line in prose, or at the token bound / EOS.
"""

from __future__ import annotations

from dataclasses import dataclass

from infill import languages
from infill.types import GapFacts

_OPENERS = (":", "{", "(", "[")  # a line ending so is followed by deeper lines (a block, a call, a dict value)
_CLOSERS_AND_SEPARATORS = set(",;:.!?)]}")
STUTTER_MIN_CHARS = 4  # a repeated line this long ends the fill (cutting loses less than the watchdog's reject)


def trim_unfinished(text: str, shape: GapShape) -> str:
    """A fill cut off by the token bound (or EOS) inside brackets or a string it opened would break the line:
    keep it up to the last point where everything it opened is closed again (whole lines for multi-line gaps),
    without a dangling operator or comma."""
    last = 0
    for i, ch, balanced, in_string in languages.balance_points(text):
        if balanced and not in_string and (shape.single_line or ch == "\n"):
            last = i + 1
    if last == len(text):
        return text
    return text[:last].rstrip(" \t=,+-*/%|&^<>:.\\") if shape.single_line else text[:last]


@dataclass(frozen=True)
class GapShape:
    """What the text around one gap says about where its fill ends."""

    single_line: bool
    block_indent: int  # indentation of the line that sets the enclosing block
    opener: bool  # that line opens a block (a body line must be deeper than it)
    cursor_line: str  # text of the gap's line before the gap
    after_line: str  # rest of the gap's line after the gap, stripped (writing it ends a one-line fill)
    after_next: str  # first non-blank line after the gap, stripped (a multi-line fill stops before repeating it)
    prose: bool


def gap_shape(before: str, after: str, single_line: bool, language: str | None,
              facts: GapFacts | None = None) -> GapShape:
    """The shape of the gap between `before` and `after`. `facts` (from the pipeline's context, for the first
    gap) say what the text alone cannot: prose or code, inside a comment, the block's indentation, and the gap's
    whole line when the prompt window cut it; without them (a bare request, a later gap) they are read from the
    text."""
    after_line, _, after_rest = after.partition("\n")
    after_next = next((line.strip() for line in after_rest.split("\n") if line.strip()), "")
    if facts is not None:
        # A line left of the indentation the pipeline chose for the fill's later lines leaves the block.
        cursor_line, after_line, prose = facts.line_before, facts.line_after, facts.is_prose
        block_indent, opener = len(facts.indent), False
    else:
        # The line that sets the block: the cursor's, or the last non-blank one above (a body line must be deeper
        # than one that opens a block).
        cursor_line = before.rsplit("\n", 1)[-1]
        reference = cursor_line if cursor_line.strip() else \
            before[:len(before) - len(cursor_line)].rstrip().rsplit("\n", 1)[-1]
        block_indent, opener = languages.indent_width(reference), reference.rstrip().endswith(_OPENERS)
        prose = languages.is_prose_language(language)
    return GapShape(single_line=single_line or bool(after_line.strip()), block_indent=block_indent, opener=opener,
                    cursor_line=cursor_line, after_line=after_line.strip(), after_next=after_next, prose=prose)


def cut_fill(text: str, shape: GapShape) -> tuple[str, bool]:
    """The fill so far and whether generation should stop here."""
    if shape.single_line:
        head, newline, _ = text.partition("\n")
        if len(shape.after_line) >= 3 and shape.after_line in head:  # the model wrote on into the fixed text
            return head[:head.index(shape.after_line)], True
        if shape.after_line[:1] in _CLOSERS_AND_SEPARATORS:
            end = languages.first_unopened(head, shape.after_line[0])
            if end is not None:  # `f(|)`, `{"a": |, ...}`, `... is |.`: the model wrote on past the gap
                return head[:end], True
        if shape.after_line:
            return head, bool(newline)
        return languages.first_line_end(text)
    if shape.prose and "\n\n" in text.lstrip("\n"):
        start = len(text) - len(text.lstrip("\n"))
        return text[:text.index("\n\n", start)], True
    lines = text.split("\n")
    for j in range(1, len(lines)):
        line = lines[j]
        if not line.strip():
            continue
        indent = languages.indent_width(line)
        dedented = indent <= shape.block_indent if shape.opener else indent < shape.block_indent
        complete = j < len(lines) - 1
        repeats_after = complete and shape.after_next and line.strip() == shape.after_next
        if dedented or repeats_after or (complete and languages.stutters(lines, j, STUTTER_MIN_CHARS)):
            return "\n".join(lines[:j]), True
    return text, False
