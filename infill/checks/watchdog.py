"""Checks every candidate fill before it can be shown: deadline, emptiness, length, stutter, comment-only code,
broken syntax, broken Markdown tables. A rejected candidate is never shown; its reason is logged and counted."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from infill import languages
from infill.context.builder import GapContext
from infill.context.syntax import (
    DocumentSnapshot,
    ParsedDocument,
    apply_fills,
    error_nodes,
    errors_inside,
    load_language,
)  # noqa: F401
from infill.types import GapShape, InfillError, require_integers

log = logging.getLogger(__name__)

REASONS = (
    "empty_prefix",
    "timeout",
    "empty",
    "too_long",
    "too_many_lines",
    "repetition",
    "comment_only",
    "syntax",
    "structure",
)
_WORD = re.compile(r"^\w+$")


@dataclass(frozen=True)
class WatchdogSettings:
    max_chars: int = 2000
    max_lines: int = 60
    max_single_line_chars: int = 240
    max_ngram: int = 4  # stutter: an n-gram of up to this many words ...
    ngram_repeats: int = 3  # ... repeated this many times back to back
    plain_repeats: int = 8  # any token (numbers, punctuation) this many times back to back: `2, 2, 2, 2, ...`
    line_repeats: int = 3  # the same (non-trivial) line this many times anywhere in one fill
    consecutive_line_chars: int = languages.STUTTER_MIN_CHARS  # a line this long (or longer) twice in a row
    deadline_grace_ms: float = 250.0  # a candidate later than deadline + grace is stale
    check_syntax: bool = True

    def __post_init__(self) -> None:
        whole = (
            "max_chars",
            "max_lines",
            "max_single_line_chars",
            "max_ngram",
            "plain_repeats",
            "consecutive_line_chars",
        )
        require_integers(self, dict.fromkeys(whole, 1) | {"ngram_repeats": 2, "line_repeats": 2}, "watchdog setting ")
        if self.deadline_grace_ms < 0:
            raise InfillError(f"deadline_grace_ms must be >= 0, got {self.deadline_grace_ms}")


@dataclass(frozen=True)
class Verdict:
    reason: str | None = None  # None: the candidate may be shown
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


OK = Verdict()


class Watchdog:
    """Stateless checks plus a Counter of rejection reasons (and of candidates checked) for status/benchmarks."""

    def __init__(self, settings: WatchdogSettings | None = None) -> None:
        self.settings = settings or WatchdogSettings()
        self.counts: Counter[str] = Counter()
        self.checked = 0
        self._lock = threading.Lock()  # requests are judged on several worker threads

    def record(self, verdict: Verdict, backend: str = "") -> Verdict:
        if not verdict.ok:
            with self._lock:
                self.counts[verdict.reason] += 1  # type: ignore[index]
            log.info("watchdog rejected a fill from %s: %s (%s)", backend or "?", verdict.reason, verdict.detail)
        return verdict

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"checked": self.checked, "rejected": dict(self.counts)}

    def check(
        self,
        middles: list[str],
        spans: list[tuple[int, int]],
        doc: DocumentSnapshot,
        ctx: GapContext | list[GapContext],
        *,
        deadline: float | None = None,
        backend: str = "",
    ) -> Verdict:
        """The first failed check, cheapest first (the parse comes last), counted in `stats` and, when it fails,
        logged with `backend`'s name. `ctx` is one context for all gaps or one per gap."""
        with self._lock:
            self.checked += 1
        contexts = ctx if isinstance(ctx, list) else [ctx] * len(middles)
        s = self.settings
        if deadline is not None and time.monotonic() > deadline + s.deadline_grace_ms / 1000:
            verdict = Verdict("timeout", "the candidate arrived after the deadline")
        elif not any(m.strip() for m in middles):
            verdict = Verdict("empty", "nothing left after post-processing")
        else:
            per_gap = self._each_gap(middles, spans, doc.text, contexts)
            verdict = per_gap or self._whole(middles, spans, doc, contexts[0])
        return self.record(verdict, backend)

    def _each_gap(
        self, middles: list[str], spans: list[tuple[int, int]], text: str, contexts: list[GapContext]
    ) -> Verdict | None:
        s = self.settings
        for middle, gap, (a, _) in zip(middles, contexts, spans):
            verdict = (
                check_length(middle, gap, s)
                or check_repetition(middle, s, _line_above(text, a))
                or check_comment_only(middle, gap)
            )
            if verdict:
                return verdict
        return None

    def _whole(
        self, middles: list[str], spans: list[tuple[int, int]], doc: DocumentSnapshot, gap: GapContext
    ) -> Verdict:
        """The fills read in the document: a prose table's rows, a fenced block's code, the file's syntax."""
        if gap.is_prose:
            return check_table_rows(middles, spans, doc.text) or OK
        if self.settings.check_syntax and gap.fence is not None:
            return check_fence_syntax(middles, spans, doc.text, gap) or OK
        if self.settings.check_syntax and doc.has_grammar:
            return check_syntax(middles, spans, doc, gap.shape) or OK
        return OK


