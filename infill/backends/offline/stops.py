"""Where an autoregressive fill ends (cleaning and judging what it wrote is the pipeline's: infill/checks/).

A base model without FIM tokens only continues the prefix, so the gap's end is decided here from its GapFacts
(infill/context/gap_facts.py: the pipeline's, or read from the text): single-line gaps end where their line ends
(`languages.line_so_far`: code runs on while a call it wraps is open, prose and comments end at the newline);
multi-line gaps end when a generated line dedents out of the enclosing block, when a line repeats the first line
after the gap, at a blank line in prose, or at the token bound / EOS. The gap's shape (`GapFacts.shape`, what the
text after it says) ends fills sooner: inside a string that goes on below, before the string's end; where the text
below closes brackets the fill must open, right after it opens them (cut back there when the line went on to close
one); and a line the lines below must find open, or ended by a block's colon, may not end before it is
(`line_held_open`). A fill the token bound or the deadline ends inside brackets it opened ends at its last
balanced point (`trim_unfinished`): where it ends, not cleaning.
"""

from __future__ import annotations

from infill import languages
from infill.languages import PYTHON_HEADER_WORDS, STUTTER_MIN_CHARS, closed_past, ends_on_its_line, leaves_open
from infill.types import GapFacts

_CLOSERS_AND_SEPARATORS = set(",;:.!?" + languages.CLOSERS)
HEADER_WORDS = PYTHON_HEADER_WORDS  # a block's header above the block (GapShape.header) starts with one of these


def trim_unfinished(text: str, gap: GapFacts, single_line: bool) -> str:
    """A fill cut off by the token bound (or EOS) inside brackets or a string it opened would break the line:
    keep it up to the last point where everything it opened is closed again (whole lines for multi-line gaps),
    without a dangling operator or comma; a fill that leaves open just what the text below closes is whole."""
    one_line = ends_on_its_line(single_line, gap.line_after)
    if gap.shape.must_open and "\n" not in text and leaves_open(text) == gap.shape.must_open:
        return text
    last = 0
    for i, ch, balanced, in_string in languages.balance_points(text):
        if balanced and not in_string and (one_line or ch == "\n"):
            last = i + 1
    if last == len(text):
        return text
    return text[:last].rstrip(" \t=,+-*/%|&^<>:.\\") if one_line else text[:last]


def cut_fill(text: str, gap: GapFacts, single_line: bool) -> tuple[str, bool]:
    """The fill so far and whether generation should stop here."""
    shape = gap.shape
    if shape.string_end and shape.string_end in text:  # the string goes on below the gap: the fill stays in it
        return text[: text.index(shape.string_end)], True
    if shape.must_open:  # `return (`: its arguments and `)` are the lines below
        head = text.partition("\n")[0]
        if leaves_open(head) == shape.must_open and head.rstrip().endswith(shape.must_open[-1]):
            return head.rstrip(), True
        passed = closed_past(head, shape.must_open)
        if passed is not None:  # `= {"a": 1}` where the lines below are the dict's items: `= {`
            return head[:passed], True
    if ends_on_its_line(single_line, gap.line_after):
        head, newline, _ = text.partition("\n")
        after_line = gap.line_after.strip()  # writing the rest of the gap's line ends a one-line fill
        # the model wrote on into the fixed text (a short rest is left to the bracket-aware rule below: `:` in
        # `d[a:b]` is no repeat of a `:` after the gap)
        if len(after_line) >= languages.MIN_OVERLAP_CHARS and after_line in head:
            return head[: head.index(after_line)], True
        if after_line[:1] in _CLOSERS_AND_SEPARATORS:
            end = languages.first_unopened(head, after_line[0])
            if end is not None:  # `f(|)`, `{"a": |, ...}`, `... is |.`: the model wrote on past the gap
                return head[:end], True
        if after_line:
            return head, bool(newline)
        return languages.line_so_far(text, wraps=gap.code)
    if gap.is_prose and "\n\n" in text.lstrip("\n"):
        start = len(text) - len(text.lstrip("\n"))
        return text[: text.index("\n\n", start)], True
    lines = text.split("\n")
    for j in range(1, len(lines)):
        line = lines[j]
        if not line.strip():
            continue
        dedented = languages.indent_width(line) < gap.body_indent
        complete = j < len(lines) - 1
        repeats_after = complete and gap.next_line and line.strip() == gap.next_line
        if dedented or repeats_after or (complete and languages.stutters(lines, j, STUTTER_MIN_CHARS)):
            return "\n".join(lines[:j]), True
    return text, False


def line_held_open(text: str, gap: GapFacts) -> bool:
    """The fill's first line may not end yet: the lines below close brackets it has not opened yet, or are the
    body of the block whose header it has not ended with its colon (the backend then takes no token that ends the
    line)."""
    shape = gap.shape
    if "\n" in text or not (shape.must_open or shape.header):
        return False
    return leaves_open(text) != shape.must_open if shape.must_open else not text.rstrip().endswith(":")
