"""A request's context, built once: its gap spans checked, its document parsed, the gap context(s) read, and the
`InfillRequest` a backend fills (`Prepared`). The pipeline builds it (`Pipeline.prepare`), the server ahead of the
model worker while its debounce runs."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace

from infill import timing
from infill.completion import CompletionRequest
from infill.context.builder import ContextBuilder, GapContext
from infill.context.related import RelatedFiles
from infill.context.syntax import DocumentSnapshot
from infill.types import InfillError, InfillRequest

_NON_SPACE = re.compile(r"\S")

MAX_GAPS = 100  # placeholders filled by one request: each gets its own context and decode (callers take the first)


def checked_spans(req: CompletionRequest) -> list[tuple[int, int]]:
    """The request's gap spans, checked: sorted, apart, inside the text, at most MAX_GAPS (else InfillError)."""
    cap = req.max_middle_tokens
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise InfillError(f"max_middle_tokens must be a positive integer, got {cap!r}")
    if req.mode not in ("inline", "gap", "gaps"):
        raise InfillError(f"unknown completion mode {req.mode!r} (inline, gap or gaps)")
    if req.mode == "gaps":
        spans = [tuple(s) for s in req.spans]
        if not spans:
            raise InfillError("mode 'gaps' needs at least one span")
        if len(spans) > MAX_GAPS:
            raise InfillError(f"{len(spans)} gaps in one request; at most {MAX_GAPS} (fill them in parts)")
    else:
        spans = [(req.start, req.start if req.end is None else req.end)]
    previous = 0
    for a, b in spans:
        if not (isinstance(a, int) and isinstance(b, int) and previous <= a <= b <= len(req.text)):
            raise InfillError(
                f"gap {a}..{b} is not a sorted, non-overlapping span inside the document (length {len(req.text)})"
            )
        previous = b
    return spans  # type: ignore[return-value]


@dataclass(frozen=True)
class Prepared:
    """Everything a request needs after context building."""

    source: CompletionRequest
    request: InfillRequest
    spans: list[tuple[int, int]]
    doc: DocumentSnapshot
    ctx: GapContext  # the whole request's context (windows, budget)
    gaps: list[GapContext]  # one per gap (line context for cleaning and checks)
    context_ms: float = 0.0  # time `prepare` took
    trace: timing.Trace = field(default=timing.OFF, repr=False)  # benchmark phases, continued by `complete`


def prepare(req: CompletionRequest, contexts: ContextBuilder, related: RelatedFiles) -> Prepared:
    """Context for `req`: the backend request, the gap spans, the parsed document, the gap context(s). Thread-safe
    as `contexts` and `related` are."""
    t0, trace = time.perf_counter(), timing.trace()
    trace.start("context")
    spans = checked_spans(req)
    doc = contexts.document(req.text, req.language, req.document_id, req.version, focus=(spans[0][0], spans[-1][1]))
    ctx = contexts.build(doc, spans, req.mode)
    if req.max_middle_tokens is not None and req.max_middle_tokens < ctx.max_middle_tokens:
        ctx = replace(ctx, max_middle_tokens=req.max_middle_tokens)
    # Several gaps each get their own line context (a table cell, a sentence) for cleaning and checks.
    gaps = [ctx] if len(spans) == 1 else [contexts.build(doc, [span], "gap", keep_window=False) for span in spans]
    first, last = spans[0][0], spans[-1][1]
    between = tuple(req.text[a_end:b_start] for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    extra = (
        ""
        if not (req.related and ctx.is_code)
        else related.select(
            req.related,
            req.text,
            first,
            last,
            ctx.language or req.language,
            name=req.name,
            document_id=req.document_id,
        )
    )
    request = InfillRequest(
        prefix=req.text[ctx.prefix_start : first],
        suffix=req.text[last : ctx.suffix_end],
        between=between,
        max_middle_tokens=ctx.max_middle_tokens,
        candidates=req.candidates,
        keystroke=req.keystroke,
        single_line=ctx.single_line,
        language=ctx.language or req.language,
        document_id=req.document_id,
        version=req.version,
        extra_context=extra,
        gap=gaps[0].facts(between[0] if between else req.text[last : ctx.suffix_end]),
    )
    trace.stop("context")
    return Prepared(req, request, spans, doc, ctx, gaps, context_ms=(time.perf_counter() - t0) * 1000, trace=trace)


def has_text(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] holds a non-space character: a search, not a copy of a possibly huge slice."""
    return _NON_SPACE.search(text, start, end) is not None