def check_length(middle: str, ctx: GapContext, s: WatchdogSettings) -> Verdict | None:
    if (
        ctx.single_line
        and "\n" in middle
        and (ctx.is_prose or ctx.in_comment or not languages.one_logical_line(middle))
    ):
        return Verdict("too_many_lines", "a single-line fill spans lines (other than to wrap a call it opens)")
    limit = s.max_single_line_chars if ctx.single_line else s.max_chars
    if len(middle) > limit:
        return Verdict("too_long", f"{len(middle)} chars > {limit}")
    if middle.count("\n") + 1 > s.max_lines:
        return Verdict("too_many_lines", f"{middle.count(chr(10)) + 1} lines > {s.max_lines}")
    return None


def check_repetition(middle: str, s: WatchdogSettings, line_above: str = "") -> Verdict | None:
    """Stutter: a word n-gram repeated back to back, a line repeated, or the fill copying the line above."""
    words = middle.split()
    run = 1
    for previous, word in zip(words, words[1:]):
        run = run + 1 if word == previous else 1
        if run >= s.plain_repeats:
            return Verdict("repetition", f"{word!r} {run} times in a row")
    for n in range(1, s.max_ngram + 1):
        span = n * s.ngram_repeats
        for i in range(len(words) - span + 1):
            gram = words[i : i + n]
            if not _meaningful(gram):
                continue
            if all(words[i + k * n : i + (k + 1) * n] == gram for k in range(1, s.ngram_repeats)):
                return Verdict("repetition", f"{' '.join(gram)!r} repeated {s.ngram_repeats} times")
    lines = [line.strip() for line in middle.split("\n")]
    seen: Counter[str] = Counter(line for line in lines if len(line) >= 4 and languages.has_words(line))
    for line, count in seen.items():
        if count >= s.line_repeats:
            return Verdict("repetition", f"line {line!r} {count} times")
    for j in range(1, len(lines)):
        if languages.stutters(lines, j, s.consecutive_line_chars):
            return Verdict("repetition", f"line {lines[j]!r} twice in a row")
    first = next((line for line in lines if line), "")
    if len(first) >= s.consecutive_line_chars and first == line_above.strip() and languages.has_words(first):
        return Verdict("repetition", "the fill repeats the line above")
    return None


def _meaningful(gram: list[str]) -> bool:
    if len(gram) == 1:
        return bool(_WORD.match(gram[0])) and not gram[0].isdigit()
    return any(languages.has_words(w) for w in gram)


def _line_above(text: str, index: int) -> str:
    line_start = text.rfind("\n", 0, index) + 1
    if text[line_start:index].strip():
        return ""  # the fill continues a line: compare nothing
    start = text.rfind("\n", 0, max(0, line_start - 1)) + 1
    return text[start : max(start, line_start - 1)]


def check_comment_only(middle: str, ctx: GapContext) -> Verdict | None:
    """Code fills that are nothing but comments say nothing the user asked for."""
    if not ctx.is_code or ctx.in_comment:
        return None
    if languages.comment_only(middle, ctx.language, ctx.line_before):
        return Verdict("comment_only", "the fill is only comments")
    return None


NO_SHAPE = GapShape()  # a gap whose text after it says nothing of its shape


