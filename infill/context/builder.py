"""What the model sees around a gap: syntax-aware prefix/suffix windows, single- vs multi-line, middle budget.

Windows are sized by an approximate token budget (chars / chars_per_token) and snapped to whole syntactic units
(statements, the enclosing function or class, a Markdown section or paragraph) found with tree-sitter. Each
document keeps its tree between keystrokes and is re-parsed incrementally. Languages without a grammar (or whose
grammar fails to load) get line-based windows.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from infill.context.edits import Edit
from infill.context.gap_facts import gap_facts
from infill.context.indentation import block_indent, unit_near
from infill.context.shape import read_shape
from infill.context.surroundings import (
    fence_content,
    fence_language,
    inside,
    inside_inline_node,
    looks_like_prose,
    node_at,
    single_line,
)
from infill.context.syntax import DocumentSnapshot, ParsedDocument, resolve_language
from infill.context.windows import byte_offset, fit_prefix, line_end, line_window, syntactic_window
from infill.languages import PROSE_LANGUAGES, encodable
from infill.types import GapFacts, GapShape, InfillError

# A placeholder sits on one line (any LSP line ending) and is short: a match never scans far.
_PLACEHOLDER = re.compile(r"\[\[[^\[\]\r\n]{0,1000}\]\]|\{\{[^{}\r\n]{0,1000}\}\}|_{3,}")
_NOT_RULE = re.compile(r"[^ \t_]")


@dataclass(frozen=True)
class ContextSettings:
    prefix_tokens: int = 2048  # approximate token budget of the window before the gap
    suffix_tokens: int = 512
    chars_per_token: float = 3.5  # rough chars per token for code and English prose
    single_line_tokens: int = 32
    multi_line_tokens: int = 64
    max_gap_tokens: int = 256  # ceiling for a "Fill gap" over a large selection

    def __post_init__(self) -> None:
        for name in ("prefix_tokens", "suffix_tokens", "single_line_tokens", "multi_line_tokens", "max_gap_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InfillError(f"context setting {name} must be a positive integer, got {value!r}")
        if not self.chars_per_token > 0:
            raise InfillError(f"chars_per_token must be > 0, got {self.chars_per_token!r}")


@dataclass(frozen=True)
class GapContext:
    """The context stage's record of a gap: where the window starts and ends (str indices into the document),
    the middle budget, and what cleaning and judging a fill need (indentation unit, comment or string, fence,
    syntactic unit). It stays with the pipeline and infill/checks/; a backend gets only `GapFacts`
    (infill/types.py), the few facts that tell it where a fill ends (`facts`, gap_facts.py)."""

    language: str | None
    prefix_start: int
    suffix_end: int
    single_line: bool
    max_middle_tokens: int
    indent: str  # indentation of lines after the first inside the fill (the enclosing block's)
    indent_unit: str  # one level of indentation as the document writes it
    line_before: str  # text between the start of the cursor's line and the gap
    line_after: str  # text between the gap and the end of its line
    in_comment: bool  # the gap sits in a comment or string: prose rules, not code rules
    is_prose: bool
    unit: str  # the enclosing syntactic unit (for logs), "lines" without a grammar
    fence: tuple[int, int] | None = None  # code in a Markdown fence: the fence content's span (str indices)
    shape: GapShape = GapShape()  # what the text after the gap says the fill must look like (context/shape.py)

    @property
    def is_code(self) -> bool:
        return not self.is_prose and self.language not in (None, "json")

    def facts(self, after: str) -> GapFacts:
        """The backend's description of this gap; `after` is the fixed text the backend sees after it (the
        request's `between[0]` or `suffix`)."""
        return gap_facts(
            self.line_before, self.line_after, after, self.indent, self.is_prose, self.shape, self.in_comment
        )


