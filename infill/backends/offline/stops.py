"""Where an autoregressive fill ends (cleaning and judging what it wrote is the pipeline's: infill/checks/).

A base model without FIM tokens only continues the prefix, so the gap's end is decided here from its GapFacts
(infill/context/gap_facts.py: the pipeline's, or read from the text): single-line gaps end at the newline;
multi-line gaps end when a generated line dedents out of the enclosing block, when a line repeats the first line
after the gap, at a blank line in prose, or at the token bound / EOS. The gap's shape (`GapFacts.shape`, what the
text after it says) ends fills sooner: inside a string that goes on below, before the string's end; where the text
below closes brackets the fill must open, right after it opens them (cut back there when the line went on to close
one); and a line the lines below must find open, or ended by a block's colon, may not end before it is
(`line_held_open`). A fill the token bound or the deadline ends inside brackets it opened ends at its last
balanced point (`trim_unfinished`): where it ends, not cleaning.
"""

from __future__ import annotations

from collections.abc import Iterator

from infill import languages
from infill.types import GapFacts

_CLOSERS_AND_SEPARATORS = set(",;:.!?)]}")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
# A block's header above the block (GapShape.header) starts with one of these.
HEADER_WORDS = (
    "if",
    "elif",
    "else",
    "for",
    "while",
    "try",
    "except",
    "finally",
    "with",
    "def",
    "class",
    "async",
    "match",
    "case",
)
STUTTER_MIN_CHARS = 4  # a repeated line this long ends the fill (cutting loses less than the watchdog's reject)


def ends_on_its_line(gap: GapFacts, single_line: bool) -> bool:
    """A single-line request, or text after the gap on its line: the fill ends on the gap's line."""
    return single_line or bool(gap.line_after.strip())


def trim_unfinished(text: str, gap: GapFacts, single_line: bool) -> str:
    """A fill cut off by the token bound (or EOS) inside brackets or a string it opened would break the line:
    keep it up to the last point where everything it opened is closed again (whole lines for multi-line gaps),
    without a dangling operator or comma; a fill that leaves open just what the text below closes is whole."""
    one_line = ends_on_its_line(gap, single_line)
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
    if ends_on_its_line(gap, single_line):
        head, newline, _ = text.partition("\n")
        after_line = gap.line_after.strip()  # writing the rest of the gap's line ends a one-line fill
        if len(after_line) >= 3 and after_line in head:  # the model wrote on into the fixed text
            return head[: head.index(after_line)], True
        if after_line[:1] in _CLOSERS_AND_SEPARATORS:
            end = languages.first_unopened(head, after_line[0])
            if end is not None:  # `f(|)`, `{"a": |, ...}`, `... is |.`: the model wrote on past the gap
                return head[:end], True
        if after_line:
            return head, bool(newline)
        return languages.first_line_end(text)
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


def _brackets(line: str) -> Iterator[tuple[int, str | None]]:
    """For each bracket in `line`'s code, its index and the brackets open after it, outermost first; None (and
    nothing more) for a closer that does not close the innermost open bracket."""
    stack: list[str] = []
    for i, ch, code, _ in languages.code_characters(line):
        if not code:
            continue
        if ch in _PAIRS:
            stack.append(ch)
        elif ch in _PAIRS.values():
            if not stack or _PAIRS[stack[-1]] != ch:
                yield i, None
                return
            stack.pop()
        else:
            continue
        yield i, "".join(stack)


def leaves_open(line: str) -> str:
    """The brackets `line` opens and does not close, outermost first ("" when it closes what it opens, or closes
    one it never opened)."""
    brackets = list(_brackets(line))
    return (brackets[-1][1] or "") if brackets else ""


def closed_past(line: str, must_open: str) -> int | None:
    """Where `line` left open just `must_open` (the index after its last opener) when it then went on to close
    one of them: the fill wrote on past where the lines below take over. None when it never did both."""
    held: int | None = None
    for i, opened in _brackets(line):
        if opened is None or (held is not None and len(opened) < len(must_open)):
            return held
        if held is None and opened == must_open:
            held = i + 1
    return None