def check_syntax(
    middles: list[str], spans: list[tuple[int, int]], doc: DocumentSnapshot, shape: GapShape = NO_SHAPE
) -> Verdict | None:
    """The filled document may not have more ERROR/MISSING nodes than the document before the edit (a file that
    already has errors is judged relative to them), and no ERROR node may lie wholly inside a fill. `shape`: what
    the text after the gap says the fill must look like (Python's line check reads it)."""
    before = error_nodes(doc.tree)
    after_tree = doc.parse_filled(spans, middles)
    after = error_nodes(after_tree)
    if after > before:
        return Verdict("syntax", f"{after} error nodes after the fill, {before} before")
    for start, end in _fill_byte_ranges(doc.text, spans, middles):
        if errors_inside(after_tree, start, end):
            return Verdict("syntax", "the fill itself does not parse")
    if doc.language == "python":
        return check_python_compiles(doc.text, spans, middles) or check_python_line_finished(
            doc.text, spans, middles, shape
        )
    return None


_CONTINUES_STATEMENT = re.compile(r"[\s#)\]}]|(else|elif|except|finally)\b")


def _statement_start(text: str, index: int) -> int:
    """Start of the line that begins the top-level statement around `index` (a column-0 line that does not
    continue a statement). A heuristic: where it errs (e.g. a column-0 line inside a string), the region fails to
    compile before the fill too, and the check stands aside."""
    line = text.rfind("\n", 0, index) + 1
    while line > 0 and (not text[line : line + 1] or _CONTINUES_STATEMENT.match(text, line)):
        line = text.rfind("\n", 0, line - 1) + 1
    return line


def _statement_end(text: str, index: int, decorated: bool = False) -> int:
    """Start of the next top-level statement after `index` (or the end of the text); with `decorated` (the line at
    `index` is a decorator), of the one after the definition it decorates."""
    line = text.find("\n", index)
    while line != -1:
        if line + 1 < len(text) and not _CONTINUES_STATEMENT.match(text, line + 1):
            if not decorated:
                return line + 1
            decorated = text.startswith("@", line + 1)  # a column-0 definition (or another decorator): part of it
        line = text.find("\n", line + 1)
    return len(text)


def _decorates(text: str, spans: list[tuple[int, int]], middles: list[str]) -> bool:
    """The last fill's line, filled, is a decorator: the statement goes on to the definition below it."""
    line_start = text.rfind("\n", 0, spans[-1][0]) + 1
    return (text[line_start : spans[-1][0]] + middles[-1]).lstrip().startswith("@")


def check_python_compiles(text: str, spans: list[tuple[int, int]], middles: list[str]) -> Verdict | None:
    """tree-sitter-python accepts some code CPython refuses (a block of only comments, an `elif` whose `if` is
    gone): when the top-level statements around the fill compiled before it, they must compile after it. Only
    those statements are compiled (a whole large file costs tens of milliseconds), and the original only when the
    filled region fails, so a good fill costs one small parse."""
    start, end = (
        _statement_start(text, spans[0][0]),
        _statement_end(text, spans[-1][1], _decorates(text, spans, middles)),
    )
    region = text[start:end]
    local = [(a - start, b - start) for a, b in spans]
    error = languages.python_error(apply_fills(region, local, middles))
    if error is None or languages.python_error(region) is not None:
        return None  # fine, or it did not compile before either: tree-sitter's relative judgement stands
    return Verdict("syntax", f"Python would not compile it: {error}")