def find_placeholders(
    text: str, start: int = 0, end: int | None = None, limit: int | None = None
) -> list[tuple[int, int]]:
    """Spans of `[[...]]`, `{{...}}` and runs of 3+ underscores in text[start:end]; each whole span is a gap (at
    most `limit` of them). Work is proportional to the window, whatever the line endings: matches are bounded, and
    telling a Markdown rule line from a blank looks at the match's neighbours, or measures one run once."""
    end = len(text) if end is None else min(end, len(text))
    spans: list[tuple[int, int]] = []
    position, search = start, _PLACEHOLDER.search
    run = (0, 0)  # the last run of rule characters found not to be a whole line
    while (match := search(text, position, end)) is not None:
        first, last = match.span()
        position = last
        if text[first] == "_":
            before = text[first - 1] if first else "\n"
            after = text[last] if last < len(text) else "\n"
            if before in _NOT_RULE_NEIGHBOUR or after in _NOT_RULE_NEIGHBOUR:
                pass  # text beside it on its line: a blank to fill
            elif before in "\r\n" and after in "\r\n":
                continue  # the whole line: a rule
            elif not run[0] <= first < run[1]:
                run_start, run_end, whole_line = _rule_run(text, first)
                if whole_line:
                    position = max(last, run_end)  # the rest of the rule holds no placeholder: skip it
                    continue
                run = (run_start, run_end)
        spans.append((first, last))
        if limit is not None and len(spans) >= limit:
            break
    return spans


class _NotRuleNeighbour:
    """Any character that cannot sit on a rule line (everything but " ", tab, "_" and line endings)."""

    def __contains__(self, char: str) -> bool:
        return char not in " \t_\r\n"


_NOT_RULE_NEIGHBOUR = _NotRuleNeighbour()


def _rule_run(text: str, index: int) -> tuple[int, int, bool]:
    """The run of " ", tab and "_" characters around `index`, and whether it is a whole line: a line of nothing
    but underscores is a Markdown horizontal rule, not a blank to fill. Scans only the run itself."""
    stop = _NOT_RULE.search(text, index)
    run_end = len(text) if stop is None else stop.start()
    run_start, step = index, 64
    while run_start > 0:  # backwards in growing chunks: rstrip runs at C speed
        chunk_start = max(0, run_start - step)
        kept = len(text[chunk_start:run_start].rstrip(" \t_"))
        run_start, step = chunk_start + kept, step * 4
        if kept:
            break
    whole_line = (run_start == 0 or text[run_start - 1] in "\r\n") and (run_end == len(text) or text[run_end] in "\r\n")
    return run_start, run_end, whole_line