def check_python_line_finished(
    text: str, spans: list[tuple[int, int]], middles: list[str], shape: GapShape = NO_SHAPE
) -> Verdict | None:
    """A cursor fill must leave its line's statement finished: when the code around compiles with the cursor's line
    replaced by a stand-in statement, it must compile with the fill. This catches what a relative check lets
    through while the line is still being typed (the file does not compile before the fill either): a fill that
    opens a block and stops (`if override:` with nothing indented after it), opens a string or a bracket, or
    leaves the line half written; where the lines below are a body, arguments or a definition (the gap's shape),
    one that is not their header, their opening line or a decorator; inside brackets, an element (`_,`). Where no
    stand-in makes the code around compile (a file being restructured), it stands aside."""
    if len(spans) != 1 or spans[0][0] != spans[0][1]:
        return None  # gap fills replace whole selections: the relative checks judge them
    cursor = spans[0][0]
    start, end = _statement_start(text, cursor), _statement_end(text, cursor, _decorates(text, spans, middles))
    error = languages.python_error(apply_fills(text[start:end], [(cursor - start, cursor - start)], middles))
    if error is None:
        return None
    line_start = text.rfind("\n", 0, cursor) + 1
    line_end = text.find("\n", cursor)
    line_end = end if line_end < 0 or line_end > end else line_end
    indent = text[line_start:cursor][: len(text[line_start:cursor]) - len(text[line_start:cursor].lstrip())]
    after = re.search(r"\n([ \t]*)\S", text[line_end:end])  # the next non-blank line: a body under this one?
    if not any(
        languages.python_error(text[start:line_start] + indent + stand_in + text[line_end:end]) is None
        for stand_in in _stand_ins(shape, after is not None and len(after.group(1)) > len(indent))
    ):
        return None
    return Verdict("syntax", f"the fill leaves its statement unfinished: {error}")


def _stand_ins(shape: GapShape, body_below: bool) -> list[str]:
    """Lines that finish a statement at the cursor's line, as the lines below want it: opening the brackets they
    close (an assignment, a call's keyword arguments, a definition's parameters), a block's header above a body
    (`try:` before its `except`, `else:` ...), a decorator above a definition, or a plain statement."""
    if shape.must_open:
        inner = shape.must_open[1:]
        opening = [f"_ = {shape.must_open}"]
        if shape.must_open[0] == "(":
            opening += [f"_({inner}", f"def _({inner}", f"class _({inner}"]
        return opening
    if body_below:
        return ["if 1:", "try:", "else:", "finally:", "except Exception:"]
    statements = ["pass", "@_"] if shape.before_definition else ["pass"]
    return statements + _ELEMENTS


# Lines that finish an element of a statement spanning lines (a list's item, a dict's entry, a call's keyword
# argument): inside brackets no statement stands in for the cursor's line, and a fill there must leave the
# statement compiling all the same (a dict value `2 3` parses for tree-sitter as no worse than the empty one).
_ELEMENTS = ["_,", "_: _,", "_=_,"]


def check_fence_syntax(middles: list[str], spans: list[tuple[int, int]], text: str, ctx: GapContext) -> Verdict | None:
    """Code in a Markdown fence is checked with the grammar of the fence's language (when there is one)."""
    start, end = ctx.fence  # type: ignore[misc]
    if load_language(ctx.language) is None or not all(start <= a <= b <= end for a, b in spans):
        return None
    code = ParsedDocument(ctx.language).update(text[start:end])
    return check_syntax(middles, [(a - start, b - start) for a, b in spans], code)


def _fill_byte_ranges(text: str, spans: list[tuple[int, int]], middles: list[str]) -> list[tuple[int, int]]:
    """Byte ranges of each inserted middle in the filled document."""
    ranges, offset, cursor = [], 0, 0
    for (a, b), middle in zip(spans, middles):
        offset += len(text[cursor:a].encode("utf-8"))
        size = len(middle.encode("utf-8"))
        ranges.append((offset, offset + size))
        offset += size
        cursor = b
    return ranges


def check_table_rows(middles: list[str], spans: list[tuple[int, int]], text: str) -> Verdict | None:
    """Markdown: a fill inside a table row may not add cells beyond the row above."""
    for (a, b), middle in zip(spans, middles):
        line_start = text.rfind("\n", 0, a) + 1
        line_end = text.find("\n", b)
        line_end = len(text) if line_end < 0 else line_end
        if not text[line_start:a].lstrip().startswith("|") or line_start == 0:
            continue
        above_start = text.rfind("\n", 0, line_start - 1) + 1
        above = text[above_start : line_start - 1]
        if not above.lstrip().startswith("|"):
            continue
        # Only the pipes the fill adds count: a row may hold more already (a `|` in a code span).
        allowed = max(0, above.count("|") - text[line_start:a].count("|") - text[b:line_end].count("|"))
        if "\n" in middle or middle.count("|") > allowed:
            return Verdict("structure", "the fill breaks the table row's cells")
    return None