class ContextBuilder:
    """Keeps one parsed document per document id (LRU) and builds a GapContext for each request."""

    def __init__(self, settings: ContextSettings | None = None, max_documents: int = 32) -> None:
        self.settings = settings or ContextSettings()
        self.max_documents = max_documents
        self._documents: OrderedDict[tuple[str, str | None], ParsedDocument] = OrderedDict()
        # Guards the index only (held for dict operations); each document's own lock serialises its parses, so
        # an edit noted from the event loop never waits for a parse running on a worker thread.
        self._lock = threading.Lock()

    def document(
        self,
        text: str,
        language: str | None,
        document_id: str | None,
        version: int | None = None,
        focus: tuple[int, int] | None = None,
    ) -> DocumentSnapshot:
        """A snapshot of this text parsed: the cached tree re-parsed incrementally (from the noted edits up to
        `version`, or by comparing texts), or a fresh parse. With a `focus` (the span of the gaps), a large
        document's tree may cover only the part a context for that focus can reach."""
        key = resolve_language(language, document_id)
        if not text.isascii():
            text = encodable(text)  # a lone surrogate (U+FFFD after, same length) cannot be encoded for the parser
        s = self.settings
        reach = (int(s.prefix_tokens * s.chars_per_token), int(s.suffix_tokens * s.chars_per_token))
        if document_id is None:
            return ParsedDocument(key).update(text)  # parsed once and dropped: a region would cost more
        with self._lock:
            doc = self._documents.pop((document_id, key), None) or ParsedDocument(key)
            self._documents[(document_id, key)] = doc
            while len(self._documents) > self.max_documents:
                self._documents.popitem(last=False)
        with doc.lock:
            return doc.update(text, version, focus, reach)

    def note_edit(self, document_id: str, start: int, old_end: int, new_text: str, version: int | None = None) -> None:
        """The editor changed text[start:old_end] (str offsets, before this change) to `new_text`. O(1): the
        tree is brought up to date only when a context is next built. Unknown documents are ignored (their
        first request parses them whole)."""
        if start < 0 or old_end < start:
            raise InfillError(f"edit {start}..{old_end} is not a range")
        edit = Edit.replacing(start, old_end, new_text)
        with self._lock:
            docs = [doc for (doc_id, _), doc in self._documents.items() if doc_id == document_id]
        for doc in docs:
            doc.note_edit(edit, version)

    def forget(self, document_id: str) -> None:
        with self._lock:
            for key in [k for k in self._documents if k[0] == document_id]:
                del self._documents[key]

    def build(
        self, doc: DocumentSnapshot, spans: list[tuple[int, int]], mode: str, keep_window: bool = True
    ) -> GapContext:
        """The context for `spans`. With `keep_window`, its window start is kept (in the document's memo) for the
        next request; per-gap contexts of a multi-gap request pass False."""
        text, s = doc.text, self.settings
        first, last = spans[0][0], spans[-1][1]
        line_start = text.rfind("\n", 0, first) + 1
        gap_line_end = line_end(text, last)
        line_before, line_after = text[line_start:first], text[last:gap_line_end]
        language = doc.language
        is_prose = language in PROSE_LANGUAGES or (language is None and looks_like_prose(text[line_start:gap_line_end]))
        prefix_budget = int(s.prefix_tokens * s.chars_per_token)
        suffix_budget = int(s.suffix_tokens * s.chars_per_token)
        node = node_at(doc, first) if doc.has_grammar else None
        unit_starts: list[int] = []
        if node is not None:
            unit_starts, suffix_end, unit = syntactic_window(doc, node, first, last, prefix_budget, suffix_budget)
        else:
            suffix_end, unit = line_window(text, first, last, prefix_budget, suffix_budget)[1], "lines"
        # The window keeps its start while that still fits, so typing on does not change the start of the prompt
        # (a backend re-encodes everything after the first changed token).
        previous = doc.memo.get("window_start") if doc.memo is not None and keep_window else None
        prefix_start, anchor = fit_prefix(text, first, prefix_budget, previous, unit_starts)
        if doc.memo is not None and keep_window:
            doc.memo["window_start"] = (prefix_start, anchor)
        in_comment = node is not None and inside_inline_node(doc, byte_offset(doc, first))
        fence = None
        if is_prose and node is not None and inside(node, ("fenced_code_block", "indented_code_block")):
            is_prose = False  # code in a Markdown fence follows code rules, of the fence's language if named
            language = fence_language(doc, node) or language
            fence = fence_content(doc, node)
        shape = (
            GapShape()
            if is_prose or fence is not None
            else read_shape(doc, node, prefix_start, first, last, line_before, line_after, in_comment)
        )
        single = single_line(mode, text, spans, line_before, line_after, node, is_prose, in_comment, language) or (
            mode == "inline" and shape.one_line
        )
        unit_indent = unit_near(text, first, last, prefix_start, suffix_end, language)
        indent = block_indent(text, line_start, line_before, unit_indent, language)
        return GapContext(
            language=language,
            prefix_start=prefix_start,
            suffix_end=suffix_end,
            single_line=single,
            max_middle_tokens=self._middle_budget(mode, single, text, spans),
            indent=indent,
            indent_unit=unit_indent,
            line_before=line_before,
            line_after=line_after,
            in_comment=in_comment,
            is_prose=is_prose,
            unit=unit,
            fence=fence,
            shape=shape,
        )

    def _middle_budget(self, mode: str, single: bool, text: str, spans: list[tuple[int, int]]) -> int:
        s = self.settings
        if single:
            return s.single_line_tokens
        if mode == "inline":
            return s.multi_line_tokens
        # A "Fill gap" over a selection may need about as much text as it replaces.
        selected = max(b - a for a, b in spans)
        return max(s.multi_line_tokens, min(s.max_gap_tokens, math.ceil(selected / s.chars_per_token * 1.5)))
